// Kernels that exercise layouts and control flow: views (broadcast,
// expand_dims, permute, reshape), atomics, scalars, loops with carried
// values, nested if, dot at several shapes.
#include "tests/codegen/codegen_test_util.h"
#include "tests/codegen/emu_harness.h"

using namespace tilec;
using namespace tilec::codegen;
using namespace tilec::codegen::test;
using ir::DType;
using ir::OpKind;

namespace {

ir::Value* offsets2d(ir::Builder& b, int64_t rows, int64_t cols, int64_t row_stride) {
  ir::Shape s{rows, cols};
  auto* r = b.broadcast(b.expand_dims(b.arange(0, rows), 1), s);
  auto* c = b.broadcast(b.expand_dims(b.arange(0, cols), 0), s);
  return b.binary(OpKind::Add, b.binary(OpKind::Mul, r, splat_i32(b, row_stride, s)), c);
}

// out = x^T + reshape(x), a [rows, cols] tile; exercises permute and a
// reshape that moves elements between threads.
ir::Kernel transpose_kernel(int64_t n) {
  auto fn = std::make_shared<ir::Function>("transpose_reshape");
  ir::Builder b(*fn);
  auto* x = fn->add_param("x", ptr_type(DType::f32));
  auto* out = fn->add_param("out", ptr_type(DType::f32));
  auto* offs = offsets2d(b, n, n, n);
  ir::Shape s{n, n};
  auto* v = b.load(b.addptr(b.splat(x, s), offs));
  auto* t = b.permute(v, {1, 0});
  auto* r = b.reshape(b.reshape(v, {n * n}), {n / 2, n * 2});
  auto* r2 = b.reshape(r, {n, n});
  b.store(b.addptr(b.splat(out, s), offs), b.binary(OpKind::Add, t, r2));
  b.ret();
  return fn;
}

// A histogram-like kernel: atomics on f32 and i32 with a ragged mask, and a
// scalar atomic whose old value is used. The data is read from x[16:], the histogram
// accumulates in x[0:16]: no program reads what another's atomics change.
ir::Kernel atomic_kernel() {
  auto fn = std::make_shared<ir::Function>("atomics");
  ir::Builder b(*fn);
  auto* x = fn->add_param("x", ptr_type(DType::f32));
  auto* counts = fn->add_param("counts", ptr_type(DType::i32));
  auto* out = fn->add_param("out", ptr_type(DType::i32));
  auto* n = fn->add_param("n", ir::scalar_type(DType::i32));
  const int64_t blk = 256;
  auto* offs = b.binary(OpKind::Add, b.splat(b.binary(OpKind::Mul, b.program_id(0), i32c(b, blk)), {blk}), b.arange(0, blk));
  auto* mask = b.binary(OpKind::Lt, offs, b.splat(n, {blk}));
  auto* v = b.load(b.addptr(b.splat(x, {blk}), b.binary(OpKind::Add, offs, splat_i32(b, 16, {blk}))), mask);
  auto* bucket = b.binary(OpKind::Rem, b.cast(v, DType::i32), splat_i32(b, 16, {blk}));
  b.atomic_add(b.addptr(b.splat(x, {blk}), bucket), v, mask);
  auto* old = b.atomic_add(b.addptr(b.splat(counts, {blk}), bucket), splat_i32(b, 1, {blk}), mask);
  b.store(b.addptr(b.splat(out, {blk}), offs), old, mask);
  // scalar: a ticket per program; small replicated tile: [4]
  auto* ticket = b.atomic_add(counts, i32c(b, 1));
  b.store(b.addptr(out, b.program_id(0)), ticket);
  auto* four = b.arange(0, 4);
  auto* old4 = b.atomic_add(b.addptr(b.splat(counts, {4}), four), splat_i32(b, 2, {4}));
  b.store(b.addptr(b.splat(out, {4}), b.binary(OpKind::Add, four, splat_i32(b, 8, {4}))), old4);
  b.ret();
  return fn;
}

// Nested control flow: for (i < n) { s += x[i] (scalar); acc += tile;
// if (i % 2 == 0) { if (s > 0) acc *= 2 else acc -= 1 } }; scalar
// program ids over three axes.
ir::Kernel control_flow_kernel() {
  auto fn = std::make_shared<ir::Function>("control_flow");
  ir::Builder b(*fn);
  auto* x = fn->add_param("x", ptr_type(DType::f32));
  auto* out = fn->add_param("out", ptr_type(DType::f32));
  auto* n = fn->add_param("n", ir::scalar_type(DType::i32));
  const int64_t blk = 128;
  ir::Shape s{blk};
  auto* pid = b.binary(OpKind::Add, b.program_id(0),
                       b.binary(OpKind::Mul, b.program_id(1), b.binary(OpKind::Add, b.num_programs(0), b.program_id(2))));
  auto* offs = b.binary(OpKind::Add, b.splat(b.binary(OpKind::Mul, pid, i32c(b, blk)), s), b.arange(0, blk));
  auto* zero_s = b.constant(ir::scalar_type(DType::f32), ir::ConstValue::of_float(0));
  auto* zero_t = b.constant(ir::tile_type(DType::f32, s), ir::ConstValue::of_float(0));
  ir::Op* loop = b.for_op(i32c(b, 0), n, i32c(b, 1), {zero_s, zero_t});
  ir::Block* outer = b.block();
  ir::Block& body = loop->region(0);
  b.set_block(&body);
  {
    ir::Value* i = body.args[0];
    auto* xs = b.load(b.addptr(x, i));
    auto* s1 = b.binary(OpKind::Add, body.args[1], xs);
    auto* tile = b.load(b.addptr(b.splat(x, s), b.binary(OpKind::Add, offs, b.splat(i, s))));
    auto* acc = b.binary(OpKind::Add, body.args[2], tile);
    auto* even = b.binary(OpKind::Eq, b.binary(OpKind::Rem, i, i32c(b, 2)), i32c(b, 0));
    ir::Op* if1 = b.if_op(even, {acc->type});
    ir::Block* in_loop = b.block();
    b.set_block(&if1->region(0));
    {
      auto* pos = b.binary(OpKind::Gt, s1, zero_s);
      ir::Op* if2 = b.if_op(pos, {acc->type});
      ir::Block* in_then = b.block();
      b.set_block(&if2->region(0));
      b.yield({b.binary(OpKind::Mul, acc, b.constant(acc->type, ir::ConstValue::of_float(2)))});
      b.set_block(&if2->region(1));
      b.yield({b.binary(OpKind::Sub, acc, b.constant(acc->type, ir::ConstValue::of_float(1)))});
      b.check(*if2);
      b.set_block(in_then);
      b.yield({if2->results[0]});
    }
    b.set_block(&if1->region(1));
    b.yield({acc});
    b.check(*if1);
    b.set_block(in_loop);
    b.yield({s1, if1->results[0]});
  }
  b.check(*loop);
  b.set_block(outer);
  auto* res = b.binary(OpKind::Add, loop->results[1], b.splat(loop->results[0], s));
  b.store(b.addptr(b.splat(out, s), offs), res);
  b.ret();
  return fn;
}

// out = a[m, k] . b[k, n] + c, one program, dtype `t`.
ir::Kernel dot_kernel(int64_t m, int64_t n, int64_t k, DType t) {
  auto fn = std::make_shared<ir::Function>(fmt::format("dot_{}x{}x{}_{}", m, n, k, ir::dtype_name(t)));
  ir::Builder b(*fn);
  auto* a = fn->add_param("a", ptr_type(t));
  auto* bp = fn->add_param("b", ptr_type(t));
  auto* c = fn->add_param("c", ptr_type(DType::f32));
  auto* av = b.load(b.addptr(b.splat(a, {m, k}), offsets2d(b, m, k, k)));
  auto* bv = b.load(b.addptr(b.splat(bp, {k, n}), offsets2d(b, k, n, n)));
  auto* cp = b.addptr(b.splat(c, {m, n}), offsets2d(b, m, n, n));
  b.store(cp, b.dot(av, bv, b.load(cp)));
  b.ret();
  return fn;
}

} // namespace

TEST_CASE("views: permute and element-moving reshape", "[codegen]") {
  for (auto& [arch, k] : compile_all_archs(*transpose_kernel(32))) {
    INFO(arch);
    CHECK(k.stats.conversions >= 1);
    CHECK(k.shared_bytes > 0);
  }
}

TEST_CASE("atomics, scalar and replicated", "[codegen]") {
  for (auto& [arch, k] : compile_all_archs(*atomic_kernel())) {
    INFO(arch << "\n" << k.ptx);
    CHECK(count_matches(k.ptx, R"(atom\.global\.add\.f32)") >= 1);
    CHECK(count_matches(k.ptx, R"(atom\.global\.add\.u32|atom\.global\.add\.s32)") >= 1);
  }
}

TEST_CASE("loops with carried scalars and tiles, nested if", "[codegen]") {
  for (auto& [arch, k] : compile_all_archs(*control_flow_kernel())) {
    INFO(arch << "\n" << k.ptx);
    CHECK(k.stats.conversions == 0);
  }
}

TEST_CASE("dot at several shapes and dtypes", "[codegen]") {
  struct S {
    int64_t m, n, k;
  };
  for (S s : {S{16, 16, 16}, S{32, 64, 32}, S{64, 32, 8}, S{8, 64, 32}, S{128, 64, 16}, S{2, 16, 64}}) {
    for (DType t : {DType::f32, DType::f16, DType::bf16}) {
      auto fn = dot_kernel(s.m, s.n, s.k, t);
      INFO(fn->name);
      compile_all_archs(*fn);
    }
  }
}

TEST_CASE("structure kernels agree with the interpreter when emulated", "[codegen][emu]") {
  using launch::Arg;
  using launch::Buffer;
  {
    std::vector<Buffer> bufs{{"x", DType::f32, 32 * 32}, {"out", DType::f32, 32 * 32}};
    fill_random(bufs[0], 21, -1, 1);
    check_against_interpreter(*transpose_kernel(32), {1, 1, 1}, bufs, [&](std::vector<Buffer>& b) {
      return std::vector<Arg>{Arg::of(b[0]), Arg::of(b[1])};
    }, 0);
  }
  {
    const int64_t n = 700;
    std::vector<Buffer> bufs{{"x", DType::f32, n + 16}, {"counts", DType::i32, 64}, {"out", DType::i32, 1024}};
    fill_random(bufs[0], 22, 0, 50);
    // Old values depend on the order of the atomics: compare the totals only.
    check_against_interpreter(*atomic_kernel(), {3, 1, 1}, bufs, [&](std::vector<Buffer>& b) {
      return std::vector<Arg>{Arg::of(b[0]), Arg::of(b[1]), Arg::of(b[2]), Arg::of_int(n)};
    }, 1e-4, 4, {2});
  }
  {
    const int64_t n = 5;
    std::vector<Buffer> bufs{{"x", DType::f32, 4 * 128 + n + 8}, {"out", DType::f32, 4 * 128}};
    fill_random(bufs[0], 23, -1, 1);
    check_against_interpreter(*control_flow_kernel(), {2, 2, 1}, bufs, [&](std::vector<Buffer>& b) {
      return std::vector<Arg>{Arg::of(b[0]), Arg::of(b[1]), Arg::of_int(n)};
    }, 1e-5);
  }
  struct S {
    int64_t m, n, k;
  };
  for (S s : {S{16, 16, 16}, S{32, 64, 32}, S{64, 32, 8}, S{8, 64, 32}, S{2, 16, 64}}) {
    for (DType t : {DType::f32, DType::bf16}) {
      std::vector<Buffer> bufs{{"a", t, size_t(s.m * s.k)}, {"b", t, size_t(s.k * s.n)}, {"c", DType::f32, size_t(s.m * s.n)}};
      fill_random(bufs[0], 24, -1, 1);
      fill_random(bufs[1], 25, -1, 1);
      fill_random(bufs[2], 26, -1, 1);
      check_against_interpreter(*dot_kernel(s.m, s.n, s.k, t), {1, 1, 1}, bufs, [&](std::vector<Buffer>& b) {
        return std::vector<Arg>{Arg::of(b[0]), Arg::of(b[1]), Arg::of(b[2])};
      }, 1e-4);
    }
  }
}

TEST_CASE("the register ceiling: min_blocks_per_sm, max_registers and the compile's own, the lowest holds",
          "[codegen][registers]") {
  auto maxnreg = [](int min_blocks, int kernel_max, int option_max) {
    ir::Kernel k = transpose_kernel(16);
    k->min_blocks_per_sm = min_blocks;
    k->max_registers = kernel_max;
    CompileOptions o;
    o.run_ptxas = false;
    o.max_registers = option_max;
    const std::string ptx = compile(*k, o).ptx;
    const size_t at = ptx.find(".maxnreg ");
    REQUIRE(at != std::string::npos);
    return std::stoi(ptx.substr(at + 9));
  };
  CHECK(maxnreg(0, 0, 0) == 255);     // every register one block of 128 threads can have
  CHECK(maxnreg(4, 0, 0) == 128);     // 64 K / (4 x 128)
  CHECK(maxnreg(4, 96, 0) == 96);     // the kernel's ceiling, lower
  CHECK(maxnreg(4, 200, 0) == 128);   // ... or not
  CHECK(maxnreg(0, 72, 0) == 72);
  CHECK(maxnreg(4, 96, 160) == 160);  // the compile's ceiling replaces the kernel's asks
  CHECK(maxnreg(0, 96, 40) == 40);
  ir::Kernel k = transpose_kernel(16);
  CompileOptions o;
  o.max_registers = 300;
  CHECK_THROWS_WITH(compile(*k, o), Catch::Contains("max_registers 300 must be from 24 to 255"));
}
