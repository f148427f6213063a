#pragma once
// A forward analysis of integer and pointer tiles (docs/ARCHITECTURE.md): per
// dim, the contiguity (runs of consecutive values), the divisibility (a power of
// two dividing the first value of each run; pointers in elements) and the
// constancy (runs of equal values). Loads and stores use it to pick their
// vector width and layout.
#include <cstdint>
#include <map>
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
  explicit AxisAnalysis(const ir::Function& fn, const std::map<std::string, int64_t>& int_arg_divisibility = {});
  const AxisInfo& at(const ir::Value* v) const;

private:
  void visit_block(const ir::Block& b);
  void visit(const ir::Op& op);
  std::unordered_map<const ir::Value*, AxisInfo> info_;
};

} // namespace tilec::codegen
