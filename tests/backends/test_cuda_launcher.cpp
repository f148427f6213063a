// The cuda launcher (backends/cuda_launcher.cpp) and `tilec run --backend cuda`. Without a
// GPU they run against the stand-in libcuda.so.1 (tests/runtime/fake_libcuda.c) in a child
// process whose LD_LIBRARY_PATH finds it: the fake keeps device memory on the host, runs only
// vector_add, and traces allocations, copies and launches, which the parent checks. The
// launcher's own checks run in this test binary as hidden cases, started as that child.
#include "backends/launchers.h"
#include "runtime/cuda.h"
#include "abi/error.h"
#include "launch/launcher.h"
#include "templates/registry.h"

#include "tests/runtime/helpers.h"

#include <catch2/catch.hpp>

#include <algorithm>

namespace fs = std::filesystem;
using namespace tilec;
using namespace tilec::rt::test;

namespace {

const std::string kAllReleased = "fake: at exit: 0 allocations, 0 modules, 0 streams, 0 events, "
                                 "0 retained contexts, context depth 0";

// `command` with the fake driver first on the library path, its trace on, and a fresh module cache.
Output with_fake_driver(const TempDir& cache, const std::string& command, const std::string& env = "") {
  return run_command("env LD_LIBRARY_PATH=" + quoted(kFakeCudaDir) + " FAKE_CUDA_TRACE=1 XDG_CACHE_HOME=" +
                     quoted(cache.path) + " " + env + " " + command);
}

// One hidden case of this binary, run as the child.
Output child_case(const TempDir& cache, const std::string& name) {
  fs::path self = fs::read_symlink("/proc/self/exe");
  return with_fake_driver(cache, quoted(self) + " '" + name + "'");
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct Run {
  templates::Problem problem;
  ir::Kernel kernel;
  int num_warps = 4;
  launch::Grid grid{1, 1, 1};
};

Run problem(const std::string& name, templates::ParamMap shape_overrides = {}) {
  const templates::KernelTemplate* t = templates::find_template(name);
  REQUIRE(t);
  templates::ParamMap params, shape;
  for (const auto& p : t->params) params[p.name] = p.value;
  for (const auto& p : t->shape) shape[p.name] = p.value;
  for (const auto& [k, v] : shape_overrides) shape[k] = v;
  return {templates::make_problem(*t, {shape, 7, {}, {}}), t->build(params, shape), int(params.at("num_warps")),
          templates::launch_grid(*t, params, shape)};
}

// The child cases need the fake: make sure it is the driver they talk to.
std::unique_ptr<launch::Launcher> fake_cuda_launcher() {
  std::string reason;
  REQUIRE(rt::cuda_available(&reason));
  rt::Context ctx(0);
  REQUIRE(ctx.properties().name == "Fake CUDA Device");
  return backends::make_cuda_launcher();
}

} // namespace

TEST_CASE("fake cuda child: vector_add runs on device copies of its buffers", "[.][fake_cuda_child]") {
  auto launcher = fake_cuda_launcher();
  CHECK(launcher->backend() == "cuda");
  Run r = problem("vector_add", {{"n", 5000}});
  launcher->launch(r.kernel, r.num_warps, r.grid, r.problem.launch_args());
  templates::Comparison c = templates::compare_outputs(r.problem);
  CHECK(c.ok);
  CHECK(launcher->stats().launches == 1);
  CHECK(launcher->stats().time_ms == Approx(0.25)); // the fake's event time
  CHECK_FALSE(launcher->stats().bytes_loaded);
  CHECK_FALSE(launcher->stats().bytes_stored);
  CHECK_FALSE(launcher->stats().unique_bytes);
  // A second launch of the same kernel uses the loaded module.
  launcher->launch(r.kernel, r.num_warps, r.grid, r.problem.launch_args());
  CHECK(launcher->stats().launches == 2);
  CHECK(launcher->stats().time_ms == Approx(0.5));
}

TEST_CASE("fake cuda child: one device buffer per distinct host buffer", "[.][fake_cuda_child]") {
  auto launcher = fake_cuda_launcher();
  Run r = problem("vector_add", {{"n", 3000}});
  auto args = r.problem.launch_args();
  args[1] = args[0]; // out = x + x
  launcher->launch(r.kernel, r.num_warps, r.grid, args);
  const launch::Buffer& x = *args[0].buffer;
  const launch::Buffer& out = *args[2].buffer;
  for (size_t i = 0; i < 3000; i += 499) CHECK(out.get(i) == 2 * x.get(i));
}

TEST_CASE("fake cuda child: a kernel the fake cannot run still reaches the driver", "[.][fake_cuda_child]") {
  auto launcher = fake_cuda_launcher();
  Run r = problem("softmax", {{"rows", 5}, {"cols", 100}});
  launcher->launch(r.kernel, r.num_warps, r.grid, r.problem.launch_args());
  CHECK(launcher->stats().launches == 1);
}

TEST_CASE("fake cuda child: time() moves the buffers once", "[.][fake_cuda_child]") {
  auto launcher = fake_cuda_launcher();
  Run r = problem("vector_add", {{"n", 2048}});
  launch::TimingStats t = launcher->time(r.kernel, r.num_warps, r.grid, r.problem.launch_args(), 2, 5);
  CHECK(t.warmup == 2);
  CHECK(t.repeats == 5);
  CHECK(t.median_ms == Approx(0.25));
  CHECK(t.min_ms == Approx(0.25));
  CHECK(t.max_ms == Approx(0.25));
  CHECK(launcher->stats().launches == 0); // time() leaves the stats alone
  CHECK(templates::compare_outputs(r.problem).ok);
  CHECK_THROWS_AS(launcher->time(r.kernel, r.num_warps, r.grid, r.problem.launch_args(), 0, 0), UserError);
}

TEST_CASE("fake cuda child: argument errors are user errors", "[.][fake_cuda_child]") {
  auto launcher = fake_cuda_launcher();
  Run r = problem("vector_add", {{"n", 100}});
  auto args = r.problem.launch_args();
  args.pop_back();
  CHECK_THROWS_WITH(launcher->launch(r.kernel, r.num_warps, r.grid, args),
                    "kernel 'vector_add': expects 4 arguments, got 3: missing parameter 'n' (i32)");
  CHECK_THROWS_WITH(launcher->launch(r.kernel, r.num_warps, {-1, 1, 1}, r.problem.launch_args()),
                    Catch::Contains("grid (-1, 1, 1) must be from 0"));
  // No programs: a no-op (the fake driver, like the real one, refuses a zero grid).
  CHECK_NOTHROW(launcher->launch(r.kernel, r.num_warps, {0, 1, 1}, r.problem.launch_args()));
}

// Checked before the kernel compiles, loads or allocates anything on the device.
TEST_CASE("fake cuda child: a buffer of another dtype or a missing argument is refused first",
          "[.][fake_cuda_child]") {
  auto launcher = fake_cuda_launcher();
  Run r = problem("vector_add", {{"n", 100}});
  auto args = r.problem.launch_args();
  launch::Buffer halves("halves", ir::DType::f16, 100);
  args[1] = launch::Arg::of(halves);
  CHECK_THROWS_WITH(launcher->launch(r.kernel, r.num_warps, r.grid, args),
                    "kernel 'vector_add': parameter 'y' (ptr<f32>) was given buffer 'halves' of f16");
  CHECK_THROWS_AS(launcher->time(r.kernel, r.num_warps, r.grid, args, 1, 1), UserError);
  args = r.problem.launch_args();
  args.erase(args.begin() + 2);
  CHECK_THROWS_WITH(launcher->launch(r.kernel, r.num_warps, r.grid, args),
                    "kernel 'vector_add': expects 4 arguments, got 3: missing parameter 'out' (ptr<f32>)");
  args = r.problem.launch_args();
  args.back() = launch::Arg::of_float(100);
  CHECK_THROWS_WITH(launcher->launch(r.kernel, r.num_warps, r.grid, args),
                    Catch::EndsWith("parameter 'n' (i32) was given the float 100, not an integer (pass Arg::of_int)"));
  CHECK(launcher->stats().launches == 0);
}

TEST_CASE("the cuda launcher uploads, launches with the compiled block and downloads", "[cuda]") {
  REQUIRE(fs::exists(kFakeCudaDir / "libcuda.so.1"));
  TempDir cache;
  SECTION("vector_add") {
    Output out = child_case(cache, "fake cuda child: vector_add runs on device copies of its buffers");
    INFO(out.text);
    CHECK(out.status == 0);
    // x, y and out go up and come back, 5000 floats each, around each of the two launches.
    CHECK(count(out.text, "fake: cuMemcpyHtoD 20000 bytes\n") == 6);
    CHECK(count(out.text, "fake: cuMemcpyDtoH 20000 bytes\n") == 6);
    CHECK(count(out.text, "fake: cuLaunchKernel vector_add\n") == 2);
    // 5000 elements in programs of 1024: 5 blocks of num_warps (4) x 32 threads.
    CHECK(count(out.text, "fake: cuLaunchKernel grid 5x1x1 block 128x1x1 shared 0\n") == 2);
    CHECK(count(out.text, "fake: cuModuleLoadDataEx") == 1);
    CHECK_THAT(out.text, Catch::Contains(kAllReleased + "\n"));
    // The compiled module is in the cache folder.
    bool cached = false;
    for (const auto& e : fs::recursive_directory_iterator(cache.path)) cached |= e.path().extension() == ".ptx";
    CHECK(cached);
  }
  SECTION("a buffer passed twice is copied once") {
    Output out = child_case(cache, "fake cuda child: one device buffer per distinct host buffer");
    INFO(out.text);
    CHECK(out.status == 0);
    CHECK(count(out.text, "fake: cuMemAlloc 12000 bytes\n") == 2);
    CHECK(count(out.text, "fake: cuMemcpyHtoD 12000 bytes\n") == 2);
    CHECK_THAT(out.text, Catch::Contains(kAllReleased + "\n"));
  }
  SECTION("softmax: one program per row") {
    Output out = child_case(cache, "fake cuda child: a kernel the fake cannot run still reaches the driver");
    INFO(out.text);
    CHECK(out.status == 0);
    CHECK_THAT(out.text, Catch::Contains("fake: cuLaunchKernel softmax\nfake: cuLaunchKernel grid 5x1x1 block "
                                         "128x1x1"));
    CHECK(count(out.text, "fake: cuMemcpyHtoD 2000 bytes\n") == 2);
    CHECK(count(out.text, "fake: cuMemcpyDtoH 2000 bytes\n") == 2);
  }
  SECTION("timing") {
    Output out = child_case(cache, "fake cuda child: time() moves the buffers once");
    INFO(out.text);
    CHECK(out.status == 0);
    CHECK(count(out.text, "fake: cuLaunchKernel vector_add\n") == 7); // 2 warm-up + 5 timed
    CHECK(count(out.text, "fake: cuMemcpyHtoD 8192 bytes\n") == 3);
    CHECK(count(out.text, "fake: cuMemcpyDtoH 8192 bytes\n") == 3);
  }
  SECTION("argument errors") {
    Output out = child_case(cache, "fake cuda child: argument errors are user errors");
    INFO(out.text);
    CHECK(out.status == 0);
    CHECK_THAT(out.text, !Catch::Contains("cuLaunchKernel"));
  }
  SECTION("a wrong dtype or a missing argument never reaches the module or the device") {
    Output out = child_case(cache, "fake cuda child: a buffer of another dtype or a missing argument is refused first");
    INFO(out.text);
    CHECK(out.status == 0);
    CHECK_THAT(out.text, !Catch::Contains("cuModuleLoad") && !Catch::Contains("cuMemAlloc") &&
                             !Catch::Contains("cuLaunchKernel"));
    CHECK_THAT(out.text, Catch::Contains(kAllReleased + "\n"));
  }
}

TEST_CASE("tilec run --backend cuda against the fake driver", "[cuda]") {
  TempDir cache;
  const std::string tilec = quoted(tilec::test::tilec_binary());
  SECTION("vector_add is right and reports kernel time, no byte counts") {
    Output out = with_fake_driver(cache, tilec + " run vector_add --backend cuda --shape n=3000 --json");
    INFO(out.text);
    CHECK(out.status == 0);
    CHECK_THAT(out.text, Catch::Contains("\"backend\": \"cuda\""));
    CHECK_THAT(out.text, Catch::Contains("\"ok\": true"));
    CHECK_THAT(out.text, Catch::Contains("\"time_ms\": 0.25"));
    CHECK_THAT(out.text, Catch::Contains("\"bytes_loaded\": null"));
    CHECK_THAT(out.text, Catch::Contains("fake: cuLaunchKernel grid 3x1x1 block 128x1x1 shared 0"));
    CHECK_THAT(out.text, Catch::Contains(kAllReleased + "\n"));
  }
  SECTION("auto picks cuda when a device is present") {
    Output out = with_fake_driver(cache, tilec + " run vector_add --shape n=100 --json");
    INFO(out.text);
    CHECK(out.status == 0);
    CHECK_THAT(out.text, Catch::Contains("\"backend\": \"cuda\""));
  }
  SECTION("num_warps sets the block") {
    Output out = with_fake_driver(cache, tilec + " run vector_add --backend cuda --set num_warps=2 --shape n=100");
    INFO(out.text);
    CHECK(out.status == 0);
    CHECK_THAT(out.text, Catch::Contains("block 64x1x1"));
  }
  SECTION("matmul's TMA copies get their tensor maps encoded from the arguments at launch") {
    Output out = with_fake_driver(cache, tilec + " run matmul --backend cuda --set block_m=128 --set block_n=128 "
                                                 "--set block_k=64 --set num_stages=3 --shape dtype=bf16 --shape m=200 "
                                                 "--shape n=320 --shape k=160");
    INFO(out.text);
    CHECK(out.status == 1); // the fake does not compute it
    // A [200, 160] and B [160, 320], innermost dim first, 128-byte swizzle (CU_TENSOR_MAP_SWIZZLE_128B = 3).
    CHECK_THAT(out.text, Catch::Contains("rank 2 dims 160 x 200 box 64 x 128 stride 320 swizzle 3"));
    CHECK_THAT(out.text, Catch::Contains("rank 2 dims 320 x 160 box 64 x 64 stride 640 swizzle 3"));
    CHECK_THAT(out.text, Catch::Contains(kAllReleased + "\n"));
  }
  SECTION("a wrong result is exit 1: the fake does not compute softmax") {
    Output out = with_fake_driver(cache, tilec + " run softmax --backend cuda --json");
    INFO(out.text);
    CHECK(out.status == 1);
    CHECK_THAT(out.text, Catch::Contains("\"ok\": false"));
  }
  SECTION("a driver without a device is exit 3, one line") {
    Output out = with_fake_driver(cache, tilec + " run vector_add --backend cuda", "FAKE_CUDA_NO_DEVICE=1");
    INFO(out.text);
    CHECK(out.status == 3);
    CHECK_THAT(out.text, Catch::Contains("no CUDA device found (cuInit: CUDA_ERROR_NO_DEVICE"));
  }
  SECTION("auto falls back to emulate without a device") {
    Output out = with_fake_driver(cache, tilec + " run vector_add --shape n=100 --json", "FAKE_CUDA_NO_DEVICE=1");
    INFO(out.text);
    CHECK_THAT(out.text, Catch::Contains("\"backend\": \"emulate\""));
  }
}

TEST_CASE("without a CUDA driver the cuda backend is unavailable, never a crash", "[cuda][errors]") {
  if (rt::cuda_available()) return; // a machine with a GPU: nothing to check here
  CHECK_THROWS_AS(backends::make_cuda_launcher(), rt::BackendUnavailable);
  Output out = run_command(quoted(tilec::test::tilec_binary()) + " run softmax --backend cuda");
  CHECK(out.status == 3);
  CHECK_THAT(out.text, Catch::StartsWith("tilec: error: CUDA driver not found ("));
  CHECK(std::count(out.text.begin(), out.text.end(), '\n') == 1);
  out = run_command(quoted(tilec::test::tilec_binary()) + " run softmax --backend cuda --json");
  CHECK(out.status == 3);
}
