#include <catch2/catch.hpp>

#include <set>

#include "codegen/compile.h"
#include "fuzz/generator.h"
#include "ir/printer.h"
#include "ir/verifier.h"

using namespace tilec;
using namespace tilec::fuzz;

TEST_CASE("fuzz: one seed gives one program", "[fuzz]") {
  for (uint64_t seed : {1u, 2u, 77u, 12345u}) {
    std::string a = to_text(generate(seed)), b = to_text(generate(seed));
    CHECK(a == b);
  }
  CHECK(to_text(generate(1)) != to_text(generate(2)));
}

TEST_CASE("fuzz: every generated program verifies and round-trips through its text", "[fuzz]") {
  std::set<std::string> ops, dtypes;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    Program p = generate(seed);
    INFO("seed " << seed << "\n" << to_text(p));
    REQUIRE_NOTHROW(ir::verify(*p.kernel));
    Program q = from_text(to_text(p));
    CHECK(to_text(q) == to_text(p));
    CHECK(q.grid == p.grid);
    CHECK(q.num_warps == p.num_warps);
    ir::walk(p.kernel->body, [&](ir::Op& op) {
      ops.insert(std::string(ir::op_name(op.kind)));
      for (const ir::Value* v : op.results) dtypes.insert(std::string(ir::dtype_name(v->type.dtype())));
    });
  }
  // Every op the generator is meant to make shows up in a few hundred programs.
  for (ir::OpKind k : {ir::OpKind::Load, ir::OpKind::Store, ir::OpKind::AtomicAdd, ir::OpKind::Dot,
                       ir::OpKind::Reduce, ir::OpKind::For, ir::OpKind::If, ir::OpKind::Permute,
                       ir::OpKind::Reshape, ir::OpKind::Broadcast, ir::OpKind::ExpandDims, ir::OpKind::Splat,
                       ir::OpKind::Select, ir::OpKind::Cast, ir::OpKind::Exp, ir::OpKind::Exp2, ir::OpKind::Log,
                       ir::OpKind::Tanh, ir::OpKind::Sqrt, ir::OpKind::Rsqrt, ir::OpKind::Abs, ir::OpKind::Neg,
                       ir::OpKind::Div, ir::OpKind::Rem, ir::OpKind::Xor, ir::OpKind::Ge, ir::OpKind::NumPrograms,
                       ir::OpKind::Sin, ir::OpKind::Cos, ir::OpKind::Erf, ir::OpKind::Pow, ir::OpKind::Fma,
                       ir::OpKind::Shl, ir::OpKind::AShr, ir::OpKind::LShr, ir::OpKind::UMulHi, ir::OpKind::Scan})
    CHECK(ops.count(std::string(ir::op_name(k))));
  for (ir::DType t : ir::kAllDTypes) CHECK(dtypes.count(std::string(ir::dtype_name(t))));
}

TEST_CASE("fuzz: a program's text names its seed, grid and parameter values", "[fuzz]") {
  Program p = generate(5);
  std::string t = to_text(p);
  CHECK_THAT(t, Catch::StartsWith("// tilec fuzz program\n// seed 5\n"));
  CHECK_THROWS_WITH(from_text("kernel @k() {\n  return\n}\n", "x.tir"), Catch::Contains("x.tir"));
  CHECK_THROWS_WITH(from_text("// seed 1\n// grid 1 1 1\nkernel @k(%n: i32) {\n  return\n}\n", "y.tir"),
                    Catch::Contains("'n'"));
}

TEST_CASE("fuzz: the generator reaches tensor-core dots with asynchronous and TMA copies and pipelined loops", "[fuzz][pipeline]") {
  // Loops with num_stages > 1 whose dot operands are 16-byte loads: `tilec fuzz` runs them on
  // the emulator against the interpreter, so the pipeline's copies ahead are checked too.
  // And dots of a warpgroup's shape, which the emulator runs as sm_90's wgmma.
  // And descriptor loads, some of them TMA copies feeding wgmma.
  int async = 0, pipelined = 0, wgmma = 0, tma = 0, desc = 0;
  for (uint64_t seed = 1; seed <= 600; ++seed) {
    Program p = generate(seed);
    codegen::CompileOptions o;
    o.num_warps = p.num_warps;
    codegen::LoweredKernel k = codegen::lower_to_llvm(*p.kernel, o);
    async += k.llvm_ir.find("cp.async") != std::string::npos;
    pipelined += k.stats.pipelined_loops > 0;
    wgmma += k.stats.wgmma_dots > 0;
    tma += k.stats.tma_loads > 0;
    bool has_desc = false;
    ir::walk(p.kernel->body, [&](ir::Op& op) { has_desc = has_desc || op.kind == ir::OpKind::DescLoad; });
    desc += has_desc;
  }
  CHECK(async >= 6);
  CHECK(pipelined >= 3);
  INFO("generated programs with a warpgroup MMA: " << wgmma);
  CHECK(wgmma >= 3);
  INFO("generated programs with descriptor loads: " << desc << ", with TMA copies: " << tma);
  CHECK(desc >= 10);
  CHECK(tma >= 1);
}
