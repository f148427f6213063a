#pragma once
// Runs a kernel's tile IR, op by op, over a grid of programs on host buffers:
// the semantic oracle every other backend is checked against.
#include <vector>

#include "ir/ir.h"
#include "launch/args.h"

namespace tilec::interp {

// Runs `fn` for every program of `grid`. Throws UserError for: argument count
// or type mismatch, an unmasked (or unmasked-lane) access outside its buffer
// (naming the kernel, the op's source location, the buffer and the offset),
// integer division by zero, a for loop with a non-positive step.
void interpret(const ir::Function& fn, launch::Grid grid, const std::vector<launch::Arg>& args);

} // namespace tilec::interp
