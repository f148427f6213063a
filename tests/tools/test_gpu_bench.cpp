// bench/gpu_bench, the GPU check's measuring program, on this machine: --emulate runs emulator
// modules through the same code path a GPU run takes (each kernel's own problem and reference,
// the module launcher, the run's other kernels found beside the first), so the program cannot
// rot where CI has no GPU.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "tests/tilec_process.h"

namespace fs = std::filesystem;
using namespace tilec;

namespace {

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("tilec_gpu_bench_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

void compile(const fs::path& out, const std::string& args) {
  test::Process p = test::run_tilec("compile " + args + " --target emu -o " + out.string());
  INFO(p.text());
  REQUIRE(p.exit_code == 0);
}

} // namespace

TEST_CASE("gpu_bench --emulate checks every module against its kernel's reference", "[bench][gpu_bench]") {
  Scratch s;
  fs::path host = s.dir / "host";
  compile(host / "vector_add", "vector_add --set block=256 --shape n=3000");
  compile(host / "softmax", "softmax --set block=512 --shape rows=9 cols=300");
  compile(host / "pa_split", "paged_attention --set num_splits=2 block_n=16 --shape batch=2 hq=4 hkv=2 ctx=40 "
                             "dtype=f16");
  compile(host / "pa_alibi", "paged_attention --shape batch=2 hq=4 hkv=1 ctx=33 dtype=bf16 alibi=1");
  fs::path jsonl = s.dir / "out.jsonl";
  test::Process p = test::run_process(tilec::test::gpu_bench_binary(), {s.dir.string(), "--emulate", "--repeats", "2",
                                                               "--out", jsonl.string()});
  INFO(p.text());
  CHECK(p.exit_code == 0);
  CHECK_THAT(p.err, Catch::Contains("gpu_bench: 4 of 4 modules ok"));
  // The split module's combine kernel is launched by it, not benchmarked on its own.
  CHECK(test::count_lines(p.out) == 4);
  CHECK_THAT(p.out, Catch::Contains("\"module\":\"pa_split\",\"name\":\"pa_split\",\"impl\":\"tilec\",\"kernel\":\"paged_attention\"") &&
                        Catch::Contains("\"shape\":\"n=3000\"") && Catch::Contains("\"ok\":true"));
  std::ifstream in(jsonl);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(test::count_lines(text) == 4);

  // --module runs one folder; code files that are not what the manifest recorded (here:
  // pa_alibi's library under pa_split's manifest) are refused before anything loads them.
  test::Process one = test::run_process(tilec::test::gpu_bench_binary(), {"--module", (host / "softmax").string(), "--emulate",
                                                                 "--repeats", "1", "--name", "sm"});
  CHECK(one.exit_code == 0);
  CHECK_THAT(one.out, Catch::Contains("\"name\":\"sm\"") && Catch::Contains("\"ok\":true"));
  fs::copy_file(host / "pa_split" / "paged_attention.toml", host / "pa_alibi" / "paged_attention.toml",
                fs::copy_options::overwrite_existing);
  test::Process wrong = test::run_process(tilec::test::gpu_bench_binary(), {"--module", (host / "pa_alibi").string(),
                                                                   "--emulate", "--repeats", "1"});
  CHECK(wrong.exit_code == 1);
  CHECK_THAT(wrong.err, Catch::Contains("truncated or corrupt"));
  CHECK(test::run_process(tilec::test::gpu_bench_binary(), {"--module", (host / "nowhere").string(), "--emulate"}).exit_code == 2);

  // A module whose run's other kernel is missing is reported, and the run fails.
  fs::remove(host / "pa_split" / "paged_attention_combine.toml");
  test::Process broken = test::run_process(tilec::test::gpu_bench_binary(), {s.dir.string(), "--emulate", "--repeats", "1"});
  CHECK(broken.exit_code == 1);
  CHECK_THAT(broken.err, Catch::Contains("no module of kernel 'paged_attention_combine'"));
}

TEST_CASE("gpu_bench without a GPU or modules exits with the documented codes", "[bench][gpu_bench]") {
  Scratch s;
  CHECK(test::run_process(tilec::test::gpu_bench_binary(), {s.dir.string()}).exit_code == 3);             // no driver
  CHECK(test::run_process(tilec::test::gpu_bench_binary(), {s.dir.string(), "--emulate"}).exit_code == 2); // no host/
  CHECK(test::run_process(tilec::test::gpu_bench_binary(), {s.dir.string(), "--bogus"}).exit_code == 2);
}
