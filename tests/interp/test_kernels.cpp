// Whole kernels on the interpreter, each against a plain C++ loop.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/interp/helpers.h"

using namespace tilec;
using namespace tilec::interp;
using namespace tilec::launch;
using namespace tilec::interp::test;

namespace {

// out[i] = x[i] + y[i] for i < n, `block` lanes per program. Its loads carry
// the location k.cpp:12:5 and its store k.cpp:14:3.
void build_vector_add(KernelDef& k, int64_t block, bool masked) {
  auto& b = k.b;
  Value *x = k.ptr("x", DType::f32), *y = k.ptr("y", DType::f32), *out = k.ptr("out", DType::f32);
  Value* n = k.scalar("n", DType::i32);
  Value* offs =
      k.op_s(OpKind::Add, b.arange(0, block), k.op(OpKind::Mul, b.program_id(0), k.i32(block)));
  Value* mask = masked ? k.op_s(OpKind::Lt, offs, n) : nullptr;
  b.loc = {"k.cpp", 12, 5};
  Value* xv = b.load(k.at(x, offs), mask);
  Value* yv = b.load(k.at(y, offs), mask);
  Value* sum = k.op(OpKind::Add, xv, yv);
  b.loc = {"k.cpp", 14, 3};
  b.store(k.at(out, offs), sum, mask);
  b.ret();
}

struct VectorAddRun {
  Buffer x, y, out;
};

VectorAddRun run_vector_add(const ir::Function& fn, int64_t n, int64_t block, std::mt19937& rng) {
  VectorAddRun r{random_buffer("x", DType::f32, n, rng, -1, 1),
                 random_buffer("y", DType::f32, n, rng, -1, 1), Buffer("out", DType::f32, n)};
  interpret(fn, {(n + block - 1) / block, 1, 1},
            {Arg::of(r.x), Arg::of(r.y), Arg::of(r.out), Arg::of_int(n)});
  return r;
}

} // namespace

TEST_CASE("vector add with a ragged tail matches a C++ loop", "[interp]") {
  std::mt19937 rng(1);
  for (int64_t block : {16, 128, 1024}) {
    KernelDef k("vadd");
    build_vector_add(k, block, true);
    for (int trial = 0; trial < 5; ++trial) {
      int64_t n = std::uniform_int_distribution<int64_t>(1, 5000)(rng);
      if (n % block == 0) ++n;
      auto r = run_vector_add(k.fn, n, block, rng);
      for (int64_t i = 0; i < n; ++i)
        REQUIRE(r.out.get(i) == double(float(r.x.get(i)) + float(r.y.get(i))));
    }
  }
}

// Its speed is measured in bench/ (bench_interpreter), not asserted here.
TEST_CASE("a 1M-element vector add is exact", "[interp]") {
  KernelDef k("vadd");
  build_vector_add(k, 1024, true);
  std::mt19937 rng(2);
  int64_t n = 1 << 20;
  VectorAddRun r{random_buffer("x", DType::f32, n, rng, -1, 1),
                 random_buffer("y", DType::f32, n, rng, -1, 1), Buffer("out", DType::f32, n)};
  interpret(k.fn, {n / 1024, 1, 1}, {Arg::of(r.x), Arg::of(r.y), Arg::of(r.out), Arg::of_int(n)});
  for (int64_t i = 0; i < n; i += 4099)
    REQUIRE(r.out.get(i) == double(float(r.x.get(i)) + float(r.y.get(i))));
  CHECK(r.out.get(n - 1) == double(float(r.x.get(n - 1)) + float(r.y.get(n - 1))));
}

TEST_CASE("row softmax over rows of random length", "[interp]") {
  constexpr int64_t block = 128, rows = 9;
  KernelDef k("softmax");
  auto& b = k.b;
  Value *x = k.ptr("x", DType::f32), *out = k.ptr("out", DType::f32);
  Value* lens = k.ptr("lens", DType::i32);
  Value* row = b.program_id(0);
  Value* len = b.load(b.addptr(lens, row));
  Value* offs = k.op_s(OpKind::Add, b.arange(0, block), k.op(OpKind::Mul, row, k.i32(block)));
  Value* mask = k.op_s(OpKind::Lt, b.arange(0, block), len);
  Value* v = b.load(k.at(x, offs), mask, k.full({block}, DType::f32, -INFINITY));
  Value* e = b.unary(OpKind::Exp, k.op_s(OpKind::Sub, v, b.reduce(ir::ReduceKind::max, v, 0)));
  b.store(k.at(out, offs), k.op_s(OpKind::Div, e, b.reduce(ir::ReduceKind::sum, e, 0)), mask);
  b.ret();

  std::mt19937 rng(3);
  Buffer xb = random_buffer("x", DType::f32, rows * block, rng, -5, 5);
  Buffer lb("lens", DType::i32, rows), ob("out", DType::f32, rows * block);
  for (int64_t r = 0; r < rows; ++r)
    lb.set(r, std::uniform_int_distribution<int>(1, block - 1)(rng));
  for (int64_t i = 0; i < rows * block; ++i)
    ob.set(i, 42);
  interpret(k.fn, {rows, 1, 1}, {Arg::of(xb), Arg::of(ob), Arg::of(lb)});

  for (int64_t r = 0; r < rows; ++r) {
    int64_t len_r = lb.get_int(r);
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < len_r; ++j)
      mx = std::max(mx, xb.get(r * block + j));
    for (int64_t j = 0; j < len_r; ++j)
      sum += std::exp(xb.get(r * block + j) - mx);
    for (int64_t j = 0; j < block; ++j) {
      double got = ob.get(r * block + j);
      if (j < len_r)
        REQUIRE(got == Approx(std::exp(xb.get(r * block + j) - mx) / sum).epsilon(1e-5));
      else
        REQUIRE(got == 42); // masked lanes are not written
    }
  }
}

TEST_CASE("tiled matmul with a for loop, dot and ragged masks", "[interp]") {
  constexpr int64_t bm = 16, bn = 8, bk = 8;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    KernelDef k("matmul");
    auto& b = k.b;
    Value *pa = k.ptr("a", dt), *pb = k.ptr("b", dt), *pc = k.ptr("c", DType::f32);
    Value *m = k.scalar("m", DType::i32), *n = k.scalar("n", DType::i32),
          *kk = k.scalar("k", DType::i32);
    Value* rm = k.op_s(OpKind::Add, b.arange(0, bm), k.op(OpKind::Mul, b.program_id(0), k.i32(bm)));
    Value* rn = k.op_s(OpKind::Add, b.arange(0, bn), k.op(OpKind::Mul, b.program_id(1), k.i32(bn)));
    ir::Op* loop = b.for_op(k.i32(0), kk, k.i32(bk), {k.full({bm, bn}, DType::f32, 0)});
    b.set_block(&loop->region(0));
    Value* ka = k.op_s(OpKind::Add, b.arange(0, bk), loop->region(0).args[0]);
    Value* a_off = k.op(OpKind::Add, k.op_s(OpKind::Mul, k.col(rm, bk), kk), k.row(ka, bm));
    Value* a_mask = k.op(OpKind::And, k.op_s(OpKind::Lt, k.col(rm, bk), m),
                         k.op_s(OpKind::Lt, k.row(ka, bm), kk));
    Value* b_off = k.op(OpKind::Add, k.op_s(OpKind::Mul, k.col(ka, bn), n), k.row(rn, bk));
    Value* b_mask = k.op(OpKind::And, k.op_s(OpKind::Lt, k.col(ka, bn), kk),
                         k.op_s(OpKind::Lt, k.row(rn, bk), n));
    b.yield({b.dot(b.load(k.at(pa, a_off), a_mask), b.load(k.at(pb, b_off), b_mask),
                   loop->region(0).args[1])});
    b.check(*loop);
    b.set_block(&k.fn.body);
    Value* c_off = k.op(OpKind::Add, k.op_s(OpKind::Mul, k.col(rm, bn), n), k.row(rn, bm));
    Value* c_mask = k.op(OpKind::And, k.op_s(OpKind::Lt, k.col(rm, bn), m),
                         k.op_s(OpKind::Lt, k.row(rn, bm), n));
    b.store(k.at(pc, c_off), loop->results[0], c_mask);
    b.ret();

    std::mt19937 rng(4);
    for (int trial = 0; trial < 3; ++trial) {
      int64_t M = std::uniform_int_distribution<int64_t>(1, 40)(rng);
      int64_t N = std::uniform_int_distribution<int64_t>(1, 20)(rng);
      int64_t K = std::uniform_int_distribution<int64_t>(1, 30)(rng);
      Buffer A = random_buffer("a", dt, M * K, rng, -1, 1),
             B = random_buffer("b", dt, K * N, rng, -1, 1);
      Buffer C("c", DType::f32, M * N);
      interpret(
          k.fn, {(M + bm - 1) / bm, (N + bn - 1) / bn, 1},
          {Arg::of(A), Arg::of(B), Arg::of(C), Arg::of_int(M), Arg::of_int(N), Arg::of_int(K)});
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          float s = 0; // f32 products summed in k order, as the kernel does
          for (int64_t q = 0; q < K; ++q)
            s += float(A.get(i * K + q)) * float(B.get(q * N + j));
          REQUIRE(C.get(i * N + j) == s);
        }
    }
  }
}

TEST_CASE("nested if inside a for carries scalars and tiles", "[interp]") {
  KernelDef k("branchy");
  auto& b = k.b;
  Value *out_s = k.ptr("out_s", DType::i32), *out_t = k.ptr("out_t", DType::f32);
  Value *lb = k.scalar("lb", DType::i32), *ub = k.scalar("ub", DType::i32),
        *step = k.scalar("step", DType::i32);
  b.loc = {"loop.cpp", 7, 1};
  ir::Op* loop = b.for_op(lb, ub, step, {k.i32(0), k.full({4}, DType::f32, 1)});
  b.loc = {"test.cpp", 1, 1};
  ir::Block& body = loop->region(0);
  b.set_block(&body);
  Value *iv = body.args[0], *s = body.args[1], *t = body.args[2];
  auto is_multiple = [&](int64_t d) {
    return k.op(OpKind::Eq, k.op(OpKind::Rem, iv, k.i32(d)), k.i32(0));
  };
  ir::Op* outer = b.if_op(is_multiple(3), {s->type, t->type});
  b.set_block(&outer->region(0));
  b.yield({k.op(OpKind::Add, s, iv), t});
  b.set_block(&outer->region(1));
  ir::Op* inner = b.if_op(is_multiple(2), {s->type, t->type});
  b.set_block(&inner->region(0));
  b.yield({k.op(OpKind::Sub, s, k.i32(1)), k.op(OpKind::Mul, t, k.full({4}, DType::f32, 2))});
  b.set_block(&inner->region(1));
  b.yield({s, k.op(OpKind::Add, t, b.cast(b.arange(0, 4), DType::f32))});
  b.check(*inner);
  b.set_block(&outer->region(1));
  b.yield({inner->results[0], inner->results[1]});
  b.check(*outer);
  b.set_block(&body);
  b.yield({outer->results[0], outer->results[1]});
  b.check(*loop);
  b.set_block(&k.fn.body);
  b.store(out_s, loop->results[0]);
  b.store(k.at(out_t, b.arange(0, 4)), loop->results[1]);
  b.ret();

  struct Case {
    int lb, ub, step;
  };
  for (Case c : {Case{0, 10, 1}, Case{-7, 20, 3}, Case{5, 5, 1}, Case{9, 2, 1}, Case{-3, 12, 5}}) {
    Buffer bs("out_s", DType::i32, 1), bt("out_t", DType::f32, 4);
    interpret(
        k.fn, {1, 1, 1},
        {Arg::of(bs), Arg::of(bt), Arg::of_int(c.lb), Arg::of_int(c.ub), Arg::of_int(c.step)});
    int32_t s_ref = 0;
    float t_ref[4] = {1, 1, 1, 1};
    for (int i = c.lb; i < c.ub; i += c.step) {
      if (i % 3 == 0)
        s_ref += i;
      else if (i % 2 == 0) {
        s_ref -= 1;
        for (float& v : t_ref)
          v *= 2;
      } else {
        for (int j = 0; j < 4; ++j)
          t_ref[j] += j;
      }
    }
    CHECK(bs.get(0) == s_ref);
    for (int j = 0; j < 4; ++j)
      CHECK(bt.get(j) == t_ref[j]);
  }

  Buffer bs("out_s", DType::i32, 1), bt("out_t", DType::f32, 4);
  for (int bad_step : {0, -2})
    REQUIRE_THROWS_WITH(interpret(k.fn, {1, 1, 1},
                                  {Arg::of(bs), Arg::of(bt), Arg::of_int(0), Arg::of_int(4),
                                   Arg::of_int(bad_step)}),
                        Catch::Contains("branchy: loop.cpp:7:1") &&
                            Catch::Contains("step must be positive"));
}

TEST_CASE("a loop near the top of its type's range stops without wrapping", "[interp]") {
  KernelDef k("edge");
  auto& b = k.b;
  Value* out = k.ptr("out", DType::i8);
  auto c8 = [&](int v) {
    return b.constant(ir::scalar_type(DType::i8), ir::ConstValue::of_int(v));
  };
  ir::Op* loop = b.for_op(c8(100), c8(127), c8(10), {c8(0)});
  b.set_block(&loop->region(0));
  b.yield({k.op(OpKind::Add, loop->region(0).args[1], c8(1))});
  b.check(*loop);
  b.set_block(&k.fn.body);
  b.store(out, loop->results[0]);
  b.ret();
  Buffer o("out", DType::i8, 1);
  interpret(k.fn, {1, 1, 1}, {Arg::of(o)});
  CHECK(o.get(0) == 3); // iv = 100, 110, 120
}

TEST_CASE("atomic_add accumulates from many programs", "[interp]") {
  constexpr int64_t programs = 64;
  KernelDef k("atomics");
  auto& b = k.b;
  Value *acc = k.ptr("acc", DType::f32), *counter = k.ptr("counter", DType::i32),
        *olds = k.ptr("olds", DType::i32);
  Value* lanes = b.arange(0, 16);
  b.atomic_add(k.at(acc, k.op(OpKind::Rem, lanes, b.splat(k.i32(4), {16}))),
               k.full({16}, DType::f32, 0.5), k.op(OpKind::Lt, lanes, b.splat(k.i32(12), {16})));
  b.store(b.addptr(olds, b.program_id(0)), b.atomic_add(counter, k.i32(1)));
  b.ret();

  Buffer a("acc", DType::f32, 4), c("counter", DType::i32, 1), o("olds", DType::i32, programs);
  interpret(k.fn, {programs, 1, 1}, {Arg::of(a), Arg::of(c), Arg::of(o)});
  for (int j = 0; j < 4; ++j)
    CHECK(a.get(j) == programs * 3 * 0.5); // 12 of 16 lanes hit each
  CHECK(c.get(0) == programs);
  std::vector<int64_t> seen;
  for (int64_t p = 0; p < programs; ++p)
    seen.push_back(o.get_int(p));
  std::sort(seen.begin(), seen.end());
  for (int64_t p = 0; p < programs; ++p)
    CHECK(seen[p] == p); // each old value once
}

TEST_CASE("out-of-bounds accesses name kernel, location, buffer and offset", "[interp]") {
  std::mt19937 rng(5);
  Buffer x = random_buffer("x", DType::f32, 1000, rng, 0, 1);
  Buffer y = random_buffer("y", DType::f32, 1000, rng, 0, 1), out("out", DType::f32, 1000);
  std::vector<Arg> args{Arg::of(x), Arg::of(y), Arg::of(out), Arg::of_int(1000)};
  SECTION("an unmasked load") {
    KernelDef k("vadd");
    build_vector_add(k, 1024, false);
    REQUIRE_THROWS_AS(interpret(k.fn, {1, 1, 1}, args), UserError);
    REQUIRE_THROWS_WITH(interpret(k.fn, {1, 1, 1}, args),
                        "vadd: k.cpp:12:5: load out of bounds: buffer 'x' has 1000 elements, "
                        "offset 1000");
  }
  SECTION("an unmasked store") {
    KernelDef k("vadd");
    build_vector_add(k, 1024, false);
    Buffer big_x("x", DType::f32, 2048), big_y("y", DType::f32, 2048);
    REQUIRE_THROWS_WITH(
        interpret(k.fn, {1, 1, 1},
                  {Arg::of(big_x), Arg::of(big_y), Arg::of(out), Arg::of_int(1000)}),
        "vadd: k.cpp:14:3: store out of bounds: buffer 'out' has 1000 elements, offset 1000");
  }
  SECTION("a negative offset in a later program") {
    KernelDef k("shift");
    auto& b = k.b;
    Value* p = k.ptr("x", DType::f32);
    b.loc = {"shift.cpp", 3, 9};
    b.load(b.addptr(p, k.op(OpKind::Sub, k.i32(1), b.program_id(0))));
    b.ret();
    REQUIRE_THROWS_WITH(interpret(k.fn, {3, 1, 1}, {Arg::of(x)}),
                        "shift: shift.cpp:3:9: load out of bounds: buffer 'x' has 1000 elements, "
                        "offset -1");
  }
  SECTION("masked-off lanes with wild pointers do not fault") {
    KernelDef k("wild");
    auto& b = k.b;
    Value *src = k.ptr("x", DType::f32), *dst = k.ptr("out", DType::f32);
    Value* lanes = b.arange(0, 1024);
    Value* mask = k.op_s(OpKind::Lt, lanes, k.i32(1000));
    Value* wild = k.op(OpKind::Mul, lanes, b.splat(k.i32(-1000003), {1024}));
    Value* offs = b.select(mask, lanes, wild);
    Value* v = b.load(k.at(src, offs), mask);
    b.store(k.at(dst, offs), v, mask);
    b.atomic_add(k.at(dst, offs), v, mask);
    b.ret();
    REQUIRE_NOTHROW(interpret(k.fn, {1, 1, 1}, {Arg::of(x), Arg::of(out)}));
    CHECK(out.get(999) == float(x.get(999)) * 2);
  }
}

TEST_CASE("integer division by zero is an error at the op", "[interp]") {
  for (OpKind kind : {OpKind::Div, OpKind::Rem}) {
    KernelDef k("divide");
    auto& b = k.b;
    Value* out = k.ptr("out", DType::i32);
    Value *x = k.scalar("x", DType::i32), *y = k.scalar("y", DType::i32);
    b.loc = {"div.cpp", 21, 8};
    Value* q = k.op(kind, x, y);
    b.store(out, q);
    b.ret();
    Buffer o("out", DType::i32, 1);
    REQUIRE_THROWS_WITH(interpret(k.fn, {1, 1, 1}, {Arg::of(o), Arg::of_int(7), Arg::of_int(0)}),
                        Catch::StartsWith("divide: div.cpp:21:8: integer") &&
                            Catch::EndsWith("by zero"));
    interpret(k.fn, {1, 1, 1}, {Arg::of(o), Arg::of_int(-7), Arg::of_int(2)});
    CHECK(o.get(0) == (kind == OpKind::Div ? -3 : -1)); // C semantics
  }
}

TEST_CASE("mismatched arguments are user errors naming the parameter", "[interp]") {
  KernelDef k("vadd");
  build_vector_add(k, 16, true);
  Buffer f("xs", DType::f32, 16), h("halves", DType::f16, 16);
  auto call = [&](std::vector<Arg> args) { interpret(k.fn, {1, 1, 1}, args); };
  REQUIRE_THROWS_WITH(call({Arg::of(f), Arg::of(f), Arg::of(f)}),
                      "vadd: expects 4 arguments, got 3: missing parameter 'n' (i32)");
  REQUIRE_THROWS_WITH(call({Arg::of(f), Arg::of_float(1), Arg::of(f), Arg::of_int(16)}),
                      "vadd: parameter 'y' (ptr<f32>) was given a scalar, not a buffer");
  REQUIRE_THROWS_WITH(call({Arg::of(f), Arg::of(h), Arg::of(f), Arg::of_int(16)}),
                      "vadd: parameter 'y' (ptr<f32>) was given buffer 'halves' of f16");
  REQUIRE_THROWS_WITH(call({Arg::of(f), Arg::of(f), Arg::of(f), Arg::of(f)}),
                      "vadd: parameter 'n' (i32) was given buffer 'xs', not a scalar");
  REQUIRE_THROWS_WITH(call({Arg::of(f), Arg::of(f), Arg::of(f), Arg::of_int(int64_t(1) << 40)}),
                      Catch::Contains("'n' (i32) was given 1099511627776, which does not fit"));
  REQUIRE_THROWS_AS(
      interpret(k.fn, {-1, 1, 1}, {Arg::of(f), Arg::of(f), Arg::of(f), Arg::of_int(16)}),
      UserError);
}
