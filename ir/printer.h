#pragma once
// The textual form of the tile IR. It is canonical (the module cache hashes
// it) and ir/parser.h reads it back: print(parse(print(k))) == print(k).
//
//   kernel @vector_add(%x: ptr<f32>, %n: i32) {
//     %2 = program_id 0 : i32 loc("add.cpp":3:10)
//     %3 = arange 0 : tile<128xi32>
//     %4 = constant -inf : tile<4x8xf32>           // floats: shortest exact form
//     %5 = add %3, %3 : tile<128xi32> loc("add.cpp":4:12)
//     %6 = load %p, %mask, %other : tile<128xf32>  // mask and other optional
//     %7 = reduce max %4 axis 1 : tile<4xf32>
//     %8 = expand_dims %7 axis 0 : tile<1x4xf32>
//     %9 = permute %4 [1, 0] : tile<8x4xf32>
//     %10, %11 = for %12 = %lb to %ub step %s iter_args(%13 = %a, %14 = %b) -> (f32, i32) {
//       %15 = if %c -> (f32) {
//         yield %13
//       } else {
//         yield %13
//       }
//       yield %15, %14
//     } loc("add.cpp":5:3)
//     return
//   }
//
// (A sketch: real output numbers every value but the parameters.) An op reads
// `results = name operands-and-attributes : result type loc(...)`; an unknown
// location prints nothing.
#include <functional>
#include <string>
#include <vector>

#include "ir/ir.h"

namespace tilec::ir {

// Values are numbered as Function::renumber would number them (without
// mutating `fn`); kernel parameters print by name.
std::string print(const Function& fn);

// Text a caller adds to the print, such as the layouts `tilec ir --stage
// layouts` shows; the parser does not read it back. `ref` names a value as the
// print does. Empty hooks add nothing.
struct PrintHooks {
  using Ref = std::function<std::string(const Value*)>;
  // Added to the op's line before its location (for an op with regions: at the
  // end of the line opening the first).
  std::function<std::string(const Op&, const Ref& ref)> suffix;
  // Whole lines after the op (after its regions), at the op's indentation.
  std::function<std::vector<std::string>(const Op&, const Ref& ref)> after;
  // Whole lines at the top of region `i` of the op, at the region's indentation.
  std::function<std::vector<std::string>(const Op&, size_t i, const Ref& ref)> region_start;
};
std::string print(const Function& fn, const PrintHooks& hooks);

// 16 hex digits of FNV-1a over the printed IR without source locations (they say where a
// kernel was written, not what it computes): what a module records as its ir_hash, so the
// runtime can tell a module built from this IR from one built for another shape or config.
std::string content_hash(const Function& fn);

// Lexical rules the parser shares: a bare name (`%x`, `@k`) is an identifier
// character run; anything else prints quoted (`%"a b"`).
inline bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '$';
}
// `"..."` with \\, \" and \xHH escapes for control bytes.
std::string quote(std::string_view s);

} // namespace tilec::ir
