// Whole kernels through the GPU pipeline: vector add, row softmax, tiled matmul.
#include "tests/codegen/codegen_test_util.h"
#include "tests/codegen/emu_harness.h"

using namespace tilec;
using namespace tilec::codegen;
using namespace tilec::codegen::test;
using ir::DType;
using ir::OpKind;

namespace {

// out[i] = x[i] + y[i] for i < n, `block` elements per program.
ir::Kernel vector_add(int64_t block, DType dt = DType::f32) {
  auto fn = std::make_shared<ir::Function>("vector_add");
  ir::Builder b(*fn);
  auto* x = fn->add_param("x", ptr_type(dt));
  auto* y = fn->add_param("y", ptr_type(dt));
  auto* out = fn->add_param("out", ptr_type(dt));
  auto* n = fn->add_param("n", ir::scalar_type(DType::i32));
  auto* offs = b.binary(OpKind::Add, b.splat(b.binary(OpKind::Mul, b.program_id(0), i32c(b, block)), {block}),
                        b.arange(0, block));
  auto* mask = b.binary(OpKind::Lt, offs, b.splat(n, {block}));
  auto ptr = [&](ir::Value* p) { return b.addptr(b.splat(p, {block}), offs); };
  auto* sum = b.binary(OpKind::Add, b.load(ptr(x), mask), b.load(ptr(y), mask));
  b.store(ptr(out), sum, mask);
  b.ret();
  return fn;
}

// One row per warp: rows [num_warps, cols]; out = softmax(x) along each row.
ir::Kernel row_softmax(int64_t rows, int64_t cols) {
  auto fn = std::make_shared<ir::Function>("row_softmax");
  ir::Builder b(*fn);
  auto* x = fn->add_param("x", ptr_type(DType::f32));
  auto* out = fn->add_param("out", ptr_type(DType::f32));
  auto* n_rows = fn->add_param("n_rows", ir::scalar_type(DType::i32));
  auto* row0 = b.binary(OpKind::Mul, b.program_id(0), i32c(b, rows));
  auto* r = b.binary(OpKind::Add, b.splat(row0, {rows}), b.arange(0, rows));
  auto* r2 = b.broadcast(b.expand_dims(r, 1), {rows, cols});
  auto* c2 = b.broadcast(b.expand_dims(b.arange(0, cols), 0), {rows, cols});
  auto* offs = b.binary(OpKind::Add, b.binary(OpKind::Mul, r2, splat_i32(b, cols, {rows, cols})), c2);
  auto* mask = b.binary(OpKind::Lt, r2, b.splat(n_rows, {rows, cols}));
  auto* v = b.load(b.addptr(b.splat(x, {rows, cols}), offs), mask);
  auto* m = b.reduce(ir::ReduceKind::max, v, 1);
  auto* e = b.unary(OpKind::Exp, b.binary(OpKind::Sub, v, b.broadcast(b.expand_dims(m, 1), {rows, cols})));
  auto* s = b.reduce(ir::ReduceKind::sum, e, 1);
  auto* p = b.binary(OpKind::Div, e, b.broadcast(b.expand_dims(s, 1), {rows, cols}));
  b.store(b.addptr(b.splat(out, {rows, cols}), offs), p, mask);
  b.ret();
  return fn;
}

} // namespace

TEST_CASE("vector add compiles to coalesced 16-byte accesses", "[codegen]") {
  auto fn = vector_add(1024);
  for (auto& [arch, k] : compile_all_archs(*fn)) {
    INFO(arch << "\n" << k.ptx);
    CHECK(count_matches(k.ptx, R"(ld\.global(\.nc)?\.v4\.f32)") >= 2);
    CHECK(count_matches(k.ptx, R"(st\.global\.v4\.f32)") >= 1);
    CHECK(count_matches(k.ptx, R"(bar\.sync)") == 0);
    CHECK(k.stats.conversions == 0);
    CHECK(k.shared_bytes == 0);
  }
}

TEST_CASE("row softmax with one warp per row stays in registers", "[codegen]") {
  auto fn = row_softmax(4, 256);
  for (auto& [arch, k] : compile_all_archs(*fn)) {
    INFO(arch << "\n" << k.ptx);
    CHECK(count_matches(k.ptx, R"(ld\.global(\.nc)?\.v4\.f32)") >= 1);
    CHECK(count_matches(k.ptx, R"(bar\.sync)") == 0);
    CHECK(count_matches(k.ptx, R"(shfl\.sync\.bfly)") >= 10);
    CHECK(k.stats.conversions == 0);
    CHECK(k.stats.barriers == 0);
  }
}

namespace {

// C[M, N] = A[M, K] . B[K, N], row-major with constant strides; one
// [bm, bn] tile per program, a loop over K in steps of bk carrying the
// accumulator.
ir::Kernel tiled_matmul(int64_t m, int64_t n, int64_t k, int64_t bm, int64_t bn, int64_t bk,
                        DType dt = DType::f32) {
  auto fn = std::make_shared<ir::Function>("matmul");
  ir::Builder b(*fn);
  auto* a = fn->add_param("a", ptr_type(dt));
  auto* bp = fn->add_param("b", ptr_type(dt));
  auto* c = fn->add_param("c", ptr_type(DType::f32));
  auto* kdim = fn->add_param("k", ir::scalar_type(DType::i32));
  (void)m;
  auto* rm = b.binary(OpKind::Add, b.splat(b.binary(OpKind::Mul, b.program_id(0), i32c(b, bm)), {bm}), b.arange(0, bm));
  auto* rn = b.binary(OpKind::Add, b.splat(b.binary(OpKind::Mul, b.program_id(1), i32c(b, bn)), {bn}), b.arange(0, bn));
  auto* rk = b.arange(0, bk);
  auto col = [&](ir::Value* v, int64_t other) {
    return b.broadcast(b.expand_dims(v, 1), {v->type.shape[0], other});
  };
  auto row = [&](ir::Value* v, int64_t other) {
    return b.broadcast(b.expand_dims(v, 0), {other, v->type.shape[0]});
  };
  auto* a_offs = b.binary(OpKind::Add, b.binary(OpKind::Mul, col(rm, bk), splat_i32(b, k, {bm, bk})), row(rk, bm));
  auto* b_offs = b.binary(OpKind::Add, b.binary(OpKind::Mul, col(rk, bn), splat_i32(b, n, {bk, bn})), row(rn, bk));
  auto* zero = b.constant(ir::tile_type(DType::f32, {bm, bn}), ir::ConstValue::of_float(0.0));
  ir::Op* loop = b.for_op(i32c(b, 0), kdim, i32c(b, bk), {zero});
  ir::Block* outer = b.block();
  b.set_block(&loop->region(0));
  {
    ir::Value* kk = loop->region(0).args[0];
    ir::Value* acc = loop->region(0).args[1];
    auto* at = b.load(b.addptr(b.splat(a, {bm, bk}), b.binary(OpKind::Add, a_offs, b.splat(kk, {bm, bk}))));
    auto* koff = b.binary(OpKind::Mul, kk, i32c(b, n));
    auto* bt = b.load(b.addptr(b.splat(bp, {bk, bn}), b.binary(OpKind::Add, b_offs, b.splat(koff, {bk, bn}))));
    b.yield({b.dot(at, bt, acc)});
  }
  b.check(*loop);
  b.set_block(outer);
  auto* c_offs = b.binary(OpKind::Add, b.binary(OpKind::Mul, col(rm, bn), splat_i32(b, n, {bm, bn})), row(rn, bm));
  b.store(b.addptr(b.splat(c, {bm, bn}), c_offs), loop->results[0]);
  b.ret();
  return fn;
}

} // namespace

TEST_CASE("tiled matmul with a K loop and dot", "[codegen]") {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    auto fn = tiled_matmul(256, 256, 256, 64, 64, 16, dt);
    for (auto& [arch, k] : compile_all_archs(*fn)) {
      INFO(arch << " " << ir::dtype_name(dt) << "\n" << k.ptx);
      if (dt == DType::f32) { // CUDA cores
        CHECK(count_matches(k.ptx, R"(fma\.rn\.f32)") >= 32);
        CHECK(count_matches(k.ptx, R"(mma\.sync)") == 0);
      } else if (arch == "sm_90") { // a warpgroup: one m64n64k16 per k step of 16, A k-major, B N-major
        std::string t = dt == DType::f16 ? "f16" : "bf16";
        CHECK(count_matches(k.ptx, "wgmma\\.mma_async\\.sync\\.aligned\\.m64n64k16\\.f32\\." + t + "\\." + t) == 1);
        CHECK(count_matches(k.ptx, R"(, 1, 1, 1, 0, 1;)") == 1); // scale-d; B N-major (imm-trans-b)
        CHECK(count_matches(k.ptx, R"(fma\.rn\.f32)") == 0);
      } else { // tensor cores: 32 tiles of 16x8 over 4 warps, 8 each
        std::string t = dt == DType::f16 ? "f16" : "bf16";
        CHECK(count_matches(k.ptx, "mma\\.sync\\.aligned\\.m16n8k16\\.row\\.col\\.f32\\." + t + "\\." + t + "\\.f32") >= 8);
        CHECK(count_matches(k.ptx, R"(fma\.rn\.f32)") == 0);
      }
      // The tensor-core accumulator stays in its MMA layout through the loop and is stored
      // from it (two f32 a lane, four lanes a 32-byte sector of a row): no conversion.
      CHECK(k.stats.conversions == 0);
      if (dt != DType::f32) CHECK(count_matches(k.ptx, R"(st\.global\.v2\.f32)") > 0);
      CHECK(k.shared_bytes > 0);
      if (k.ptxas) WARN("matmul " << ir::dtype_name(dt) << " " << arch << ": " << k.ptxas->registers << " registers");
    }
  }
}

TEST_CASE("vector add, softmax and matmul agree with the interpreter when emulated", "[codegen][emu]") {
  using launch::Arg;
  using launch::Buffer;
  {
    const int64_t n = 1000;
    std::vector<Buffer> bufs{{"x", DType::f32, n}, {"y", DType::f32, n}, {"out", DType::f32, n}};
    fill_random(bufs[0], 1, -10, 10);
    fill_random(bufs[1], 2, -10, 10);
    check_against_interpreter(*vector_add(256), {4, 1, 1}, bufs, [&](std::vector<Buffer>& b) {
      return std::vector<Arg>{Arg::of(b[0]), Arg::of(b[1]), Arg::of(b[2]), Arg::of_int(n)};
    }, 0);
  }
  {
    const int64_t rows = 10, cols = 256;
    std::vector<Buffer> bufs{{"x", DType::f32, rows * cols}, {"out", DType::f32, rows * cols}};
    fill_random(bufs[0], 3, -5, 5);
    check_against_interpreter(*row_softmax(4, cols), {3, 1, 1}, bufs, [&](std::vector<Buffer>& b) {
      return std::vector<Arg>{Arg::of(b[0]), Arg::of(b[1]), Arg::of_int(rows)};
    }, 1e-5);
  }
  for (DType dt : {DType::f32, DType::f16}) {
    const int64_t m = 128, n = 128, k = 64;
    std::vector<Buffer> bufs{{"a", dt, m * k}, {"b", dt, k * n}, {"c", DType::f32, m * n}};
    fill_random(bufs[0], 4, -1, 1);
    fill_random(bufs[1], 5, -1, 1);
    check_against_interpreter(*tiled_matmul(m, n, k, 64, 64, 16, dt), {2, 2, 1}, bufs, [&](std::vector<Buffer>& b) {
      return std::vector<Arg>{Arg::of(b[0]), Arg::of(b[1]), Arg::of(b[2]), Arg::of_int(k)};
    }, 1e-4);
  }
}

TEST_CASE("register use of the main kernels", "[codegen][report]") {
  if (!have_ptxas()) return;
  struct K {
    const char* what;
    ir::Kernel fn;
  };
  std::vector<K> ks;
  ks.push_back({"vector_add block 1024", vector_add(1024)});
  ks.push_back({"row_softmax 4x256", row_softmax(4, 256)});
  ks.push_back({"matmul 64x64x16 f32", tiled_matmul(256, 256, 256, 64, 64, 16)});
  ks.push_back({"matmul 64x64x16 f16", tiled_matmul(256, 256, 256, 64, 64, 16, DType::f16)});
  for (auto& k : ks)
    for (auto& [arch, c] : compile_all_archs(*k.fn))
      WARN(k.what << " " << arch << ": " << c.ptxas->registers << " registers, " << c.stats.barriers
                  << " barriers, " << c.stats.conversions << " conversions, " << c.shared_bytes
                  << " B shared, " << c.compile_ms << " ms");
}
