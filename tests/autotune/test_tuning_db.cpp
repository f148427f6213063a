// The tuning database: round trip, merge, selection rules, corruption recovery and
// concurrent writers.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/tilec_tuning.h"
#include "runtime/tuning_db.h"

using namespace tilec::rt;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  fs::path dir;
  Scratch() {
    static int n = 0;
    dir = fs::temp_directory_path() / ("tilec_tuning_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

TuningEntry entry(int64_t ctx, int64_t block_n, double ms, std::string device = "cpu-emulator") {
  TuningEntry e;
  e.kernel = "paged_attention";
  e.device = std::move(device);
  e.backend = "emulate";
  e.key = {{"batch", int64_t(2)}, {"hq", int64_t(8)}, {"hkv", int64_t(2)}, {"ctx", ctx}, {"dtype", std::string("f32")}};
  e.config = {{"block_n", block_n}, {"num_warps", 4}};
  e.median_ms = e.min_ms = e.max_ms = ms;
  e.repeats = 1;
  return e;
}

} // namespace

TEST_CASE("tuning database round trip", "[autotune]") {
  TuningDb db;
  TuningEntry e = entry(256, 32, 1.25);
  e.compute_capability = "9.0";
  e.gbps = 812.5;
  e.ideal_bytes = 123456;
  e.bytes_loaded = 200000;
  e.max_abs_err = 2.5e-7;
  e.device = "NVIDIA \"quoted\" GPU";
  db.entries.push_back(e);
  db.entries.push_back(entry(512, 64, 2.0));
  TuningDb back = parse_tuning_db(format_tuning_db(db), "db.toml");
  REQUIRE(back.entries.size() == 2);
  const TuningEntry& b = back.entries[0];
  CHECK(b.same_slot(e));
  CHECK(b.median_ms == 1.25);
  CHECK(b.gbps == 812.5);
  CHECK(b.ideal_bytes == 123456);
  CHECK(b.bytes_loaded == 200000);
  CHECK(!b.bytes_stored);
  CHECK(b.max_abs_err == 2.5e-7);
  CHECK(!b.measured_at.empty());
  CHECK(std::get<std::string>(b.key.at("dtype")) == "f32");
}

TEST_CASE("merging keeps every slot and replaces only the same one", "[autotune]") {
  TuningDb db;
  db.entries = {entry(256, 32, 1.0), entry(256, 64, 2.0)};
  TuningDb newer;
  newer.entries = {entry(256, 64, 1.5), entry(512, 32, 3.0)};
  db.merge(newer);
  REQUIRE(db.entries.size() == 3);
  CHECK(db.find(entry(256, 64, 0))->median_ms == 1.5);
  CHECK(db.find(entry(256, 32, 0))->median_ms == 1.0);
  CHECK(db.find(entry(512, 32, 0)));
  CHECK(!db.find(entry(512, 64, 0)));
}

TEST_CASE("a malformed database names file:line:column", "[autotune]") {
  CHECK_THROWS_WITH(parse_tuning_db("version = 1\n[[entry]\n", "db.toml"), Catch::StartsWith("db.toml:2:"));
  CHECK_THROWS_WITH(parse_tuning_db("version = 1\n[[entry]]\nkernel = \"k\"\n", "db.toml"),
                    Catch::StartsWith("db.toml:") && Catch::Contains("missing key 'device'"));
  CHECK_THROWS_WITH(parse_tuning_db("version = 7\n", "db.toml"), Catch::StartsWith("db.toml:1:11:"));
}

TEST_CASE("selection: exact key, then nearest context length, then nothing", "[autotune]") {
  const std::vector<std::string> kSizes = {"ctx", "batch"}; // paged attention's first size fields
  TuningDb db;
  db.entries = {entry(256, 32, 2.0), entry(256, 64, 1.0), entry(4096, 128, 0.5), entry(256, 16, 0.1, "other-gpu")};
  ProblemKey k256 = entry(256, 0, 0).key;
  auto exact = select_config(db, "paged_attention", "cpu-emulator", k256, kSizes);
  REQUIRE(exact);
  CHECK(exact->rule == "exact");
  CHECK(exact->entry.config.at("block_n") == 64); // the fastest of that key, on this device only

  ProblemKey k300 = entry(300, 0, 0).key;
  auto near = select_config(db, "paged_attention", "cpu-emulator", k300, kSizes);
  REQUIRE(near);
  CHECK(near->rule == "nearest");
  CHECK(near->entry.config.at("block_n") == 64);
  ProblemKey k3000 = entry(3000, 0, 0).key;
  CHECK(select_config(db, "paged_attention", "cpu-emulator", k3000, kSizes)->entry.config.at("block_n") == 128);

  // Another head geometry or dtype never matches.
  ProblemKey other = k256;
  other["dtype"] = std::string("f16");
  CHECK(!select_config(db, "paged_attention", "cpu-emulator", other, kSizes));
  // A device with no entries falls back to those of other devices of its kind, saying so
  // (other-gpu's, the fastest there is, not the emulator's).
  auto fallback = select_config(db, "paged_attention", "new-gpu", k256, kSizes);
  REQUIRE(fallback);
  CHECK(fallback->entry.config.at("block_n") == 16);
  CHECK_THAT(fallback->note, Catch::Contains("nothing tuned on new-gpu"));
  // The emulator's timings never stand in for a GPU's, nor a GPU's for a CPU backend's.
  TuningDb cpu_only;
  cpu_only.entries = {entry(256, 32, 2.0)};
  CHECK(!select_config(cpu_only, "paged_attention", "new-gpu", k256, kSizes));
  CHECK(select_config(cpu_only, "paged_attention", "cpu-interpreter", k256, kSizes));
  TuningDb gpu_only;
  gpu_only.entries = {entry(256, 32, 2.0, "other-gpu")};
  CHECK(!select_config(gpu_only, "paged_attention", "cpu-emulator", k256, kSizes));
  CHECK(!select_config(db, "softmax", "cpu-emulator", k256, kSizes));
}

TEST_CASE("selection: a bucketed size field never crosses its bucket (paged attention's sq)", "[autotune]") {
  const std::vector<std::string> kSizes = {"sq", "ctx", "batch"};
  const SizeBuckets kBuckets = {{"sq", {1, 4, 16, 128}}};
  auto at = [](int64_t sq, int64_t ctx, int64_t block_n, double ms) {
    TuningEntry e = entry(ctx, block_n, ms);
    e.key["sq"] = sq;
    return e;
  };
  CHECK(size_bucket(kBuckets, "sq", int64_t(1)) == 0);
  CHECK(size_bucket(kBuckets, "sq", int64_t(2)) == 1);
  CHECK(size_bucket(kBuckets, "sq", int64_t(4)) == 1);
  CHECK(size_bucket(kBuckets, "sq", int64_t(5)) == 2);
  CHECK(size_bucket(kBuckets, "sq", int64_t(128)) == 3);
  CHECK(size_bucket(kBuckets, "sq", int64_t(129)) == 4);
  CHECK(size_bucket(kBuckets, "sq", int64_t(100000)) == 4);
  CHECK(size_bucket(kBuckets, "ctx", int64_t(5)) == -1);
  CHECK(size_bucket(kBuckets, "sq", std::string("x")) == -1);

  TuningDb db;
  db.entries = {at(1, 256, 16, 1.0), at(4, 256, 32, 1.0), at(64, 256, 64, 1.0), at(512, 4096, 128, 1.0)};
  auto pick = [&](int64_t sq, int64_t ctx) -> int64_t {
    ProblemKey k = at(sq, ctx, 0, 0).key;
    auto sel = select_config(db, "paged_attention", "cpu-emulator", k, kSizes, kBuckets);
    return sel ? sel->entry.config.at("block_n") : -1;
  };
  CHECK(pick(1, 256) == 16);   // exact
  CHECK(pick(1, 4000) == 16);  // decode: the decode key, however far its context
  CHECK(pick(2, 256) == 32);   // 2-4: sq=4's, though sq=1 is as near
  CHECK(pick(3, 4096) == 32);
  CHECK(pick(8, 256) == -1);   // 5-16: nothing tuned there, so the defaults, not sq=4's or sq=64's
  CHECK(pick(100, 256) == 64); // 17-128
  CHECK(pick(129, 256) == 128);
  CHECK(pick(8192, 300) == 128);
  // Without buckets, sq is an ordinary size field: the nearest sq wins.
  ProblemKey k8 = at(8, 256, 0, 0).key;
  CHECK(select_config(db, "paged_attention", "cpu-emulator", k8, kSizes)->entry.config.at("block_n") == 32);
}

TEST_CASE("a corrupt database is moved aside and writing proceeds", "[autotune]") {
  Scratch s;
  std::string path = (s.dir / "db.toml").string();
  { std::ofstream(path) << "version = 1\n[[entry]]\nkernel = \n"; }
  std::string warning;
  TuningDb one;
  one.entries = {entry(256, 32, 1.0)};
  TuningDb merged = merge_into_file(path, one, &warning);
  CHECK_THAT(warning, Catch::Contains("db.toml.corrupt-"));
  CHECK(merged.entries.size() == 1);
  int aside = 0;
  for (const auto& f : fs::directory_iterator(s.dir)) aside += f.path().filename().string().starts_with("db.toml.corrupt-");
  CHECK(aside == 1);
  CHECK(read_tuning_db(path).entries.size() == 1);
}

TEST_CASE("two concurrent writers lose nothing", "[autotune]") {
  Scratch s;
  std::string path = (s.dir / "db.toml").string();
  const int per_writer = 25;
  std::vector<pid_t> kids;
  for (int w = 0; w < 2; ++w) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = 0;
      try {
        for (int i = 0; i < per_writer; ++i) {
          TuningDb one;
          one.entries = {entry(1000 * (w + 1) + i, 32, 1.0)};
          merge_into_file(path, one);
        }
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(read_tuning_db(path).entries.size() == size_t(2 * per_writer));
}

TEST_CASE("problem keys format and parse", "[autotune]") {
  ProblemKey k = parse_key("batch=2 ctx=256 dtype=f16");
  CHECK(std::get<int64_t>(k.at("ctx")) == 256);
  CHECK(std::get<std::string>(k.at("dtype")) == "f16");
  CHECK(format_key(k) == "batch=2 ctx=256 dtype=f16");
  CHECK_THROWS_AS(parse_key("batch"), TuningDbError);
}

TEST_CASE("the C API selects from a database on disk", "[autotune]") {
  Scratch s;
  std::string path = (s.dir / "db.toml").string();
  TuningDb db;
  db.entries = {entry(256, 32, 2.0), entry(256, 64, 1.0)};
  merge_into_file(path, db);
  char err[256] = "";
  tilec_tuning_db* h = tilec_tuning_open(path.c_str(), err, sizeof err);
  REQUIRE(h);
  CHECK(tilec_tuning_size(h) == 2);
  const char* names[4];
  long long values[4];
  char note[256];
  int n = tilec_tuning_select(h, "paged_attention", "cpu-emulator", "batch=2 hq=8 hkv=2 ctx=256 dtype=f32", names,
                              values, 4, note, sizeof note);
  REQUIRE(n == 2);
  CHECK(std::string(names[0]) == "block_n");
  CHECK(values[0] == 64);
  CHECK(tilec_tuning_select(h, "paged_attention", "cpu-emulator", "batch=2 hq=4 hkv=2 ctx=256 dtype=f32", names,
                            values, 4, note, sizeof note) == 0);
  CHECK(tilec_tuning_select(h, "paged_attention", "cpu-emulator", "batch", names, values, 4, note, sizeof note) == -1);
  tilec_tuning_close(h);

  { std::ofstream(path) << "[[entry\n"; }
  CHECK(!tilec_tuning_open(path.c_str(), err, sizeof err));
  CHECK_THAT(std::string(err), Catch::Contains("db.toml:1:"));
}
