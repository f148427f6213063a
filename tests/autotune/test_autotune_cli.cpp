// `tilec autotune` end to end on a tiny problem, and `tilec run --tuned` using its database.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "runtime/cuda.h"
#include "runtime/tuning_db.h"
#include "tests/tilec_process.h"

namespace fs = std::filesystem;

namespace {

// Ran to an exit (never a signal); stdout and stderr together in `out`.
struct Outcome {
  int code = -1;
  std::string out;
};

Outcome run_tilec(const std::string& args) {
  tilec::test::Process p = tilec::test::run_tilec(args);
  INFO("tilec " << args << "\n" << p.text());
  REQUIRE(p.exited());
  return {p.exit_code, p.out + p.err};
}

struct Scratch {
  fs::path dir;
  Scratch() {
    dir = fs::temp_directory_path() / ("tilec_autotune_" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

const char* kSpace = R"(kernel = "paged_attention"
[params]
block_n = [4, 8]
head_group = [1, 2, 4]
num_splits = [1, 2]
num_warps = [1]
[constraints]
group = "(hq / hkv) % head_group == 0"
[measure]
warmup = 0
repeats = 2
)";

const char* kShape = "--shape batch=1 hq=2 hkv=1 head_dim=16 block_size=4 ctx=8";

} // namespace

TEST_CASE("tilec autotune: tiny end to end, skip on rerun, run --tuned", "[autotune]") {
  Scratch s;
  std::string space = (s.dir / "space.toml").string(), db = (s.dir / "db.toml").string();
  { std::ofstream(space) << kSpace; }
  std::string common = "autotune paged_attention --space " + space + " " + kShape + " --backend interpret --no-ptxas -o " + db;

  Outcome first = run_tilec(common + " --json");
  INFO(first.out);
  REQUIRE(first.code == 0);
  CHECK_THAT(first.out, Catch::Contains("\"candidates\": 8") && Catch::Contains("\"measured\": 8") &&
                            Catch::Contains("\"best\": {"));
  tilec::rt::TuningDb d = tilec::rt::read_tuning_db(db);
  REQUIRE(d.entries.size() == 8);
  for (const auto& e : d.entries) {
    CHECK(e.device == "cpu-interpreter");
    CHECK(e.backend == "interpret");
    CHECK(e.repeats == 2);
    CHECK(e.ideal_bytes);
    CHECK(e.min_ms <= e.median_ms);
  }

  Outcome again = run_tilec(common + " --json");
  INFO(again.out);
  REQUIRE(again.code == 0);
  CHECK_THAT(again.out, Catch::Contains("\"measured\": 0") && Catch::Contains("\"skipped\": 8"));

  Outcome run = run_tilec("run paged_attention --backend interpret --tuned " + db + " " + kShape);
  INFO(run.out);
  CHECK(run.code == 0);
  CHECK_THAT(run.out, Catch::Contains("exact key"));
  Outcome nearest = run_tilec("run paged_attention --backend interpret --tuned " + db +
                          " --shape batch=1 hq=2 hkv=1 head_dim=16 block_size=4 ctx=12");
  CHECK(nearest.code == 0);
  CHECK_THAT(nearest.out, Catch::Contains("nearest key"));
  Outcome none = run_tilec("run paged_attention --backend interpret --tuned " + db +
                       " --shape batch=1 hq=4 hkv=1 head_dim=16 block_size=4 ctx=8");
  CHECK(none.code == 0);
  CHECK_THAT(none.out, Catch::Contains("using the default config"));
}

TEST_CASE("tilec autotune: no valid candidate exits 1, says why, exports nothing, records the rejections", "[autotune]") {
  Scratch s;
  std::string space = (s.dir / "space.toml").string(), db = (s.dir / "db.toml").string();
  // Three candidates, none a power of two: every one is dropped when it is built.
  { std::ofstream(space) << "kernel = \"vector_add\"\n[params]\nblock = [3, 5, 6]\n[measure]\nwarmup = 0\nrepeats = 1\n"; }
  std::string common = "autotune vector_add --space " + space + " --shape n=100 --backend interpret --no-ptxas -o " + db;
  Outcome o = run_tilec(common + " --export " + (s.dir / "deploy").string());
  INFO(o.out);
  CHECK(o.code == 1);
  CHECK_THAT(o.out, Catch::Contains("no valid candidate for n=100 (3 candidates, 3 rejected, 0 measured)") &&
                        Catch::Contains("3 dropped, e.g. --set block=3: must be a power of two from 1 to 65536"));
  CHECK_THAT(o.out, !Catch::Contains("database") && !Catch::Contains("exported"));
  CHECK_FALSE(fs::exists(s.dir / "deploy"));
  // The database records the rejections alone: a re-run says the same without building any.
  tilec::rt::TuningDb d = tilec::rt::read_tuning_db(db);
  CHECK(d.entries.empty());
  CHECK(d.rejections.size() == 3);
  Outcome j = run_tilec(common + " --json");
  INFO(j.out);
  CHECK(j.code == 1);
  CHECK_THAT(j.out, Catch::Contains("\"best\": null") && Catch::Contains("\"failed_keys\": [\"n=100\"]") &&
                        Catch::Contains("\"count\": 3") && Catch::Contains("\"compiled\": 0") &&
                        Catch::Contains("\"rejected_before\": 3"));
}

TEST_CASE("tilec autotune: a malformed space exits 2 with line and column", "[autotune]") {
  Scratch s;
  std::string space = (s.dir / "bad.toml").string();
  { std::ofstream(space) << "kernel = \"paged_attention\"\n[params]\nblock_n = [16]\n[constraints]\nc = \"block_n < < 2\"\n"; }
  Outcome o = run_tilec("autotune paged_attention --space " + space + " " + kShape + " --backend interpret -o " +
                    (s.dir / "db.toml").string());
  CHECK(o.code == 2);
  CHECK_THAT(o.out, Catch::Contains("bad.toml:5:16:"));
}

TEST_CASE("tilec autotune --backend cuda without a GPU exits 3", "[autotune]") {
  if (tilec::rt::cuda_available()) return;
  Scratch s;
  Outcome o = run_tilec("autotune paged_attention --space " + std::string(TILEC_SOURCE_DIR) +
                    "/configs/paged_attention.toml " + kShape + " --backend cuda -o " + (s.dir / "db.toml").string());
  CHECK(o.code == 3);
}

TEST_CASE("tilec autotune --shard I/N: the shards partition the candidates and merge into the whole",
          "[autotune][db]") {
  Scratch s;
  std::string space = (s.dir / "space.toml").string();
  { std::ofstream(space) << kSpace; }
  std::string base = "autotune paged_attention --space " + space + " " + kShape + " --backend interpret --no-ptxas";
  size_t total = 0;
  for (int i = 1; i <= 3; ++i) {
    std::string db = (s.dir / ("shard" + std::to_string(i) + ".toml")).string();
    Outcome o = run_tilec(base + " --shard " + std::to_string(i) + "/3 -o " + db + " --json");
    CHECK(o.code == 0);
    size_t n = tilec::rt::read_tuning_db(db).entries.size();
    CHECK(n >= 1);
    total += n;
  }
  std::string merged = (s.dir / "merged.toml").string();
  Outcome m = run_tilec("db merge " + (s.dir / "shard1.toml").string() + " " + (s.dir / "shard2.toml").string() + " " +
                        (s.dir / "shard3.toml").string() + " -o " + merged + " --json");
  CHECK(m.code == 0);
  CHECK(m.out.find("\"conflicts\": 0") != std::string::npos); // no candidate measured twice
  // Together they measured what one unsharded run measures: every candidate that passes.
  std::string whole = (s.dir / "whole.toml").string();
  CHECK(run_tilec(base + " -o " + whole).code == 0);
  CHECK(tilec::rt::read_tuning_db(merged).entries.size() == total);
  CHECK(tilec::rt::read_tuning_db(whole).entries.size() == total);
  Outcome run = run_tilec("run paged_attention --backend interpret --tuned " + merged + " " + kShape);
  CHECK(run.code == 0);
  CHECK(run.out.find("exact key") != std::string::npos);
  // Bad shards are refused before anything runs.
  for (const char* bad : {"0/3", "4/3", "3", "1/0", "a/b", "1/2x"}) {
    Outcome o = run_tilec(base + " --shard " + bad + " -o " + (s.dir / "bad.toml").string());
    CHECK(o.code == 2);
    CHECK(o.out.find("--shard") != std::string::npos);
  }
  CHECK(run_tilec(base + " --shard 1/2 --export " + (s.dir / "exp").string() + " -o " + (s.dir / "bad.toml").string())
            .code == 2);
  CHECK_FALSE(fs::exists(s.dir / "bad.toml"));
}
