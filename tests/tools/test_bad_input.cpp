// Every command given wrong, missing and malformed arguments and files: exit 2 (3 for a
// backend this machine lacks), never a signal, one `tilec: error:` line naming what is
// wrong (and under --json the error object as stdout's last line), and the scratch folder
// left exactly as it was: nothing written, nothing half-written.
//
// A row of a table is one case; "{dir}" in an argument stands for a scratch folder holding
// the fixtures below. To cover a new command, add its table and a TEST_CASE running it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cuda.h"
#include "runtime/npy.h"
#include "templates/attention/paged_attention.h"
#include "tests/tilec_process.h"

namespace fs = std::filesystem;

namespace {

struct BadCase {
  std::vector<std::string> args;  // "{dir}" is replaced by the scratch folder
  std::vector<std::string> names; // what the error message must mention
  int exit_code = 2;
};

// Removes the fixtures when the test process ends.
struct Fixtures {
  fs::path dir;
  ~Fixtures() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
};

// Files and folders the cases point at, made once per process.
const fs::path& fixtures() {
  static const Fixtures f{[] {
    fs::path d = fs::temp_directory_path() / ("tilec_bad_input_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d / "adir");
    std::ofstream(d / "afile") << "not a folder\n";
    std::ofstream(d / "empty.toml");

    // A valid paged-attention input folder, then broken copies of it.
    tilec::templates::PagedAttentionShape s;
    s.batch = 2, s.hq = 2, s.hkv = 1, s.head_dim = 16, s.block_size = 4, s.max_blocks = 2, s.num_blocks = 4;
    tilec::templates::PagedAttentionInputs in = tilec::templates::make_paged_attention_inputs(s, 1, 8);
    auto make = [&](const char* name) {
      fs::path p = d / name;
      tilec::templates::write_paged_attention_inputs(p.string(), in);
      return p;
    };
    make("inputs_ok");
    fs::remove(make("inputs_no_q") / "q.npy");
    {
      fs::path q = make("inputs_truncated") / "q.npy";
      fs::resize_file(q, fs::file_size(q) - 5);
    }
    {
      fs::path q = make("inputs_header_only") / "q.npy";
      fs::resize_file(q, 20);
    }
    std::ofstream(make("inputs_garbage") / "q.npy") << "this is not an npy file\n";
    auto write = [](const fs::path& p, std::string descr, std::vector<int64_t> shape, size_t bytes) {
      tilec::rt::write_npy(p.string(), {std::move(descr), std::move(shape), std::vector<std::byte>(bytes)});
    };
    write(make("inputs_f64") / "q.npy", "<f8", {2, 2, 1, 16}, 2 * 2 * 16 * 8);
    write(make("inputs_rank3") / "q.npy", "<f4", {2, 2, 16}, 2 * 2 * 16 * 4);
    write(make("inputs_float_table") / "block_table.npy", "<f4", {2, 2}, 16);
    {
      // context_lens = [100, 100] with a capacity of 2 * 4 tokens.
      tilec::rt::NpyArray a{"<i4", {2}, std::vector<std::byte>(8)};
      int32_t v[2] = {100, 100};
      std::memcpy(a.data.data(), v, 8);
      tilec::rt::write_npy((make("inputs_ctx_too_long") / "context_lens.npy").string(), a);
      // block_table entries far past num_blocks.
      tilec::rt::NpyArray t{"<i4", {2, 2}, std::vector<std::byte>(16)};
      int32_t pages[4] = {0, 1, 1000, 3};
      std::memcpy(t.data.data(), pages, 16);
      tilec::rt::write_npy((make("inputs_bad_page") / "block_table.npy").string(), t);
    }
    {
      // Sq = 3 query rows (causal) and a sequence of 2 tokens.
      tilec::templates::PagedAttentionShape s3 = s;
      s3.sq = 3;
      tilec::templates::PagedAttentionInputs in3 = tilec::templates::make_paged_attention_inputs(s3, 1, 2);
      tilec::templates::write_paged_attention_inputs((d / "inputs_sq3_ctx2").string(), in3);
    }
    {
      tilec::templates::PagedAttentionShape s8 = s;
      s8.kv_fp8 = tilec::ir::DType::f8e5m2;
      tilec::templates::write_paged_attention_inputs((d / "inputs_fp8").string(),
                                                   tilec::templates::make_paged_attention_inputs(s8, 1, 4));
    }
    {
      fs::path z = make("inputs_zero_batch");
      write(z / "q.npy", "<f4", {0, 2, 1, 16}, 0);
      write(z / "block_table.npy", "<i4", {0, 2}, 0);
      write(z / "context_lens.npy", "<i4", {0}, 0);
    }

    std::ofstream(d / "corrupt_db.toml") << "[[entry]\nkernel = \n";
    std::ofstream(d / "space_syntax.toml") << "kernel = \"paged_attention\"\n[params\nblock_n = [16]\n";
    std::ofstream(d / "space_unknown_param.toml") << "kernel = \"paged_attention\"\n[params]\nblok_n = [16]\n";
    std::ofstream(d / "space_other_kernel.toml") << "kernel = \"softmax\"\n[params]\nblock = [16]\n";
    std::ofstream(d / "space_not_ints.toml") << "kernel = \"paged_attention\"\n[params]\nblock_n = [\"big\"]\n";
    std::ofstream(d / "space_empty_list.toml") << "kernel = \"paged_attention\"\n[params]\nblock_n = []\n";
    std::ofstream(d / "space_bad_constraint.toml")
        << "kernel = \"paged_attention\"\n[params]\nblock_n = [16]\n[constraints]\nc = \"nosuch > 1\"\n";

    // A module folder whose manifest name is taken by a folder: compile must not leave a
    // PTX file without its manifest there.
    fs::create_directories(d / "module_clash" / "softmax.toml");
    return d;
  }()};
  return f.dir;
}

// Every file and folder under `root` with its size and modification time. An empty `.lock`
// file is left out: the tuning database's lock file outlives the lock by design (removing
// it would race with another process taking it).
std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> snapshot(const fs::path& root) {
  std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    uintmax_t size = e.is_regular_file() ? e.file_size() : 0;
    if (e.is_regular_file() && size == 0 && e.path().extension() == ".lock") continue;
    out[fs::relative(e.path(), root).string()] = {size, e.last_write_time()};
  }
  return out;
}

std::vector<std::string> expand(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (std::string a : args) {
    for (size_t at; (at = a.find("{dir}")) != std::string::npos;) a.replace(at, 5, fixtures().string());
    out.push_back(a);
  }
  return out;
}

std::string joined(const std::vector<std::string>& args) {
  std::string s = "tilec";
  for (const auto& a : args) s += " " + a;
  return s;
}

// Runs `c` plain and with --json and checks everything the file's comment promises.
void check_case(const BadCase& c) {
  const fs::path& dir = fixtures();
  for (bool json : {false, true}) {
    std::vector<std::string> args = expand(c.args);
    // Right after the command: as the last word it would be taken as the value of an
    // option the case leaves without one.
    if (json) args.insert(args.begin() + (args.empty() ? 0 : 1), "--json");
    auto before = snapshot(dir);
    tilec::test::Process p = tilec::test::run_tilec(args, 300);
    INFO(joined(args) << "\n--- stdout:\n" << p.out << "--- stderr:\n" << p.err);
    REQUIRE_FALSE(p.timed_out);
    REQUIRE(p.exited()); // no signal: no crash, no sanitizer abort
    CHECK(p.exit_code == c.exit_code);

    std::vector<std::string> errors;
    std::istringstream lines(p.err);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("tilec: error: ", 0) == 0) errors.push_back(line);
    REQUIRE(errors.size() == 1);
    CHECK_THAT(p.err, Catch::EndsWith(errors[0] + "\n")); // the error is the last word
    for (const std::string& name : expand(c.names)) CHECK_THAT(errors[0], Catch::Contains(name));

    if (json) {
      std::string last = tilec::test::last_line(p.out);
      CHECK_THAT(last, Catch::StartsWith("{\"ok\": false, \"error\": \"") &&
                           Catch::EndsWith(", \"exit_code\": " + std::to_string(c.exit_code) + "}"));
    } else {
      CHECK(p.out.empty());
    }
    CHECK(snapshot(dir) == before);
  }
}

void check_all(const std::vector<BadCase>& cases) {
  for (const BadCase& c : cases) {
    DYNAMIC_SECTION(joined(c.args)) { check_case(c); }
  }
}

// --set and --shape mistakes every kernel command reports the same way, for `cmd`.
std::vector<BadCase> param_cases(const std::vector<std::string>& cmd) {
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = cmd;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  return {
      {with({"--set", "block"}), {"--set 'block'", "NAME=VALUE"}},
      {with({"--set", "=64"}), {"--set '=64'", "NAME=VALUE"}},
      {with({"--set", "blok=64"}), {"'blok'", "block"}},
      {with({"--set", "block=big"}), {"block=big", "not an integer"}},
      {with({"--set", "block="}), {"block=", "not an integer"}},
      {with({"--set", "block=64x"}), {"block=64x"}},
      {with({"--set", "block=-64"}), {"block=-64"}},
      {with({"--set", "block=0"}), {"block=0"}},
      {with({"--set", "block=100"}), {"block=100", "power of two"}},
      {with({"--set", "block=1099511627776"}), {"block=1099511627776"}},
      {with({"--set", "block=99999999999999999999999"}), {"block=99999999999999999999999", "out of range"}},
      {with({"--set", "block=64", "block=128"}), {"block", "twice"}},
      {with({"--set", "num_warps=3"}), {"num_warps=3"}},
      {with({"--set", "num_warps=64"}), {"num_warps=64"}},
      {with({"--set", "num_warps=0"}), {"num_warps=0"}},
      {with({"--shape", "rows"}), {"--shape 'rows'", "NAME=VALUE"}},
      {with({"--shape", "colz=5"}), {"'colz'", "cols"}},
      {with({"--shape", "cols=many"}), {"cols=many"}},
      {with({"--shape", "rows=2", "rows=3"}), {"rows", "twice"}},
      {with({"--set"}), {"--set"}},
  };
}

} // namespace

TEST_CASE("bad input: no command or an unknown command", "[cli][errors]") {
  check_all({
      {{}, {"subcommand"}},
      {{"frobnicate"}, {"frobnicate"}},
      {{"--frobnicate"}, {"--frobnicate"}},
  });
}

TEST_CASE("bad input: tilec list", "[cli][errors]") {
  check_all({
      {{"list", "--no-such-option"}, {"--no-such-option"}},
      {{"list", "extra"}, {"extra"}},
  });
}

TEST_CASE("bad input: tilec ir", "[cli][errors]") {
  check_all({
      {{"ir"}, {"kernel"}},
      {{"ir", "nosuchkernel"}, {"nosuchkernel", "softmax"}},
      {{"ir", "softmax", "--no-such-option"}, {"--no-such-option"}},
      {{"ir", "softmax", "extra"}, {"extra"}},
      {{"ir", "softmax", "--stage", "asm"}, {"asm"}},
      {{"ir", "softmax", "--stage"}, {"--stage"}},
      {{"ir", "softmax", "--arch", "sm_7"}, {"sm_7"}},
      {{"ir", "paged_attention", "--shape", "head_dim=100"}, {"head_dim=100", "multiple of 8 from 16 to 576"}},
      {{"ir", "paged_attention", "--shape", "head_dim=8"}, {"head_dim=8", "multiple of 8 from 16 to 576"}},
      {{"ir", "paged_attention", "--shape", "head_dim=584"}, {"head_dim=584", "from 16 to 576"}},
      {{"ir", "paged_attention", "--shape", "dtype=f64"}, {"f64", "f32"}},
      {{"ir", "paged_attention", "--shape", "block_size=0"}, {"block_size=0"}},
      {{"ir", "paged_attention", "--set", "block_n=3"}, {"block_n", "3"}},
  });
  check_all(param_cases({"ir", "softmax"}));
}

TEST_CASE("bad input: tilec compile", "[cli][errors]") {
  check_all({
      {{"compile", "-o", "{dir}/out"}, {"kernel"}},
      {{"compile", "softmax"}, {"--out"}},
      {{"compile", "nosuchkernel", "-o", "{dir}/out"}, {"nosuchkernel"}},
      {{"compile", "softmax", "-o"}, {"--out"}},
      {{"compile", "softmax", "-o", "{dir}/out", "--target", "x86"}, {"x86"}},
      {{"compile", "softmax", "-o", "{dir}/out", "--arch", "sm_75"}, {"sm_75"}},
      {{"compile", "softmax", "-o", "{dir}/afile"}, {"{dir}/afile", "not a folder"}},
      {{"compile", "softmax", "-o", "{dir}/afile/sub"}, {"{dir}/afile"}},
      {{"compile", "softmax", "-o", "{dir}/module_clash"}, {"softmax.toml"}},
      {{"compile", "softmax", "-o", "{dir}/module_clash", "--target", "emu"}, {"softmax.toml"}},
      {{"compile", "softmax", "-o", "{dir}/out", "--set", "num_warps=5"}, {"num_warps=5"}},
  });
  check_all(param_cases({"compile", "softmax", "-o", "{dir}/out"}));
}

TEST_CASE("bad input: tilec run", "[cli][errors]") {
  const std::vector<std::string> pa = {"run", "paged_attention", "--backend", "interpret"};
  auto pa_with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = pa;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  std::vector<BadCase> cases = {
      {{"run"}, {"kernel"}},
      {{"run", "nosuchkernel"}, {"nosuchkernel"}},
      {{"run", "softmax", "--backend", "warp-drive"}, {"warp-drive"}},
      {{"run", "softmax", "--backend"}, {"--backend"}},
      {{"run", "softmax", "--seed", "abc"}, {"abc"}},
      {{"run", "softmax", "--seed", "-1"}, {"-1"}},
      {{"run", "softmax", "--backend", "interpret", "--shape", "cols=5000"}, {"cols=5000"}},
      {{"run", "softmax", "--backend", "interpret", "--shape", "rows=-1"}, {"rows=-1"}},
      {{"run", "vector_add", "--backend", "interpret", "--shape", "n=-5"}, {"n=-5"}},
      {{"run", "vector_add", "--backend", "interpret", "--shape", "n=99999999999999"}, {"n=99999999999999"}},
      {{"run", "matmul", "--backend", "interpret", "--shape", "m=0"}, {"m=0"}},
      {{"run", "softmax", "--inputs", "{dir}/inputs_ok"}, {"--inputs", "x.npy is missing", "softmax reads x.npy [rows, cols]"}},
      {{"run", "softmax", "--softcap", "30"}, {"--softcap", "softmax"}},
      {{"run", "softmax", "--path", "decompose"}, {"--path decompose", "softmax"}},
      {{"run", "softmax", "--tuned", "{dir}/corrupt_db.toml"}, {"--tuned", "{dir}/corrupt_db.toml"}},
      {pa_with({"--path", "sideways"}), {"sideways"}},
      {pa_with({"--softcap", "-1"}), {"softcap", "-1"}},
      {pa_with({"--softcap", "0"}), {"softcap", "0"}},
      {pa_with({"--softcap", "nan"}), {"softcap", "nan"}},
      {pa_with({"--softcap", "soft"}), {"soft"}},
      {pa_with({"--softmax-scale", "inf"}), {"scale", "inf"}},
      {pa_with({"--softmax-scale", "nan"}), {"scale", "nan"}},
      {pa_with({"--shape", "hq=3", "hkv=2"}), {"3", "2", "multiple"}},
      {pa_with({"--shape", "hkv=0"}), {"hkv", "0"}},
      {pa_with({"--shape", "batch=0"}), {"batch", "0"}},
      {pa_with({"--shape", "batch=-1"}), {"batch", "-1"}},
      {pa_with({"--shape", "batch=1099511627776"}), {"batch", "1099511627776"}},
      {pa_with({"--shape", "sq=-3"}), {"sq", "-3"}},
      {pa_with({"--shape", "head_dim=0"}), {"head_dim", "0"}},
      {pa_with({"--shape", "head_dim=584"}), {"head_dim", "584"}},
      {pa_with({"--shape", "block_size=-4"}), {"block_size=-4"}},
      {pa_with({"--shape", "block_size=1024"}), {"block_size", "1024"}},
      {pa_with({"--shape", "max_blocks=-1"}), {"max_blocks", "-1"}},
      {pa_with({"--shape", "num_blocks=-1"}), {"num_blocks", "-1"}},
      {pa_with({"--shape", "ctx=-2"}), {"ctx", "-2"}},
      {pa_with({"--shape", "ctx=100000", "block_size=16", "max_blocks=2"}), {"ctx=100000"}},
      {pa_with({"--shape", "alibi=2"}), {"alibi", "2"}},
      {pa_with({"--shape", "window=-1"}), {"window=-1", "window must be from 0 to 1099511627776 (2^40)"}},
      {pa_with({"--shape", "causal=2"}), {"causal=2"}},
      {pa_with({"--shape", "chunk=-1"}), {"chunk=-1", "chunk must be from 0"}},
      {pa_with({"--shape", "causal=1", "sq=4", "ctx=3"}), {"causal=1", "sq=4", "ctx=3"}},
      {pa_with({"--shape", "kv_dtype=f8e3m4"}), {"kv_dtype", "f8e3m4"}},
      {pa_with({"--k-scale", "0.5"}), {"--k-scale", "not fp8", "kv_dtype=f8e4m3"}},
      {pa_with({"--shape", "kv_dtype=f8e4m3", "--k-scale", "nan"}), {"k_scale", "nan", "f8e4m3"}},
      {pa_with({"--shape", "kv_dtype=f8e4m3", "--v-scale", "-1"}), {"v_scale", "-1"}},
      {pa_with({"--shape", "kv_dtype=f8e5m2", "--v-scale", "inf"}), {"v_scale", "inf"}},
      {pa_with({"--inputs", "{dir}/inputs_fp8"}), {"k_cache.npy", "|u1", "kv_dtype=f8e4m3"}},
      {pa_with({"--inputs", "{dir}/inputs_fp8", "--shape", "kv_dtype=f8e5m2"}), {"--k-scale is required"}},
      {pa_with({"--inputs", "{dir}/inputs_fp8", "--shape", "kv_dtype=f8e5m2", "--k-scale", "1"}), {"--v-scale is required"}},
      {pa_with({"--inputs", "{dir}/inputs_ok", "--shape", "kv_dtype=f8e4m3", "--k-scale", "1", "--v-scale", "1"}),
       {"k_cache.npy", "kv_dtype=f8e4m3", "|u1"}},
      {pa_with({"--set", "num_stages=0"}), {"num_stages", "0"}},
      {pa_with({"--set", "num_stages=9"}), {"num_stages", "9"}},
      {pa_with({"--shape", "dtype=int8"}), {"int8"}},
      {pa_with({"--shape", "batch=65536", "hq=65536", "head_dim=256", "max_blocks=65536"}), {"batch"}},
      {pa_with({"--set", "block_n=0"}), {"block_n", "0"}},
      {pa_with({"--set", "head_group=3"}), {"head_group", "3"}},
      {pa_with({"--set", "num_splits=3"}), {"num_splits", "3"}},
      {pa_with({"--set", "num_splits=-2"}), {"num_splits", "-2"}},
      {pa_with({"--inputs", "{dir}/nothing_here"}), {"{dir}/nothing_here"}},
      {pa_with({"--inputs", "{dir}/afile"}), {"{dir}/afile", "not a directory"}},
      {pa_with({"--inputs", "{dir}/inputs_no_q"}), {"q.npy", "missing"}},
      {pa_with({"--inputs", "{dir}/inputs_truncated"}), {"q.npy"}},
      {pa_with({"--inputs", "{dir}/inputs_header_only"}), {"q.npy"}},
      {pa_with({"--inputs", "{dir}/inputs_garbage"}), {"q.npy"}},
      {pa_with({"--inputs", "{dir}/inputs_f64"}), {"q.npy", "<f8"}},
      {pa_with({"--inputs", "{dir}/inputs_rank3"}), {"q.npy", "3 dimensions"}},
      {pa_with({"--inputs", "{dir}/inputs_float_table"}), {"block_table.npy", "<f4"}},
      {pa_with({"--inputs", "{dir}/inputs_ctx_too_long"}), {"context_lens[0] = 100"}},
      {pa_with({"--inputs", "{dir}/inputs_bad_page"}), {"block_table[1, 0] = 1000"}},
      {pa_with({"--inputs", "{dir}/inputs_zero_batch"}), {"batch", "0"}},
      {pa_with({"--inputs", "{dir}/inputs_sq3_ctx2", "--shape", "causal=1"}),
       {"causal=1", "Sq = 3", "context_lens[0] = 2"}},
      {pa_with({"--inputs", "{dir}/inputs_ok", "--shape", "batch=3"}), {"--shape batch=3 contradicts the inputs in", "batch=2"}},
      {pa_with({"--inputs", "{dir}/inputs_ok", "--out", "{dir}/adir"}), {"{dir}/adir"}},
      {pa_with({"--inputs", "{dir}/inputs_ok", "--out", "{dir}/afile/out.npy"}), {"{dir}/afile"}},
      {pa_with({"--inputs", "{dir}/inputs_ok", "--out", "{dir}/no_such_folder/out.npy"}), {"{dir}/no_such_folder"}},
      {pa_with({"--tuned", "{dir}/no_such_db.toml"}), {"{dir}/no_such_db.toml"}},
      {pa_with({"--tuned", "{dir}/corrupt_db.toml"}), {"{dir}/corrupt_db.toml"}},
      {pa_with({"--tuned", "{dir}/adir"}), {"{dir}/adir"}},
  };
  if (!tilec::rt::cuda_available())
    cases.push_back({{"run", "softmax", "--backend", "cuda"}, {"cuda"}, 3});
  check_all(cases);
  check_all(param_cases({"run", "softmax", "--backend", "interpret"}));
}

TEST_CASE("bad input: tilec autotune", "[cli][errors][autotune]") {
  const std::vector<std::string> shape = {"batch=1", "hq=2", "hkv=1", "head_dim=16", "block_size=4", "ctx=8"};
  const std::string space = std::string(TILEC_SOURCE_DIR) + "/configs/paged_attention.toml";
  auto at = [&](std::vector<std::string> more) {
    std::vector<std::string> a = {"autotune", "paged_attention", "--no-ptxas", "-o", "{dir}/db.toml"};
    a.insert(a.end(), more.begin(), more.end());
    if (std::find(a.begin(), a.end(), "--backend") == a.end()) a.insert(a.end(), {"--backend", "interpret"});
    return a;
  };
  // Tuning a valid problem into the database `db`.
  auto into = [&](const std::string& db) {
    std::vector<std::string> a = {"autotune", "paged_attention", "--backend", "interpret", "--no-ptxas",
                                  "--space", space, "-o", db, "--shape"};
    a.insert(a.end(), shape.begin(), shape.end());
    return a;
  };
  auto with_shape = [&](std::vector<std::string> a) {
    a.push_back("--shape");
    a.insert(a.end(), shape.begin(), shape.end());
    return a;
  };
  std::vector<BadCase> cases = {
      {{"autotune"}, {"kernel"}},
      {{"autotune", "paged_attention", "--shape", "batch=1"}, {"--space"}},
      {{"autotune", "paged_attention", "--space", space}, {"--shape"}},
      {{"autotune", "nosuchkernel", "--space", space, "--shape", "batch=1"}, {"nosuchkernel"}},
      {{"autotune", "softmax", "--space", space, "--shape", "rows=1"}, {"softmax"}},
      {at({"--space", space, "--shape", "batch"}), {"--shape 'batch'", "NAME=VALUE"}},
      {at({"--space", space, "--shape", "bacth=1"}), {"bacth"}},
      {at({"--space", space, "--shape", "batch=one"}), {"batch=one"}},
      {at({"--space", space, "--shape", "batch=0"}), {"batch", "0"}},
      {at({"--space", space, "--shape", "hq=3", "hkv=2"}), {"multiple"}},
      {at({"--space", space, "--backend", "warp-drive", "--shape", "batch=1"}), {"warp-drive"}},
      {at({"--space", space, "-j", "-1", "--shape", "batch=1"}), {"-1"}},
      {at({"--space", space, "--seed", "abc", "--shape", "batch=1"}), {"abc"}},
      {at({"--space", "{dir}/no_such_space.toml", "--shape", "batch=1"}), {"{dir}/no_such_space.toml"}},
      {at({"--space", "{dir}/adir", "--shape", "batch=1"}), {"{dir}/adir"}},
      {at({"--space", "{dir}/empty.toml", "--shape", "batch=1"}), {"{dir}/empty.toml"}},
      {at({"--space", "{dir}/space_syntax.toml", "--shape", "batch=1"}), {"space_syntax.toml:2"}},
      {at({"--space", "{dir}/space_unknown_param.toml", "--shape", "batch=1"}), {"blok_n"}},
      {at({"--space", "{dir}/space_other_kernel.toml", "--shape", "batch=1"}), {"softmax"}},
      {at({"--space", "{dir}/space_not_ints.toml", "--shape", "batch=1"}), {"space_not_ints.toml", "block_n"}},
      {at({"--space", "{dir}/space_empty_list.toml", "--shape", "batch=1"}), {"space_empty_list.toml", "block_n"}},
      {at({"--space", "{dir}/space_bad_constraint.toml", "--shape", "batch=1"}), {"nosuch"}},
      {into("{dir}/adir"), {"{dir}/adir"}},
      {into("{dir}/afile/db.toml"), {"{dir}/afile"}},
      {into("{dir}/no_such_folder/db.toml"), {"{dir}/no_such_folder"}},
      {into(""), {"-o", "empty"}},
      {with_shape(at({"--space", space, "--seed", "-1"})), {"--seed", "-1"}},
      {with_shape(at({"--space", space, "-j", "0"})), {"--jobs", "0"}},
      {with_shape(at({"--space", space, "--export", "{dir}/afile"})), {"--export", "{dir}/afile"}},
  };
  if (!tilec::rt::cuda_available())
    cases.push_back({with_shape(at({"--space", space, "--backend", "cuda"})), {"cuda"}, 3});
  check_all(cases);
}

TEST_CASE("bad input: tilec bench", "[cli][errors]") {
  std::vector<BadCase> cases = {
      {{"bench"}, {"kernel"}},
      {{"bench", "nosuchkernel"}, {"nosuchkernel"}},
      {{"bench", "paged_attention", "--also", "nope"}, {"--also nope", "paged_attention"}},
      {{"bench", "paged_attention", "--tuned", "{dir}/no_such_db.toml"}, {"{dir}/no_such_db.toml"}},
      {{"bench", "paged_attention", "--tuned", "{dir}/adir"}, {"{dir}/adir", "folder"}},
      {{"bench", "paged_attention", "--shape", "hq=2", "--set", "block_n=3"}, {"block_n", "3"}},
      {{"bench", "softmax", "--tuned", "{dir}/no_such_db.toml"}, {"--tuned", "{dir}/no_such_db.toml"}},
      {{"bench", "softmax", "--decompose"}, {"decompose", "softmax"}},
      {{"bench", "softmax", "--repeats", "0"}, {"--repeats", "0"}},
      {{"bench", "softmax", "--warmup", "-1"}, {"--warmup", "-1"}},
      {{"bench", "softmax", "--seed", "-1"}, {"--seed", "-1"}},
      {{"bench", "softmax", "--backend", "warp-drive"}, {"warp-drive"}},
  };
  if (!tilec::rt::cuda_available()) cases.push_back({{"bench", "softmax", "--backend", "cuda"}, {"cuda"}, 3});
  check_all(cases);
  check_all(param_cases({"bench", "softmax", "--backend", "interpret"}));
}

TEST_CASE("bad input: tilec fuzz", "[cli][errors]") {
  check_all({
      {{"fuzz", "--count", "0"}, {"--count", "0"}},
      {{"fuzz", "--count", "-3"}, {"--count", "-3"}},
      {{"fuzz", "--count", "many"}, {"--count", "many"}},
      {{"fuzz", "--jobs", "0"}, {"--jobs", "0"}},
      {{"fuzz", "--seed", "-1"}, {"--seed", "-1"}},
      {{"fuzz", "--save-dir", "{dir}/afile"}, {"--save-dir", "{dir}/afile"}},
      {{"fuzz", "--replay", "{dir}/no_such.tir"}, {"{dir}/no_such.tir"}},
      {{"fuzz", "--replay", "{dir}/empty.toml"}, {"{dir}/empty.toml", "not a fuzz program"}},
  });
}
