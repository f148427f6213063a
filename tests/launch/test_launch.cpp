// The launch layer (launch/): one dtype enum for the IR and the runtime, host buffers and
// their element codec, the argument check every launcher applies, specialize(), and the one
// cache of loaded modules every module launcher shares.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <type_traits>
#include <vector>

#include "abi/types.h"
#include "backends/launchers.h"
#include "backends/module_builder.h"
#include "dsl/dsl.h"
#include "ir/types.h"
#include "launch/args.h"
#include "launch/buffer.h"
#include "launch/module_launcher.h"
#include "launch/specialize.h"
#include "runtime/launch.h"
#include "templates/registry.h"
#include "tests/runtime/helpers.h"

namespace fs = std::filesystem;
using namespace tilec;
using launch::Arg;
using launch::Buffer;

namespace {

// (x: ptr<f32>, stride: i32, flag: i1, scale: f32, n: i64): every kind of parameter.
ir::Kernel mixed_params() {
  using namespace dsl;
  KernelBuilder k("mixed");
  auto x = k.arg<Ptr<f32>>("x");
  auto stride = k.arg<i32>("stride");
  auto flag = k.arg<i1>("flag");
  auto scale = k.arg<f32>("scale");
  auto n = k.arg<i64>("n");
  auto offs = arange(0, 16);
  auto mask = (offs * stride < n) & flag;
  store(x + offs * stride, load(x + offs * stride, mask) * scale, mask);
  return k.finish();
}

} // namespace

TEST_CASE("the IR's dtypes and the runtime's element types are one enum", "[launch]") {
  STATIC_REQUIRE(std::is_same_v<ir::DType, rt::ScalarType>);
  STATIC_REQUIRE(std::is_same_v<ir::DType, DType>);
  for (DType t : kAllDTypes) {
    INFO(dtype_name(t));
    CHECK(parse_dtype(dtype_name(t)) == t);
    CHECK(rt::parse_scalar_type(dtype_name(t)) == t);
    CHECK(rt::scalar_type_bytes(t) == std::size_t(dtype_bytes(t)));
    auto p = rt::parse_param_type("ptr<" + std::string(dtype_name(t)) + ">");
    REQUIRE(p);
    CHECK(p->element == t);
    CHECK(p->is_pointer);
    CHECK(ir::ElemType{t, true}.str() == p->str());
  }
  CHECK(std::size(kAllDTypes) == 14);
  CHECK(!parse_dtype("f64"));
}

TEST_CASE("a buffer stores each dtype as the interpreter's loads read it", "[launch]") {
  Buffer h("h", DType::f16, 2), b("b", DType::bf16, 1), i8("i8", DType::i8, 1), u64("u64", DType::u64, 1);
  h.set(0, 1.0);
  h.set(1, -2.5);
  CHECK(h.bytes.size() == 4);
  CHECK(launch::read_float(h.bytes.data(), DType::f16) == 1.0f);
  CHECK(launch::read_float(h.bytes.data() + 2, DType::f16) == -2.5f);
  CHECK(std::to_integer<int>(h.bytes.data()[1]) == 0x3c); // 1.0 in f16 is 0x3c00, little-endian
  b.set(0, 3.0);
  CHECK(b.get(0) == 3.0);
  i8.set_int(0, 300); // wraps to the width
  CHECK(i8.get_int(0) == 44);
  i8.set(0, 1e9); // a float saturates, as PTX's cvt.rzi does
  CHECK(i8.get_int(0) == 127);
  u64.set_int(0, -1);
  CHECK(u64.get(0) == 18446744073709551615.0);
  launch::write_int(u64.bytes.data(), DType::u64, 5);
  CHECK(u64.get_int(0) == 5);
  CHECK_THROWS_WITH(h.get(2), "buffer 'h' has 2 elements, no element 2");
}

TEST_CASE("check_kernel_args words a mistake as every launcher does", "[launch]") {
  ir::Kernel k = mixed_params();
  Buffer x("xs", DType::f32, 16), h("hs", DType::f16, 16);
  std::vector<Arg> good{Arg::of(x), Arg::of_int(1), Arg::of_int(1), Arg::of_float(2.0), Arg::of_int(16)};
  CHECK(launch::argument_error(*k, good).empty());
  CHECK_NOTHROW(launch::check_kernel_args(*k, good));
  std::vector<Arg> wrong = good;
  wrong[0] = Arg::of(h);
  CHECK_THROWS_WITH(launch::check_kernel_args(*k, wrong),
                    "kernel 'mixed': parameter 'x' (ptr<f32>) was given buffer 'hs' of f16");
  wrong = good;
  wrong[1] = Arg::of_int(int64_t(1) << 40);
  CHECK(launch::argument_error(*k, wrong) == "parameter 'stride' (i32) was given 1099511627776, which does not fit");
  wrong = good;
  wrong[3] = Arg::of_int(2);
  CHECK(launch::argument_error(*k, wrong) ==
        "parameter 'scale' (f32) was given the integer 2, not a float (pass Arg::of_float)");
  wrong = good;
  wrong.pop_back();
  CHECK(launch::argument_error(*k, wrong) == "expects 5 arguments, got 4: missing parameter 'n' (i64)");
}

TEST_CASE("specialize: integers divisible by 16 or equal to 1, and buffers past 2^31 elements", "[launch]") {
  ir::Kernel k = mixed_params();
  Buffer x("x", DType::f32, 16);
  launch::Specialization s =
      launch::specialize(*k, {Arg::of(x), Arg::of_int(32), Arg::of_int(0), Arg::of_float(16.0), Arg::of_int(1)});
  // i1 and floats are never specialized, whatever their values.
  CHECK(s.divisibility == std::map<std::string, int64_t>{{"stride", 16}});
  CHECK(s.values == std::map<std::string, int64_t>{{"n", 1}});
  CHECK(s.large_buffers.empty());
  CHECK(s.str() == "stride%16 n=1");

  s = launch::specialize(*k, {Arg::of(x), Arg::of_int(0), Arg::of_int(1), Arg::of_float(1.0), Arg::of_int(7)});
  CHECK(s.divisibility == std::map<std::string, int64_t>{{"stride", 16}}); // 0 is a multiple of 16
  CHECK(s.values.empty());

  CHECK(launch::specialize(*k, {Arg::of(x), Arg::of_int(3), Arg::of_int(1), Arg::of_float(1.0), Arg::of_int(7)})
            .str() == "none");

  // Pages are mapped when written, so a buffer of 2^31 + 16 bytes costs nothing here.
  Buffer big("big", DType::f32, rt::kMaxElements32 + 1);
  s = launch::specialize(*k, {Arg::of(big), Arg::of_int(3), Arg::of_int(1), Arg::of_float(1.0), Arg::of_int(7)});
  CHECK(s.large_buffers == std::set<std::string>{"x"});
  CHECK(s.str() == "x:i64");
  Buffer edge("edge", DType::f32, rt::kMaxElements32);
  CHECK(launch::specialize(*k, {Arg::of(edge)}).large_buffers.empty()); // exactly 2^31: 32-bit offsets reach it
}

TEST_CASE("module launchers share one cache of loaded modules", "[launch]") {
  rt::test::TempDir dir;
  const templates::KernelTemplate* t = templates::find_template("vector_add");
  REQUIRE(t);
  templates::ParamMap params{{"block", 128}, {"num_warps", 4}}, shape{{"n", 300}};
  REQUIRE(backends::write_template_modules(*t, params, shape, "host", dir.path, false).size() == 1);
  ir::Kernel k = t->build(params, shape);
  rt::Manifest manifest = rt::read_manifest(dir.path / "vector_add.toml");
  std::vector<launch::Specialization> asked;
  auto from_folder = [&](const ir::Function&, int, const launch::Specialization& spec) {
    asked.push_back(spec);
    return manifest;
  };
  Buffer x("x", DType::f32, 320), y("y", DType::f32, 320), out("out", DType::f32, 320);
  for (size_t i = 0; i < 320; ++i) x.set(i, 1.5), y.set(i, 2.0);
  std::vector<Arg> args{Arg::of(x), Arg::of(y), Arg::of(out), Arg::of_int(320)};
  auto first = launch::make_module_launcher(from_folder, false, "emulate");
  first->launch(k, 4, {3, 1, 1}, args);
  CHECK(out.get(319) == 3.5);
  REQUIRE(asked.size() == 1);
  CHECK(asked[0].str() == "n%16"); // the source is told the launch's specialization

  // Another launcher finds the module loaded (the first still holds it): its library is no
  // longer needed on disk.
  fs::remove(dir.path / manifest.emulator);
  out.set(319, 0.0);
  auto second = launch::make_module_launcher(from_folder, false, "emulate");
  second->launch(k, 4, {3, 1, 1}, args);
  CHECK(out.get(319) == 3.5);
  CHECK(second->stats().launches == 1);
  CHECK(second->stats().bytes_loaded.value_or(0) > 0); // the emulator's counts come back

  // Once no launcher holds it, the module is unloaded: a new launcher must open the library.
  first.reset();
  second.reset();
  auto third = launch::make_module_launcher(from_folder, false, "emulate");
  CHECK_THROWS(third->launch(k, 4, {3, 1, 1}, args));
}
