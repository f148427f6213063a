// `tilec autotune -j N` against `-j 1`: compiling a space's candidates on several threads must
// leave the same tuning database as compiling them one after another.
//
// What is compared: everything the database holds except the times. Entries in their order:
// kernel, device, backend, key, config, repeats, the counted bytes and the error against the
// reference; rejections in their order: key, config, stage, arch, reason, compiler. Not
// compared: each entry's median/min/max (and so its GB/s) and measured_at, and each
// rejection's rejected_at: timings differ from run to run, serial or not. The winner is chosen
// by time, so with several measured candidates it may differ between any two runs, serial
// ones too; it is compared only where one candidate survives (the second test), so the winner
// does not depend on a time and a parallel run must find the same one.
//
// Where parallelism could change the database: the compile stage (autotune/tuner.cpp's
// compile_candidates) builds, compiles and ptxas-checks candidates on N threads, which finish
// in any order; what it drops is recorded as rejections, and the survivors are then measured
// one at a time. A tuner that recorded drops or results in the order the threads finish would
// write another database. The second test makes that order the reverse of the candidates'
// (each candidate's first build sleeps longer the earlier it comes), so such a tuner fails it.
// The compile stage runs ptxas where it is installed, and only builds where it is not; both
// runs of a test see the same.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "autotune/tuner.h"
#include "backends/launchers.h"
#include "codegen/compile.h"
#include "runtime/tuning_db.h"
#include "templates/registry.h"
#include "tests/runtime/helpers.h"
#include "tests/tilec_process.h"

namespace fs = std::filesystem;
using namespace tilec;

namespace {

// The database as format_tuning_db writes it, with every time blanked: what must not depend on
// the number of compile threads.
std::string without_times(rt::TuningDb db) {
  for (rt::TuningEntry& e : db.entries) {
    e.median_ms = e.min_ms = e.max_ms = 0;
    e.gbps.reset();
    e.measured_at = "-";
  }
  for (rt::TuningRejection& x : db.rejections) x.rejected_at = "-";
  return rt::format_tuning_db(db);
}

// The text of `"name": value` in a one-line JSON object (up to the next ", \"" or "}").
std::string json_field(const std::string& json, const std::string& name) {
  const std::string tag = "\"" + name + "\": ";
  size_t at = json.find(tag);
  if (at == std::string::npos) return "<no " + name + ">";
  at += tag.size();
  size_t end = json[at] == '[' ? json.find(']', at) + 1 : json.find_first_of(",}", at);
  return json.substr(at, end - at);
}

} // namespace

TEST_CASE("tilec autotune -j 4 writes the database -j 1 writes, times aside", "[autotune][parallel]") {
  // vector_add refuses a block that is not a power of two when it is built: the space mixes such
  // candidates among valid ones, over two keys, so drops and measurements interleave.
  rt::test::TempDir s;
  const fs::path space = s.path / "space.toml";
  {
    std::ofstream(space) << "kernel = \"vector_add\"\n[params]\nblock = [3, 16, 5, 32, 6, 64, 128, 12, 256]\n"
                            "num_warps = [1, 4]\n[measure]\nwarmup = 0\nrepeats = 1\n";
  }
  INFO("ptxas " << (codegen::find_ptxas() ? "found: the compile stage compiles each candidate for sm_90"
                                          : "not found: the compile stage only builds"));
  std::map<unsigned, rt::TuningDb> dbs;
  std::map<unsigned, std::string> json;
  for (unsigned jobs : {1u, 4u}) {
    const fs::path db = s.path / ("j" + std::to_string(jobs) + ".toml");
    test::Process p = test::run_tilec("autotune vector_add --space " + space.string() +
                                      " --shape n=1000 --shape n=3000 --backend interpret --arch sm_90 -j " +
                                      std::to_string(jobs) + " -o " + db.string() + " --json");
    INFO("-j " << jobs << "\n" << p.text());
    REQUIRE(p.exited());
    REQUIRE(p.exit_code == 0);
    json[jobs] = p.out;
    dbs[jobs] = rt::read_tuning_db(db.string());
  }
  const rt::TuningDb &serial = dbs.at(1), &parallel = dbs.at(4);
  // What the space holds, so that an empty or lopsided database cannot pass as "the same".
  CHECK(serial.entries.size() == 2 * 2 * 5); // two keys x (block 16 .. 256) x two num_warps
  CHECK(serial.rejections.size() == 2 * 2 * 4);
  for (const rt::TuningRejection& x : serial.rejections) {
    CHECK(x.stage == "build");
    CHECK_THAT(x.reason, Catch::Contains("power of two"));
  }
  CHECK(without_times(parallel) == without_times(serial));
  // The run's own account, all but the winners (chosen by time).
  for (const char* field : {"candidates", "rejected", "measured", "skipped", "rejected_before", "compiled",
                            "failed_keys", "rejections"}) {
    INFO(field);
    CHECK(json_field(json.at(4), field) == json_field(json.at(1), field));
  }
  CHECK(json_field(json.at(1), "compiled") == "36");
}

TEST_CASE("autotune with 4 compile threads finishing out of order: the same database and winner as 1",
          "[autotune][parallel]") {
  // vector_add as a template of this test. Of block = 3, 5, 16, 32, 64, 128 (listed in that
  // order): 3 and 5 are refused when built; 16, 32 and 128 launch half their grid, so the
  // run stage drops them (a wrong result); 64 alone is measured, and so is the winner whatever
  // the times. Each candidate's first build for a key sleeps 15 ms for every candidate after
  // it, so four threads finish each key's compile stage out of order (about in reverse) while
  // one thread finishes it in order.
  const templates::KernelTemplate* base = templates::find_template("vector_add");
  REQUIRE(base);
  const std::vector<int64_t> blocks = {3, 5, 16, 32, 64, 128};
  templates::KernelTemplate t = *base;
  std::mutex mutex;
  std::map<std::pair<int64_t, int64_t>, int> builds; // (n, block) -> builds
  t.build = [&, build = base->build](const templates::ParamMap& p, const templates::ParamMap& shape) {
    const int64_t block = p.at("block");
    bool first = false;
    {
      std::lock_guard lock(mutex);
      first = builds[{shape.at("n"), block}]++ == 0;
    }
    if (first) {
      const auto at = std::find(blocks.begin(), blocks.end(), block) - blocks.begin();
      std::this_thread::sleep_for(std::chrono::milliseconds(15 * (int64_t(blocks.size()) - at)));
    }
    return build(p, shape);
  };
  t.grid = [grid = base->grid](const templates::ParamMap& p, const templates::ParamMap& shape) {
    launch::Grid g = grid(p, shape);
    if (p.at("block") != 64) g[0] = (g[0] + 1) / 2;
    return g;
  };
  autotune::SearchSpace space = autotune::parse_space(
      "kernel = \"vector_add\"\n[params]\nblock = [3, 5, 16, 32, 64, 128]\n[measure]\nwarmup = 0\nrepeats = 1\n",
      "space.toml", autotune::space_names(t));
  std::vector<autotune::KeyToTune> keys = autotune::make_keys(t, {{"n=1000"}, {"n=3000"}}, 1);
  std::optional<std::string> ptxas_arch;
  if (codegen::find_ptxas()) ptxas_arch = "sm_90";
  autotune::Target target{"emulate", "cpu-emulator", "", ptxas_arch, {"sm_90", "host"}};
  auto launcher = backends::make_emulate_launcher();

  rt::test::TempDir s;
  std::map<unsigned, rt::TuningDb> dbs;
  std::map<unsigned, autotune::TuneResult> results;
  for (unsigned jobs : {1u, 4u}) {
    {
      std::lock_guard lock(mutex);
      builds.clear();
    }
    autotune::TuneSettings settings;
    settings.db = (s.path / ("j" + std::to_string(jobs) + ".toml")).string();
    settings.jobs = jobs;
    results[jobs] = autotune::tune(t, space, keys, settings, target, *launcher, {});
    dbs[jobs] = rt::read_tuning_db(settings.db);
  }
  const autotune::TuneResult &one = results.at(1), &four = results.at(4);
  const rt::TuningDb& serial = dbs.at(1);
  REQUIRE(serial.entries.size() == 2);
  REQUIRE(serial.rejections.size() == 2 * 5);
  std::map<std::string, int> stages;
  for (const rt::TuningRejection& x : serial.rejections) ++stages[x.stage];
  CHECK(stages == std::map<std::string, int>{{"build", 4}, {"run", 6}});

  CHECK(without_times(dbs.at(4)) == without_times(serial));
  CHECK(four.candidates == one.candidates);
  CHECK(four.compiled == one.compiled);
  CHECK(four.compile_times.size() == four.compiled);
  CHECK(four.measured == one.measured);
  CHECK(four.rejected == one.rejected);
  CHECK(four.reasons == one.reasons);
  CHECK(four.failed_keys == one.failed_keys);
  REQUIRE(one.best.size() == 2);
  REQUIRE(four.best.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(four.best[i].key == one.best[i].key);
    CHECK(four.best[i].config == one.best[i].config);
    CHECK(one.best[i].config.at("block") == 64);
  }
}
