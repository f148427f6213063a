#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/runtime/helpers.h"
#include "tests/tilec_process.h"

namespace {

using tilec::test::count_lines;
using tilec::test::last_line;

// Ran to an exit (never a signal); its streams are in Process::out and ::err.
tilec::test::Process run(const std::string& args) {
  tilec::test::Process p = tilec::test::run_tilec(args);
  INFO("tilec " << args << "\n" << p.text());
  REQUIRE(p.exited());
  return p;
}

} // namespace

TEST_CASE("tilec list names every template", "[cli]") {
  auto o = run("list");
  CHECK(o.exit_code == 0);
  for (const char* k : {"vector_add", "softmax", "matmul", "block_m", "--shape"})
    CHECK_THAT(o.out, Catch::Contains(k));
  auto j = run("list --json");
  CHECK(j.exit_code == 0);
  CHECK_THAT(last_line(j.out), Catch::StartsWith("{\"kernels\": ["));
}

TEST_CASE("tilec run on the interpreter passes every template", "[cli]") {
  for (const char* k : {"vector_add", "softmax", "matmul"}) {
    auto o = run(std::string("run ") + k + " --backend interpret --json");
    INFO(o.text());
    CHECK(o.exit_code == 0);
    CHECK_THAT(last_line(o.out), Catch::Contains("\"ok\": true"));
    CHECK_THAT(last_line(o.out), Catch::Contains("\"bytes_loaded\": null"));
  }
}

TEST_CASE("tilec run takes shapes and template parameters", "[cli]") {
  auto o = run("run matmul --backend interpret --set block_m=16 block_n=64 --shape m=33 n=65 k=7");
  INFO(o.text());
  CHECK(o.exit_code == 0);
  CHECK_THAT(o.out, Catch::Contains("m=33"));
}

TEST_CASE("tilec exit codes for bad usage", "[cli][errors]") {
  auto unknown = run("run nosuchkernel");
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.out.empty());
  CHECK(count_lines(unknown.err) == 1);
  CHECK_THAT(unknown.err, Catch::Contains("nosuchkernel"));

  CHECK(run("run softmax --no-such-flag").exit_code == 2);
  CHECK(run("frobnicate").exit_code == 2);
  CHECK(run("").exit_code == 2);

  auto malformed = run("ir softmax --set block");
  CHECK(malformed.exit_code == 2);
  CHECK_THAT(malformed.err, Catch::Contains("NAME=VALUE"));
  auto unknown_param = run("ir softmax --set blok=64");
  CHECK(unknown_param.exit_code == 2);
  CHECK_THAT(unknown_param.err, Catch::Contains("blok"));
  auto not_int = run("ir softmax --set block=big");
  CHECK(not_int.exit_code == 2);
  CHECK_THAT(not_int.err, Catch::Contains("not an integer"));
  auto not_pow2 = run("ir softmax --set block=100");
  CHECK(not_pow2.exit_code == 2);
  CHECK_THAT(not_pow2.err, Catch::Contains("power of two"));
  auto bad_shape = run("run softmax --backend interpret --shape cols=5000");
  CHECK(bad_shape.exit_code == 2);
  CHECK_THAT(bad_shape.err, Catch::Contains("cols=5000"));
  CHECK(run("run softmax --backend warp-drive").exit_code == 2);
}

TEST_CASE("errors are reported as a JSON last line under --json too", "[cli][errors]") {
  auto o = run("run nosuchkernel --json");
  CHECK(o.exit_code == 2);
  CHECK_THAT(last_line(o.out), Catch::StartsWith("{\"ok\": false"));
  CHECK_THAT(o.err, Catch::StartsWith("tilec: error: "));
}

TEST_CASE("every command has --help", "[cli]") {
  for (const char* c : {"", "list", "ir", "run"}) {
    auto o = run(std::string(c) + " --help");
    CHECK(o.exit_code == 0);
    CHECK_THAT(o.text(), Catch::Contains("Usage"));
  }
}

TEST_CASE("tilec ir prints tile IR that names the kernel", "[cli]") {
  auto o = run("ir softmax");
  CHECK(o.exit_code == 0);
  CHECK_THAT(o.out, Catch::Contains("kernel @softmax("));
  CHECK_THAT(o.out, Catch::Contains("reduce"));
}

TEST_CASE("tilec compile --json reports the phases and the main loop of paged attention", "[cli]") {
  tilec::rt::test::TempDir tmp;
  std::string dir = (tmp.path / "compile_json").string();
  auto o = run("compile paged_attention --arch sm_90 --set block_n=64 head_group=4 num_warps=4 --shape batch=1 hq=32 "
               "hkv=8 sq=1 head_dim=128 block_size=16 dtype=bf16 -o " + dir + " --json");
  CHECK(o.exit_code == 0);
  std::string j = last_line(o.out);
  for (const char* key : {"\"build_ms\": ", "\"lower_ms\": ", "\"optimize_ms\": ", "\"codegen_ms\": ", "\"ptxas_ms\": ",
                          "\"loop_mma\": 16", "\"loop_wgmma\": 0", "\"loop_cp_async\": 16", "\"loop_inner_loops\": 0"})
    CHECK_THAT(j, Catch::Contains(key));
  // A GEMM tile on warpgroup MMAs: its K step's wgmma counted apart from mma.sync.
  o = run("compile matmul --arch sm_90 --set block_m=128 block_n=128 block_k=64 num_stages=3 --shape m=512 n=512 "
          "k=512 dtype=bf16 -o " + dir + "_gemm --json");
  CHECK(o.exit_code == 0);
  j = last_line(o.out);
  for (const char* key : {"\"loop_mma\": 0", "\"loop_wgmma\": 8", "\"loop_cp_async\": 0"}) CHECK_THAT(j, Catch::Contains(key));
}

TEST_CASE("tilec compile --max-registers sets the GPU code's register ceiling, checked", "[cli][registers]") {
  tilec::rt::test::TempDir tmp;
  std::string dir = (tmp.path / "maxreg").string();
  auto o = run("compile vector_add --max-registers 40 -o " + dir + " --json");
  CHECK(o.exit_code == 0);
  CHECK_THAT(last_line(o.out), Catch::Contains("\"register_ceiling\": 40"));
  std::ifstream in(dir + "/vector_add.ptx");
  std::stringstream ptx;
  ptx << in.rdbuf();
  CHECK_THAT(ptx.str(), Catch::Contains(".maxnreg 40"));
  for (const char* bad : {"300", "8", "many"}) {
    auto e = run(std::string("compile vector_add --max-registers ") + bad + " -o " + dir + "_bad");
    CHECK(e.exit_code == 2);
    CHECK_THAT(e.err, Catch::Contains("--max-registers"));
  }
}
