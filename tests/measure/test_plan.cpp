// Compile here, measure there: `tilec autotune --prepare` writes a plan, the LLVM-free
// `tilec-measure` times it (here on the emulator) in shards, `tilec db merge` joins the shards,
// and `tilec run --tuned` reads the result. The plan format round-trips; a truncated plan or
// module is reported and nothing runs.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>

#include "ir/error.h"
#include "measure/plan.h"
#include "runtime/tuning_db.h"
#include "tests/tilec_process.h"

namespace fs = std::filesystem;
using namespace tilec;

namespace {

struct Outcome {
  int code = -1;
  std::string out;    // stdout and stderr
  std::string stdout_; // stdout alone (a --json object is its last line)
};

Outcome finished(const std::string& what, const test::Process& p) {
  INFO(what << "\n" << p.text());
  REQUIRE(p.exited());
  return {p.exit_code, p.out + p.err, p.out};
}

Outcome run_tilec(const std::string& args) { return finished("tilec " + args, test::run_tilec(args)); }

Outcome run_measure(const std::string& args) {
  std::vector<std::string> split;
  std::istringstream in(args);
  for (std::string a; in >> a;) split.push_back(a);
  return finished("tilec-measure " + args, test::run_process(tilec::test::measure_binary(), split));
}

struct Scratch {
  fs::path dir;
  Scratch() {
    dir = fs::temp_directory_path() / ("tilec_plan_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

const char* kSpace = R"(kernel = "paged_attention"
[params]
block_n = [4, 8]
head_group = [1, 2]
num_warps = [1, 2]
[constraints]
group = "(hq / hkv) % head_group == 0"
[measure]
warmup = 0
repeats = 2
)";

const char* kShape = "--shape batch=1 hq=2 hkv=1 head_dim=16 block_size=4 ctx=8";

measure::Plan sample_plan() {
  measure::Plan p;
  p.kernel = "paged_attention";
  p.arch = "sm_80";
  p.compiler = "tilec 0.1.0";
  p.created_at = "2026-12-02T00:00:00Z";
  p.warmup = 2;
  p.repeats = 7;
  p.problems = {{{{"batch", int64_t(2)}, {"dtype", std::string("bf16")}}, 5},
                {{{"batch", int64_t(64)}, {"dtype", std::string("f16")}}, 1}};
  measure::PlanCandidate a;
  a.problem = 1;
  a.index = 3;
  a.config = {{"block_n", 64}, {"num_warps", 4}};
  a.modules = "p1/c3";
  a.registers = 117;
  a.checked = true;
  a.max_abs_err = 1.25e-3;
  measure::PlanCandidate b = a;
  b.problem = 0;
  b.index = 0;
  b.modules = "p0/c0";
  b.registers.reset();
  b.checked = false;
  b.max_abs_err.reset();
  p.candidates = {a, b};
  p.rejected = {{0, {{"block_n", 16}}, "spills on sm_80 (8 bytes); a \"quoted\" reason"}};
  return p;
}

} // namespace

TEST_CASE("measurement plans round-trip, and a truncated or malformed plan is refused", "[autotune][plan]") {
  measure::Plan p = sample_plan();
  std::string text = measure::format_plan(p);
  measure::Plan back = measure::parse_plan(text, "plan.toml");
  CHECK(measure::format_plan(back) == text);
  CHECK(back.kernel == p.kernel);
  CHECK(back.arch == "sm_80");
  CHECK(back.warmup == 2);
  CHECK(back.repeats == 7);
  REQUIRE(back.problems.size() == 2);
  CHECK(back.problems[0].key == p.problems[0].key);
  CHECK(back.problems[0].seed == 5);
  REQUIRE(back.candidates.size() == 2);
  CHECK(back.candidates[0].config == p.candidates[0].config);
  CHECK(back.candidates[0].registers == 117);
  CHECK(back.candidates[0].max_abs_err == Approx(1.25e-3));
  CHECK_FALSE(back.candidates[1].registers);
  CHECK_FALSE(back.candidates[1].checked);
  REQUIRE(back.rejected.size() == 1);
  CHECK(back.rejected[0].reason == p.rejected[0].reason);

  // Cut at the start of its last candidate: still valid TOML, but fewer than it says.
  std::string cut = text.substr(0, text.rfind("[[candidate]]"));
  CHECK_THROWS_WITH(measure::parse_plan(cut, "plan.toml"), Catch::Contains("says 2 candidates but holds 1") &&
                                                               Catch::Contains("truncated"));
  // Cut mid-table: a candidate missing its fields.
  std::string mid = text.substr(0, text.find("modules = 'p0/c0'"));
  CHECK_THROWS_WITH(measure::parse_plan(mid, "plan.toml"), Catch::Contains("missing key 'modules'"));
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    REQUIRE(t.find(from) != std::string::npos);
    return t.replace(t.find(from), from.size(), to);
  };
  CHECK_THROWS_WITH(measure::parse_plan(with("version = 1", "version = 2"), "p.toml"), Catch::Contains("p.toml:2:"));
  CHECK_THROWS_WITH(measure::parse_plan(with("problem = 1", "problem = 9"), "p.toml"),
                    Catch::Contains("problem 9 is not among the plan's 2"));
  CHECK_THROWS_WITH(measure::parse_plan(with("'p1/c3'", "'../../etc'"), "p.toml"),
                    Catch::Contains("must be a folder inside the plan"));
  CHECK_THROWS_WITH(measure::parse_plan(with("repeats = 7", "repeats = 0"), "p.toml"),
                    Catch::Contains("'repeats' must be at least 1"));

  CHECK(measure::parse_shard("").whole());
  measure::Shard s = measure::parse_shard("2/3");
  CHECK((s.takes(1) && s.takes(4) && !s.takes(0) && !s.takes(2)));
  for (const char* bad : {"0/3", "4/3", "3", "1/0", "a/b", "1/2x"})
    CHECK_THROWS_AS(measure::parse_shard(bad), UserError);
}

TEST_CASE("tilec autotune --prepare, then tilec-measure in shards on the emulator, then db merge and run --tuned",
          "[autotune][plan][cli]") {
  Scratch s;
  std::string space = s.path("space.toml");
  { std::ofstream(space) << kSpace; }
  std::string plan = s.path("plan");
  Outcome prep = run_tilec("autotune paged_attention --space " + space + " " + kShape +
                           " --arch sm_90 --prepare " + plan + "/ --json"); // as users type it
  REQUIRE(prep.code == 0);
  CHECK(prep.out.find("\"candidates\": 8") != std::string::npos);
  CHECK_FALSE(fs::exists(plan + ".partial"));
  measure::Plan p = measure::read_plan(plan);
  REQUIRE(p.candidates.size() == 8);
  CHECK(p.arch == "sm_90");
  CHECK(p.repeats == 2);
  for (const measure::PlanCandidate& c : p.candidates) {
    CHECK(c.checked); // each ran against the reference on the emulator
    CHECK(measure::check_candidate_modules(plan, "host", c).empty());
    CHECK(measure::check_candidate_modules(plan, "sm_90", c).empty());
  }
  CHECK(fs::exists(fs::path(plan) / "space.toml"));

  // Two shards, each into its own database, then merged in either order: the same bytes.
  Outcome one = run_measure(plan + " --backend emulate --shard 1/2 -o " + s.path("s1.toml"));
  Outcome two = run_measure(plan + " --backend emulate --shard 2/2 -o " + s.path("s2.toml") + " --json");
  CHECK(one.code == 0);
  CHECK(two.code == 0);
  CHECK(test::last_line(two.stdout_).find("\"measured\": 4") != std::string::npos);
  rt::TuningDb s1 = rt::read_tuning_db(s.path("s1.toml")), s2 = rt::read_tuning_db(s.path("s2.toml"));
  CHECK(s1.entries.size() == 4);
  CHECK(s2.entries.size() == 4);
  CHECK(run_tilec("db merge " + s.path("s1.toml") + " " + s.path("s2.toml") + " -o " + s.path("m12.toml")).code == 0);
  CHECK(run_tilec("db merge " + s.path("s2.toml") + " " + s.path("s1.toml") + " -o " + s.path("m21.toml")).code == 0);
  auto read = [](const std::string& f) {
    std::ifstream in(f);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  CHECK(read(s.path("m12.toml")) == read(s.path("m21.toml")));

  // The same database shape as `tilec autotune` timing the same space directly: the same
  // slots, and the same fields filled in each.
  CHECK(run_tilec("autotune paged_attention --space " + space + " " + kShape + " --backend emulate --no-ptxas -o " +
                  s.path("direct.toml"))
            .code == 0);
  rt::TuningDb merged = rt::read_tuning_db(s.path("m12.toml")), direct = rt::read_tuning_db(s.path("direct.toml"));
  REQUIRE(merged.entries.size() == direct.entries.size());
  for (const rt::TuningEntry& e : merged.entries) {
    const rt::TuningEntry* d = direct.find(e);
    REQUIRE(d);
    CHECK(e.device == "cpu-emulator"); // marked as the emulator's: never chosen for a GPU
    CHECK(e.backend == "emulate");
    CHECK(e.repeats == d->repeats);
    CHECK(bool(e.gbps) == bool(d->gbps));
    CHECK(e.ideal_bytes == d->ideal_bytes);
    CHECK(bool(e.bytes_loaded) == bool(d->bytes_loaded));
    CHECK(bool(e.max_abs_err) == bool(d->max_abs_err));
    CHECK(e.median_ms > 0);
  }
  Outcome run = run_tilec("run paged_attention --backend emulate --tuned " + s.path("m12.toml") + " " + kShape);
  CHECK(run.code == 0);
  CHECK(run.out.find("exact key") != std::string::npos);
  // A GPU is never given these entries.
  auto gpu = rt::select_config(merged, "paged_attention", "NVIDIA H200", merged.entries[0].key, {});
  CHECK_FALSE(gpu);

  // --winners: the fastest emulated candidate, with its emulator modules; none measured on the
  // GPU, so with --backend cuda (the default) every problem lacks one (exit 1).
  Outcome won = run_measure(plan + " --winners " + s.path("m12.toml") + " --backend emulate");
  CHECK(won.code == 0);
  const rt::TuningEntry* fastest = &merged.entries[0];
  for (const rt::TuningEntry& e : merged.entries) fastest = e.median_ms < fastest->median_ms ? &e : fastest;
  CHECK(won.stdout_.find("\"config\": \"" + rt::format_config(fastest->config) + "\"") != std::string::npos);
  CHECK(won.stdout_.find("/modules/host/p0/c") != std::string::npos);
  Outcome none = run_measure(plan + " --winners " + s.path("m12.toml"));
  CHECK(none.code == 1);
  CHECK(none.stdout_.empty());

  // Without a driver the GPU backend exits 3 and writes nothing.
  Outcome cuda = run_measure(plan + " -o " + s.path("gpu.toml"));
  CHECK(cuda.code == 3);
  CHECK_FALSE(fs::exists(s.path("gpu.toml")));
}

TEST_CASE("tilec-measure refuses a truncated plan or module and bad arguments, running nothing",
          "[autotune][plan][cli]") {
  Scratch s;
  std::string space = s.path("space.toml");
  { std::ofstream(space) << kSpace; }
  std::string plan = s.path("plan");
  REQUIRE(run_tilec("autotune paged_attention --space " + space + " " + kShape + " --prepare " + plan).code == 0);
  measure::Plan p = measure::read_plan(plan);
  REQUIRE(p.candidates.size() >= 2);

  // A module cut short: reported with its file, nothing measured, no database written.
  fs::path victim;
  for (const auto& e : fs::directory_iterator(measure::candidate_dir(plan, "host", p.candidates[1])))
    if (e.path().extension() == ".so") victim = e.path();
  REQUIRE(!victim.empty());
  fs::resize_file(victim, fs::file_size(victim) / 2);
  Outcome bad = run_measure(plan + " --backend emulate -o " + s.path("db.toml"));
  CHECK(bad.code == 2);
  CHECK(bad.out.find(victim.filename().string()) != std::string::npos);
  CHECK(bad.out.find("truncated or corrupt") != std::string::npos);
  CHECK(bad.out.find("nothing was measured") != std::string::npos);
  CHECK_FALSE(fs::exists(s.path("db.toml")));
  // The shard without that candidate still runs.
  CHECK(run_measure(plan + " --backend emulate --shard 1/2 -o " + s.path("db.toml")).code == 0);

  // plan.toml cut short.
  std::string text;
  {
    std::ifstream in(fs::path(plan) / "plan.toml");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  { std::ofstream(fs::path(plan) / "plan.toml") << text.substr(0, text.rfind("[[candidate]]")); }
  Outcome cut = run_measure(plan + " --backend emulate -o " + s.path("db2.toml") + " --json");
  CHECK(cut.code == 2);
  CHECK(cut.out.find("truncated") != std::string::npos);
  CHECK(test::last_line(cut.stdout_).find("\"exit_code\": 2") != std::string::npos);
  CHECK_FALSE(fs::exists(s.path("db2.toml")));

  for (const std::string& args : {std::string(""), s.path("nowhere"), plan + " --shard 3/2", plan + " --backend gpu",
                                  plan + " --repeats 0", plan + " --bogus", plan + " " + plan})
    CHECK(run_measure(args + " -o " + s.path("db3.toml")).code == 2);
  CHECK_FALSE(fs::exists(s.path("db3.toml")));

  // --prepare refuses a folder in use and flags that do not apply to it.
  CHECK(run_tilec("autotune paged_attention --space " + space + " " + kShape + " --prepare " + plan).code == 2);
  std::string fresh = " --prepare " + s.path("fresh");
  CHECK(run_tilec("autotune paged_attention --space " + space + " " + kShape + fresh + " --shard 1/2").code == 2);
  CHECK(run_tilec("autotune paged_attention --space " + space + " " + kShape + fresh + " -o x.toml").code == 2);
  CHECK(run_tilec("autotune paged_attention --space " + space + " " + kShape + " --no-check").code == 2);
  CHECK_FALSE(fs::exists(s.path("fresh")));
}

// Issue 29: a prefill key (sq=64) prepares with the shipped space's block_m candidates, each
// checked on the emulator; measured, its winner serves other prefill lengths of its sq bucket
// (17-128) and never a speculative one (5-16), which keeps the defaults.
TEST_CASE("tilec autotune --prepare a prefill key, measure it on the emulator, --tuned within its sq bucket",
          "[autotune][plan][cli]") {
  Scratch s;
  std::string space = s.path("space.toml");
  {
    std::ofstream(space) << "kernel = \"paged_attention\"\n[params]\nblock_n = [16]\nhead_group = [2]\n"
                            "num_warps = [4]\nnum_stages = [2]\nblock_m = [0, 16, 32, 64, 128]\n"
                            "[constraints]\nblock_m_within_rows = \"block_m == 0 || block_m < 2 * head_group * sq\"\n"
                            "registers_hold_tile = \"tile_m * (pow2(head_dim) + block_n) <= 2560 * num_warps\"\n"
                            "[measure]\nwarmup = 0\nrepeats = 1\n";
  }
  const std::string prefill = "--shape batch=1 hq=4 hkv=2 sq=64 head_dim=32 block_size=16 ctx=96 dtype=f16 causal=1";
  const std::string decode = "--shape batch=1 hq=4 hkv=2 sq=1 head_dim=32 block_size=16 ctx=96 dtype=f16";
  std::string plan = s.path("plan");
  Outcome prep = run_tilec("autotune paged_attention --space " + space + " " + prefill + " " + decode +
                           " --arch sm_90 --prepare " + plan);
  REQUIRE(prep.code == 0);
  measure::Plan p = measure::read_plan(plan);
  std::set<int64_t> block_ms;
  size_t decode_candidates = 0;
  for (const measure::PlanCandidate& c : p.candidates) {
    CHECK(c.checked);
    if (c.problem == 0) block_ms.insert(c.config.at("block_m"));
    else ++decode_candidates;
  }
  // 128 rows at sq=64: every block_m up to 128 is its own tile; decode (2 rows) tunes 0 alone.
  CHECK(block_ms == std::set<int64_t>{0, 16, 32, 64, 128});
  CHECK(decode_candidates == 1);
  REQUIRE(run_measure(plan + " --backend emulate -o " + s.path("db.toml")).code == 0);
  const std::string near = "--shape batch=1 hq=4 hkv=2 sq=100 head_dim=32 block_size=16 ctx=120 dtype=f16 causal=1";
  Outcome run = run_tilec("run paged_attention --backend emulate --tuned " + s.path("db.toml") + " " + near);
  CHECK(run.code == 0);
  CHECK(run.out.find("from the nearest key") != std::string::npos);
  CHECK(run.out.find("sq=64") != std::string::npos);
  const std::string spec = "--shape batch=1 hq=4 hkv=2 sq=8 head_dim=32 block_size=16 ctx=96 dtype=f16 causal=1";
  Outcome other = run_tilec("run paged_attention --backend emulate --tuned " + s.path("db.toml") + " " + spec);
  CHECK(other.code == 0);
  CHECK(other.out.find("using the default config") != std::string::npos);
}
