// Integer arguments specialized on divisibility by 16, as Triton's launcher does: a row
// stride passed at run time gives 16-byte vector loads when it is a multiple of 16, the
// module records the assumption, and its launch refuses a value that breaks it.
#include <catch2/catch.hpp>

#include "backends/launchers.h"
#include "codegen/compile.h"
#include "codegen/module.h"
#include "dsl/dsl.h"
#include "interp/interpreter.h"
#include "interp/launcher.h"
#include "launch/launcher.h"
#include "tests/codegen/codegen_test_util.h"
#include "ir/param_access.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "launch/module_launcher.h"
#include "launch/specialize.h"
#include "runtime/emulator/emulator.h"
#include "tests/runtime/helpers.h"

using namespace tilec;
using codegen::test::count;
using namespace tilec::dsl;
using ir::DType;

namespace {

// out[r, c] = x[r * stride + c] for a [4, 64] f16 tile: the row stride is a runtime integer.
ir::Kernel strided_copy() {
  KernelBuilder kb("strided_copy");
  auto x = kb.arg(ptr_to(DType::f16), "x");
  auto out = kb.arg(ptr_to(DType::f16), "out");
  auto stride = kb.arg(ElemType{DType::i32, false}, "stride");
  auto r = arange(0, 4), c = arange(0, 64);
  store(out + r.col() * 64 + c.row(), load(x + r.col() * stride + c.row()));
  return kb.finish();
}

// out[r, c] = x[r * 64 + c * cstride] for a [4, 64] f16 tile: the column stride is a runtime
// integer, usually 1.
ir::Kernel column_strided_copy() {
  KernelBuilder kb("column_strided_copy");
  auto x = kb.arg(ptr_to(DType::f16), "x");
  auto out = kb.arg(ptr_to(DType::f16), "out");
  auto cstride = kb.arg(ElemType{DType::i32, false}, "cstride");
  auto r = arange(0, 4), c = arange(0, 64);
  store(out + r.col() * 64 + c.row(), load(x + r.col() * 64 + c.row() * cstride));
  return kb.finish();
}

// A host vector of f16 bits as an emulator buffer argument.
rt::Arg buf(std::vector<std::uint16_t>& v) {
  return rt::Arg::buffer(reinterpret_cast<std::uint64_t>(v.data()), v.size() * 2, rt::ScalarType::f16);
}

} // namespace

TEST_CASE("a runtime stride that is a multiple of 16 gives vector loads", "[codegen][specialize]") {
  ir::Kernel k = strided_copy();
  codegen::CompileOptions o;
  o.num_warps = 1;
  std::string plain = codegen::compile(*k, o).ptx;
  o.int_arg_divisibility = {{"stride", 16}};
  std::string spec = codegen::compile(*k, o).ptx;
  INFO(plain << "\n----\n" << spec);
  // Unspecialized, each 16-byte chunk checks its alignment at run time (a vector and a
  // scalar path); specialized, only the vector path is left.
  // (x is read-only, so its loads take the non-coherent path: ld.global.nc.)
  auto scalar16 = [&](const std::string& ptx) {
    return count(ptx, "ld.global.nc.b16") + count(ptx, "ld.global.nc.u16") + count(ptx, "ld.global.b16") +
           count(ptx, "ld.global.u16");
  };
  CHECK(count(spec, "ld.global.nc.v4") + count(spec, "ld.global.v4") >= 1);
  CHECK(scalar16(spec) == 0);
  CHECK(scalar16(plain) >= 8);
  CHECK(launch::specialize(*k, {launch::Arg(), launch::Arg(), launch::Arg::of_int(128)}).divisibility ==
        std::map<std::string, int64_t>{{"stride", 16}});
  CHECK(launch::specialize(*k, {launch::Arg(), launch::Arg(), launch::Arg::of_int(100)}).divisibility.empty());
}

TEST_CASE("launches specialize on the stride they pass and stay correct either way", "[codegen][specialize][emulator]") {
  ir::Kernel k = strided_copy();
  for (int64_t stride : {64, 100, 128}) {
    INFO("stride " << stride);
    launch::Buffer x("x", DType::f16, size_t(4 * stride)), want("out", DType::f16, 256), got("out", DType::f16, 256);
    for (size_t i = 0; i < x.count(); ++i) x.set(i, double(i % 97) / 8);
    auto args = [&](launch::Buffer& o) {
      return std::vector<launch::Arg>{launch::Arg::of(x), launch::Arg::of(o), launch::Arg::of_int(stride)};
    };
    interp::make_interpret_launcher()->launch(k, 1, {1, 1, 1}, args(want));
    backends::make_emulate_launcher()->launch(k, 1, {1, 1, 1}, args(got));
    CHECK(got.bytes == want.bytes);
  }
}

TEST_CASE("a module compiled for a divisible argument records it and refuses other values", "[codegen][specialize]") {
  rt::test::TempDir dir;
  ir::Kernel k = strided_copy();
  codegen::CompileOptions o;
  o.target = codegen::Target::emu;
  o.num_warps = 1;
  o.int_arg_divisibility = {{"stride", 16}};
  rt::Manifest m = codegen::write_module(*k, codegen::compile(*k, o), o, {}, dir.path, "strided_copy");
  CHECK(rt::read_manifest(dir.path / "strided_copy.toml").divisibility == std::map<std::string, std::int64_t>{{"stride", 16}});
  rt::EmuModule mod(m);
  std::vector<std::uint16_t> x(4 * 100), out(256);
  std::vector<rt::Arg> good = {buf(x), buf(out), std::int32_t{64}};
  CHECK_NOTHROW(mod.launch({1, 1, 1}, good));
  std::vector<rt::Arg> bad = {buf(x), buf(out), std::int32_t{100}};
  CHECK_THROWS_WITH(mod.launch({1, 1, 1}, bad), Catch::Contains("parameter 'stride' = 100"));
}

TEST_CASE("pointer parameters: read-only ones are marked so, every one noalias, and manifests say which", "[codegen][specialize]") {
  ir::Kernel k = strided_copy();
  std::vector<ir::ParamAccess> access = ir::param_access(*k);
  CHECK(access == std::vector<ir::ParamAccess>{ir::ParamAccess::read, ir::ParamAccess::write, ir::ParamAccess::none});
  codegen::CompileOptions o;
  o.num_warps = 1;
  codegen::LoweredKernel l = codegen::lower_to_llvm(*k, o);
  INFO(l.llvm_ir);
  CHECK(l.llvm_ir.find("noalias readonly") != std::string::npos);
  codegen::CompiledKernel ck = codegen::compile(*k, o);
  CHECK(ck.ptx.find("ld.global.nc") != std::string::npos); // the read-only data path
  rt::test::TempDir dir;
  rt::Manifest m = codegen::write_module(*k, ck, o, {}, dir.path, "strided_copy");
  rt::Manifest back = rt::read_manifest(dir.path / "strided_copy.toml");
  REQUIRE(back.params.size() == 3);
  CHECK(back.params[0].read_only);
  CHECK_FALSE(back.params[1].read_only);
}

TEST_CASE("a kernel needing more shared memory than the arch has is an error with the numbers", "[codegen][limits]") {
  KernelBuilder kb("big_transpose");
  auto x = kb.arg(ptr_to(DType::f32), "x");
  auto out = kb.arg(ptr_to(DType::f32), "out");
  auto r = arange(0, 256), c = arange(0, 256);
  store(out + r.col() * 256 + c.row(), trans(load(x + r.col() * 256 + c.row())));
  ir::Kernel k = kb.finish();
  codegen::CompileOptions o;
  o.arch = "sm_86";
  o.num_warps = 8;
  o.run_ptxas = false;
  CHECK_THROWS_WITH(codegen::compile(*k, o), Catch::Contains("kernel 'big_transpose' needs") &&
                                                Catch::Contains("bytes of shared memory per block; sm_86 allows at most 101376"));
  o.target = codegen::Target::emu; // the emulator has no such limit
  CHECK_NOTHROW(codegen::compile(*k, o));
}

namespace {

// strided_copy with the stride promised a multiple of 8 in the kernel itself.
ir::Kernel strided_copy_promised() {
  KernelBuilder kb("strided_copy");
  auto x = kb.arg(ptr_to(DType::f16), "x");
  auto out = kb.arg(ptr_to(DType::f16), "out");
  auto stride = multiple_of(kb.arg(ElemType{DType::i32, false}, "stride"), 8);
  auto r = arange(0, 4), c = arange(0, 64);
  store(out + r.col() * 64 + c.row(), load(x + r.col() * stride + c.row()));
  return kb.finish();
}

} // namespace

TEST_CASE("multiple_of: a stride the kernel promises is a multiple of 8 gives vector loads, and is checked",
          "[codegen][specialize]") {
  ir::Kernel k = strided_copy_promised();
  std::string printed = ir::print(*k);
  INFO(printed);
  CHECK(printed.find("stride: i32 multiple_of 8") != std::string::npos);
  CHECK(ir::print(*ir::parse(printed)) == printed);
  codegen::CompileOptions o;
  o.num_warps = 1;
  std::string ptx = codegen::compile(*k, o).ptx;
  CHECK(count(ptx, "ld.global.nc.v4") >= 1);
  CHECK(count(ptx, "ld.global.nc.u16") + count(ptx, "ld.global.nc.b16") == 0);
  // Interpreter and emulator refuse an argument that breaks the promise, in the same words.
  launch::Buffer x("x", DType::f16, 4 * 100), out("out", DType::f16, 256);
  std::vector<launch::Arg> bad = {launch::Arg::of(x), launch::Arg::of(out), launch::Arg::of_int(100)};
  CHECK_THROWS_WITH(interp::make_interpret_launcher()->launch(k, 1, {1, 1, 1}, bad),
                    Catch::Contains("parameter 'stride' (i32) was given 100, not a multiple of 8"));
  CHECK_THROWS_WITH(backends::make_emulate_launcher()->launch(k, 1, {1, 1, 1}, bad),
                    Catch::Contains("parameter 'stride' (i32) was given 100, not a multiple of 8"));
  std::vector<launch::Arg> good = {launch::Arg::of(x), launch::Arg::of(out), launch::Arg::of_int(72)};
  CHECK_NOTHROW(backends::make_emulate_launcher()->launch(k, 1, {1, 1, 1}, good));
  // The DSL refuses a promise on anything but an integer parameter.
  KernelBuilder kb("bad_promise");
  auto f = kb.arg(ptr_to(DType::f32), "f");
  CHECK_THROWS_WITH(multiple_of(f, 16), Catch::Contains("needs an integer scalar parameter"));
  auto n = kb.arg(ElemType{DType::i32, false}, "n");
  CHECK_THROWS_WITH(multiple_of(n, 12), Catch::Contains("12 is not a power of two"));
  CHECK_THROWS_WITH(multiple_of(n + 1, 16), Catch::Contains("only a kernel parameter"));
}


TEST_CASE("an integer argument equal to 1 is compiled in: a unit column stride gives vector loads",
          "[codegen][specialize]") {
  ir::Kernel k = column_strided_copy();
  CHECK(launch::specialize(*k, {launch::Arg(), launch::Arg(), launch::Arg::of_int(1)}).values ==
        std::map<std::string, int64_t>{{"cstride", 1}});
  CHECK(launch::specialize(*k, {launch::Arg(), launch::Arg(), launch::Arg::of_int(2)}).values.empty());
  codegen::CompileOptions o;
  o.num_warps = 1;
  std::string plain = codegen::compile(*k, o).ptx;
  o.int_arg_values = {{"cstride", 1}};
  std::string spec = codegen::compile(*k, o).ptx;
  INFO(plain << "\n----\n" << spec);
  CHECK(count(spec, "ld.global.nc.v4") >= 1);
  CHECK(count(spec, "ld.global.nc.u16") + count(spec, "ld.global.nc.b16") == 0);
  CHECK(count(plain, "ld.global.nc.v4") == 0);
  CHECK(count(plain, "ld.global.nc.u16") + count(plain, "ld.global.nc.b16") >= 8);

  // Launches specialize on it and stay correct for any stride.
  for (int64_t cs : {1, 2, 3}) {
    INFO("cstride " << cs);
    launch::Buffer x("x", DType::f16, size_t(4 * 64 * 3)), want("out", DType::f16, 256), got("out", DType::f16, 256);
    for (size_t i = 0; i < x.count(); ++i) x.set(i, double(i % 89) / 4);
    auto args = [&](launch::Buffer& out) {
      return std::vector<launch::Arg>{launch::Arg::of(x), launch::Arg::of(out), launch::Arg::of_int(cs)};
    };
    interp::make_interpret_launcher()->launch(k, 1, {1, 1, 1}, args(want));
    for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
      got.bytes.assign(got.bytes.size(), std::byte{0});
      backends::make_emulate_launcher(lowering)->launch(k, 1, {1, 1, 1}, args(got));
      CHECK(got.bytes == want.bytes);
    }
  }

  // The module records the value and its launch refuses another.
  rt::test::TempDir dir;
  o.target = codegen::Target::emu;
  rt::Manifest m = codegen::write_module(*k, codegen::compile(*k, o), o, {}, dir.path, "column_strided_copy");
  CHECK(rt::read_manifest(dir.path / "column_strided_copy.toml").fixed ==
        std::map<std::string, std::int64_t>{{"cstride", 1}});
  rt::EmuModule mod(m);
  std::vector<std::uint16_t> x(4 * 64 * 2), out(256);
  std::vector<rt::Arg> one = {buf(x), buf(out), std::int32_t{1}}, two = {buf(x), buf(out), std::int32_t{2}};
  CHECK_NOTHROW(mod.launch({1, 1, 1}, one));
  CHECK_THROWS_WITH(mod.launch({1, 1, 1}, two),
                    Catch::Contains("parameter 'cstride' = 2: this module was compiled with it fixed at 1"));
}

TEST_CASE("a launch with zero programs is a no-op on every CPU backend, a negative grid is an error",
          "[codegen][emulator][launch]") {
  ir::Kernel k = strided_copy();
  launch::Buffer x("x", DType::f16, 4 * 64), out("out", DType::f16, 256);
  for (size_t i = 0; i < out.count(); ++i) out.set(i, 7.0);
  const launch::Buffer before = out;
  std::vector<launch::Arg> args = {launch::Arg::of(x), launch::Arg::of(out), launch::Arg::of_int(64)};
  for (launch::Grid g : {launch::Grid{0, 1, 1}, launch::Grid{3, 0, 1}, launch::Grid{1, 1, 0}}) {
    CHECK_NOTHROW(interp::make_interpret_launcher()->launch(k, 1, g, args));
    for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx})
      CHECK_NOTHROW(backends::make_emulate_launcher(lowering)->launch(k, 1, g, args));
    CHECK(out.bytes == before.bytes);
  }
  CHECK_THROWS_WITH(backends::make_emulate_launcher()->launch(k, 1, {-1, 1, 1}, args),
                    Catch::Contains("grid (-1, 1, 1) must be from 0"));
  // The runtime's module launch too (no block runs, nothing is counted).
  rt::test::TempDir dir;
  codegen::CompileOptions o;
  o.target = codegen::Target::emu;
  o.num_warps = 1;
  rt::EmuModule mod(codegen::write_module(*k, codegen::compile(*k, o), o, {}, dir.path, "strided_copy"));
  std::vector<std::uint16_t> xs(4 * 64), outs(256, 0x4700);
  std::vector<rt::Arg> rargs = {buf(xs), buf(outs), std::int32_t{64}};
  rt::EmuLaunchStats st = mod.launch({0, 1, 1}, rargs);
  CHECK(st.bytes_loaded == 0);
  CHECK(st.bytes_stored == 0);
  CHECK(outs == std::vector<std::uint16_t>(256, 0x4700));
}
