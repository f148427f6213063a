#pragma once
// Which tensor descriptor loads (dsl::TensorDesc, ir op desc_load) become TMA copies on sm_90,
// and the tensor maps their launches need. Every other descriptor op is expanded into the
// masked load or store it describes before the lowering plans anything
// (prepare_descriptors). Internal to codegen/ and not installed.
#include <string>
#include <vector>

#include "codegen/compile.h"
#include "ir/ir.h"

namespace tilec::codegen {

// What the runtime encodes at launch (cuTensorMapEncodeTiled on the GPU) for the TMA copies of
// one descriptor: passed to the kernel after its own parameters, in this order.
struct TensorMapPlan {
  const ir::Value* base = nullptr;               // a pointer parameter
  std::vector<const ir::Value*> sizes, strides; // outermost first; each a parameter or a constant
  std::vector<int64_t> box;                     // the box one copy moves, outermost first
  int swizzle = 0;                              // bytes of the shared layout's swizzle pattern (32, 64, 128)
  bool operator==(const TensorMapPlan&) const = default;
};

// The first op strictly between `from` and `to` (ops of one block, `from` first) that may
// write memory: a store, an atomic, or a for or an if (whose regions might); null when none.
// An operand copied asynchronously for `to` is read when `to` issues it, not at `from`.
const ir::Op* writes_between(const ir::Op& from, const ir::Op& to);

// "" when `load` (a desc_load of `fn`) may become TMA copies of its block into a warpgroup
// MMA's operand staging under `o`; otherwise why not ("the arch is sm_80", "its user is an
// add, not a dot", ...). The layout plan then confirms the dot runs on wgmma as expected.
std::string tma_unfit(const ir::Function& fn, const ir::Op& load, const CompileOptions& o);

// The tensor map of a desc_load that TMA copies into `dot`'s operand `idx` (staged k-major
// or not): its box is one swizzle panel of the staging.
TensorMapPlan tensor_map_plan(const ir::Op& load, const ir::Op& dot, int idx, bool kmajor);

// "" when `store` (a desc_store of `fn`) may become TMA stores of its block on sm_90 under `o`
// (staged in shared memory, then copied out by the copy engine); otherwise why not.
std::string tma_store_unfit(const ir::Function& fn, const ir::Op& store, const CompileOptions& o);
// Its tensor map: a box of the block's rows, one swizzle pattern wide (the whole row when it is
// 16 bytes).
TensorMapPlan tensor_map_plan_store(const ir::Op& store);
// The most shared memory a TMA store's block may take to be staged in scratch. A store at the
// kernel's top level (outside every loop and if) may take more where the buffers of its
// pipelined loops hold the block (pipeline_room): it is staged there, in memory no copy uses
// any more (or yet), at no cost in shared memory.
inline constexpr int64_t kMaxTmaStoreBytes = 32 * 1024;
// The bytes of the pipeline buffers of `fn`'s top-level loops that stage dot operands TMA
// copies under `o`: the largest such loop's stages x its stagings (0: none). An estimate made
// before the plans: where the planned buffers are smaller, the block is staged in scratch.
int64_t pipeline_room(const ir::Function& fn, const CompileOptions& o);

// A copy of `fn` whose descriptor ops are all expanded (ir::expand_descriptors) but the loads
// TMA copies under `o`; null when there is nothing to expand (no descriptor op, or only loads
// TMA copies).
ir::Kernel prepare_descriptors(const ir::Function& fn, const CompileOptions& o);

} // namespace tilec::codegen
