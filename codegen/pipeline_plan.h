#pragma once
// Which tensor-core dot operands go from global memory straight to their shared-memory
// staging (16-byte cp.async), and which loops copy them ahead (software pipelining): planned
// once per kernel before emission, as LayoutPlan plans the layouts, printed by `tilec ir
// --stage layouts` (print_pipelines, codegen/layout_print.h) and read by the lowering, which
// decides nothing about either while it emits (docs/ARCHITECTURE.md, "Software pipelining").
// Internal to codegen/ and not installed.
//
// Every list is in IR walk order (pre-order: an op before the ops of its regions; a dot's A
// before its B), never in the order ops sit in memory, so slots, offsets and the copies'
// order are the same in every compile. The maps behind the lookups are never iterated.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "codegen/layout_plan.h"
#include "codegen/tma.h"
#include "ir/ir.h"
#include "ir/param_access.h"

namespace tilec::codegen {

// How a tensor-core dot stages operand `idx` (0: A [M, K], 1: B [K, N]) in shared memory:
// `rows` rows of `row_bytes` bytes (padded by 16); k-major: the rows are M (or N) and each
// holds K elements, else the rows are K.
// A warpgroup MMA's operand (`swizzle` 32, 64 or 128) is in `panels` panels of `rows` rows
// (M or N when k-major, else K) of `swizzle` bytes (row_bytes), panel p holding bytes
// [p swizzle, (p + 1) swizzle) of every row, its 16-byte chunks swizzled as wgmma reads them
// (staged_offset).
// It starts at a multiple of kSwizzleAlign bytes.
struct MmaStaging {
  bool kmajor = false;
  int64_t row_bytes = 0, rows = 0;
  int swizzle = 0;
  int64_t panels = 1;
  int64_t bytes() const { return (rows * row_bytes * panels + 15) / 16 * 16; }
  static constexpr int64_t kSwizzleAlign = 1024;
};
MmaStaging mma_staging(const ir::Op& dot, int idx, bool kmajor);
// A warpgroup MMA's operand `idx`, k-major or MN-major (the rows are then K and the panels
// hold M or N), swizzled (wgmma_swizzle).
MmaStaging wgmma_staging(const ir::Op& dot, int idx, bool kmajor);
// Byte (row, col_byte) of a staging, from its start: rows of row_bytes, or with a swizzle the
// panel's rows with the address bits [4, 4 + log2(swizzle / 16)) XOR-ed with bits [7, ...):
// the layout wgmma's swizzled matrix descriptors describe.
int64_t staged_offset(const MmaStaging& st, int64_t row, int64_t col_byte);

using ir::is_positive_zero; // ir/ir.h

class PipelinePlan {
public:
  // `tensor_cores`: CompileOptions::tensor_cores (off: no dot takes the tensor cores, so
  // nothing is copied asynchronously).
  PipelinePlan(const ir::Function& fn, const LayoutPlan& layouts, bool tensor_cores);

  // A load that feeds a tensor-core dot's operand and nothing else (possibly through a
  // transpose), in whole aligned 16-byte chunks with one mask bit per chunk: each chunk is one
  // cp.async into the dot's staging, along the load's contiguous dim. The load and the
  // transpose are not emitted where they stand.
  struct AsyncOperand {
    const ir::Op* dot = nullptr;
    int idx = 0; // 0: A, 1: B
    const ir::Op* load = nullptr;
    const ir::Op* transpose = nullptr; // the permute [1, 0] between the load and the dot, if any
    MmaStaging staging;
    int pipeline = -1; // its loop's entry in pipelines(); -1: the dot copies it, one group of its own
    int slot = -1;     // in the pipeline: its place in each buffer (Pipeline::offsets)
    // A descriptor load (desc_load) the copy engine moves instead (TMA, sm_90): its tensor map in
    // tensor_maps(), one copy per staging panel, completing on an mbarrier: the pipeline's
    // for its stage, or (not pipelined) `mbarrier`, a byte offset of shared memory.
    int tensor_map = -1;
    int64_t mbarrier = -1;
    bool tma() const { return tensor_map >= 0; }
  };
  // A for loop whose asynchronous operands are copied stages - 1 iterations ahead, each
  // iteration's copies one cp.async group into one of `stages` rotating buffers: buffer s at
  // base + s * stage_bytes of shared memory, below every other use of it.
  struct Pipeline {
    const ir::Op* loop = nullptr;
    int64_t stages = 1;
    std::vector<int> operands;     // entries of async_operands(), by slot
    std::vector<int64_t> offsets;  // per slot: where the operand starts within a buffer
    int64_t base = 0, stage_bytes = 0;
    // With TMA operands: one mbarrier per stage, 8 bytes each from this byte offset (-1: none);
    // whether any operand is copied by cp.async (otherwise no cp.async group is committed).
    int64_t mbarriers = -1;
    bool cp_async = false;
    // Two stages only: per slot, whether it is late, read by a dot after the body's first
    // pipelined one (attention's V after K) whose result is thin: at most kMaxLateRows rows
    // or columns (decode's query rows, as [rows, D] or transposed). A late slot has one
    // buffer of its own, at
    // base + stages * stage_bytes + its offset, which the previous trip fills after its last
    // barrier (its own reads are done), in a group of its own; its dot waits for that group
    // while the next trip's early copies stay in flight. K double-buffered and V single
    // take three tiles of shared memory instead of four.
    std::vector<bool> late;
    int64_t late_bytes = 0;
    static constexpr int64_t kMaxLateRows = 16; // the late dot's result's smaller side
    int64_t late_base() const { return base + stages * stage_bytes; } // where the late buffer starts
    int64_t end() const { return late_base() + late_bytes; }
    bool has_late() const { return late_bytes > 0; }
    // The body's ops the copies' addresses and masks need, in body order: emitted again for
    // the iteration ahead. Those that nothing else uses are deferred (not emitted in the body).
    std::vector<const ir::Op*> slice;
    // With every operand copied by TMA, both of its own among them: the body's one dot, a
    // warpgroup MMA accumulating into
    // a value the loop carries and nothing else reads (acc = dot(a, b, acc)), whose group
    // stays in flight over the next trip (null: each dot waits for its own). The dot waits
    // with wgmma.wait_group 1, retiring the previous trip's group; the trip then ends with
    // its barrier and only then issues the copies of iteration + stages - 1, into the buffer
    // the retired group read; the loop's exit waits with wait_group 0. `in_flight_result`: the
    // loop result (body argument - 1) it accumulates.
    const ir::Op* wgmma_in_flight = nullptr;
    int in_flight_result = -1;
    // Warp specialized (the loop asks for it: ir::Attrs::warp_specialize; a loop with a group
    // in flight, at the kernel's top level, after ops that touch no memory): a producer
    // warpgroup of its own, after the kernel's warps, issues every copy, waiting for stage s's
    // "empty" mbarrier (empty_mbarriers + 8 s, one arrival per consumer thread) before it
    // refills the stage; the consumers wait for the "full" ones (mbarriers) and arrive on the
    // empty one once the group that read the stage has retired. No barrier in the loop.
    bool warp_specialized = false;
    int64_t empty_mbarriers = -1;
  };
  // A loop that asks for stages but is not pipelined (dot null), or an operand of a
  // tensor-core dot directly in such a loop's body that is not copied ahead (whether the
  // loop is pipelined or not): `value` (null for none) followed by `why` says why.
  struct NotPipelined {
    const ir::Op* loop = nullptr;
    const ir::Op* dot = nullptr;
    int idx = 0;
    const ir::Value* value = nullptr;
    std::string why;
  };

  const std::vector<AsyncOperand>& async_operands() const { return async_; }
  const std::vector<Pipeline>& pipelines() const { return pipelines_; }
  const std::vector<NotPipelined>& not_pipelined() const { return not_pipelined_; }
  // The for loops with num_stages > 1.
  const std::vector<const ir::Op*>& staged_loops() const { return staged_; }

  const AsyncOperand* async_operand(const ir::Op* dot, int idx) const;
  const Pipeline* pipeline_of(const ir::Op* loop) const;
  // Not emitted where it stands: an asynchronous operand's load or transpose, or an op of a
  // pipeline's slice that only the copies issued ahead need.
  bool deferred(const ir::Op* op) const { return deferred_.count(op) != 0; }
  // Shared memory every pipeline's buffers take, from offset 0, with the mbarriers of the TMA
  // copies after them; scratch starts above.
  int64_t buffer_bytes() const { return buffer_bytes_; }
  // Where the pipelines' buffers end (the mbarriers not counted): outside every loop, once a
  // barrier follows their last reads and copies, bytes [0, buffers_end()) are free.
  int64_t buffers_end() const { return buffers_end_; }
  // The tensor maps of the TMA copies, in the order the kernel takes them after its parameters.
  const std::vector<TensorMapPlan>& tensor_maps() const { return tensor_maps_; }
  // A TMA store's (a desc_store left by prepare_descriptors) tensor map in tensor_maps().
  int store_tensor_map(const ir::Op* store) const { return store_maps_.at(store); }
  // The mbarriers of the TMA copies: `count` of 8 bytes from byte offset `base` (count 0: none).
  int64_t mbarrier_base() const { return mbar_base_; }
  int64_t mbarrier_count() const { return mbar_count_; }
  // The warp-specialized pipeline (Pipeline::warp_specialized), or null: at most one a kernel.
  const Pipeline* warp_specialized() const;

private:
  struct Failure {
    const ir::Value* value = nullptr;
    std::string why;
  };
  bool plan_async(const ir::Op& dot, int idx, const std::map<const ir::Value*, int>& uses, Failure& fail);
  bool plan_ahead(const AsyncOperand& x, std::set<const ir::Op*>& slice, Failure& fail) const;
  bool plan_tma(const ir::Op& dot, int idx, const ir::Op* view, const ir::Op& load,
                const std::map<const ir::Value*, int>& uses, Failure& fail);

  const ir::Function& fn_;
  const LayoutPlan& layouts_;
  std::vector<ir::ParamAccess> access_;
  std::vector<AsyncOperand> async_;
  std::vector<Pipeline> pipelines_;
  std::vector<NotPipelined> not_pipelined_;
  std::vector<const ir::Op*> staged_;
  std::map<std::pair<const ir::Op*, int>, int> async_index_; // lookups only
  std::map<const ir::Op*, int> pipeline_index_;             // lookups only
  std::set<const ir::Op*> deferred_;                          // lookups only
  int64_t buffer_bytes_ = 0, buffers_end_ = 0;
  std::vector<TensorMapPlan> tensor_maps_;
  int64_t mbar_base_ = 0, mbar_count_ = 0;
  std::map<const ir::Op*, int> store_maps_; // lookups only
};

} // namespace tilec::codegen
