// The launch API: a DSL kernel compiled from a host program (backends/jit.h) and launched on
// buffers the program owns, and an exported module loaded without the compiler
// (runtime/loaded_module.h) through the same launch call. No GPU here: both run emulated.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "abi/error.h"
#include "backends/jit.h"
#include "backends/module_builder.h"
#include "dsl/dsl.h"
#include "templates/registry.h"
#include "runtime/cuda.h"
#include "tests/runtime/helpers.h"

using namespace tilec;

namespace {

// out[i] = a * x[i] + y[i] for i < n, one block of elements per program.
ir::Kernel saxpy(int64_t block) {
  using namespace dsl;
  KernelBuilder k("saxpy");
  auto x = k.arg<Ptr<f32>>("x"), y = k.arg<Ptr<f32>>("y"), out = k.arg<Ptr<f32>>("out");
  auto a = k.arg<f32>("a");
  auto n = k.arg<i32>("n");
  auto offs = program_id(0) * block + arange(0, block);
  auto mask = offs < n;
  store(out + offs, a * load(x + offs, mask) + load(y + offs, mask), mask);
  return k.finish();
}

} // namespace

TEST_CASE("jit: a DSL kernel compiled in-process runs on the program's own buffers", "[backends][jit]") {
  rt::test::TempDir cache;
  rt::test::EnvVar env("TILEC_CACHE_DIR", cache.path.string());
  REQUIRE_FALSE(rt::cuda_available()); // this machine has no GPU: the emulator serves
  CHECK(backends::jit_arch() == "host");
  const int32_t n = 1000;
  std::vector<float> x(n), y(n), out(n, -1.0f);
  for (int32_t i = 0; i < n; ++i) x[size_t(i)] = float(i), y[size_t(i)] = 0.5f;
  rt::LoadedModule m = backends::jit(saxpy(256), 2);
  CHECK_FALSE(m.on_gpu());
  CHECK(m.manifest().threads_per_block == 64);
  m.launch({(n + 255) / 256}, {rt::Arg::array(x.data(), x.size()), rt::Arg::array(y.data(), y.size()),
                               rt::Arg::array(out.data(), out.size()), 2.0f, n});
  for (int32_t i = 0; i < n; i += 97) CHECK(out[size_t(i)] == 2.0f * float(i) + 0.5f);

  // Once per process: the same kernel again is the same module, from the cache.
  CHECK(backends::jit(saxpy(256), 2).manifest().emulator == m.manifest().emulator);

  // Arguments are checked against the parameters, with the parameter named.
  auto bufs = [&] {
    return std::vector<rt::Arg>{rt::Arg::array(x.data(), x.size()), rt::Arg::array(y.data(), y.size()),
                                rt::Arg::array(out.data(), out.size())};
  };
  std::vector<rt::Arg> wrong_scalar = bufs();
  wrong_scalar.insert(wrong_scalar.end(), {2.0f, 1000.0f}); // an f32 for the i32 n
  CHECK_THROWS_WITH(m.launch({4}, wrong_scalar), Catch::Contains("parameter 'n'") && Catch::Contains("f32"));
  std::vector<rt::Arg> int_for_float = bufs();
  int_for_float.insert(int_for_float.end(), {int32_t(2), n}); // an i32 for the f32 a
  CHECK_THROWS_AS(m.launch({4}, int_for_float), rt::LaunchArgumentError);
  std::vector<int32_t> ints(n);
  std::vector<rt::Arg> wrong_buffer{rt::Arg::array(ints.data(), ints.size()), rt::Arg::array(y.data(), y.size()),
                                    rt::Arg::array(out.data(), out.size()), 2.0f, n};
  CHECK_THROWS_WITH(m.launch({4}, wrong_buffer),
                    Catch::Contains("parameter 'x'") && Catch::Contains("a buffer of i32"));
  CHECK_THROWS_WITH(m.launch({4}, {2.0f, n}), "kernel 'saxpy': expects 5 arguments, got 2: missing parameters "
                                              "'x' (ptr<f32>), 'y' (ptr<f32>) and 'out' (ptr<f32>)");
}

TEST_CASE("an exported module launches through the same call, without the compiler", "[backends][jit]") {
  rt::test::TempDir dir;
  const templates::KernelTemplate* t = templates::find_template("vector_add");
  REQUIRE(t);
  templates::ParamMap params{{"block", 128}, {"num_warps", 4}}, shape{{"n", 300}};
  std::vector<rt::Manifest> ms = backends::write_template_modules(*t, params, shape, "host", dir.path, false);
  REQUIRE(ms.size() == 1);
  rt::LoadedModule m = rt::LoadedModule::load(rt::read_manifest(dir.path / "vector_add.toml"));
  std::vector<float> x(300, 1.5f), y(300, 2.0f), out(300, 0.0f);
  m.launch({3}, {rt::Arg::array(x.data(), 300), rt::Arg::array(y.data(), 300), rt::Arg::array(out.data(), 300),
                 int32_t(300)});
  CHECK(out.front() == 3.5f);
  CHECK(out.back() == 3.5f);
  // A GPU module on a machine without a driver: BackendUnavailable, not a crash.
  std::vector<rt::Manifest> gpu = backends::write_template_modules(*t, params, shape, "sm_90", dir.path, true);
  CHECK_THROWS_AS(rt::LoadedModule::load(gpu.at(0)), rt::BackendUnavailable);
}
