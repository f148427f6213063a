// `tilec db merge` and `tilec db show`: databases measured apart join into one, the faster
// measurement of a slot wins (reported), and the result does not depend on the order.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "runtime/tuning_db.h"
#include "tests/tilec_process.h"

namespace fs = std::filesystem;
using namespace tilec;

namespace {

rt::TuningEntry entry(int64_t ctx, int64_t block_n, double ms, const std::string& when) {
  rt::TuningEntry e;
  e.kernel = "paged_attention";
  e.device = "cpu-emulator";
  e.backend = "emulate";
  e.key = {{"batch", int64_t(2)}, {"ctx", ctx}, {"dtype", std::string("f32")}};
  e.config = {{"block_n", block_n}, {"num_warps", 4}};
  e.median_ms = e.min_ms = e.max_ms = ms;
  e.repeats = 3;
  e.measured_at = when;
  return e;
}

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

} // namespace

TEST_CASE("tilec db merge joins shards, keeps the faster of a conflict, in any order", "[autotune][db][cli]") {
  fs::path dir = fs::temp_directory_path() / ("tilec_db_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  rt::TuningDb a, b;
  a.entries = {entry(256, 32, 1.0, "2026-01-01T00:00:00Z"), entry(256, 64, 2.0, "2026-01-01T00:00:00Z")};
  b.entries = {entry(1024, 32, 3.0, "2026-01-02T00:00:00Z"), entry(256, 32, 0.8, "2026-01-02T00:00:00Z")};
  std::ofstream(dir / "a.toml") << rt::format_tuning_db(a);
  std::ofstream(dir / "b.toml") << rt::format_tuning_db(b);
  const std::string A = (dir / "a.toml").string(), B = (dir / "b.toml").string();

  auto ab = test::run_tilec("db merge " + A + " " + B + " -o " + (dir / "ab.toml").string() + " --json");
  INFO(ab.text());
  REQUIRE(ab.exited());
  CHECK(ab.exit_code == 0);
  CHECK(ab.out.find("\"entries\": 3") != std::string::npos);
  CHECK(ab.out.find("\"conflicts\": 1") != std::string::npos);
  auto ba = test::run_tilec("db merge " + B + " " + A + " -o " + (dir / "ba.toml").string());
  REQUIRE(ba.exited());
  CHECK(ba.exit_code == 0);
  CHECK(ba.out.find("conflict: paged_attention") != std::string::npos);
  CHECK(read(dir / "ab.toml") == read(dir / "ba.toml")); // deterministic

  rt::TuningDb merged = rt::read_tuning_db((dir / "ab.toml").string());
  REQUIRE(merged.entries.size() == 3);
  auto sel = rt::select_config(merged, "paged_attention", "cpu-emulator",
                               {{"batch", int64_t(2)}, {"ctx", int64_t(256)}, {"dtype", std::string("f32")}}, {"ctx"});
  REQUIRE(sel);
  CHECK(sel->entry.median_ms == 0.8); // b's faster measurement of (ctx=256, block_n=32)
  CHECK(sel->entry.config.at("block_n") == 32);

  auto show = test::run_tilec("db show " + (dir / "ab.toml").string());
  REQUIRE(show.exited());
  CHECK(show.exit_code == 0);
  CHECK(show.out.find("batch=2 ctx=1024 dtype=f32") != std::string::npos);
  CHECK(show.out.find("block_n=64 num_warps=4") != std::string::npos);

  // --svg: a heatmap per key; block_n is the only field that varies, so it is the columns.
  // Each measured config is a cell with its time; the fastest of a key is outlined.
  auto svg = test::run_tilec("db show " + (dir / "ab.toml").string() + " --svg " + (dir / "h.svg").string());
  REQUIRE(svg.exited());
  CHECK(svg.exit_code == 0);
  std::string pic = read(dir / "h.svg");
  CHECK(pic.rfind("<svg ", 0) == 0);
  CHECK(pic.find("</svg>") != std::string::npos);
  CHECK(pic.find("batch=2 ctx=256 dtype=f32") != std::string::npos);
  CHECK(pic.find("batch=2 ctx=1024 dtype=f32") != std::string::npos);
  CHECK(pic.find("columns block_n") != std::string::npos);
  CHECK(pic.find(">0.8 ms<") != std::string::npos); // (ctx=256, block_n=32): b's faster time
  CHECK(pic.find(">2 ms<") != std::string::npos);
  size_t fastest = 0;
  for (size_t p = pic.find("<title>fastest: "); p != std::string::npos; p = pic.find("<title>fastest: ", p + 1)) ++fastest;
  CHECK(fastest == 2); // one per key
  rt::TuningDb none;
  std::ofstream(dir / "empty.toml") << rt::format_tuning_db(none);
  auto empty = test::run_tilec("db show " + (dir / "empty.toml").string() + " --svg " + (dir / "e.svg").string());
  REQUIRE(empty.exited());
  CHECK(empty.exit_code == 2);
  CHECK_FALSE(fs::exists(dir / "e.svg"));

  // Bad input: exit 2, naming the file.
  auto missing = test::run_tilec("db merge " + A + " " + (dir / "nope.toml").string() + " -o " + (dir / "x.toml").string());
  REQUIRE(missing.exited());
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("nope.toml: no such file") != std::string::npos);
  std::ofstream(dir / "bad.toml") << "version = 1\n[[entry]]\nkernel = 3\n";
  auto bad = test::run_tilec("db show " + (dir / "bad.toml").string());
  REQUIRE(bad.exited());
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("bad.toml:") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "x.toml"));
  fs::remove_all(dir);
}
