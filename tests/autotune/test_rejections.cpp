// Rejected configs in the tuning database: their format, that a re-run of the tuner neither
// builds nor measures them again (counted, not timed), and `tilec db export`, which writes the
// winners of an existing database as `tilec autotune --export` does, measuring nothing.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "autotune/tuner.h"
#include "backends/launchers.h"
#include "runtime/module_store.h"
#include "runtime/tuning_db.h"
#include "templates/registry.h"
#include "tests/runtime/helpers.h"
#include "tests/tilec_process.h"

namespace fs = std::filesystem;
using namespace tilec;

namespace {

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

rt::TuningEntry measured(int64_t block, double ms) {
  rt::TuningEntry e;
  e.kernel = "vector_add";
  e.device = "cpu-emulator";
  e.backend = "emulate";
  e.key = {{"n", int64_t(1000)}};
  e.config = {{"block", block}, {"num_warps", 4}};
  e.median_ms = e.min_ms = e.max_ms = ms;
  e.repeats = 1;
  e.measured_at = "2026-01-01T00:00:00Z";
  return e;
}

rt::TuningRejection rejected(int64_t block, const std::string& stage, const std::string& arch, const std::string& when) {
  rt::TuningRejection x;
  x.kernel = "vector_add";
  x.device = "cpu-emulator";
  x.backend = "emulate";
  x.key = {{"n", int64_t(1000)}};
  x.config = {{"block", block}, {"num_warps", 4}};
  x.stage = stage;
  x.arch = arch;
  x.reason = "dropped at " + stage;
  x.compiler = "tilec 0.1.0";
  x.rejected_at = when;
  return x;
}

test::Process tilec_run(const std::string& args, int want) {
  test::Process p = test::run_tilec(args);
  INFO("tilec " << args << "\n" << p.text());
  REQUIRE(p.exited());
  REQUIRE(p.exit_code == want);
  return p;
}

// The files of a folder, by name.
std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

} // namespace

TEST_CASE("tuning database: rejections round trip, version 2 only with them, the newer verdict wins",
          "[autotune][db]") {
  rt::TuningDb db;
  db.entries = {measured(64, 1.0)};
  std::string plain = rt::format_tuning_db(db);
  CHECK_THAT(plain, Catch::Contains("version = 1") && !Catch::Contains("rejected"));

  db.rejections = {rejected(3, "build", "", "2026-01-01T00:00:00Z"), rejected(128, "compile", "sm_90", "2026-01-01T00:00:00Z")};
  std::string text = rt::format_tuning_db(db);
  CHECK_THAT(text, Catch::Contains("version = 2") && Catch::Contains("[[rejected]]"));
  rt::TuningDb back = rt::parse_tuning_db(text, "t.toml");
  REQUIRE(back.entries.size() == 1);
  REQUIRE(back.rejections.size() == 2);
  CHECK(back.rejections[1].stage == "compile");
  CHECK(back.rejections[1].arch == "sm_90");
  CHECK(back.rejections[1].reason == "dropped at compile");
  CHECK(back.rejections[1].compiler == "tilec 0.1.0");
  CHECK(back.rejections[1].config.at("block") == 128);
  CHECK(rt::format_tuning_db(back) == text);

  // Which runs a rejection applies to: one of the build stage to every arch; one of the
  // compile stage to its arch alone; none to another compiler version.
  rt::TuningEntry slot = measured(3, 0);
  CHECK(back.find_rejection(slot, "", "tilec 0.1.0"));
  CHECK(back.find_rejection(slot, "sm_80", "tilec 0.1.0"));
  CHECK_FALSE(back.find_rejection(slot, "", "tilec 0.2.0"));
  slot.config["block"] = 128;
  CHECK(back.find_rejection(slot, "sm_90", "tilec 0.1.0"));
  CHECK_FALSE(back.find_rejection(slot, "sm_80", "tilec 0.1.0"));
  CHECK_FALSE(back.find_rejection(slot, "", "tilec 0.1.0"));

  // A measurement of a rejected config removes the rejection; a rejection of a measured one
  // removes the measurement.
  rt::TuningDb newer;
  newer.entries = {measured(3, 2.0)};
  newer.rejections = {rejected(64, "run", "", "2026-01-02T00:00:00Z")};
  back.merge(newer);
  REQUIRE(back.entries.size() == 1);
  CHECK(back.entries[0].config.at("block") == 3);
  REQUIRE(back.rejections.size() == 2);
  CHECK(back.rejections[0].config.at("block") == 128);
  CHECK(back.rejections[1].config.at("block") == 64);

  CHECK_THROWS_WITH(rt::parse_tuning_db("version = 3\n", "v.toml"), Catch::Contains("unsupported version"));
  CHECK_THROWS_WITH(rt::parse_tuning_db("version = 2\n[[rejected]]\nkernel = \"k\"\ndevice = \"d\"\nbackend = \"b\"\n"
                                        "key = {}\nconfig = {}\nstage = \"later\"\nreason = \"r\"\n",
                                        "s.toml"),
                    Catch::Contains("s.toml:8:") && Catch::Contains("stage 'later'"));
}

TEST_CASE("autotune records what it drops: a re-run neither builds nor measures it again", "[autotune][db]") {
  // vector_add as a template of this test: its builds are counted per block, and block=64
  // launches half its grid, so the emulator's result is wrong and the run stage drops it.
  // block=3 is refused by the template when it is built.
  const templates::KernelTemplate* base = templates::find_template("vector_add");
  REQUIRE(base);
  templates::KernelTemplate t = *base;
  std::mutex mutex;
  std::map<int64_t, int> builds;
  t.build = [&, build = base->build](const templates::ParamMap& p, const templates::ParamMap& s) {
    {
      std::lock_guard lock(mutex);
      ++builds[p.at("block")];
    }
    return build(p, s);
  };
  t.grid = [grid = base->grid](const templates::ParamMap& p, const templates::ParamMap& s) {
    launch::Grid g = grid(p, s);
    if (p.at("block") == 64) g[0] = (g[0] + 1) / 2;
    return g;
  };

  rt::test::TempDir s;
  autotune::SearchSpace space = autotune::parse_space(
      "kernel = \"vector_add\"\n[params]\nblock = [3, 32, 64, 128]\n[measure]\nwarmup = 0\nrepeats = 1\n", "space.toml",
      autotune::space_names(t));
  std::vector<autotune::KeyToTune> keys = autotune::make_keys(t, {{"n=1000"}}, 1);
  autotune::TuneSettings settings;
  settings.db = (s.path / "db.toml").string();
  settings.jobs = 2;
  autotune::Target target{"emulate", "cpu-emulator", "", std::nullopt, {"sm_90", "host"}};
  auto launcher = backends::make_emulate_launcher();

  autotune::TuneResult first = autotune::tune(t, space, keys, settings, target, *launcher, {});
  CHECK(first.compiled == 4);
  CHECK(first.measured == 2);
  CHECK(first.rejected == 2);
  CHECK(first.rejected_before == 0);
  CHECK(builds.at(3) == 1);
  CHECK(builds.at(64) >= 2); // built, then built again to run it
  rt::TuningDb db = rt::read_tuning_db(settings.db);
  REQUIRE(db.entries.size() == 2);
  REQUIRE(db.rejections.size() == 2);
  std::map<int64_t, rt::TuningRejection> by_block;
  for (const rt::TuningRejection& x : db.rejections) by_block[x.config.at("block")] = x;
  CHECK(by_block.at(3).stage == "build");
  CHECK_THAT(by_block.at(3).reason, Catch::Contains("must be a power of two"));
  CHECK(by_block.at(64).stage == "run");
  CHECK_THAT(by_block.at(64).reason, Catch::Contains("wrong result"));
  CHECK(by_block.at(64).device == "cpu-emulator");
  CHECK(by_block.at(64).arch.empty());

  builds.clear();
  autotune::TuneResult again = autotune::tune(t, space, keys, settings, target, *launcher, {});
  CHECK(builds.empty()); // nothing built: two measured, two rejected before
  CHECK(again.compiled == 0);
  CHECK(again.measured == 0);
  CHECK(again.skipped == 2);
  CHECK(again.rejected == 2);
  CHECK(again.rejected_before == 2);
  REQUIRE(again.reasons.size() == 2); // the kinds of the recorded reasons, as the first run said
  CHECK(again.failed_keys.empty());
  REQUIRE(again.best.size() == 1);
  CHECK(again.best[0].config.at("block") != 64);

  // --force tries everything again, and finds the same.
  builds.clear();
  settings.force = true;
  autotune::TuneResult forced = autotune::tune(t, space, keys, settings, target, *launcher, {});
  CHECK(forced.compiled == 4);
  CHECK(forced.rejected_before == 0);
  CHECK(builds.count(3));
  CHECK(builds.count(64));
  CHECK(rt::read_tuning_db(settings.db).rejections.size() == 2);
}

TEST_CASE("tilec db export writes what autotune --export wrote, for a runtime-only host", "[autotune][db][modules]") {
  rt::test::TempDir s;
  fs::path space = s.path / "space.toml", db = s.path / "db.toml", tuned = s.path / "tuned", exported = s.path / "exported";
  { std::ofstream(space) << "kernel = \"vector_add\"\n[params]\nblock = [3, 64, 128]\n[measure]\nwarmup = 0\nrepeats = 1\n"; }
  const std::string autotune = "autotune vector_add --space " + space.string() +
                               " --shape n=1000 --shape n=3000 --backend emulate --no-ptxas -o " + db.string();
  test::Process first = tilec_run(autotune + " --export " + tuned.string() + " --json", 0);
  CHECK_THAT(first.out, Catch::Contains("\"compiled\": 6") && Catch::Contains("\"rejected\": 2"));
  // A re-run with --export compiles no candidate: it exports again from what is recorded.
  test::Process rerun = tilec_run(autotune + " --export " + tuned.string() + " --json", 0);
  CHECK_THAT(rerun.out, Catch::Contains("\"compiled\": 0") && Catch::Contains("\"rejected_before\": 2") &&
                            Catch::Contains("\"measured\": 0"));
  CHECK_THAT(rerun.err, !Catch::Contains("compile ["));

  test::Process out = tilec_run("db export " + db.string() + " --to " + exported.string() + " --json", 0);
  CHECK_THAT(out.err, Catch::Contains("export [4/4]")); // a line per module: 2 winners x (sm_90, host)
  CHECK(names_in(exported) == names_in(tuned));
  CHECK(fs::exists(exported / "vector_add.kernel.toml"));
  // The shipped copy holds the measurements alone, as version 1: any runtime reads it.
  std::string copy = read(exported / "db.toml");
  CHECK_THAT(copy, Catch::Contains("version = 1") && !Catch::Contains("[[rejected]]"));
  CHECK_THAT(read(db), Catch::Contains("version = 2") && Catch::Contains("[[rejected]]"));

  rt::set_module_builder({}); // as a host that links only the runtime
  rt::TuningDb shipped = rt::read_tuning_db((exported / "db.toml").string());
  for (int64_t n : {1000, 3000})
    for (const char* arch : {"host", "sm_90"}) {
      INFO("n=" << n << " " << arch);
      rt::TunedModules m = rt::load_tuned(shipped, "vector_add", "cpu-emulator", {{"n", n}}, arch, {exported});
      REQUIRE(m.selection);
      CHECK(m.selection->rule == "exact");
      REQUIRE(m.modules.size() == 1);
      CHECK(m.modules[0].arch == arch);
      CHECK(m.config.at("block") != 3);
    }

  // --arch and --kernel choose; show and merge carry the rejections.
  tilec_run("db export " + db.string() + " --to " + (s.path / "host_only").string() + " --arch host --kernel vector_add", 0);
  for (const std::string& f : names_in(s.path / "host_only")) CHECK(f.find("sm_90") == std::string::npos);
  test::Process show = tilec_run("db show " + db.string(), 0);
  CHECK_THAT(show.out, Catch::Contains("rejected configs (2;") && Catch::Contains("[build] --set block=3"));
  CHECK_THAT(tilec_run("db show " + db.string() + " --json", 0).out,
             Catch::Contains("\"rejected\": 2") && Catch::Contains("\"stage\": \"build\""));
  test::Process merged = tilec_run("db merge " + db.string() + " " + db.string() + " -o " + (s.path / "m.toml").string(), 0);
  CHECK(rt::read_tuning_db((s.path / "m.toml").string()).rejections.size() == 2);

  // Bad input: exit 2, naming it; nothing written.
  rt::TuningDb only_rejections;
  only_rejections.rejections = rt::read_tuning_db(db.string()).rejections;
  rt::write_tuning_db((s.path / "rej.toml").string(), only_rejections);
  struct Bad {
    std::string args, says;
  };
  for (const Bad& b : {Bad{"db export " + (s.path / "nope.toml").string() + " --to " + (s.path / "x").string(), "nope.toml: no such file"},
                       Bad{"db export " + (s.path / "rej.toml").string() + " --to " + (s.path / "x").string(),
                           "no measured configs to export (it records 2 rejected configs only)"},
                       Bad{"db export " + db.string() + " --to " + (s.path / "x").string() + " --kernel nosuch",
                           "--kernel nosuch: no such kernel"},
                       Bad{"db export " + db.string() + " --to " + (s.path / "x").string() + " --kernel matmul",
                           "has no measurements of it (kernels there: vector_add)"},
                       Bad{"db export " + db.string() + " --to " + space.string(), "exists and is not a folder"}}) {
    test::Process p = tilec_run(b.args, 2);
    CHECK_THAT(p.err, Catch::Contains(b.says));
  }
  CHECK_FALSE(fs::exists(s.path / "x"));
}
