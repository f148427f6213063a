#pragma once
// What a launch specializes a kernel's compiled code on, read from its arguments: the one rule
// every launcher applies (the cuda and emulate backends compile for it, a module launcher's
// source is handed it, the interpreter widens the offsets it names), as Triton's launcher
// specializes on integer arguments divisible by 16 and equal to 1.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "launch/args.h"

namespace tilec::launch {

struct Specialization {
  // Integer parameters (i1 aside) whose arguments are multiples of 16 (0 included), each
  // mapped to 16: index arithmetic from them is known aligned (CompileOptions::
  // int_arg_divisibility; a module records it in its [divisibility] table).
  std::map<std::string, int64_t> divisibility;
  // Integer parameters (i1 aside) whose arguments are 1, compiled in as that constant
  // (CompileOptions::int_arg_values; the module's [fixed] table).
  std::map<std::string, int64_t> values;
  // Pointer parameters given buffers of more than 2^31 elements: offsets into them are
  // computed in 64 bits (CompileOptions::large_buffers, ir::widen_offsets).
  std::set<std::string> large_buffers;

  bool operator==(const Specialization&) const = default;
  // "stride%16 cstride=1 cache:i64", or "none": how the module cache's key and a person read it.
  std::string str() const;
};

// The specialization of a launch of `fn` with `args` (read for the parameters both have).
Specialization specialize(const ir::Function& fn, const std::vector<Arg>& args);

} // namespace tilec::launch
