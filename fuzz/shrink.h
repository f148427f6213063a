#pragma once
// Shrinks a failing fuzz program by delta debugging: it tries smaller grids and warp counts,
// then, op by op from the end, removing stores, replacing an op's result by one of its
// operands or by zero, replacing a loop by its initial values or by one trip of its body and
// an if by one of its branches (dead ops go after each step), and keeps every step after
// which the program is still valid and still fails.
#include <functional>

#include "fuzz/program.h"

namespace tilec::fuzz {

using StillFails = std::function<bool(const Program&)>;

struct ShrinkStats {
  int checks = 0;   // candidates run
  int accepted = 0; // steps kept
};

// At most `max_checks` candidates are run.
Program shrink(const Program& failing, const StillFails& still_fails, int max_checks = 400,
               ShrinkStats* stats = nullptr);

// The number of ops of `p` (every region included, terminators excluded).
int count_ops(const Program& p);

} // namespace tilec::fuzz
