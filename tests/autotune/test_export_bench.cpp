// `tilec autotune --export` (modules a runtime-only host finds) and `tilec bench` (tuned
// against default configs), end to end on the emulator.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "runtime/module_store.h"
#include "runtime/tuning_db.h"
#include "tests/tilec_process.h"

namespace fs = std::filesystem;
using namespace tilec;

namespace {

struct Scratch {
  fs::path dir;
  Scratch() {
    static int n = 0;
    dir = fs::temp_directory_path() / ("tilec_export_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

test::Process tilec_ok(const std::string& args) {
  test::Process p = test::run_tilec(args);
  INFO("tilec " << args << "\n" << p.text());
  REQUIRE(p.exited());
  REQUIRE(p.exit_code == 0);
  return p;
}

const char* kSpace = R"(kernel = "paged_attention"
[params]
block_n = [4, 8]
head_group = [1]
num_splits = [2]
num_warps = [1]
[measure]
warmup = 0
repeats = 1
)";

const char* kShape = "--shape batch=1 hq=2 hkv=1 head_dim=16 block_size=4 ctx=8";

} // namespace

TEST_CASE("tilec autotune --export writes modules a runtime-only host loads, and tilec bench compares",
          "[autotune][modules]") {
  Scratch s;
  fs::path space = s.dir / "space.toml", db = s.dir / "db.toml", out = s.dir / "deploy";
  { std::ofstream(space) << kSpace; }
  test::Process tuned = tilec_ok("autotune paged_attention --space " + space.string() + " " + kShape +
                                 " --backend emulate --no-ptxas -o " + db.string() + " --export " + out.string() +
                                 " --json");
  CHECK_THAT(tuned.out, Catch::Contains("\"exported\": [") && Catch::Contains("\"measured\": 2"));
  REQUIRE(fs::exists(out / "db.toml")); // the database travels with the modules
  rt::TuningDb d = rt::read_tuning_db((out / "db.toml").string());
  REQUIRE(d.entries.size() == 2);

  rt::set_module_builder({}); // as a host that links only the runtime
  auto key = d.entries[0].key;
  for (const char* arch : {"host", "sm_90"})
    for (int64_t softcap : {0, 1}) {
      INFO(arch << " softcap=" << softcap);
      rt::TunedModules t = rt::load_tuned(d, "paged_attention", "cpu-emulator", key, arch, {out},
                                          {{"softcap", softcap}});
      REQUIRE(t.selection);
      CHECK(t.selection->rule == "exact");
      REQUIRE(t.modules.size() == 2); // every winner splits the KV walk: its combine kernel too
      CHECK(t.modules[1].kernel == "paged_attention_combine");
      CHECK(t.modules[0].arch == arch);
      CHECK(t.modules[0].specialization.at("block_n") == rt::SpecValue(t.config.at("block_n")));
    }

  // The example host program (linked with the runtime alone) finds them too, and names the
  // command that builds a module it cannot find.
  std::string key_text = rt::format_key(key);
  test::Process host = test::run_process(tilec::test::tuned_modules_binary(),
                                         {(out / "db.toml").string(), out.string(), "cpu-emulator", "host", key_text});
  INFO(host.text());
  CHECK(host.exit_code == 0);
  CHECK_THAT(host.out, Catch::Contains("exact key") && Catch::Contains("module paged_attention (host)"));
  test::Process missing = test::run_process(
      tilec::test::tuned_modules_binary(), {(out / "db.toml").string(), out.string(), "cpu-emulator", "sm_80", key_text});
  INFO(missing.text());
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Catch::Contains("no module paged_attention for sm_80") &&
                              Catch::Contains("tilec compile paged_attention --arch sm_80"));

  // The database's keys by default; one row, both configs correct and timed.
  test::Process bench = tilec_ok("bench paged_attention --tuned " + db.string() +
                                 " --backend emulate --warmup 0 --repeats 1 --decompose --json");
  CHECK_THAT(bench.out, Catch::Contains("\"ok\": true") && Catch::Contains("\"rule\": \"exact\"") &&
                            Catch::Contains("\"default\": {\"config\": \"block_m=0 block_n=32 head_group=0") &&
                            Catch::Contains("\"decompose\": {") && Catch::Contains("\"speedup\": "));
  test::Process table = tilec_ok("bench paged_attention --tuned " + db.string() +
                                 " --backend interpret --repeats 1 --shape batch=2 hq=2 hkv=1 head_dim=16 "
                                 "block_size=4 ctx=12");
  CHECK_THAT(table.out, Catch::Contains("default ms") && Catch::Contains("tuned ms") && Catch::Contains("(nearest)"));
}

TEST_CASE("tilec compile writes paged attention's combine module too, findable by its specialization",
          "[autotune][modules]") {
  Scratch s;
  fs::path out = s.dir / "mods";
  tilec_ok("compile paged_attention --target emu --set block_n=8 num_splits=4 --shape hq=4 hkv=1 head_dim=32 "
           "dtype=bf16 -o " + out.string());
  rt::Manifest main = rt::read_manifest(out / "paged_attention.toml");
  rt::Manifest combine = rt::read_manifest(out / "paged_attention_combine.toml");
  CHECK(main.specialization == combine.specialization);
  CHECK(main.specialization.at("dtype") == rt::SpecValue(std::string("bf16")));
  CHECK(main.specialization.at("head_group") == rt::SpecValue(int64_t(0))); // as configured: all Hq/Hkv heads
  CHECK(main.run == std::vector<std::string>{"paged_attention", "paged_attention_combine"});
  CHECK(rt::read_kernel_card(out / "paged_attention.kernel.toml").size_fields == std::vector<std::string>{"sq", "ctx", "batch", "max_blocks", "num_blocks"});
  rt::ModuleQuery q;
  q.kernel = "paged_attention_combine";
  q.arch = "host";
  q.values = main.specialization;
  q.values["batch"] = int64_t(3);
  auto found = rt::find_module({s.dir}, q);
  REQUIRE(found);
  CHECK(found->kernel == "paged_attention_combine");
}

TEST_CASE("tilec bench times any template's kernel after checking it", "[autotune]") {
  test::Process p = tilec_ok("bench softmax --backend emulate --set block=256 --shape rows=5 cols=200 --shape rows=3 "
                             "cols=256 --repeats 2 --json");
  CHECK_THAT(test::last_line(p.out), Catch::StartsWith("{\"ok\": true") && Catch::Contains("\"rows\": [{\"key\": \"cols=200 rows=5\"") &&
                                         Catch::Contains("\"config\": \"block=256 num_warps=4\"") &&
                                         Catch::Contains("cols=256 rows=3"));
  test::Process table = tilec_ok("bench vector_add --backend interpret --repeats 1");
  CHECK_THAT(table.out, Catch::Contains("default ms") && Catch::Contains("vector_add on cpu-interpreter"));
}

TEST_CASE("tilec bench: bad input exits 2 naming it", "[autotune]") {
  Scratch s;
  fs::path db = s.dir / "db.toml";
  { std::ofstream(db) << "version = 1\n"; }
  struct Case {
    std::string args, says;
  } cases[] = {
      {"bench paged_attention --tuned " + (s.dir / "missing.toml").string(), "missing.toml: no such file"},
      {"bench softmax --tuned " + db.string(), "softmax"},
      {"bench paged_attention --tuned " + db.string() + " --repeats 0", "--repeats 0"},
      {"bench paged_attention --tuned " + db.string(), "give --shape"},
      {"bench paged_attention --tuned " + db.string() + " --shape hq=3 bogus=1", "bogus"},
      {"bench paged_attention --also nope", "--also nope: paged_attention has no other path"},
      {"bench paged_attention --shape hq=2 --set block_n=3", "block_n"},
      {"bench softmax --decompose", "--also decompose: softmax has no other path"},
      {"bench softmax --set block=3", "block"},
      {"bench nosuch", "nosuch"},
      {"bench softmax --warmup -1", "--warmup -1"},
  };
  for (const Case& c : cases) {
    test::Process p = test::run_tilec(c.args);
    INFO("tilec " << c.args << "\n" << p.text());
    REQUIRE(p.exited());
    CHECK(p.exit_code == 2);
    CHECK_THAT(p.err, Catch::Contains(c.says));
  }
}
