// The main loop `tilec compile` reports is one of the kernel's own loops: a kernel whose only
// loop in the PTX is libdevice's (sin/cos range reduction over a table in global memory)
// reports none, and a kernel with a K loop reports that one.
#include <catch2/catch.hpp>

#include "codegen/compile.h"
#include "codegen/ptx_loops.h"
#include "dsl/dsl.h"

using namespace tilec;
using namespace tilec::dsl;

namespace {

ir::Kernel rope_like() {
  KernelBuilder k("rope_like");
  auto x = k.arg<Ptr<f32>>("x"), out = k.arg<Ptr<f32>>("out");
  auto offs = program_id(0) * 128 + arange(0, 128);
  auto v = load(x + offs);
  store(out + offs, sin(v) * cos(v));
  return k.finish();
}

ir::Kernel sum_rows() {
  KernelBuilder m("sum_rows");
  auto a = m.arg<Ptr<f32>>("a"), o2 = m.arg<Ptr<f32>>("o");
  auto n = m.arg<i32>("n");
  Var acc = zeros({64});
  for_range(0, n, 1, [&](Scalar i) { acc = acc + load(a + i * 64 + arange(0, 64)); });
  store(o2 + arange(0, 64), acc);
  return m.finish();
}

} // namespace

TEST_CASE("the main loop is the kernel's own, not libdevice's", "[codegen][loops]") {
  ir::Kernel fn = rope_like();
  codegen::CompileOptions o;
  o.run_ptxas = false;
  codegen::CompiledKernel ck = codegen::compile(*fn, o);
  // libdevice brings a loop that reads global memory (so main_loop alone would pick it)...
  std::vector<codegen::PtxLoop> loops = codegen::ptx_loops(ck.ptx);
  REQUIRE(codegen::main_loop(loops) != nullptr);
  // ...but the kernel has no loop of its own.
  CHECK_FALSE(codegen::kernel_main_loop(*fn, ck.ptx).has_value());

  ir::Kernel sum = sum_rows();
  codegen::CompiledKernel cs = codegen::compile(*sum, o);
  std::optional<codegen::PtxLoop> l = codegen::kernel_main_loop(*sum, cs.ptx);
  REQUIRE(l.has_value());
  CHECK(l->count("ld.global") > 0);
}
