#pragma once
// The typing rule of every op, in one place. The builder applies it to each op
// it creates and the verifier to every op of a function.
#include <string>

#include "ir/ir.h"

namespace tilec::ir {

// Returns "" when `op`'s operands, attributes and results agree with its
// kind's rule; otherwise what disagrees, naming the values (e.g.
// "operands %3 (tile<4xf32>) and %5 (tile<8xf32>) differ in shape").
// Regions are checked for their argument and yield types, not recursively.
std::string check_op_types(const Op& op);

// "%3 (tile<4xf32>)"
std::string describe(const Value* v);
// "%3 (f32), %4 (f32)"; "" for none.
std::string describe_all(const std::vector<Value*>& values);

} // namespace tilec::ir
