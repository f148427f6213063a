// Drives runtime/cuda.cpp end to end against a stand-in libcuda.so.1 (fake_libcuda.c): the
// example host program runs in a child process whose LD_LIBRARY_PATH finds the fake first.
// The fake enforces that a context is current, and reports at exit what is still alive.
#include "abi/manifest.h"

#include "tests/runtime/helpers.h"

#include <catch2/catch.hpp>

#include <fstream>

namespace fs = std::filesystem;
using namespace tilec::rt;
using namespace tilec::rt::test;

namespace {

Output run_with_fake_driver(const fs::path& manifest, const std::string& env = "") {
  return run_command("env LD_LIBRARY_PATH=" + quoted(kFakeCudaDir) + " FAKE_CUDA_TRACE=1 " + env +
                     " " + quoted(kExample) + " " + quoted(manifest) + " 1000");
}

const std::string kAllReleased = "fake: at exit: 0 allocations, 0 modules, 0 streams, 0 events, "
                                 "0 retained contexts, context depth 0";

// The example module, rewritten into `dir` with `edit` applied; code paths made absolute.
template <class Edit> fs::path edited_module(const TempDir& dir, Edit edit) {
  Manifest m = read_manifest(kExampleManifest);
  m.ptx = m.code_path(m.ptx);
  edit(m);
  fs::path file = dir.path / "manifest.toml";
  write_manifest(m, file);
  return file;
}

} // namespace

TEST_CASE("the cuda runtime launches a module through the driver API", "[runtime]") {
  REQUIRE(fs::exists(kFakeCudaDir / "libcuda.so.1"));
  Output out = run_with_fake_driver(kExampleManifest);
  INFO(out.text);
  CHECK(out.status == 0);
  CHECK_THAT(out.text, Catch::Contains("fake: cuModuleLoadDataEx ptx"));
  CHECK_THAT(out.text, Catch::Contains("fake: cuLaunchKernel grid 4x1x1 block 256x1x1 shared 0"));
  CHECK_THAT(out.text, Catch::Contains("vector_add on Fake CUDA Device (sm_90, 132 SMs): n = "
                                       "1000, 4 blocks of 256 threads, 0.250 ms, all correct"));
  CHECK_THAT(out.text, !Catch::Contains("max dynamic shared"));
  CHECK_THAT(out.text, Catch::Contains(kAllReleased + "\n"));
}

TEST_CASE("the cuda runtime raises the shared-memory limit past 48 KiB", "[runtime]") {
  TempDir dir;
  fs::path manifest = edited_module(dir, [](Manifest& m) { m.shared_bytes = 100000; });
  Output out = run_with_fake_driver(manifest);
  INFO(out.text);
  CHECK(out.status == 0);
  CHECK_THAT(out.text, Catch::Contains("fake: cuFuncSetAttribute max dynamic shared 100000"));
  CHECK_THAT(out.text, Catch::Contains("block 256x1x1 shared 100000"));

  fs::path too_much = edited_module(dir, [](Manifest& m) { m.shared_bytes = 300000; });
  out = run_with_fake_driver(too_much);
  CHECK(out.status == 2);
  CHECK_THAT(out.text, Catch::Contains("launch_module: kernel 'vector_add' needs 300000 bytes of "
                                       "shared memory per block; Fake CUDA Device allows at most "
                                       "232448"));
}

TEST_CASE("the cuda runtime picks the cubin built for the device, else the PTX", "[runtime]") {
  TempDir dir;
  {
    std::ofstream cubin(dir.path / "vector_add.cubin", std::ios::binary);
    cubin << "\177ELF fake cubin";
  }
  fs::path sm90 = edited_module(dir, [](Manifest& m) {
    m.arch = "sm_90";
    m.cubin = "vector_add.cubin";
  });
  Output out = run_with_fake_driver(sm90);
  INFO(out.text);
  CHECK(out.status == 0);
  CHECK_THAT(out.text, Catch::Contains("fake: cuModuleLoadDataEx cubin"));

  fs::path sm80 = edited_module(dir, [](Manifest& m) {
    m.arch = "sm_80";
    m.cubin = "vector_add.cubin";
  });
  out = run_with_fake_driver(sm80);
  CHECK(out.status == 0);
  CHECK_THAT(out.text, Catch::Contains("fake: cuModuleLoadDataEx ptx"));

  fs::path no_ptx = edited_module(dir, [](Manifest& m) {
    m.arch = "sm_80";
    m.ptx.clear();
    m.cubin = "vector_add.cubin";
  });
  out = run_with_fake_driver(no_ptx);
  CHECK(out.status == 2);
  CHECK_THAT(out.text, Catch::Contains("module 'vector_add' has no code for sm_90: its cubin is "
                                       "for sm_80 and it has no PTX"));
}

TEST_CASE("failing driver calls name the call and the driver's error", "[runtime]") {
  TempDir dir;
  SECTION("no device") {
    Output out = run_with_fake_driver(kExampleManifest, "FAKE_CUDA_NO_DEVICE=1");
    CHECK(out.status == 3);
    CHECK_THAT(out.text, Catch::StartsWith("launch_module: no CUDA device found (cuInit: "
                                           "CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is "
                                           "detected); without a GPU, load the module built for the CPU emulator (runtime/emulator/emulator.h)\n"));
  }
  SECTION("out of memory") {
    Output out = run_with_fake_driver(kExampleManifest, "FAKE_CUDA_OOM=1");
    CHECK(out.status == 1);
    CHECK_THAT(out.text, Catch::Contains("launch_module: cuMemAlloc(4000 bytes) failed: "
                                         "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory\n"));
    CHECK_THAT(out.text, Catch::Contains(kAllReleased + "\n"));
  }
  SECTION("the JIT's error log is part of the message") {
    {
      std::ofstream ptx(dir.path / "bad.ptx");
      ptx << "// FAKE_JIT_ERROR\n";
    }
    fs::path manifest = edited_module(dir, [&](Manifest& m) { m.ptx = dir.path / "bad.ptx"; });
    Output out = run_with_fake_driver(manifest);
    CHECK(out.status == 1);
    CHECK_THAT(out.text, Catch::Contains("bad.ptx) failed: CUDA_ERROR_INVALID_PTX (218): a PTX "
                                         "JIT compilation failed\nptxas fatal   : fake JIT error "
                                         "log line\n"));
  }
  SECTION("a symbol the module lacks") {
    fs::path manifest = edited_module(dir, [](Manifest& m) { m.symbol = "vector_sub"; });
    Output out = run_with_fake_driver(manifest);
    CHECK(out.status == 1);
    CHECK_THAT(out.text, Catch::Contains("launch_module: cuModuleGetFunction(vector_sub) failed: "
                                         "CUDA_ERROR_NOT_FOUND (500): named symbol not found\n"));
    CHECK_THAT(out.text, Catch::Contains(kAllReleased + "\n"));
  }
  SECTION("a missing code file") {
    fs::path manifest = edited_module(dir, [&](Manifest& m) { m.ptx = dir.path / "gone.ptx"; });
    Output out = run_with_fake_driver(manifest);
    CHECK(out.status == 2);
    CHECK_THAT(out.text, Catch::Contains("module 'vector_add': cannot open code file"));
  }
}
