#pragma once
// Checks that a function is well-formed tile IR: every op obeys its typing
// rule, operands are defined before use in a block that encloses the use
// (SSA dominance for structured regions), blocks end in exactly one
// terminator, parent links agree with ownership and kernel parameters have
// unique names.
#include <string>
#include <vector>

#include "ir/ir.h"

namespace tilec::ir {

// Throws UserError at the first problem; the message names the op, its source
// location and the values that disagree.
void verify(const Function& f);

// Every problem found, one message each, in program order.
std::vector<std::string> verify_all(const Function& f);

} // namespace tilec::ir
