// Every launcher checks a launch's arguments against the kernel's parameters before it runs
// anything, and words each mistake as the interpreter does (abi/arg_errors.h): a buffer of
// another element type names the parameter and both types, a scalar of the other kind names
// the parameter, a missing or an extra argument is named (issue 28: f32 buffers ran through
// an f16 kernel on the emulator without a word and printed `got -nan`). The cuda launcher's
// share runs against the fake driver (test_cuda_launcher.cpp).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "abi/arg_errors.h"
#include "abi/error.h"
#include "backends/launchers.h"
#include "backends/module_builder.h"
#include "dsl/dsl.h"
#include "interp/launcher.h"
#include "ir/error.h"
#include "launch/launcher.h"
#include "launch/module_launcher.h"
#include "templates/registry.h"
#include "runtime/launch.h"
#include "runtime/loaded_module.h"
#include "tests/runtime/helpers.h"

namespace fs = std::filesystem;
using namespace tilec;
using launch::Arg;
using launch::Buffer;
using ir::DType;

namespace {

// out[i] = x[i] * scale for i < n, on f16 buffers; n is declared even (multiple_of).
ir::Kernel scale_f16() {
  using namespace dsl;
  KernelBuilder k("scale_f16");
  auto x = k.arg<Ptr<f16>>("x"), out = k.arg<Ptr<f16>>("out");
  auto scale = k.arg<f32>("scale");
  auto n = multiple_of(k.arg<i32>("n"), 2);
  auto offs = arange(0, 64);
  auto mask = offs < n;
  store(out + offs, (load(x + offs, mask).to(f32) * scale).to(f16), mask);
  return k.finish();
}

// The message of the UserError (or runtime error) `f` throws; "" when it throws none.
template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The refusals every launcher makes, in the same words; `prefix` is what its messages start
// with ("scale_f16: " from the interpreter, "kernel 'scale_f16': " from the others).
void check_refusals(launch::Launcher& launcher, const std::string& prefix) {
  ir::Kernel k = scale_f16();
  Buffer xs("xs", DType::f32, 64), xh("xh", DType::f16, 64), out("out", DType::f16, 64);
  for (size_t i = 0; i < 64; ++i) xs.set(i, 1.0), xh.set(i, 1.0), out.set(i, 5.0);
  auto launch = [&](std::vector<Arg> args) {
    return error_of([&] { launcher.launch(k, 2, {1, 1, 1}, args); });
  };
  INFO(launcher.backend());
  CHECK(launch({Arg::of(xs), Arg::of(out), Arg::of_float(2), Arg::of_int(64)}) ==
        prefix + "parameter 'x' (ptr<f16>) was given buffer 'xs' of f32");
  CHECK(launch({Arg::of(xh), Arg::of(xs), Arg::of_float(2), Arg::of_int(64)}) ==
        prefix + "parameter 'out' (ptr<f16>) was given buffer 'xs' of f32");
  CHECK(launch({Arg::of(xh), Arg::of(out), Arg::of_int(64)}) ==
        prefix + "expects 4 arguments, got 3: missing parameter 'scale' (f32)");
  CHECK(launch({Arg::of(xh), Arg::of_float(2)}) ==
        prefix + "expects 4 arguments, got 2: missing parameters 'out' (ptr<f16>) and 'n' (i32)");
  CHECK(launch({Arg::of(xh), Arg::of(out), Arg::of_float(2), Arg::of_int(64), Arg::of(xs)}) ==
        prefix + "expects 4 arguments, got 5: extra argument 5 (buffer 'xs' of f32)");
  CHECK(launch({Arg::of(xh), Arg::of(out), Arg::of_int(2), Arg::of_int(64)}) ==
        prefix + "parameter 'scale' (f32) was given the integer 2, not a float (pass Arg::of_float)");
  CHECK(launch({Arg::of(xh), Arg::of(out), Arg::of_float(2), Arg::of_float(64)}) ==
        prefix + "parameter 'n' (i32) was given the float 64, not an integer (pass Arg::of_int)");
  CHECK(launch({Arg::of(xh), Arg::of(out), Arg::of_float(2), Arg::of(xs)}) ==
        prefix + "parameter 'n' (i32) was given buffer 'xs', not a scalar");
  CHECK(launch({Arg::of(xh), Arg::of_float(2), Arg::of_float(2), Arg::of_int(64)}) ==
        prefix + "parameter 'out' (ptr<f16>) was given a scalar, not a buffer");
  CHECK(launch({Arg::of(xh), Arg::of(out), Arg::of_float(2), Arg::of_int(int64_t(1) << 40)}) ==
        prefix + "parameter 'n' (i32) was given 1099511627776, which does not fit");
  CHECK(launch({Arg::of(xh), Arg::of(out), Arg::of_float(2), Arg::of_int(63)}) ==
        prefix + "parameter 'n' (i32) was given 63, not a multiple of 2 as the kernel declares (multiple_of)");
  CHECK(out.get(0) == 5.0); // nothing ran
  CHECK(launcher.stats().launches == 0);
}

} // namespace

TEST_CASE("argument errors read alike: missing parameters by name, extra arguments by position",
          "[launcher_args]") {
  std::vector<rt::ParamName> params{{"x", "ptr<f32>"}, {"y", "ptr<i32>"}, {"out", "ptr<f32>"}, {"n", "i32"}};
  CHECK(rt::argument_count_mismatch(params, 3) == "expects 4 arguments, got 3: missing parameter 'n' (i32)");
  CHECK(rt::argument_count_mismatch(params, 1) ==
        "expects 4 arguments, got 1: missing parameters 'y' (ptr<i32>), 'out' (ptr<f32>) and 'n' (i32)");
  // With what each argument could be, the skipped parameter: (x, out, n) leaves out y.
  std::vector<std::string> given{"ptr<f32>", "ptr<f32>", "i32"};
  auto fits = [&](size_t i, size_t k) { return params[i].type == given[k]; };
  CHECK(rt::argument_count_mismatch(params, 3, {}, fits) ==
        "expects 4 arguments, got 3: missing parameter 'y' (ptr<i32>)");
  // No way to fill the rest in order: the last ones.
  auto never = [](size_t, size_t) { return false; };
  CHECK(rt::argument_count_mismatch(params, 3, {}, never) == "expects 4 arguments, got 3: missing parameter 'n' (i32)");
  std::vector<std::string> extra{"the integer 7"};
  CHECK(rt::argument_count_mismatch(std::span(params).first(1), 3, extra) ==
        "expects 1 argument, got 3: extra arguments 2 (the integer 7) and 3");
  CHECK(rt::param_given("x", "ptr<f16>", rt::buffer_of("xs", "f32")) ==
        "parameter 'x' (ptr<f16>) was given buffer 'xs' of f32");
  CHECK(rt::buffer_of("", "f32") == "a buffer of f32");
}

TEST_CASE("interpret: wrong dtypes, kinds and counts are refused in the shared words", "[launcher_args]") {
  auto launcher = interp::make_interpret_launcher();
  check_refusals(*launcher, "scale_f16: ");
  // The right arguments run.
  ir::Kernel k = scale_f16();
  Buffer x("x", DType::f16, 64), out("out", DType::f16, 64);
  for (size_t i = 0; i < 64; ++i) x.set(i, double(i));
  launcher->launch(k, 2, {1, 1, 1}, {Arg::of(x), Arg::of(out), Arg::of_float(0.5), Arg::of_int(64)});
  CHECK(out.get(63) == 31.5);
}

TEST_CASE("emulate: f32 buffers for an f16 kernel are refused before anything compiles", "[launcher_args]") {
  rt::test::TempDir cache;
  rt::test::EnvVar env("TILEC_CACHE_DIR", cache.path.string());
  auto launcher = backends::make_emulate_launcher();
  check_refusals(*launcher, "kernel 'scale_f16': ");
  CHECK(fs::is_empty(cache.path)); // refused before the module was compiled
}

TEST_CASE("module launcher: a folder's modules are launched only on arguments that fit", "[launcher_args]") {
  rt::test::TempDir dir;
  const templates::KernelTemplate* t = templates::find_template("vector_add");
  REQUIRE(t);
  templates::ParamMap params{{"block", 128}, {"num_warps", 4}}, shape{{"n", 300}};
  REQUIRE(backends::write_template_modules(*t, params, shape, "host", dir.path, false).size() == 1);
  ir::Kernel k = t->build(params, shape);
  rt::Manifest manifest = rt::read_manifest(dir.path / "vector_add.toml");
  int sourced = 0;
  auto from_folder = [&](const ir::Function& fn, int, const launch::Specialization&) {
    ++sourced;
    REQUIRE(fn.name == manifest.kernel);
    return manifest;
  };
  auto launcher = launch::make_module_launcher(from_folder, false, "emulate");
  Buffer x("x", DType::f32, 300), y("y", DType::f32, 300), out("out", DType::f32, 300);
  Buffer halves("halves", DType::f16, 300);
  for (size_t i = 0; i < 300; ++i) x.set(i, 1.5), y.set(i, 2.0), halves.set(i, 2.0);
  auto launch = [&](std::vector<Arg> args) { return error_of([&] { launcher->launch(k, 4, {3, 1, 1}, args); }); };

  CHECK(launch({Arg::of(x), Arg::of(halves), Arg::of(out), Arg::of_int(300)}) ==
        "kernel 'vector_add': parameter 'y' (ptr<f32>) was given buffer 'halves' of f16");
  CHECK(launch({Arg::of(x), Arg::of(y), Arg::of(out)}) ==
        "kernel 'vector_add': expects 4 arguments, got 3: missing parameter 'n' (i32)");
  CHECK(launch({Arg::of(x), Arg::of(y), Arg::of(out), Arg::of_float(300)}) ==
        "kernel 'vector_add': parameter 'n' (i32) was given the float 300, not an integer (pass Arg::of_int)");
  CHECK(sourced == 0); // refused before any module was looked up or loaded
  CHECK(out.get(0) == 0.0);

  CHECK(launch({Arg::of(x), Arg::of(y), Arg::of(out), Arg::of_int(300)}).empty());
  CHECK(out.get(299) == 3.5);

  // The buffers go to the module typed: one whose manifest disagrees with the kernel (another
  // dtype's module in the folder) refuses them too, rather than reading f32 as f16.
  manifest.params.at(1).type = rt::ParamType{rt::ScalarType::f16, true};
  launcher = launch::make_module_launcher(from_folder, false, "emulate");
  CHECK(launch({Arg::of(x), Arg::of(y), Arg::of(out), Arg::of_int(300)}) ==
        "kernel 'vector_add': parameter 'y' (ptr<f16>) was given a buffer of f32 (1200 bytes)");
}

TEST_CASE("rt::LoadedModule: typed buffers and scalars are checked, missing ones named", "[launcher_args]") {
  rt::test::TempDir dir;
  const templates::KernelTemplate* t = templates::find_template("vector_add");
  REQUIRE(t);
  templates::ParamMap params{{"block", 128}, {"num_warps", 4}}, shape{{"n", 300}};
  REQUIRE(backends::write_template_modules(*t, params, shape, "host", dir.path, false).size() == 1);
  rt::LoadedModule m = rt::LoadedModule::load(rt::read_manifest(dir.path / "vector_add.toml"));
  std::vector<float> x(300, 1.5f), y(300, 2.0f), out(300, 0.0f);
  std::vector<std::uint16_t> halves(300);
  auto launch = [&](std::vector<rt::Arg> args) { return error_of([&] { m.launch({3}, args); }); };
  rt::Arg ax = rt::Arg::array(x.data(), 300), ay = rt::Arg::array(y.data(), 300),
          aout = rt::Arg::array(out.data(), 300);
  rt::Arg ahalves = rt::Arg::buffer(reinterpret_cast<std::uintptr_t>(halves.data()), 600, rt::ScalarType::f16);
  CHECK(launch({ax, ahalves, aout, int32_t(300)}) ==
        "kernel 'vector_add': parameter 'y' (ptr<f32>) was given a buffer of f16 (600 bytes)");
  CHECK(launch({ax, ay, int32_t(300)}) == "kernel 'vector_add': expects 4 arguments, got 3: missing parameter 'out' "
                                           "(ptr<f32>)");
  CHECK(launch({ax, ay, aout, int32_t(300), 2.0f}) ==
        "kernel 'vector_add': expects 4 arguments, got 5: extra argument 5 (a scalar f32)");
  CHECK(launch({ax, ay, aout, 300.0f}) == "kernel 'vector_add': parameter 'n' (i32) was given a scalar f32");
  CHECK(out[0] == 0.0f);
}
