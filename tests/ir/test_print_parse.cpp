#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>
#include <fstream>
#include <cmath>
#include <limits>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "ir/builder.h"
#include "ir/parser.h"
#include "ir/printer.h"

using namespace tilec;
using namespace tilec::ir;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Locations cycle through known and unknown ones, with a file name that
// needs escaping, so every op's location round-trips too.
struct Locs {
  int n = 0;
  SourceLoc next() {
    ++n;
    if (n % 5 == 0) return {};
    return {n % 3 ? "dsl/kernels.cpp" : "odd \"dir\"\\\tname.cpp", n, n % 7};
  }
};

// One kernel that uses every OpKind (and every dtype, pointers included).
Kernel coverage_kernel() {
  auto fn = std::make_shared<Function>("coverage");
  Builder b(*fn);
  Locs locs;
  auto at = [&]() -> Builder& {
    b.loc = locs.next();
    return b;
  };
  std::vector<Value*> ptrs;
  for (DType t : kAllDTypes)
    ptrs.push_back(fn->add_param(fmt::format("p_{}", dtype_name(t)), {{t, true}, {}}));
  Value* n = fn->add_param("n", scalar_type(DType::i32));
  Value* big = fn->add_param("big", scalar_type(DType::i64));
  Value* flag = fn->add_param("flag", scalar_type(DType::i1));
  Value* xf = ptrs[7]; // ptr<f32>

  Value* pid = at().program_id(0);
  Value* np = at().num_programs(2);
  Value* offs = at().arange(0, 16);
  Value* offs2 = at().arange(-3, 13);
  Value* base = at().binary(OpKind::Mul, pid, np);
  Value* idx = at().binary(OpKind::Add, at().splat(base, {16}), offs);
  idx = at().binary(OpKind::Sub, idx, offs2);
  Value* mask = at().binary(OpKind::Lt, idx, at().splat(n, {16}));

  // Loads and stores of every dtype, with and without mask / other.
  for (size_t i = 0; i < ptrs.size(); ++i) {
    Value* p = at().addptr(at().splat(ptrs[i], {16}), idx);
    Value* plain = at().load(p);
    Value* masked = at().load(p, mask);
    Value* with_other = at().load(p, mask, plain);
    at().store(p, masked);
    at().store(p, with_other, mask);
    for (DType to : kAllDTypes) at().cast(plain, to);
  }
  Value* fp = at().addptr(at().splat(xf, {16}), idx);
  Value* x = at().load(fp, mask);
  at().atomic_add(fp, x);
  Value* ip = at().addptr(at().splat(ptrs[3], {16}), idx);
  at().atomic_add(ip, idx, mask);
  for (OpKind k : {OpKind::AtomicMax, OpKind::AtomicMin, OpKind::AtomicAnd, OpKind::AtomicOr, OpKind::AtomicXor,
                   OpKind::AtomicXchg})
    at().atomic_rmw(k, ip, idx, k == OpKind::AtomicXchg ? nullptr : mask);
  at().atomic_cas(fp, x, x);
  // A tensor descriptor's block: [4, 16] of a [n, big] tensor at (pid, n), stored back.
  {
    Value* one = at().constant(scalar_type(DType::i64), ConstValue::of_int(1));
    Value* block = at().create(OpKind::DescLoad, {xf, n, big, big, one, pid, n}, {tile_type(DType::f32, {4, 16})})->result();
    at().create(OpKind::DescStore, {xf, n, big, big, one, pid, n, block}, {});
  }
  at().print(x, "x \"quoted\"");
  at().atomic_cas(ip, idx, idx, mask);

  // Every unary, binary and compare op, on floats and on integers.
  for (OpKind k : {OpKind::Exp, OpKind::Exp2, OpKind::Log, OpKind::Tanh, OpKind::Sqrt, OpKind::Rsqrt,
                   OpKind::Abs, OpKind::Neg, OpKind::Log2, OpKind::Sigmoid, OpKind::Floor, OpKind::Ceil,
                   OpKind::Round, OpKind::Sin, OpKind::Cos, OpKind::Erf})
    x = at().unary(k, x);
  x = at().binary(OpKind::Pow, x, x);
  x = at().fma(x, x, x);
  x = at().bitcast(at().bitcast(x, DType::i32), DType::f32);
  for (OpKind k : {OpKind::Shl, OpKind::AShr, OpKind::LShr, OpKind::UMulHi}) idx = at().binary(k, idx, offs);
  at().unary(OpKind::Abs, idx);
  at().unary(OpKind::Neg, idx);
  for (OpKind k : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Rem, OpKind::Min,
                   OpKind::Max}) {
    x = at().binary(k, x, x);
    idx = at().binary(k, idx, offs);
  }
  for (OpKind k : {OpKind::And, OpKind::Or, OpKind::Xor}) {
    idx = at().binary(k, idx, offs);
    mask = at().binary(k, mask, mask);
  }
  for (OpKind k : {OpKind::Eq, OpKind::Ne, OpKind::Lt, OpKind::Le, OpKind::Gt, OpKind::Ge}) {
    mask = at().binary(OpKind::Xor, mask, at().binary(k, x, x));
    at().binary(k, idx, offs);
  }
  at().select(mask, x, at().unary(OpKind::Neg, x));
  at().assert_true(mask, "a \"quoted\" message\\ with escapes");

  // Constants of every dtype, float specials included.
  for (DType t : kAllDTypes) at().constant(scalar_type(t), ConstValue::of_int(1));
  for (double f : {kInf, -kInf, std::nan(""), -0.0, 0.1, 1.0 / 3, 5e-324, 1e300, 100.0})
    at().constant(tile_type(DType::f32, {2, 8}), ConstValue::of_float(f));
  at().constant(tile_type(DType::i64, {4}), ConstValue::of_int(std::numeric_limits<int64_t>::min()));
  at().constant(scalar_type(DType::i64), ConstValue::of_int(std::numeric_limits<int64_t>::max()));
  at().constant(scalar_type(DType::i1), ConstValue::of_int(0));
  Attrs int_for_float; // an integer payload on a float type, as create() allows
  int_for_float.value = ConstValue::of_int(-7);
  at().create(OpKind::Constant, {}, {scalar_type(DType::f16)}, int_for_float);

  // Shape ops, dot and every reduction.
  Value* row = at().expand_dims(x, 0);                   // [1, 16]
  Value* mat = at().broadcast(row, {8, 16});             // [8, 16]
  Value* cube = at().reshape(mat, {2, 4, 16});           // [2, 4, 16]
  Value* perm = at().permute(cube, {2, 0, 1});           // [16, 2, 4]
  Value* flat = at().reshape(perm, {16, 8});             // [16, 8]
  Value* tr = at().permute(flat, {1, 0});                // [8, 16]
  Value* acc = at().constant(tile_type(DType::f32, {8, 8}), ConstValue::of_float(0));
  Value* d = at().dot(at().cast(tr, DType::f16), at().cast(flat, DType::f16), acc);
  for (ReduceKind k : {ReduceKind::sum, ReduceKind::max, ReduceKind::min, ReduceKind::prod}) {
    at().reduce(k, d, 0);
    at().reduce(k, d, 1);
    at().scan(k, d, 1);
  }
  Value* s = at().reduce(ReduceKind::sum, at().reduce(ReduceKind::max, d, 1), 0);

  // Nested for loops with carried values, an if with results inside them, and
  // an if without results.
  Value* zero = at().constant(scalar_type(DType::i32), ConstValue::of_int(0));
  Value* one = at().constant(scalar_type(DType::i32), ConstValue::of_int(1));
  Op* outer = at().for_op(zero, n, one, {s, acc});
  b.set_block(&outer->region(0));
  {
    Value* iv = outer->region(0).args[0];
    Value* cs = outer->region(0).args[1];
    Value* cacc = outer->region(0).args[2];
    Value* lb64 = at().cast(iv, DType::i64);
    Op* inner = at().for_op(lb64, big, at().cast(one, DType::i64), {cs});
    b.set_block(&inner->region(0));
    {
      Value* c = inner->region(0).args[1];
      Value* pos = at().binary(OpKind::Gt, c, at().constant(scalar_type(DType::f32), ConstValue::of_float(0.5)));
      Op* branch = at().if_op(pos, {scalar_type(DType::f32), tile_type(DType::f32, {8, 8})});
      b.set_block(&branch->region(0));
      at().yield({at().binary(OpKind::Mul, c, c), cacc});
      b.set_block(&branch->region(1));
      at().yield({c, at().dot(at().cast(tr, DType::f16), at().cast(flat, DType::f16), cacc)});
      b.set_block(&inner->region(0));
      at().yield({branch->results[0]});
    }
    b.set_block(&outer->region(0));
    Op* empty = at().for_op(zero, n, one, {});
    b.set_block(&empty->region(0));
    at().yield({});
    b.set_block(&outer->region(0));
    at().yield({inner->results[0], cacc});
  }
  b.set_block(&fn->body);
  Op* side = at().if_op(flag, {});
  b.set_block(&side->region(0));
  at().store(xf, outer->results[0]);
  at().yield({});
  b.set_block(&side->region(1));
  at().yield({});
  b.set_block(&fn->body);
  at().store(at().addptr(at().splat(xf, {8, 8}), at().cast(at().broadcast(at().expand_dims(at().arange(0, 8), 1), {8, 8}), DType::i64)),
             outer->results[1]);
  at().ret();
  return fn;
}

Kernel vector_add() {
  auto fn = std::make_shared<Function>("vector_add");
  Builder b(*fn);
  Value* x = fn->add_param("x", {{DType::f32, true}, {}});
  Value* out = fn->add_param("out", {{DType::f32, true}, {}});
  Value* n = fn->add_param("n", scalar_type(DType::i32));
  b.loc = {"add.cpp", 3, 15};
  Value* pid = b.splat(b.program_id(0), {4});
  Value* offs = b.binary(OpKind::Add, pid, b.arange(0, 4));
  b.loc = {"add.cpp", 4, 0};
  Value* mask = b.binary(OpKind::Lt, offs, b.splat(n, {4}));
  b.loc = {};
  Value* v = b.load(b.addptr(b.splat(x, {4}), offs), mask);
  b.store(b.addptr(b.splat(out, {4}), offs), v, mask);
  b.ret();
  return fn;
}

// The op name of each printed line ("%3 = add ..." -> "add").
std::set<std::string> printed_op_names(const std::string& text) {
  std::set<std::string> names;
  std::istringstream in(text);
  std::regex op_line(R"(^\s*(?:%[^=]*= )?([a-z_0-9]+))");
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, m, op_line)) names.insert(m[1]);
  return names;
}

// Structural equality of two functions: kinds, attrs, locations, types and
// the (renumbered) ids of operands.
void require_same(Function& a, Function& b) {
  a.renumber();
  b.renumber();
  REQUIRE(a.name == b.name);
  REQUIRE(a.params.size() == b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    CHECK(a.params[i]->name == b.params[i]->name);
    CHECK(a.params[i]->type == b.params[i]->type);
  }
  std::vector<Op*> ops_a, ops_b;
  walk(a.body, [&](Op& op) { ops_a.push_back(&op); });
  walk(b.body, [&](Op& op) { ops_b.push_back(&op); });
  REQUIRE(ops_a.size() == ops_b.size());
  for (size_t i = 0; i < ops_a.size(); ++i) {
    const Op &x = *ops_a[i], &y = *ops_b[i];
    INFO("op " << i << " " << op_name(x.kind));
    REQUIRE(x.kind == y.kind);
    CHECK(x.attrs == y.attrs);
    CHECK(x.loc == y.loc);
    REQUIRE(x.operands.size() == y.operands.size());
    for (size_t j = 0; j < x.operands.size(); ++j) CHECK(x.operands[j]->id == y.operands[j]->id);
    REQUIRE(x.results.size() == y.results.size());
    for (size_t j = 0; j < x.results.size(); ++j) CHECK(x.results[j]->type == y.results[j]->type);
    REQUIRE(x.regions.size() == y.regions.size());
    for (size_t j = 0; j < x.regions.size(); ++j)
      CHECK(x.regions[j]->args.size() == y.regions[j]->args.size());
  }
}

std::string parse_error(std::string_view text) {
  try {
    parse(text, "k.tir");
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

} // namespace

TEST_CASE("printed IR has the documented syntax", "[ir][parser]") {
  Kernel k = vector_add();
  CHECK(print(*k) == R"(kernel @vector_add(%x: ptr<f32>, %out: ptr<f32>, %n: i32) {
  %3 = program_id 0 : i32 loc("add.cpp":3:15)
  %4 = splat %3 : tile<4xi32> loc("add.cpp":3:15)
  %5 = arange 0 : tile<4xi32> loc("add.cpp":3:15)
  %6 = add %4, %5 : tile<4xi32> loc("add.cpp":3:15)
  %7 = splat %n : tile<4xi32> loc("add.cpp":4:0)
  %8 = lt %6, %7 : tile<4xi1> loc("add.cpp":4:0)
  %9 = splat %x : tile<4xptr<f32>>
  %10 = addptr %9, %6 : tile<4xptr<f32>>
  %11 = load %10, %8 : tile<4xf32>
  %12 = splat %out : tile<4xptr<f32>>
  %13 = addptr %12, %6 : tile<4xptr<f32>>
  store %13, %11, %8
  return
}
)");
}

TEST_CASE("every op kind round-trips through print and parse", "[ir][parser]") {
  Kernel k = coverage_kernel();
  std::string text = print(*k);
  Kernel back = parse(text, "coverage.tir");
  CHECK(print(*back) == text);
  require_same(*k, *back);
  CHECK(print(*parse(print(*back))) == text);
}

TEST_CASE("the coverage kernel prints every OpKind", "[ir][parser]") {
  std::set<std::string> names = printed_op_names(print(*coverage_kernel()));
  for (int i = 0; i < kNumOpKinds; ++i) {
    auto k = static_cast<OpKind>(i);
    INFO("op kind " << op_name(k) << " is missing from the coverage kernel");
    CHECK(names.count(std::string(op_name(k))) == 1);
  }
}

TEST_CASE("print is deterministic and does not renumber", "[ir][parser]") {
  Kernel k = coverage_kernel();
  std::vector<int> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(k->params[i]->id);
  std::string first = print(*k);
  CHECK(print(*k) == first);
  for (int i = 0; i < 3; ++i) CHECK(k->params[i]->id == ids[i]);
  k->renumber();
  CHECK(print(*k) == first);
}

TEST_CASE("float and integer constants round-trip bit for bit", "[ir][parser]") {
  std::vector<double> floats = {0.0, -0.0, 1.0, -1.5, 0.1, 1.0 / 3, 1e16, 123456789012345678.0,
                                5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1e-300,
                                kInf, -kInf, std::numeric_limits<double>::quiet_NaN(),
                                -std::numeric_limits<double>::quiet_NaN(),
                                std::bit_cast<double>(uint64_t{0x7ff0000000000123})};
  std::vector<int64_t> ints = {0, -1, 1, std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max()};
  auto fn = std::make_shared<Function>("consts");
  Builder b(*fn);
  for (double f : floats) b.constant(scalar_type(DType::f32), ConstValue::of_float(f));
  for (int64_t i : ints) b.constant(scalar_type(DType::i64), ConstValue::of_int(i));
  std::string text = print(*fn);
  Kernel back = parse(text);
  CHECK(print(*back) == text);
  REQUIRE(back->body.ops.size() == floats.size() + ints.size());
  for (size_t i = 0; i < floats.size(); ++i) {
    const ConstValue& v = back->body.ops[i]->attrs.value;
    INFO(text);
    CHECK(v.is_float);
    CHECK(std::bit_cast<uint64_t>(v.f) == std::bit_cast<uint64_t>(floats[i]));
  }
  for (size_t i = 0; i < ints.size(); ++i) {
    const ConstValue& v = back->body.ops[floats.size() + i]->attrs.value;
    CHECK(!v.is_float);
    CHECK(v.i == ints[i]);
  }
}

TEST_CASE("odd kernel and parameter names round-trip", "[ir][parser]") {
  auto fn = std::make_shared<Function>("my kernel\n");
  fn->add_param("a b", scalar_type(DType::i32));
  fn->add_param("", scalar_type(DType::i32));
  fn->add_param("7", scalar_type(DType::i32));
  fn->add_param("dup", scalar_type(DType::i32));
  fn->add_param("dup", scalar_type(DType::i32));
  Builder b(*fn);
  b.binary(OpKind::Add, fn->params[0], fn->params[4]);
  std::string text = print(*fn);
  CHECK(text.starts_with(R"(kernel @"my kernel\x0a"(%"a b": i32, %1: i32, %2: i32, %dup: i32, %4: i32) {)"));
  Kernel back = parse(text);
  CHECK(back->name == fn->name);
  CHECK(back->params[0]->name == "a b");
  CHECK(print(*back) == text);
}

TEST_CASE("the register asks print after the parameters, round-trip and are checked", "[ir][parser]") {
  auto fn = std::make_shared<Function>("k");
  fn->add_param("n", scalar_type(DType::i32));
  fn->min_blocks_per_sm = 4;
  Builder b(*fn);
  b.ret();
  auto round_trip = [&](const std::string& head) {
    std::string text = print(*fn);
    CHECK(text.starts_with(head));
    Kernel back = parse(text);
    CHECK(back->min_blocks_per_sm == 4);
    CHECK(back->max_registers == fn->max_registers);
    CHECK(print(*back) == text);
    CHECK(clone(*fn)->min_blocks_per_sm == 4);
    CHECK(clone(*fn)->max_registers == fn->max_registers);
  };
  round_trip("kernel @k(%n: i32) min_blocks_per_sm 4 {");
  fn->max_registers = 96;
  round_trip("kernel @k(%n: i32) min_blocks_per_sm 4 max_registers 96 {");
  CHECK_THAT(parse_error("kernel @k() min_blocks_per_sm 0 {\n  return\n}"),
             Catch::Matchers::StartsWith("k.tir:1:31: min_blocks_per_sm 0 must be from 1 to 32"));
  CHECK(parse("kernel @k() max_registers 24 {\n  return\n}")->max_registers == 24);
  CHECK_THAT(parse_error("kernel @k() max_registers 256 {\n  return\n}"),
             Catch::Matchers::StartsWith("k.tir:1:27: max_registers 256 must be from 24 to 255"));
  CHECK_THAT(parse_error("kernel @k() max_registers 16 {\n  return\n}"),
             Catch::Matchers::StartsWith("k.tir:1:27: max_registers 16 must be from 24 to 255"));
}

TEST_CASE("hand-written IR with names and comments parses", "[ir][parser]") {
  Kernel k = parse(R"(// scale a vector
kernel @scale(%x: ptr<f32>, %n: i32) {
  %offs = arange 0 : tile<64xi32>
  %xs = splat %x : tile<64xptr<f32>>   // pointers
  %p = addptr %xs, %offs : tile<64xptr<f32>>
  %two = constant 2.0 : tile<64xf32>
  %one = constant 1 : i32
  %zero = constant 0 : i32
  %v = load %p : tile<64xf32>
  %r = for %i = %zero to %n step %one iter_args(%acc = %v) -> (tile<64xf32>) {
    %next = mul %acc, %two : tile<64xf32>
    yield %next
  } loc(unknown)
  store %p, %r loc("scale.cpp":9)
  return
}
)");
  CHECK(k->params[0]->name == "x");
  CHECK(k->body.ops.size() == 10);
  CHECK(k->body.ops[8]->loc == SourceLoc{"scale.cpp", 9, 0});
  std::string text = print(*k);
  CHECK(text.find("%9 = for %10 = %7 to %n step %6 iter_args(%11 = %8) -> (tile<64xf32>) {") !=
        std::string::npos);
  CHECK(print(*parse(text)) == text);
}

TEST_CASE("parse errors name the position and what was expected", "[ir][parser]") {
  const std::string head = "kernel @k(%x: i32, %f: f32) {\n";
  struct Case {
    std::string text;
    std::string message;
  };
  std::vector<Case> cases = {
      {head + "  %1 = add %x %x : i32\n}", "k.tir:2:15: expected ',' or ':' after an operand, found '%x'"},
      {head + "  %1 = add %x, foo : i32\n}", "k.tir:2:16: expected an operand after ',', found 'foo'"},
      {head + "  %1 = add %x, %y : i32\n}", "k.tir:2:16: undefined value %y"},
      {head + "  %1 = add %x, %f : i32\n}", "k.tir:2:8: add: operands %x (i32) and %f (f32) differ in type"},
      {head + "  %1 = add %x, %x : f32\n}", "k.tir:2:8: add: result %1 (f32) should be i32"},
      {head + "  %x = add %x, %x : i32\n}", "k.tir:2:3: redefinition of %x"},
      {head + "  %1 = frobnicate %x : i32\n}", "k.tir:2:8: unknown op 'frobnicate'"},
      {head + "  %1 = constant 0 : tile<3xi32>\n}", "k.tir:2:26: tile dimension 3 is not a power of two"},
      {head + "  %1 = constant 0 : tile<4xi33>\n}", "k.tir:2:28: expected a type"},
      {head + "  %1 = constant 0 : tile<4i32>\n}", "k.tir:2:27: expected 'x' after a tile dimension, found 'i32'"},
      {head + "  %1 = constant 1e999 : f32\n}", "k.tir:2:17: float 1e999 is out of range"},
      {head + "  %1 = program_id 99999999999999999999 : i32\n}", "k.tir:2:19: integer 99999999999999999999 is out of range"},
      {head + "  %1 = program_id 3 : i32\n}", "k.tir:2:8: program_id: axis 3 is not 0, 1 or 2"},
      {head + "  %1, %2 = add %x, %x : i32\n}", "k.tir:2:3: 'add' has 1 result, but 2 names are given"},
      {head + "  store %x, %x loc(\"a.cpp:1)\n}", "k.tir:2:20: unterminated string"},
      {head + "  return\n", "k.tir:3:1: expected '}' to close the region opened at k.tir:1:29, found end of input"},
      {head + "  return\n} extra", "k.tir:3:3: expected end of input after the kernel, found 'extra'"},
      {head + "  %c = eq %x, %x : i1\n  %r = if %c -> (i32) {\n    %in = add %x, %x : i32\n"
              "    yield %in\n  } else {\n    yield %in\n  }\n}",
       "k.tir:7:11: %in is defined inside a region that does not enclose this use"},
      {head + "  %c = eq %x, %x : i1\n  %r = if %c -> (i32) {\n    yield %x\n  } else {\n    yield %f\n  }\n}",
       "k.tir:3:8: if: else region yields %f (f32) for result %r (i32)"},
      {head + "  %c = eq %x, %x : i1\n  if %c {\n    yield\n  }\n}", "k.tir:6:1: expected 'else' after the then region, found '}'"},
      {head + "  yield\n}", "k.tir:2:3: yield: yield outside a for, if or combine region"},
      {"kernel k() {}", "k.tir:1:8: expected '@name' after 'kernel', found 'k'"},
      {"", "k.tir:1:1: expected 'kernel' at the start of the input, found end of input"},
      {"kernel @k(\x01", "k.tir:1:11: expected a parameter name, found '\\x01'"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    std::string got = parse_error(c.text);
    CHECK_THAT(got, Catch::Matchers::StartsWith(c.message));
  }
}

TEST_CASE("deeply nested regions are an error, not a stack overflow", "[ir][parser]") {
  std::string text = "kernel @k(%c: i1) {\n";
  const int depth = 100000;
  for (int i = 0; i < depth; ++i) text += "if %c {\n";
  std::string msg = parse_error(text);
  CHECK_THAT(msg, Catch::Matchers::Contains("regions are nested more than"));
  CHECK_THAT(msg, Catch::Matchers::StartsWith("k.tir:66:7:"));
}

TEST_CASE("mangled IR never escapes as anything but UserError", "[ir][parser]") {
  const std::string text = print(*coverage_kernel());
  std::mt19937 rng(1234);
  const std::string junk = "%@\"{}()[]<>,:=-x0123456789.eainf_ \n\\\x01\xff";
  int parsed = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    std::string t = text;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % t.size();
      switch (rng() % 4) {
      case 0: t[pos] = junk[rng() % junk.size()]; break;
      case 1: t.erase(pos, 1 + rng() % 8); break;
      case 2: t.insert(pos, 1, junk[rng() % junk.size()]); break;
      default: t.resize(pos); break;
      }
      if (t.empty()) t.push_back('k');
    }
    INFO(t);
    try {
      Kernel k = parse(t);
      ++parsed;
      std::string once = print(*k);
      CHECK(print(*parse(once)) == once);
    } catch (const UserError&) {
    }
  }
  CHECK(parsed > 0);
}

TEST_CASE("broken IR still prints, marked, and does not parse", "[ir][parser]") {
  Kernel k = vector_add();
  Function other("other");
  Value* stray = other.add_param("stray", scalar_type(DType::i32));
  k->body.ops[0]->results[0] = stray;   // program_id's result now belongs elsewhere
  k->body.ops[3]->operands[1] = nullptr; // add lost an operand
  std::string text = print(*k);
  CHECK_THAT(text, Catch::Matchers::Contains("%<<null>>"));
  CHECK_THAT(text, Catch::Matchers::Contains("%<<undefined:"));
  CHECK_THROWS_AS(parse(text), UserError);
}

TEST_CASE("non-finite float constants are safe for every dtype", "[ir][parser]") {
  auto fn = std::make_shared<Function>("k");
  Builder b(*fn);
  CHECK(ConstValue::of_float(kInf).i == 0);
  CHECK(ConstValue::of_float(std::nan("")).i == 0);
  CHECK_THROWS_AS(b.constant(scalar_type(DType::i32), ConstValue::of_float(kInf)), UserError);
  CHECK_THROWS_AS(b.constant(scalar_type(DType::i64), ConstValue::of_float(1e300)), UserError);
  CHECK(b.constant(scalar_type(DType::i64), ConstValue::of_float(-4.0))->def->attrs.value.i == -4);
}

TEST_CASE("a for loop's stages print, parse and are checked", "[ir][parser][pipeline]") {
  const std::string text = R"(kernel @staged(%x: ptr<f32>, %n: i32) {
  %2 = constant 0 : i32
  %3 = constant 4 : i32
  for %4 = %2 to %n step %3 stages 3 {
    yield
  }
  return
}
)";
  Kernel k = parse(text, "staged.tir");
  CHECK(print(*k) == text);
  bool found = false;
  walk(k->body, [&](Op& op) {
    if (op.kind == OpKind::For) found = op.attrs.num_stages == 3;
  });
  CHECK(found);
  auto with = [&](const std::string& stages) {
    std::string t = text;
    t.replace(t.find("stages 3"), 8, "stages " + stages);
    return parse_error(t);
  };
  CHECK_THAT(with("0"), Catch::Contains("stages 0 must be from 1 to 8"));
  CHECK_THAT(with("9"), Catch::Contains("stages 9 must be from 1 to 8"));
  // One stage is the default and is not printed.
  std::string one = text;
  one.replace(one.find(" stages 3"), 9, "");
  CHECK(print(*parse(one, "one.tir")) == one);
}

TEST_CASE("the Triton table names every IR op", "[ir][docs]") {
  std::ifstream in(std::string(TILEC_SOURCE_DIR) + "/docs/TRITON_OPS.md");
  REQUIRE(in.good());
  // The backquoted names in each table row's third column (cells split at unescaped '|').
  std::set<std::string> named;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("|")) continue;
    std::vector<std::string> cells(1);
    for (size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '|' && line[i - 1] != '\\') cells.emplace_back();
      else cells.back() += line[i];
    }
    if (cells.size() < 4) continue;
    static const std::regex quoted("`([a-z_0-9]+)`");
    for (std::sregex_iterator it(cells[2].begin(), cells[2].end(), quoted), end; it != end; ++it)
      named.insert((*it)[1].str());
  }
  std::vector<std::string> missing;
  for (int i = 0; i < ir::kNumOpKinds; ++i) {
    std::string name(op_name(static_cast<OpKind>(i)));
    if (!named.count(name)) missing.push_back(name);
  }
  INFO("IR ops the third column of docs/TRITON_OPS.md does not name: " << fmt::format("{}", fmt::join(missing, ", ")));
  CHECK(missing.empty());
}
