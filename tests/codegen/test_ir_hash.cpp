// A module's IR hash names what the kernel computes, not where its source lives.
#include <catch2/catch.hpp>

#include <string>

#include "codegen/module.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "templates/kernels.h"

using namespace tilec;

TEST_CASE("the IR hash ignores source locations and absolute paths", "[codegen][module]") {
  ir::Kernel k = templates::softmax(256);
  std::string text = ir::print(*k);
  REQUIRE(text.find(" loc(\"templates/softmax.cpp\":") != std::string::npos);
  // The same kernel as if built from another checkout, at an absolute path.
  std::string moved = text;
  const std::string here = "\"templates/softmax.cpp\"";
  for (size_t at; (at = moved.find(here)) != std::string::npos;)
    moved.replace(at, here.size(), "\"/home/someone/src/tilec/templates/softmax.cpp\"");
  ir::Kernel there = ir::parse(moved);
  REQUIRE(ir::print(*there) != text);
  CHECK(codegen::ir_hash(*there) == codegen::ir_hash(*k));
  // A different kernel hashes differently.
  CHECK(codegen::ir_hash(*templates::softmax(512)) != codegen::ir_hash(*k));
}

TEST_CASE("the IR hash tells apart kernels that differ only in their register asks", "[codegen][module][registers]") {
  ir::Kernel k = templates::softmax(256);
  const std::string plain = codegen::ir_hash(*k);
  k->min_blocks_per_sm = 4;
  const std::string blocks = codegen::ir_hash(*k);
  k->max_registers = 96;
  const std::string ceiling = codegen::ir_hash(*k);
  CHECK(plain != blocks);
  CHECK(blocks != ceiling);
  CHECK(plain != ceiling);
}
