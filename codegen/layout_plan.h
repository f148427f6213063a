#pragma once
// Assigns layouts to the tiles of a kernel (docs/ARCHITECTURE.md "The lowering in depth").
//
// Loads take the coalesced layout their address tile's contiguity asks for;
// reduce, dot, for/if results and non-trivial reshapes get one layout each
// ("native"). Everything else (elementwise ops, arange, constants, splat,
// broadcast, expand_dims, permute) is computed directly in whatever layout
// its users ask for, so no data moves for them. A native value asked for in
// another layout is converted through shared memory once, where it is defined.
#include <unordered_map>
#include <set>
#include <vector>

#include "codegen/axis_info.h"
#include "codegen/layout.h"
#include "ir/ir.h"

// The ops computed directly in whatever layouts their users ask for, moving no
// data: ir/ops.def's elementwise categories and these views and elementwise-like
// ops. The plan propagates layouts through them and the lowering computes them
// once per layout asked for, both from this one list (a trivial reshape is
// treated alike by both). X(Enum, "printed name"), as in ir/ops.def.
#define TILEC_VIEW_OR_ELEMENTWISE_OPS(X)                                                           \
  X(Arange, "arange")                                                                              \
  X(Constant, "constant")                                                                          \
  X(Splat, "splat")                                                                                \
  X(Broadcast, "broadcast")                                                                        \
  X(ExpandDims, "expand_dims")                                                                     \
  X(Permute, "permute")                                                                            \
  X(AddPtr, "addptr")                                                                              \
  X(Select, "select")                                                                              \
  X(Fma, "fma")                                                                                    \
  X(Cast, "cast")                                                                                  \
  X(Bitcast, "bitcast")                                                                            \
  TILEC_UNARY_OPS(X) TILEC_BINARY_OPS(X) TILEC_COMPARE_OPS(X)

namespace tilec::codegen {

// True for the ops of TILEC_VIEW_OR_ELEMENTWISE_OPS.
bool is_view_or_elementwise(ir::OpKind k);

using LayoutId = int;
inline constexpr LayoutId kScalar = -1; // rank-0 values: uniform across the program
inline constexpr LayoutId kNone = -2;   // no preference (computed wherever needed)

class LayoutPlan {
public:
  // `tensor_cores`: f16/bf16 dots run on them (CompileOptions::tensor_cores), and produce
  // their result in the MMA accumulator's layout where it fits (mma_layout).
  // `wgmma`: the target has Hopper's warpgroup MMA (sm_90, CompileOptions::wgmma): a
  // tensor-core dot that fits it (wgmma_fits, each operand staged along the dim it is read
  // along, wgmma_operand_fits) runs on it, its result in wgmma_layout.
  LayoutPlan(const ir::Function& fn, const AxisAnalysis& axis, int num_warps, bool tensor_cores = true,
             bool wgmma = false);
  // Whether the dot runs as warpgroup MMAs (wgmma.mma_async).
  bool is_wgmma(const ir::Op* dot) const { return wgmma_dots_.count(dot) != 0; }
  // Whether a warpgroup MMA's operand `idx` (0: A, 1: B) is staged k-major (read along K),
  // else MN-major (the instruction's imm-trans flag).
  bool wgmma_kmajor(const ir::Op* dot, int idx) const { return !wgmma_mn_major_.count({dot, idx}); }
  bool has_wgmma() const { return !wgmma_dots_.empty(); }
  // Whether two warpgroup MMAs stage their B operands byte for byte alike: the same value, one
  // of them possibly through a transpose, with the same dim of it along the staging's rows
  // (MLA's latent K tile read k-major as the scores' K^T and N-major as P.V's V). One staging
  // (a pipeline's copy, or a region held between them) then serves both.
  bool wgmma_same_b_staging(const ir::Op& a, const ir::Op& b) const;
  int num_warps() const { return num_warps_; }
  // Whether `id` is a tensor-core dot's result layout (mma_layout): elementwise ops with an
  // operand in it are computed in it, so an accumulator stays in its fragments.
  bool is_mma(LayoutId id) const { return mma_.count(id) != 0; }

  const Layout& layout(LayoutId id) const { return layouts_.at(id); }
  int num_layouts() const { return static_cast<int>(layouts_.size()); }
  LayoutId intern(const Layout& l);

  // The layout a value is produced in when it is materialized by its op (loads,
  // reduce, dot, atomics, reshape, for/if results and loop-carried args), else kNone.
  LayoutId native(const ir::Value* v) const;
  // The layouts users need `v` in (kScalar entries are never listed).
  const std::vector<LayoutId>& requests(const ir::Value* v) const;
  // Per-op layouts: load/store/atomic: {access}; reduce: {operand};
  // reshape: {operand}; dot: {a, b, result}.
  const std::vector<LayoutId>& op_layouts(const ir::Op* op) const { return op_layouts_.at(op); }

  // The tile dim along which an access is contiguous and its vector width.
  struct Access {
    int contig_dim = 0;
    int vec = 1;
  };
  Access access(const ir::Value* ptr) const;
  // How a load, store or atomic in layout `l` goes: its vector width (the thread's contiguous
  // run along the access's contiguous dim, at most Access::vec), and whether the axis
  // analysis knows each vector's address aligned and its mask constant over it. The lowering
  // and the pipeline plan (cp.async needs whole aligned 16-byte chunks) both ask it.
  struct VectorAccess {
    int vec = 1;
    bool aligned = true;
    bool mask_uniform = true;
  };
  VectorAccess vector_access(const ir::Op& op, LayoutId l) const;

  bool is_materialized(const ir::Value* v) const { return native_.count(v) != 0; }

  // For an op computed in layout `l` (elementwise, broadcast, expand_dims,
  // permute, trivial reshape): the layout its tile operand `v` is needed in.
  LayoutId operand_layout(const ir::Op& op, const ir::Value* v, LayoutId l);

  // A move of elements between threads, through shared memory: a materialized
  // value asked for in a layout other than its native one (converted right
  // where it is defined; for a loop-carried value at the top of the loop body),
  // or a reshape that moves elements (`reshape` set; `value` is its operand).
  struct Conversion {
    const ir::Value* value = nullptr;
    const ir::Op* reshape = nullptr;
    LayoutId from = kNone, to = kNone;
  };
  // In the order the lowering emits them; LoweringStats::conversions counts the same.
  const std::vector<Conversion>& conversions() const { return conversions_; }

private:
  void forward(const ir::Block& b);
  void forward_op(const ir::Op& op);
  void set_native(const ir::Value* v, LayoutId l);
  void forward_view_or_elementwise(const ir::Op& op);
  void forward_reshape(const ir::Op& op);
  void forward_desc_load(const ir::Op& op);
  void forward_store(const ir::Op& op);
  void forward_dot(const ir::Op& op);
  void forward_for(const ir::Op& op);
  void forward_if(const ir::Op& op);
  void backward(const ir::Block& b);
  void backward_op(const ir::Op& op);
  void request(const ir::Value* v, LayoutId l);
  LayoutId nat(const ir::Value* v) const;
  LayoutId nat_or_default(const ir::Value* v);
  LayoutId derive_reshape(LayoutId l, const ir::Shape& from, const ir::Shape& to);
  void collect_conversions(const ir::Block& b);
  void convert_if_asked(const ir::Value* v);

  const AxisAnalysis& axis_;
  int num_warps_;
  std::vector<Layout> layouts_;
  std::unordered_map<const ir::Value*, LayoutId> nat_;
  std::unordered_map<const ir::Value*, LayoutId> native_;
  std::unordered_map<const ir::Value*, std::vector<LayoutId>> requests_;
  std::unordered_map<const ir::Op*, std::vector<LayoutId>> op_layouts_;
  std::set<LayoutId> mma_;
  std::set<const ir::Op*> wgmma_dots_; // lookups only
  std::set<std::pair<const ir::Op*, int>> wgmma_mn_major_; // lookups only
  bool tensor_cores_ = true;
  bool wgmma_ = false;
  std::vector<Conversion> conversions_;
};

// True when reshape only adds or drops size-1 dims.
bool is_trivial_reshape(const ir::Shape& from, const ir::Shape& to);

} // namespace tilec::codegen
