#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "dsl/dsl.h"
#include "ir/printer.h"
#include "templates/kernels.h"

using namespace tilec;
using namespace tilec::dsl;

namespace {

int count_ops(ir::Block& b, ir::OpKind k) {
  int n = 0;
  ir::walk(b, [&](ir::Op& op) { n += op.kind == k; });
  return n;
}

ir::Op* first_op(ir::Block& b, ir::OpKind k) {
  ir::Op* found = nullptr;
  ir::walk(b, [&](ir::Op& op) {
    if (!found && op.kind == k) found = &op;
  });
  return found;
}

// The message of the UserError `f` throws ("" if none).
template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::string here(int line) { return std::string(__FILE__) + ":" + std::to_string(line); }

} // namespace

TEST_CASE("vector_add builds the expected ops", "[dsl]") {
  auto k = templates::vector_add(128);
  REQUIRE(k->params.size() == 4);
  CHECK(k->params[0]->name == "x");
  CHECK(k->params[0]->type.str() == "ptr<f32>");
  CHECK(k->params[3]->type.str() == "i32");
  CHECK(count_ops(k->body, ir::OpKind::Load) == 2);
  CHECK(count_ops(k->body, ir::OpKind::Store) == 1);
  CHECK(count_ops(k->body, ir::OpKind::Return) == 1);
  auto* st = first_op(k->body, ir::OpKind::Store);
  REQUIRE(st->mask());
  CHECK(st->operands[0]->type.str() == "tile<128xptr<f32>>");
  CHECK(st->loc.file.find("vector_add.cpp") != std::string::npos);
}

TEST_CASE("only variables reassigned in a loop are carried", "[dsl]") {
  auto k = templates::matmul(16, 16, 8);
  auto* loop = first_op(k->body, ir::OpKind::For);
  REQUIRE(loop);
  CHECK(loop->results.size() == 1); // acc, and nothing else
  CHECK(loop->results[0]->type.str() == "tile<16x16xf32>");
  CHECK(loop->region(0).args.size() == 2); // iv, acc
  // The store after the loop (C's descriptor store) stores the loop's result.
  auto* st = first_op(k->body, ir::OpKind::DescStore);
  REQUIRE(st);
  CHECK(st->operands.back() == loop->results[0]);
}

TEST_CASE("several carried values and nested loops", "[dsl]") {
  KernelBuilder k("nest");
  auto out = k.arg<Ptr<f32>>("out");
  auto n = k.arg<i32>("n");
  Var a = zeros({4});
  Var b = full({4}, 1.0f);
  Tile untouched = zeros({4});
  for_range(0, n, 1, [&](Scalar i) {
    a = a + b;
    for_range(0, i, 2, [&](Scalar) { b = b * 2.0f; });
  });
  store(out + arange(0, 4), a + b + untouched);
  auto kern = k.finish();
  auto* outer = first_op(kern->body, ir::OpKind::For);
  CHECK(outer->results.size() == 2);
  auto* inner = first_op(outer->region(0), ir::OpKind::For);
  REQUIRE(inner);
  CHECK(inner->results.size() == 1);
}

TEST_CASE("if_then_else yields the variables its branches assign", "[dsl]") {
  KernelBuilder k("branch");
  auto out = k.arg<Ptr<f32>>("out");
  auto n = k.arg<i32>("n");
  Var x = zeros({8});
  Var y = zeros({8});
  if_then_else(n > 3, [&] { x = x + 1.0f; }, [&] { y = y - 1.0f; });
  store(out + arange(0, 8), x + y);
  auto kern = k.finish();
  auto* op = first_op(kern->body, ir::OpKind::If);
  REQUIRE(op);
  CHECK(op->results.size() == 2);
  CHECK(op->region(0).terminator()->operands.size() == 2);
}

TEST_CASE("broadcasting follows numpy rules", "[dsl]") {
  KernelBuilder k("bc");
  auto out = k.arg<Ptr<f32>>("out");
  auto r = arange(0, 4), c = arange(0, 8);
  auto grid = r.col() * 8 + c.row();
  CHECK(grid.shape() == ir::Shape{4, 8});
  auto f = grid.to(f32) * 0.5;
  CHECK(f.dtype() == ir::DType::f32);
  auto promoted = r + 1.5; // an int tile meeting a float literal becomes f32
  CHECK(promoted.dtype() == ir::DType::f32);
  store(out + grid, f);
  k.finish();
}

TEST_CASE("shape mistakes name the user's file and line and both shapes", "[dsl][errors]") {
  KernelBuilder k("bad");
  auto x = k.arg<Ptr<f32>>("x");
  int line = 0;
  std::string msg = error_of([&] {
    line = __LINE__ + 1;
    auto s = arange(0, 8) + arange(0, 16);
  });
  CHECK_THAT(msg, Catch::Contains(here(line)));
  CHECK_THAT(msg, Catch::Contains("[8]"));
  CHECK_THAT(msg, Catch::Contains("[16]"));

  msg = error_of([&] {
    line = __LINE__ + 1;
    auto d = dot(zeros({4, 8}), zeros({4, 8}));
  });
  CHECK_THAT(msg, Catch::Contains(here(line)));
  CHECK_THAT(msg, Catch::Contains("[4, 8]"));

  msg = error_of([&] {
    line = __LINE__ + 1;
    store(x + arange(0, 8), zeros({16}));
  });
  CHECK_THAT(msg, Catch::Contains(here(line)));

  msg = error_of([&] {
    line = __LINE__ + 1;
    auto v = load(x + arange(0, 8), arange(0, 8)); // mask is not i1
  });
  CHECK_THAT(msg, Catch::Contains(here(line)));
  CHECK_THAT(msg, Catch::Contains("i1"));

  msg = error_of([&] {
    line = __LINE__ + 1;
    auto v = arange(0, 12);
  });
  CHECK_THAT(msg, Catch::Contains(here(line)));
  CHECK_THAT(msg, Catch::Contains("power of two"));

  msg = error_of([&] {
    line = __LINE__ + 1;
    for_range(0, arange(0, 4), 1, [&](Scalar) {});
  });
  CHECK_THAT(msg, Catch::Contains(here(line)));
  CHECK_THAT(msg, Catch::Contains("scalar"));
}

TEST_CASE("a carried variable may not change type in the loop", "[dsl][errors]") {
  KernelBuilder k("retype");
  auto n = k.arg<i32>("n");
  Var a = zeros({4});
  int line = 0;
  std::string msg = error_of([&] {
    for_range(0, n, 1, [&](Scalar) {
      line = __LINE__ + 1;
      a = zeros({8});
    });
  });
  CHECK_THAT(msg, Catch::Contains(here(line)));
  CHECK_THAT(msg, Catch::Contains("tile<4xf32>"));
  CHECK_THAT(msg, Catch::Contains("tile<8xf32>"));
}

TEST_CASE("DSL calls outside a kernel are errors, not crashes", "[dsl][errors]") {
  CHECK_THAT(error_of([] { auto t = arange(0, 4); }), Catch::Contains("KernelBuilder"));
}

TEST_CASE("max_registers and min_blocks_per_sm are kernel attributes, checked", "[dsl][registers]") {
  KernelBuilder kb("k");
  kb.min_blocks_per_sm(4);
  kb.max_registers(96);
  CHECK_THROWS_WITH(kb.max_registers(300), Catch::Contains("max_registers 300 must be from 24 to 255"));
  CHECK_THROWS_WITH(kb.max_registers(8), Catch::Contains("max_registers 8 must be from 24 to 255"));
  ir::Kernel k = kb.finish();
  CHECK(k->min_blocks_per_sm == 4);
  CHECK(k->max_registers == 96);
  CHECK_THAT(ir::print(*k), Catch::Contains("min_blocks_per_sm 4 max_registers 96 {"));
}

TEST_CASE("for_range takes a stage count for its loads, checked", "[dsl][pipeline]") {
  {
    KernelBuilder k("staged");
    auto x = k.arg<Ptr<f32>>("x");
    Var acc = zeros({8});
    for_range(0, 64, 8, RangeOptions{3}, [&](Scalar i) { acc = acc + load(x + i + arange(0, 8)); });
    store(x + arange(0, 8), acc);
    ir::Kernel kern = k.finish();
    ir::Op* loop = first_op(kern->body, ir::OpKind::For);
    REQUIRE(loop);
    CHECK(loop->attrs.num_stages == 3);
  }
  KernelBuilder k("bad_stages");
  int line = __LINE__ + 1;
  std::string e = error_of([&] { for_range(0, 64, 8, RangeOptions{0}, [&](Scalar) {}); });
  CHECK(e == here(line) + ":43: for_range: num_stages 0 must be from 1 to 8");
}

TEST_CASE("new ops: dtype rules and clear errors", "[dsl][ops]") {
  KernelBuilder kb("ops");
  auto p = kb.arg<Ptr<f32>>("p");
  auto n = arange(0, 16);
  auto x = load(p + n);
  CHECK(where(x > 0, 1.0, 0.0).type().dtype() == ir::DType::f32); // two numbers take the mask's shape
  CHECK(where(x > 0, 1, 0).type().dtype() == ir::DType::i32);
  CHECK(where(x > 0, 1, 0).type().shape == ir::Shape{16});
  CHECK(sin(n).type().dtype() == ir::DType::f32); // integers become f32
  CHECK(pow(n, 2).type().dtype() == ir::DType::f32);
  CHECK(fma(x, 2, n).type().dtype() == ir::DType::f32);
  CHECK(isnan(x).type().dtype() == ir::DType::i1);
  CHECK(isinf(n).type().dtype() == ir::DType::i1);
  CHECK((n << 3).type().dtype() == ir::DType::i32);
  CHECK(cdiv(n, 4).type().dtype() == ir::DType::i32);
  int line = __LINE__ + 1;
  CHECK_THAT(error_of([&] { (void)(x << 2); }), Catch::Contains("<<: needs integer operands") &&
                                                      Catch::Contains(here(line)));
  CHECK_THAT(error_of([&] { (void)umulhi(n > 2, n > 3); }), Catch::Contains("umulhi") && Catch::Contains("i1"));
  CHECK_THAT(error_of([&] { (void)cdiv(x, 2); }), Catch::Contains("cdiv: needs integer operands"));
  kb.finish();
}
