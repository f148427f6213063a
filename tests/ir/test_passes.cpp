#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "ir/builder.h"
#include "abi/float16.h"
#include "ir/passes.h"
#include "ir/verifier.h"

using namespace tilec;
using namespace tilec::ir;

namespace {

SourceLoc at(int line) {
  return {"k.cpp", line, 1};
}

Type ptr_type(DType t) {
  return {{t, true}, {}};
}

size_t count_ops(Function& f, std::optional<OpKind> kind = std::nullopt) {
  size_t n = 0;
  walk(f.body, [&](Op& op) { n += !kind || op.kind == *kind; });
  return n;
}

Value* constant(Builder& b, DType t, double v, Shape shape = {}) {
  // Spelled out so NaN and infinities need no integer payload.
  ConstValue c;
  c.is_float = is_float(t);
  if (c.is_float)
    c.f = v;
  else
    c.i = static_cast<int64_t>(v);
  return b.constant(tile_type(t, std::move(shape)), c);
}

// A kernel storing one value to `out`; what reaches the store after the passes
// is the folded result.
struct Folding {
  Function f{"fold"};
  Builder b{f};
  Value* out;
  Op* store = nullptr;

  explicit Folding(DType t) {
    b.loc = at(1);
    out = f.add_param("out", ptr_type(t));
  }
  Value* param(const char* name, DType t) { return f.add_param(name, scalar_type(t)); }

  // Stores v, runs fold/cse/dce to the fixpoint and returns what is stored then.
  Value* run(Value* v) {
    b.store(v->type.is_scalar() ? out : b.splat(out, v->type.shape), v);
    store = f.body.ops.back().get();
    b.ret();
    REQUIRE(verify_all(f).empty());
    run_default_passes(f);
    REQUIRE(verify_all(f).empty());
    return store->operands[1];
  }
};

// The folded constant, or a test failure when the value was not folded.
ConstValue folded(const Value* v) {
  REQUIRE(v->def);
  INFO("stored value comes from " << op_name(v->def->kind));
  REQUIRE(v->def->kind == OpKind::Constant);
  return v->def->attrs.value;
}

int64_t folded_int(DType t, std::function<Value*(Folding&)> make) {
  Folding k(t);
  ConstValue c = folded(k.run(make(k)));
  REQUIRE(!c.is_float);
  return c.i;
}

double folded_float(DType t, std::function<Value*(Folding&)> make) {
  Folding k(t);
  ConstValue c = folded(k.run(make(k)));
  REQUIRE(c.is_float);
  return c.f;
}

// The kind of op left computing the stored value when folding must not happen.
OpKind unfolded(DType t, std::function<Value*(Folding&)> make) {
  Folding k(t);
  Value* v = k.run(make(k));
  REQUIRE(v->def);
  return v->def->kind;
}

Value* bin(Folding& k, OpKind op, DType t, double a, double b) {
  return k.b.binary(op, constant(k.b, t, a), constant(k.b, t, b));
}

} // namespace

TEST_CASE("fold: integers wrap at their width", "[ir][passes]") {
  CHECK(folded_int(DType::i8, [](Folding& k) { return bin(k, OpKind::Add, DType::i8, 127, 1); }) ==
        -128);
  CHECK(folded_int(DType::i8, [](Folding& k) { return bin(k, OpKind::Mul, DType::i8, 16, 16); }) ==
        0);
  CHECK(folded_int(DType::i16,
                   [](Folding& k) { return bin(k, OpKind::Sub, DType::i16, -32768, 1); }) == 32767);
  CHECK(folded_int(DType::i32, [](Folding& k) {
          return k.b.unary(OpKind::Neg, constant(k.b, DType::i32, -2147483648.0));
        }) == -2147483648LL);
  CHECK(folded_int(DType::i64, [](Folding& k) {
          Value* max = k.b.constant(scalar_type(DType::i64),
                                    ConstValue::of_int(std::numeric_limits<int64_t>::max()));
          return k.b.binary(OpKind::Add, max, constant(k.b, DType::i64, 1));
        }) == std::numeric_limits<int64_t>::min());
  CHECK(folded_int(DType::i8, [](Folding& k) {
          return k.b.unary(OpKind::Abs, constant(k.b, DType::i8, -128));
        }) == -128);
}

TEST_CASE("fold: C division, signed min/max and comparisons", "[ir][passes]") {
  CHECK(folded_int(DType::i32, [](Folding& k) { return bin(k, OpKind::Div, DType::i32, 7, -2); }) ==
        -3);
  CHECK(folded_int(DType::i32, [](Folding& k) { return bin(k, OpKind::Rem, DType::i32, -7, 2); }) ==
        -1);
  CHECK(folded_int(DType::i32, [](Folding& k) { return bin(k, OpKind::Min, DType::i32, -5, 3); }) ==
        -5);
  CHECK(folded_int(DType::i1, [](Folding& k) { return bin(k, OpKind::Lt, DType::i32, -5, 3); }) ==
        1);
  CHECK(folded_int(DType::i1, [](Folding& k) { return bin(k, OpKind::Ge, DType::i8, -1, 1); }) ==
        0);
}

TEST_CASE("fold: never integer division by zero or overflow", "[ir][passes]") {
  CHECK(unfolded(DType::i32, [](Folding& k) { return bin(k, OpKind::Div, DType::i32, 7, 0); }) ==
        OpKind::Div);
  CHECK(unfolded(DType::i32, [](Folding& k) { return bin(k, OpKind::Rem, DType::i32, 7, 0); }) ==
        OpKind::Rem);
  CHECK(unfolded(DType::i8, [](Folding& k) { return bin(k, OpKind::Div, DType::i8, -128, -1); }) ==
        OpKind::Div);
}

TEST_CASE("fold: f16 and bf16 round to nearest even", "[ir][passes]") {
  // 1 + 2^-11 is halfway between 1 and the next f16; ties go to even (1).
  CHECK(folded_float(DType::f16, [](Folding& k) {
          return bin(k, OpKind::Add, DType::f16, 1.0, std::ldexp(1.0, -11));
        }) == 1.0);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9; even is the latter.
  CHECK(folded_float(DType::f16, [](Folding& k) {
          return bin(k, OpKind::Add, DType::f16, 1.0, 3 * std::ldexp(1.0, -11));
        }) == 1.0 + std::ldexp(1.0, -9));
  CHECK(folded_float(DType::f16, [](Folding& k) {
          return bin(k, OpKind::Mul, DType::f16, 60000.0, 2.0);
        }) == std::numeric_limits<double>::infinity());
  CHECK(folded_float(DType::bf16, [](Folding& k) {
          return bin(k, OpKind::Add, DType::bf16, 1.0, std::ldexp(1.0, -8));
        }) == 1.0);
  // f32 arithmetic is single precision, not the double the attribute holds.
  CHECK(folded_float(DType::f32, [](Folding& k) {
          return bin(k, OpKind::Add, DType::f32, 0.1, 0.2);
        }) == static_cast<double>(0.1f + 0.2f));
}

TEST_CASE("fold: casts follow the semantics", "[ir][passes]") {
  auto cast = [](DType from, double v, DType to) {
    return [=](Folding& k) { return k.b.cast(constant(k.b, from, v), to); };
  };
  CHECK(folded_int(DType::i8, cast(DType::i32, 300, DType::i8)) == 44);
  CHECK(folded_int(DType::i1, cast(DType::i32, -2, DType::i1)) == 1);
  CHECK(folded_int(DType::i64, cast(DType::i8, -3, DType::i64)) == -3);
  CHECK(folded_int(DType::i32, cast(DType::f32, -2.75, DType::i32)) == -2);
  CHECK(folded_float(DType::f32, cast(DType::i1, 1, DType::f32)) == 1.0);
  CHECK(folded_float(DType::f32, cast(DType::i32, 16777217, DType::f32)) == 16777216.0);
  // One rounding straight to bf16: through f32 this would tie down to 2^24.
  CHECK(folded_float(DType::bf16, cast(DType::i32, 16777216 + 65536 + 1, DType::bf16)) ==
        16777216.0 + 131072.0);
  CHECK(folded_float(DType::f16, cast(DType::f32, 0.1, DType::f16)) ==
        static_cast<double>(f16_bits_to_f32(f32_to_f16_bits(0.1f))));
  CHECK(unfolded(DType::i32, cast(DType::f32, 3e9, DType::i32)) == OpKind::Cast);
  CHECK(unfolded(DType::i32, cast(DType::f32, std::nan(""), DType::i32)) == OpKind::Cast);
}

TEST_CASE("fold: NaN and infinities", "[ir][passes]") {
  double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(folded_float(DType::f32,
                     [=](Folding& k) { return bin(k, OpKind::Max, DType::f32, nan, 1.0); }) == 1.0);
  CHECK(folded_float(DType::f32,
                     [=](Folding& k) { return bin(k, OpKind::Min, DType::f32, 2.0, nan); }) == 2.0);
  CHECK(std::isnan(folded_float(
      DType::f32, [=](Folding& k) { return bin(k, OpKind::Add, DType::f32, nan, 1.0); })));
  CHECK(folded_int(DType::i1,
                   [=](Folding& k) { return bin(k, OpKind::Eq, DType::f32, nan, nan); }) == 0);
  CHECK(folded_int(DType::i1,
                   [=](Folding& k) { return bin(k, OpKind::Ne, DType::f32, nan, nan); }) == 1);
  CHECK(std::isinf(folded_float(
      DType::f32, [](Folding& k) { return bin(k, OpKind::Div, DType::f32, 1.0, 0.0); })));
  CHECK(std::isnan(folded_float(DType::f32, [](Folding& k) {
    return k.b.unary(OpKind::Sqrt, constant(k.b, DType::f32, -1.0));
  })));
  // x*0 is not 0 for a float x that may be NaN or infinite.
  CHECK(unfolded(DType::f32, [](Folding& k) {
          return k.b.binary(OpKind::Mul, k.param("x", DType::f32), constant(k.b, DType::f32, 0.0));
        }) == OpKind::Mul);
}

TEST_CASE("fold: moving a constant's elements makes a constant", "[ir][passes]") {
  Folding k(DType::f32);
  Value* c = constant(k.b, DType::f32, 1.5);
  Value* t = k.b.splat(c, {4});
  t = k.b.expand_dims(t, 1);
  t = k.b.broadcast(t, {4, 8});
  t = k.b.permute(t, {1, 0});
  t = k.b.reshape(t, {32});
  t = k.b.unary(OpKind::Exp2, t);
  Value* v = k.run(t);
  CHECK(folded(v).f == static_cast<double>(std::exp2(1.5f)));
  CHECK(v->type == tile_type(DType::f32, {32}));
  CHECK(count_ops(k.f) == 4); // constant, splat of out, store, return
}

TEST_CASE("fold: integer identities and select", "[ir][passes]") {
  SECTION("x + 0, x * 1 and x | 0 are x") {
    Folding k(DType::i32);
    Value* x = k.param("x", DType::i32);
    Value* v = k.b.binary(OpKind::Add, constant(k.b, DType::i32, 0), x);
    v = k.b.binary(OpKind::Mul, v, constant(k.b, DType::i32, 1));
    v = k.b.binary(OpKind::Or, v, constant(k.b, DType::i32, 0));
    k.run(v);
    CHECK(k.store->operands[1] == x);
    CHECK(count_ops(k.f) == 2);
  }
  SECTION("x * 0 and x - x are 0") {
    CHECK(folded_int(DType::i32, [](Folding& k) {
            return k.b.binary(OpKind::Mul, k.param("x", DType::i32), constant(k.b, DType::i32, 0));
          }) == 0);
    CHECK(folded_int(DType::i32, [](Folding& k) {
            Value* x = k.param("x", DType::i32);
            return k.b.binary(OpKind::Sub, x, x);
          }) == 0);
  }
  SECTION("0 - x and 1 / x stay") {
    CHECK(unfolded(DType::i32, [](Folding& k) {
            return k.b.binary(OpKind::Sub, constant(k.b, DType::i32, 0), k.param("x", DType::i32));
          }) == OpKind::Sub);
    CHECK(unfolded(DType::i32, [](Folding& k) {
            return k.b.binary(OpKind::Div, constant(k.b, DType::i32, 1), k.param("x", DType::i32));
          }) == OpKind::Div);
  }
  SECTION("select with a constant condition") {
    Folding k(DType::f32);
    Value* a = k.param("a", DType::f32);
    Value* b = k.param("b", DType::f32);
    Value* yes = k.b.constant(scalar_type(DType::i1), ConstValue::of_int(1));
    k.run(k.b.select(yes, a, b));
    CHECK(k.store->operands[1] == a);
  }
}

TEST_CASE("fold reports whether it changed anything", "[ir][passes]") {
  Folding k(DType::i32);
  Value* x = k.param("x", DType::i32);
  k.b.store(k.out, k.b.binary(OpKind::Add, x, x));
  k.b.ret();
  CHECK_FALSE(fold_constants(k.f));
  CHECK_FALSE(cse(k.f));
  CHECK_FALSE(dce(k.f));
}

TEST_CASE("cse merges equal pure ops", "[ir][passes]") {
  Function f("k");
  Builder b(f);
  b.loc = at(1);
  Value* x = f.add_param("x", ptr_type(DType::f32));
  Value* p1 = b.addptr(b.splat(x, {8}), b.arange(0, 8));
  Value* p2 = b.addptr(b.splat(x, {8}), b.arange(0, 8));
  Value* l1 = b.load(p1);
  Value* l2 = b.load(p2);
  Value* s1 = b.binary(OpKind::Add, l1, l2);
  Value* s2 = b.binary(OpKind::Add, l2, l1); // operand order differs: not merged
  b.store(p2, b.binary(OpKind::Mul, s1, s2));
  b.ret();
  size_t before = count_ops(f);
  CHECK(cse(f));
  CHECK(verify_all(f).empty());
  // splat, arange, addptr merged; the two loads (and so both adds) stay.
  CHECK(count_ops(f) == before - 3);
  CHECK(count_ops(f, OpKind::Load) == 2);
  CHECK(count_ops(f, OpKind::Add) == 2);
  CHECK(l2->def->operands[0] == p1);
  CHECK_FALSE(cse(f));
}

TEST_CASE("cse keeps constants and attributes apart", "[ir][passes]") {
  Function f("k");
  Builder b(f);
  b.loc = at(1);
  Value* out = f.add_param("out", ptr_type(DType::f32));
  Value* pz = constant(b, DType::f32, 0.0);
  Value* nz = constant(b, DType::f32, -0.0); // 1/x tells them apart
  Value* pz2 = constant(b, DType::f32, 0.0);
  Value* id0 = b.cast(b.program_id(0), DType::f32);
  Value* id1 = b.cast(b.program_id(1), DType::f32);
  Value* sum = b.binary(OpKind::Add, b.binary(OpKind::Add, pz, nz), pz2);
  b.store(out, b.binary(OpKind::Add, sum, b.binary(OpKind::Add, id0, id1)));
  b.ret();
  CHECK(cse(f));
  CHECK(count_ops(f, OpKind::Constant) == 2);
  CHECK(count_ops(f, OpKind::ProgramId) == 2);
  CHECK(verify_all(f).empty());
}

TEST_CASE("cse respects region scoping", "[ir][passes]") {
  Function f("k");
  Builder b(f);
  b.loc = at(1);
  Value* out = f.add_param("out", ptr_type(DType::i32));
  Value* n = f.add_param("n", scalar_type(DType::i32));
  Value* outer = b.binary(OpKind::Mul, n, n);
  Value* zero = constant(b, DType::i32, 0);
  Value* one = constant(b, DType::i32, 1);
  Op* loop = b.for_op(zero, n, one, {zero});
  Block& body = loop->region(0);
  b.set_block(&body);
  Value* again = b.binary(OpKind::Mul, n, n);   // dominated by `outer`: merged
  Value* inner = b.binary(OpKind::Add, n, one); // defined only in the loop
  b.yield({b.binary(OpKind::Add, b.binary(OpKind::Add, again, inner), body.args[1])});
  b.set_block(&f.body);
  Value* after = b.binary(OpKind::Add, n, one); // cannot reuse `inner`
  Value* cond = b.binary(OpKind::Lt, n, one);
  Op* branch = b.if_op(cond, {scalar_type(DType::i32)});
  b.set_block(&branch->region(0));
  b.yield({b.binary(OpKind::Sub, n, one)});
  b.set_block(&branch->region(1));
  b.yield({b.binary(OpKind::Sub, n, one)}); // a sibling region: not merged with `then`
  b.set_block(&f.body);
  Value* total = b.binary(OpKind::Add, loop->results[0], after);
  b.store(out, b.binary(OpKind::Add, total, branch->results[0]));
  b.ret();

  CHECK(cse(f));
  CHECK(verify_all(f).empty());
  const Op& body_yield = *body.ops.back();
  CHECK(body_yield.operands[0]->def->operands[0]->def->operands[0] == outer);
  CHECK(inner->def->parent == &body);
  CHECK(count_ops(f, OpKind::Mul) == 1);
  CHECK(count_ops(f, OpKind::Sub) == 2);
  CHECK(count_ops(f, OpKind::Add) == 6); // inner, after, 2 in the yield, total and the store's
}

TEST_CASE("dce removes unused pure ops and keeps effects", "[ir][passes]") {
  Function f("k");
  Builder b(f);
  b.loc = at(1);
  Value* x = f.add_param("x", ptr_type(DType::f32));
  Value* p = b.addptr(b.splat(x, {8}), b.arange(0, 8));
  Value* l = b.load(p);
  b.unary(OpKind::Exp, b.binary(OpKind::Mul, l, l)); // unused chain, load included
  b.atomic_add(p, b.load(p));                        // unused result, but an effect
  b.ret();
  size_t before = count_ops(f);
  CHECK(dce(f));
  CHECK(verify_all(f).empty());
  CHECK(count_ops(f) == before - 3);
  CHECK(count_ops(f, OpKind::Load) == 1);
  CHECK(count_ops(f, OpKind::AtomicAdd) == 1);
  CHECK_FALSE(dce(f));
}

TEST_CASE("dce removes for and if without effects or used results", "[ir][passes]") {
  Function f("k");
  Builder b(f);
  b.loc = at(1);
  Value* x = f.add_param("x", ptr_type(DType::f32));
  Value* n = f.add_param("n", scalar_type(DType::i32));
  Value* zero = constant(b, DType::i32, 0);
  Value* one = constant(b, DType::i32, 1);
  Value* acc0 = constant(b, DType::f32, 0.0);
  Op* pure_loop = b.for_op(zero, n, one, {acc0});
  b.set_block(&pure_loop->region(0));
  b.yield({b.binary(OpKind::Add, pure_loop->region(0).args[1], b.load(x))});
  b.set_block(&f.body);
  Op* store_loop = b.for_op(zero, n, one, {});
  b.set_block(&store_loop->region(0));
  b.store(x, acc0);
  b.yield({});
  b.set_block(&f.body);
  Op* branch = b.if_op(b.binary(OpKind::Lt, zero, n), {scalar_type(DType::f32)});
  b.set_block(&branch->region(0));
  b.yield({b.load(x)});
  b.set_block(&branch->region(1));
  b.yield({acc0});
  b.set_block(&f.body);
  b.ret();
  CHECK(dce(f));
  CHECK(verify_all(f).empty());
  CHECK(count_ops(f, OpKind::For) == 1);
  CHECK(count_ops(f, OpKind::If) == 0);
  CHECK(count_ops(f, OpKind::Store) == 1);
  CHECK(count_ops(f, OpKind::Load) == 0);
  CHECK(count_ops(f) == 7); // zero, one, acc0, for { store, yield }, return
}

TEST_CASE("dce drops loop-carried values nobody reads", "[ir][passes]") {
  Function f("k");
  Builder b(f);
  b.loc = at(1);
  Value* x = f.add_param("x", ptr_type(DType::f32));
  Value* n = f.add_param("n", scalar_type(DType::i32));
  Value* zero = constant(b, DType::i32, 0);
  Value* one = constant(b, DType::i32, 1);
  Value* acc0 = constant(b, DType::f32, 0.0);
  // carried: acc (stored after the loop), count (read by nothing but itself),
  // echo (yielded unchanged).
  Op* loop = b.for_op(zero, n, one, {acc0, zero, one});
  Block& body = loop->region(0);
  b.set_block(&body);
  Value* acc = b.binary(OpKind::Add, body.args[1], b.load(x));
  Value* count = b.binary(OpKind::Add, b.binary(OpKind::Mul, body.args[2], body.args[2]), one);
  b.yield({acc, count, body.args[3]});
  b.set_block(&f.body);
  b.store(x, loop->results[0]);
  b.ret();
  REQUIRE(verify_all(f).empty());
  CHECK(dce(f));
  CHECK(verify_all(f).empty());
  CHECK(loop->operands.size() == 4);
  CHECK(loop->results.size() == 1);
  CHECK(body.args.size() == 2);
  CHECK(body.ops.size() == 3); // load, add, yield
  CHECK(body.ops.back()->operands[0] == acc);
  CHECK_FALSE(dce(f));
}

TEST_CASE("dce keeps carried values that feed a live one", "[ir][passes]") {
  Function f("k");
  Builder b(f);
  b.loc = at(1);
  Value* x = f.add_param("x", ptr_type(DType::i32));
  Value* n = f.add_param("n", scalar_type(DType::i32));
  Value* zero = constant(b, DType::i32, 0);
  Value* one = constant(b, DType::i32, 1);
  Op* loop = b.for_op(zero, n, one, {zero, one});
  Block& body = loop->region(0);
  b.set_block(&body);
  // sum += step; step *= 2: step's result is unused, but sum reads it.
  Value* sum = b.binary(OpKind::Add, body.args[1], body.args[2]);
  Value* step = b.binary(OpKind::Mul, body.args[2], b.binary(OpKind::Add, one, one));
  b.yield({sum, step});
  b.set_block(&f.body);
  b.store(x, loop->results[0]);
  b.ret();
  CHECK_FALSE(dce(f));
  CHECK(loop->results.size() == 2);
}

TEST_CASE("default passes reach a fixpoint and keep the kernel valid", "[ir][passes]") {
  Function f("k");
  Builder b(f);
  b.loc = at(1);
  Value* out = f.add_param("out", ptr_type(DType::i8));
  Value* n = f.add_param("n", scalar_type(DType::i32));
  // offs = pid * (4 * 0) + arange: the multiply folds away and the two
  // aranges merge; 127 + 1 folds to -128 in i8 inside the loop.
  Value* pid = b.program_id(0);
  Value* scale = b.binary(OpKind::Mul, constant(b, DType::i32, 4), constant(b, DType::i32, 0));
  Value* offs =
      b.binary(OpKind::Add, b.splat(b.binary(OpKind::Mul, pid, scale), {16}), b.arange(0, 16));
  Value* ptrs = b.addptr(b.splat(out, {16}), offs);
  Value* mask = b.binary(OpKind::Lt, b.arange(0, 16), b.splat(n, {16}));
  Value* zero = constant(b, DType::i32, 0);
  Value* one = constant(b, DType::i32, 1);
  Op* loop = b.for_op(zero, n, one, {zero});
  b.set_block(&loop->region(0));
  Value* wrapped = b.binary(OpKind::Add, constant(b, DType::i8, 127), constant(b, DType::i8, 1));
  b.store(ptrs, b.splat(wrapped, {16}), mask);
  b.yield({b.binary(OpKind::Add, loop->region(0).args[1], one)});
  b.set_block(&f.body);
  b.ret();
  REQUIRE(verify_all(f).empty());

  run_default_passes(f);
  REQUIRE(verify_all(f).empty());
  CHECK_FALSE(fold_constants(f));
  CHECK_FALSE(cse(f));
  CHECK_FALSE(dce(f));

  CHECK(count_ops(f, OpKind::Arange) == 1);
  CHECK(count_ops(f, OpKind::ProgramId) == 0);
  CHECK(loop->results.empty()); // the counter fed nothing
  const Op* store = nullptr;
  walk(f.body, [&](Op& op) {
    if (op.kind == OpKind::Store) store = &op;
  });
  REQUIRE(store);
  CHECK(store->operands[0]->def->operands[1]->def->kind == OpKind::Arange);
  const Op& stored = *store->operands[1]->def;
  REQUIRE(stored.kind == OpKind::Constant);
  CHECK(stored.attrs.value.i == -128);
  CHECK(stored.result()->type == tile_type(DType::i8, {16}));
}

// A kernel loading f16 tiles a and b [16, 16] from `x` and an f32 tile y from `y`; finish()
// stores what the test built to `out` and runs the default passes.
struct DotKernel {
  Function f{"k"};
  Builder b{f};
  Value *a, *bt, *y;
  // Row-major indices of a [16, 16] tile.
  Value* idx() {
    Value* rows = b.binary(OpKind::Mul, b.arange(0, 16), b.splat(b.constant(scalar_type(DType::i32), ConstValue::of_int(16)), {16}));
    return b.binary(OpKind::Add, b.broadcast(b.expand_dims(rows, 1), {16, 16}),
                    b.broadcast(b.expand_dims(b.arange(0, 16), 0), {16, 16}));
  }
  Value* tile(Value* p) { return b.load(b.addptr(b.splat(p, {16, 16}), idx())); }
  DotKernel() {
    b.loc = at(1);
    Value* x = f.add_param("x", ptr_type(DType::f16));
    Value* yp = f.add_param("y", ptr_type(DType::f32));
    a = tile(x);
    bt = tile(x);
    y = tile(yp);
  }
  Value* zeros(double v = 0.0) { return constant(b, DType::f32, v, {16, 16}); }
  void finish(Value* v) {
    Value* out = f.add_param("out", ptr_type(DType::f32));
    b.store(b.addptr(b.splat(out, {16, 16}), idx()), v);
    b.ret();
    REQUIRE(verify_all(f).empty());
    run_default_passes(f);
    REQUIRE(verify_all(f).empty());
  }
  // The op whose result is stored.
  const Op* stored() {
    const Op* st = nullptr;
    walk(f.body, [&](Op& op) { if (op.kind == OpKind::Store) st = &op; });
    return st ? st->operands[1]->def : nullptr;
  }
};

TEST_CASE("an add of a dot's product folds into the dot's accumulator", "[ir][passes]") {
  SECTION("dot(a, b) + y and y + dot(a, b) become dot(a, b, y)") {
    for (bool dot_first : {true, false}) {
      DotKernel k;
      Value* d = k.b.dot(k.a, k.bt, k.zeros());
      Value* y2 = k.b.binary(OpKind::Mul, k.y, k.y); // defined after the dot: the dot moves down
      k.finish(dot_first ? k.b.binary(OpKind::Add, d, y2) : k.b.binary(OpKind::Add, y2, d));
      const Op* s = k.stored();
      REQUIRE(s);
      CHECK(s->kind == OpKind::Dot);
      CHECK(s->operands[2]->def->kind == OpKind::Mul);
      size_t float_adds = 0;
      walk(k.f.body, [&](Op& op) { float_adds += op.kind == OpKind::Add && op.result()->type.dtype() == DType::f32; });
      CHECK(float_adds == 0);
    }
  }
  SECTION("chained products accumulate one into the next") {
    DotKernel k;
    Value* d1 = k.b.dot(k.a, k.bt, k.zeros());
    Value* d2 = k.b.dot(k.bt, k.a, k.zeros());
    k.finish(k.b.binary(OpKind::Add, k.b.binary(OpKind::Add, d1, k.y), d2));
    const Op* s = k.stored();
    REQUIRE(s);
    CHECK(s->kind == OpKind::Dot);
    REQUIRE(s->operands[2]->def);
    CHECK(s->operands[2]->def->kind == OpKind::Dot);
    CHECK(s->operands[2]->def->operands[2] == k.y);
  }
  SECTION("a product used twice, a -0 accumulator or a nonzero one stays as it is") {
    for (int which = 0; which < 3; ++which) {
      DotKernel k;
      Value* acc = which == 1 ? k.zeros(-0.0) : which == 2 ? k.zeros(1.0) : k.zeros();
      Value* d = k.b.dot(k.a, k.bt, acc);
      Value* sum = k.b.binary(OpKind::Add, d, k.y);
      k.finish(which == 0 ? k.b.binary(OpKind::Mul, sum, d) : sum);
      INFO("case " << which);
      const Op* s = k.stored();
      REQUIRE(s);
      CHECK(s->kind == (which == 0 ? OpKind::Mul : OpKind::Add));
      CHECK(count_ops(k.f, OpKind::Dot) == 1);
    }
  }
}
