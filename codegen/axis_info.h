#pragma once
// A forward analysis of integer and pointer tiles (docs/ARCHITECTURE.md): per
// dim, the contiguity (runs of consecutive values), the divisibility (a power of
// two dividing the first value of each run; pointers in elements) and the
// constancy (runs of equal values). Loads and stores use it to pick their
// vector width and layout.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/ir.h"

namespace tilec::codegen {

struct AxisInfo {
  // One entry per dim; a scalar has one entry for a size-1 dim.
  std::vector<int64_t> contiguity, divisibility, constancy;
};

class AxisAnalysis {
public:
  // `int_arg_divisibility`: integer parameters (by name) and a power of two the launch
  // guarantees divides each (CompileOptions::int_arg_divisibility).
  // `int_arg_values`: integer parameters the launch passes with exactly that value
  // (CompileOptions::int_arg_values): constants here.
  explicit AxisAnalysis(const ir::Function& fn, const std::map<std::string, int64_t>& int_arg_divisibility = {},
                        const std::map<std::string, int64_t>& int_arg_values = {});
  const AxisInfo& at(const ir::Value* v) const;
  // The value of an integer scalar or splat known at compile time: a constant, or a parameter
  // compiled in with one value.
  std::optional<int64_t> constant_int(const ir::Value* v) const;

private:
  std::unordered_map<const ir::Value*, int64_t> fixed_; // parameters with a known value
  void visit_block(const ir::Block& b);
  void visit(const ir::Op& op);
  std::optional<AxisInfo> transfer(const ir::Op& op) const;
  void visit_for(const ir::Op& op);
  void visit_if(const ir::Op& op);
  void visit_elementwise(const ir::Op& op);
  std::unordered_map<const ir::Value*, AxisInfo> info_;
};

} // namespace tilec::codegen
