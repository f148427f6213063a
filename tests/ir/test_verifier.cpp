#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "ir/builder.h"
#include "ir/verifier.h"

using namespace tilec;
using namespace tilec::ir;
using Catch::Matchers::Contains;

namespace {

SourceLoc at(int line) {
  return {"k.cpp", line, 1};
}

Type ptr_type(DType t) {
  return {{t, true}, {}};
}

// The message verify throws, or a test failure when it accepts.
std::string verify_error(const Function& f) {
  try {
    verify(f);
  } catch (const UserError& e) {
    return e.what();
  }
  FAIL("verify accepted invalid IR");
  return "";
}

// A rejection names the op, where it was written and the value at fault.
void check_names(const std::string& msg, std::string_view op, int line, const Value* v) {
  INFO(msg);
  CHECK_THAT(msg, Contains(std::string(op)));
  CHECK_THAT(msg, Contains(fmt::format("k.cpp:{}:", line)));
  CHECK_THAT(msg, Contains(fmt::format("%{} (", v->id)));
}

size_t index_of(const Block& b, const Value* result) {
  for (size_t i = 0; i < b.ops.size(); ++i)
    if (std::find(b.ops[i]->results.begin(), b.ops[i]->results.end(), result) !=
        b.ops[i]->results.end())
      return i;
  FAIL("value not defined in this block");
  return 0;
}

// A kernel that uses every op kind once at least; line N of k.cpp is op group N.
struct EveryOp {
  Function f{"every_op"};
  Value* x;
  Value* n;
  Value* loaded;
  Op* loop;
  Op* branch;

  EveryOp() {
    Builder b(f);
    x = f.add_param("x", ptr_type(DType::f32));
    n = f.add_param("n", scalar_type(DType::i32));
    b.loc = at(1);
    Value* pid = b.program_id(0);
    Value* np = b.num_programs(0);
    Value* r = b.arange(0, 16);
    Value* one = b.constant(tile_type(DType::f32, {16}), ConstValue::of_float(1.0));
    Value* ptrs = b.addptr(b.splat(x, {16}), r);
    Value* mask = b.binary(OpKind::Lt, r, b.splat(n, {16}));
    loaded = b.load(ptrs, mask, one);
    {
      Value* c1 = b.constant(scalar_type(DType::i32), ConstValue::of_int(1));
      Value* block = b.create(OpKind::DescLoad, {x, n, n, n, c1, pid, c1}, {tile_type(DType::f32, {4, 16})})->result();
      b.create(OpKind::DescStore, {x, n, n, n, c1, pid, c1, block}, {});
    }
    b.loc = at(2);
    Value* v = loaded;
    for (OpKind k : {OpKind::Exp, OpKind::Exp2, OpKind::Log, OpKind::Tanh, OpKind::Sqrt, OpKind::Rsqrt,
                     OpKind::Abs, OpKind::Neg, OpKind::Log2, OpKind::Sigmoid, OpKind::Floor, OpKind::Ceil,
                     OpKind::Round, OpKind::Sin, OpKind::Cos, OpKind::Erf})
      v = b.unary(k, v);
    for (OpKind k : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Min, OpKind::Max, OpKind::Pow})
      v = b.binary(k, v, one);
    v = b.fma(v, one, v);
    v = b.bitcast(b.bitcast(v, DType::i32), DType::f32);
    Value* ri = r;
    for (OpKind k : {OpKind::Rem, OpKind::And, OpKind::Or, OpKind::Xor, OpKind::Shl, OpKind::AShr, OpKind::LShr,
                     OpKind::UMulHi})
      ri = b.binary(k, ri, r);
    Value* cmp = mask;
    for (OpKind k : {OpKind::Eq, OpKind::Ne, OpKind::Le, OpKind::Gt, OpKind::Ge})
      cmp = b.binary(OpKind::And, cmp, b.binary(k, ri, r));
    v = b.select(cmp, v, b.cast(ri, DType::f32));
    b.assert_true(cmp, "every lane in range");
    b.print(v, "v");
    b.loc = at(3);
    Value* row = b.expand_dims(v, 0);
    Value* wide = b.broadcast(row, {4, 16});
    Value* tall = b.reshape(wide, {16, 4});
    Value* back = b.permute(tall, {1, 0});
    Value* acc = b.constant(tile_type(DType::f32, {4, 4}), ConstValue::of_float(0.0));
    Value* prod = b.dot(back, tall, acc);
    Value* sums = b.reduce(ReduceKind::sum, b.scan(ReduceKind::prod, prod, 0), 1);
    Value* xs = b.addptr(b.splat(x, {4}), b.arange(0, 4));
    b.atomic_add(xs, sums);
    for (OpKind k : {OpKind::AtomicMax, OpKind::AtomicMin, OpKind::AtomicXchg}) b.atomic_rmw(k, xs, sums);
    b.atomic_cas(xs, sums, sums);
    Value* cs = b.addptr(b.splat(f.add_param("c", ptr_type(DType::i32)), {16}), r);
    for (OpKind k : {OpKind::AtomicAnd, OpKind::AtomicOr, OpKind::AtomicXor}) b.atomic_rmw(k, cs, ri);
    b.loc = at(4);
    Value* zero = b.constant(scalar_type(DType::i32), ConstValue::of_int(0));
    Value* step = b.constant(scalar_type(DType::i32), ConstValue::of_int(1));
    loop = b.for_op(zero, n, step, {v});
    b.set_block(&loop->region(0));
    b.yield({b.binary(OpKind::Add, loop->region(0).args[1], one)});
    b.set_block(&f.body);
    b.loc = at(5);
    branch = b.if_op(b.binary(OpKind::Lt, pid, np), {v->type});
    b.set_block(&branch->region(0));
    b.yield({loop->results[0]});
    b.set_block(&branch->region(1));
    b.yield({one});
    b.set_block(&f.body);
    b.loc = at(6);
    b.store(ptrs, branch->results[0], mask);
    b.ret();
  }
};

// A small kernel: out[i] = x[i] * 2 for i in one tile, with a loop summing.
struct Small {
  Function f{"small"};
  Value* x;
  Value* ptrs;   // line 2
  Value* two;    // line 3
  Value* scaled; // line 4
  Op* loop;      // line 5
  Value* inner;  // line 6, inside the loop
  Op* store;     // line 7

  Small() {
    Builder b(f);
    x = f.add_param("x", ptr_type(DType::f32));
    Value* n = f.add_param("n", scalar_type(DType::i32));
    b.loc = at(2);
    ptrs = b.addptr(b.splat(x, {8}), b.arange(0, 8));
    b.loc = at(3);
    two = b.constant(tile_type(DType::f32, {8}), ConstValue::of_float(2.0));
    b.loc = at(4);
    scaled = b.binary(OpKind::Mul, b.load(ptrs), two);
    b.loc = at(5);
    Value* zero = b.constant(scalar_type(DType::i32), ConstValue::of_int(0));
    Value* one = b.constant(scalar_type(DType::i32), ConstValue::of_int(1));
    loop = b.for_op(zero, n, one, {scaled});
    b.set_block(&loop->region(0));
    b.loc = at(6);
    inner = b.binary(OpKind::Add, loop->region(0).args[1], two);
    b.yield({inner});
    b.set_block(&f.body);
    b.loc = at(7);
    b.store(ptrs, loop->results[0]);
    store = f.body.ops.back().get();
    b.loc = at(8);
    b.ret();
  }
};

} // namespace

TEST_CASE("verifier accepts a kernel using every op", "[ir][verifier]") {
  EveryOp k;
  CHECK(verify_all(k.f).empty());
  CHECK_NOTHROW(verify(k.f));
  std::set<OpKind> seen;
  walk(k.f.body, [&](Op& op) { seen.insert(op.kind); });
  std::vector<std::string_view> missing;
  for (int i = 0; i < kNumOpKinds; ++i)
    if (!seen.count(static_cast<OpKind>(i))) missing.push_back(op_name(static_cast<OpKind>(i)));
  INFO(fmt::format("ops missing from the kernel: {}", fmt::join(missing, ", ")));
  CHECK(missing.empty());
}

TEST_CASE("verifier rejects an operand of the wrong shape", "[ir][verifier]") {
  Small k;
  Op& mul = *k.scaled->def;
  // x*2 now multiplies a tile<8xf32> by a tile<8xptr<f32>>.
  mul.operands[1] = k.ptrs;
  std::string msg = verify_error(k.f);
  check_names(msg, "mul", 4, k.ptrs);
}

TEST_CASE("verifier rejects a use before the definition", "[ir][verifier]") {
  Small k;
  Block& body = k.f.body;
  auto first = body.ops.begin();
  // Moves the constant 2 to just after the multiply that reads it.
  std::rotate(first + index_of(body, k.two), first + index_of(body, k.two) + 1,
              first + index_of(body, k.scaled) + 1);
  std::string msg = verify_error(k.f);
  check_names(msg, "mul", 4, k.two);
  CHECK_THAT(msg, Contains("before its definition"));
}

TEST_CASE("verifier rejects a loop value used after the loop", "[ir][verifier]") {
  Small k;
  k.store->operands[1] = k.inner;
  std::string msg = verify_error(k.f);
  check_names(msg, "store", 7, k.inner);
  CHECK_THAT(msg, Contains("does not enclose"));
}

TEST_CASE("verifier rejects a loop argument used after the loop", "[ir][verifier]") {
  Small k;
  Value* carried = k.loop->region(0).args[1];
  k.store->operands[1] = carried;
  std::string msg = verify_error(k.f);
  check_names(msg, "store", 7, carried);
  CHECK_THAT(msg, Contains("body region of for at k.cpp:5:1"));
}

TEST_CASE("verifier rejects a region without yield", "[ir][verifier]") {
  Small k;
  k.loop->region(0).ops.pop_back();
  std::vector<std::string> all = verify_all(k.f);
  REQUIRE(all.size() == 1); // the typing rule's own yield check is not repeated
  std::string msg = verify_error(k.f);
  check_names(msg, "for", 5, k.inner);
  CHECK_THAT(msg, Contains("must end in yield"));
}

TEST_CASE("verifier rejects an empty region", "[ir][verifier]") {
  Small k;
  k.loop->region(0).ops.clear();
  std::string msg = verify_error(k.f);
  check_names(msg, "for", 5, k.loop->results[0]);
  CHECK_THAT(msg, Contains("is empty"));
}

TEST_CASE("verifier rejects a kernel body without return", "[ir][verifier]") {
  Small k;
  k.f.body.ops.pop_back(); // return
  k.f.body.ops.pop_back(); // store: the body now ends in the for
  std::string msg = verify_error(k.f);
  check_names(msg, "for", 5, k.loop->results[0]);
  CHECK_THAT(msg, Contains("kernel 'small'"));
  CHECK_THAT(msg, Contains("must end in return"));
}

TEST_CASE("verifier rejects a terminator before the end of a block", "[ir][verifier]") {
  Small k;
  Block& body = k.f.body;
  size_t store = body.ops.size() - 2;
  std::swap(body.ops[store], body.ops[store + 1]); // return, then store
  std::string msg = verify_error(k.f);
  INFO(msg);
  CHECK_THAT(msg, Contains("return"));
  CHECK_THAT(msg, Contains("k.cpp:8:"));
  CHECK_THAT(msg, Contains("is not the last op"));
  CHECK_THAT(msg, Contains("store at k.cpp:7:"));
  CHECK(verify_all(k.f).size() == 2); // and the body ends in store
}

TEST_CASE("verifier rejects return inside a loop", "[ir][verifier]") {
  Small k;
  Block& loop_body = k.loop->region(0);
  loop_body.ops.back()->kind = OpKind::Return;
  loop_body.ops.back()->operands.clear();
  std::string msg = verify_error(k.f);
  INFO(msg);
  CHECK_THAT(msg, Contains("return"));
  CHECK_THAT(msg, Contains("k.cpp:6:"));
  CHECK_THAT(msg, Contains("must end in yield"));
}

TEST_CASE("verifier rejects a yield of the wrong type", "[ir][verifier]") {
  Small k;
  Op& yield = *k.loop->region(0).ops.back();
  yield.operands[0] = k.ptrs;
  std::string msg = verify_error(k.f);
  check_names(msg, "for", 5, k.ptrs);
}

TEST_CASE("verifier rejects tile bounds and conditions: control flow is uniform",
          "[ir][verifier]") {
  SECTION("for") {
    Small k;
    Value* tile = k.ptrs->def->operands[1]; // the arange
    k.loop->operands[1] = tile;
    std::string msg = verify_error(k.f);
    check_names(msg, "for", 5, tile);
    CHECK_THAT(msg, Contains("uniform"));
  }
  SECTION("if") {
    Function f("branch");
    Builder b(f);
    b.loc = at(11);
    Value* r = b.arange(0, 4);
    Value* cond = b.binary(OpKind::Lt, r, r);
    Value* scalar_cond = b.binary(OpKind::Lt, b.program_id(0), b.program_id(1));
    b.loc = at(12);
    Op* branch = b.if_op(scalar_cond, {});
    b.set_block(&branch->region(0));
    b.yield({});
    b.set_block(&branch->region(1));
    b.yield({});
    b.set_block(&f.body);
    b.ret();
    REQUIRE(verify_all(f).empty());
    branch->operands[0] = cond;
    std::string msg = verify_error(f);
    check_names(msg, "if", 12, cond);
    CHECK_THAT(msg, Contains("uniform"));
  }
}

TEST_CASE("verifier rejects broken parent links", "[ir][verifier]") {
  SECTION("op") {
    Small k;
    k.scaled->def->parent = &k.loop->region(0);
    std::string msg = verify_error(k.f);
    check_names(msg, "mul", 4, k.scaled);
    CHECK_THAT(msg, Contains("parent link"));
  }
  SECTION("region") {
    Small k;
    k.loop->region(0).parent = nullptr;
    std::string msg = verify_error(k.f);
    check_names(msg, "for", 5, k.loop->results[0]);
    CHECK_THAT(msg, Contains("parent link"));
  }
  SECTION("result") {
    Small k;
    k.scaled->def = k.two->def;
    std::string msg = verify_error(k.f);
    check_names(msg, "mul", 4, k.scaled);
  }
}

TEST_CASE("verifier rejects a value defined twice", "[ir][verifier]") {
  Small k;
  Op& add = *k.inner->def;
  add.results[0] = k.scaled;
  k.scaled->def = &add;
  std::vector<std::string> all = verify_all(k.f);
  REQUIRE(!all.empty());
  std::string joined = fmt::format("{}", fmt::join(all, "\n"));
  CHECK_THAT(joined, Contains("defined twice"));
}

TEST_CASE("verifier rejects unnamed and duplicate parameters", "[ir][verifier]") {
  Small k;
  Value* again = k.f.add_param("x", scalar_type(DType::i32));
  Value* unnamed = k.f.add_param("", scalar_type(DType::i32));
  std::vector<std::string> all = verify_all(k.f);
  REQUIRE(all.size() == 2);
  CHECK_THAT(all[0], Contains("kernel 'small'"));
  CHECK_THAT(all[0], Contains(fmt::format("%{} (", k.x->id)));
  CHECK_THAT(all[0], Contains(fmt::format("%{} (", again->id)));
  CHECK_THAT(all[0], Contains("'x'"));
  CHECK_THAT(all[1], Contains(fmt::format("%{} (", unnamed->id)));
  CHECK_THAT(all[1], Contains("no name"));
}

TEST_CASE("verifier reports every problem, verify the first", "[ir][verifier]") {
  Small k;
  k.scaled->def->operands[1] = k.ptrs; // line 4
  k.store->operands[1] = k.inner;      // line 7
  std::vector<std::string> all = verify_all(k.f);
  REQUIRE(all.size() == 2);
  CHECK_THAT(all[0], Contains("k.cpp:4:"));
  CHECK_THAT(all[1], Contains("k.cpp:7:"));
  std::string msg = verify_error(k.f);
  CHECK_THAT(msg, Contains(all[0]));
  CHECK_THAT(msg, Contains("1 more"));
}

TEST_CASE("verifier rejects a null operand without crashing", "[ir][verifier]") {
  Small k;
  k.loop->operands[1] = nullptr;
  k.loop->region(0).ops.back()->operands[0] = nullptr;
  std::vector<std::string> all = verify_all(k.f);
  REQUIRE(all.size() == 2);
  CHECK_THAT(all[0], Contains("for: operand 1 is null"));
  CHECK_THAT(all[1], Contains("yield: operand 0 is null"));
}
