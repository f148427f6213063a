#pragma once
// Random well-typed tile programs for differential fuzzing. One seed gives one program
// (kernel, parameter values, grid, warps), the same on every run: elementwise chains over
// every dtype, casts, reductions on each axis, broadcasts, permutes and reshapes, masked loads
// and stores with ragged bounds, gathers, atomics, for loops with carried values, nested ifs
// and dots. Programs are free of undefined behaviour (ir/SEMANTICS.md): integer divisors are
// never zero, floats are clamped before they become integers, every unmasked access is in
// bounds, no two lanes store different values to one address, and inexact values
// (fuzz/compare.h) feed only ops that keep their error small.
#include <cstdint>

#include "fuzz/program.h"

namespace tilec::fuzz {

struct GenOptions {
  int max_actions = 24;     // random steps per program (each makes one to a few ops)
  int64_t max_elems = 256;  // elements of the program's main tile shape
  int max_depth = 2;        // nesting of for/if regions
};

Program generate(uint64_t seed, const GenOptions& opts = {});

} // namespace tilec::fuzz
