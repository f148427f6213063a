#pragma once
// The class behind lower_kernel (codegen/lower.h), declared once and defined by op family
// across codegen/lower*.cpp, as LLVM defines DAGTypeLegalizer across LegalizeTypes*.cpp from
// one internal header. Internal to codegen/: only the lower*.cpp files include it, and it is
// not installed (cmake/tilecInstall.cmake; it includes LLVM headers). Each group of members
// below names the file that defines it. The plans it reads are made before it emits
// anything: the layouts (LayoutPlan) and the asynchronous copies and pipelines
// (PipelinePlan).
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include <array>
#include <bit>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "codegen/axis_info.h"
#include "codegen/layout_plan.h"
#include "codegen/lower.h"
#include "codegen/pipeline_plan.h"
#include "ir/param_access.h"

namespace tilec::codegen::detail {

using ir::DType;
using ir::Op;
using ir::OpKind;
using ir::Value;

// A tile value as one thread holds it: the elements its layout gives the thread.
using Elems = std::vector<llvm::Value*>;

inline int log2i(int64_t v) { return std::countr_zero(static_cast<uint64_t>(v)); }

struct MmaDot; // lower_dot_mma.cpp: one tensor-core dot as its fragment loads see it

class Lowering {
public:
  Lowering(const ir::Function& fn, const CompileOptions& opts, TargetHooks& hooks, llvm::Module& m)
      : fn_(fn), opts_(opts), hooks_(hooks), m_(m), c_(m.getContext()), axis_(fn, opts.int_arg_divisibility, opts.int_arg_values),
        plan_(fn, axis_, opts.num_warps, opts.tensor_cores, wgmma_enabled(opts)), pipes_(fn, plan_, opts.tensor_cores), b_(c_), pb_(c_),
        param_access_(ir::param_access(fn)), has_wgmma_(plan_.has_wgmma()) {}

  LoweringStats run();

private:
  // --- types and constants (lower.cpp)
  llvm::Type* reg_type(const ir::ElemType& e);
  // An integer of dtype `from` to the integer type `ty`: extended by its signedness (i1 and
  // unsigned dtypes with zeros), or truncated.
  llvm::Value* int_resize(llvm::Value* v, llvm::Type* ty, DType from) {
    return from == DType::i1 || ir::is_unsigned(from) ? b_.CreateZExtOrTrunc(v, ty) : b_.CreateSExtOrTrunc(v, ty);
  }
  static llvm::Intrinsic::ID int_minmax(bool max, DType t) {
    if (ir::is_unsigned(t)) return max ? llvm::Intrinsic::umax : llvm::Intrinsic::umin;
    return max ? llvm::Intrinsic::smax : llvm::Intrinsic::smin;
  }
  llvm::Type* mem_type(const ir::ElemType& e);
  int mem_bytes(const ir::ElemType& e) { return e.is_ptr ? 8 : ir::dtype_bytes(e.dtype); }
  llvm::Value* constant(const ir::ElemType& e, const ir::ConstValue& v);
  llvm::Value* to_f32(llvm::Value* v, DType t) {
    return t == DType::f32 ? v : ir::is_fp8(t) ? hooks_.fp8_to_f32(b_, v, t) : hooks_.to_f32(b_, v, t);
  }
  llvm::Value* from_f32(llvm::Value* v, DType t) {
    return t == DType::f32 ? v : ir::is_fp8(t) ? hooks_.f32_to_fp8(b_, v, t) : hooks_.from_f32(b_, v, t);
  }
  llvm::Value* to_mem(llvm::Value* v, const ir::ElemType& e) {
    return !e.is_ptr && e.dtype == DType::i1 ? b_.CreateZExt(v, b_.getInt8Ty()) : v;
  }
  llvm::Value* from_mem(llvm::Value* v, const ir::ElemType& e) {
    return !e.is_ptr && e.dtype == DType::i1 ? b_.CreateICmpNE(v, b_.getInt8(0)) : v;
  }

  // --- layouts at run time (lower.cpp)
  const ThreadElems& elems_of(LayoutId l, const ir::Shape& s);
  int64_t count(LayoutId l, const ir::Shape& s) { return l == kScalar ? 1 : elems_of(l, s).count; }
  const std::vector<llvm::Value*>& thread_base(LayoutId l);
  // Per element, per tile dim: the coordinate (i32).
  std::vector<std::vector<llvm::Value*>> coords(LayoutId l, const ir::Shape& s);
  std::vector<llvm::Value*> coord_of(LayoutId l, const ir::Shape& s, size_t j); // element j's alone
  std::vector<llvm::Value*> coord_starts(LayoutId l, const ir::Shape& s);
  llvm::Value* owner(LayoutId l, const ir::Shape& s); // null: every thread owns its elements
  llvm::Value* linear_index(const std::vector<llvm::Value*>& coord, const ir::Shape& s);

  // --- values (lower.cpp)
  const Elems& get(const Value* v, LayoutId l);
  void define(const Value* v, LayoutId native, Elems e);
  Elems convert(const Elems& src, LayoutId from, LayoutId to, const ir::Shape& s, const ir::ElemType& e);
  Elems share_from_owners(const Elems& src, LayoutId l, const ir::Shape& s, const ir::ElemType& e,
                          llvm::Value* owner_pred);

  // --- shared memory (lower.cpp)
  // An address in the current scratch region (scratch_begin), and in scratch at an absolute
  // offset.
  llvm::Value* smem(llvm::Type* ty, llvm::Value* index, int64_t byte_offset = 0) {
    return smem_at(ty, index, region_.lo + byte_offset);
  }
  llvm::Value* smem_at(llvm::Type* ty, llvm::Value* index, int64_t byte_offset);
  // Shared-memory accesses go through the target (the emulator checks them); `what` says
  // what the access is for, after the current op's source location.
  llvm::Value* smem_load(llvm::Type* ty, llvm::Value* ptr, const char* what) {
    count_smem(ty);
    return hooks_.shared_load(b_, ptr, ty, site(what));
  }
  void count_smem(llvm::Type* ty) {
    ++stats_.shared_accesses;
    stats_.shared_vector_accesses += ty->isVectorTy();
    stats_.shared_access_bytes += int(m_.getDataLayout().getTypeStoreSize(ty));
  }
  // `e`: the element type held, so the emulator treats +0 and -0 of floats alike.
  void smem_store(llvm::Value* v, llvm::Value* ptr, const char* what, DType e) {
    unsigned float_type = e == DType::f32      ? 1
                          : e == DType::f16    ? 2
                          : e == DType::bf16   ? 3
                          : e == DType::f8e4m3 ? 4
                          : e == DType::f8e5m2 ? 5
                                               : 0;
    count_smem(v->getType());
    hooks_.shared_store(b_, ptr, v, site(what), float_type);
    proxy_unfenced_ = true;
  }
  std::string site(const char* what) const;
  // Scratch shared memory (everything but the pipelines' buffers) starts above those buffers.
  // Each exchange through it (threads write, a barrier, threads read) takes a region of its
  // own: the lowest one at or above the floor (below it: the operands a loop keeps resident)
  // that no access since the last barrier touched, so the exchange needs no barrier before
  // its writes; only when that region would sit more than kScratchSpread bytes above the
  // floor does it wait at a barrier and take the floor. A loop body's accesses before its
  // first barrier are checked against what its end touched: where they conflict, a barrier
  // opens the body (each trip's writes wait for the previous trip's reads).
  // scratch_begin: the region for `bytes`, which smem() then addresses (after the barrier
  // the region needs, if any); scratch_end: its reads are done (it stays touched until the
  // next barrier).
  static constexpr int64_t kScratchSpread = 4096;
  // One access to shared or global memory since the last barrier, as far as ordering goes:
  // scratch bytes [lo, hi), or a global buffer (a written pointer parameter's index, or
  // kAnyBuffer when the pointer's parameter is unknown) through one pointer tile in one
  // layout. Two accesses by different threads need a barrier between them when one writes
  // and both may touch the same bytes; the same pointer tile in the same layout is the same
  // thread at the same addresses, which program order keeps.
  static constexpr int kScratch = -1, kAnyBuffer = -2;
  struct Access {
    int space = kScratch;
    int64_t lo = 0, hi = 0;
    bool write = false;
    const Value* ptr = nullptr;
    LayoutId layout = -1;
    bool conflicts(const Access& o) const {
      if (!write && !o.write) return false;
      if (space == kScratch || o.space == kScratch) return space == o.space && lo < o.hi && o.lo < hi;
      if (space != o.space && space != kAnyBuffer && o.space != kAnyBuffer) return false;
      return !(ptr && ptr == o.ptr && layout == o.layout);
    }
  };
  // `align`: the region starts at a multiple of it (a power of two, at least 16).
  void scratch_begin(int64_t bytes, int64_t align = 16);
  void scratch_end() { touched_.push_back({kScratch, region_.lo, region_.hi, false}); }
  // Records an access to the global buffer behind the pointer tile `ptr` (in layout `l`),
  // after a barrier if an earlier access since the last one conflicts with it. Buffers the
  // kernel only reads need none.
  void global_access(const Value* ptr, LayoutId l, bool write);
  // Records `a` as touched since the last barrier, and as exposed in every loop body no
  // barrier has fenced yet.
  void touch(const Access& a) {
    touched_.push_back(a);
    for (LoopFence& f : loop_fences_)
      if (!f.fenced) f.exposed.push_back(a);
  }
  bool conflicts_with_touched(const Access& a) const {
    return std::any_of(touched_.begin(), touched_.end(), [&](const Access& t) { return t.conflicts(a); });
  }
  // What the barrier bookkeeping knows at a point of the code: the accesses since the last
  // barrier, the pipeline flags below, and per loop being lowered whether its body is fenced.
  // Where paths meet (after an if, after a loop that may run no trip) their states join:
  // touched on either, unfenced on either, a body fenced only on both.
  struct SyncState {
    std::vector<Access> touched;
    bool pipe_read = false, pipe_landed = false, pipe_written = false, proxy = false;
    std::vector<bool> loop_fenced;
  };
  SyncState sync_state() const;
  void set_sync_state(const SyncState& s);
  static void join_sync(SyncState& s, const SyncState& o);
  // Shared memory the kernel needs: the pipelines' buffers, then scratch up to `scratch_top`.
  void need_smem(int64_t scratch_top) {
    stats_.shared_bytes = std::max<int64_t>(stats_.shared_bytes, pipes_.buffer_bytes() + scratch_top);
  }
  // bar.sync 0, or among the consumer warps once a producer warpgroup has gone its own way.
  void block_barrier() {
    if (consumers_only_) hooks_.barrier_among(b_, 32 * opts_.num_warps);
    else hooks_.barrier(b_);
  }
  void barrier() {
    // In a kernel with warpgroup MMAs, every thread's shared-memory writes before a barrier
    // are made visible to the async proxy that wgmma reads its operands through.
    if (has_wgmma_ && proxy_unfenced_) hooks_.fence_proxy_async(b_);
    proxy_unfenced_ = false;
    block_barrier();
    ++stats_.barriers;
    touched_.clear();
    for (LoopFence& f : loop_fences_) f.fenced = true;
    pipe_read_unfenced_ = false;
    pipe_landed_unfenced_ = false;
    pipe_written_unfenced_ = false;
  }
  // Runs of a thread's elements of a tile in layout `l` that are contiguous along `dim`:
  // (first element, count), each count a power of two of at most 16 bytes, its first
  // element's coordinate along `dim` a multiple of the count.
  std::vector<std::pair<size_t, int>> runs_along(LayoutId l, const ir::Shape& s, int dim, int elem_bytes);
  // A thread's elements of a tile in layout `l` stored to / loaded from shared memory (values
  // in their memory type) with one vector access per run along `dim` (runs_along): runs of at
  // most 16 / `vec_bytes` elements (the element's size: vectors of up to 16 bytes; 16: one
  // element at a time; more: shorter vectors). `addr(j)` is the address of element j, a run's
  // first, which the caller guarantees is aligned to the run's bytes when the run's first
  // coordinate along `dim` is a multiple of its length.
  using AddrFn = std::function<llvm::Value*(size_t)>;
  void store_runs(const Elems& mem_vals, LayoutId l, const ir::Shape& s, int dim, int vec_bytes, DType held,
                  const AddrFn& addr, const char* what);
  Elems load_runs(llvm::Type* ty, LayoutId l, const ir::Shape& s, int dim, int vec_bytes, const AddrFn& addr,
                  const char* what);
  // Elements j .. j + n - 1 (n a power of two) as one vector; f16 or bf16 values just rounded
  // from f32 are rounded in pairs where the target has an instruction for it (f32x2_to_half2).
  llvm::Value* vector_of(const Elems& vals, size_t j, int n);

  // --- the driver: every op, control flow, reshape, device_assert and device_print (lower.cpp)
  void emit_block(const ir::Block& blk);
  void emit_op(const Op& op);
  void emit_for(const Op& op);
  // Stages, before `loop`, the tensor-core dot operands in its body that are defined outside
  // it, in scratch under a raised floor (resident_), while they fit kResidentBytes (40 KiB: a
  // 128 x 128 16-bit q with its 1 KiB swizzle alignment for wgmma); returns their regions.
  static constexpr int64_t kResidentBytes = 40 * 1024;
  // With warpgroup MMAs, whose operands are read from shared memory only (no fragments to hold
  // instead): 80 KiB (MLA's 64 x 576 16-bit q, 72 KiB).
  static constexpr int64_t kResidentBytesWgmma = 80 * 1024;
  std::vector<Access> stage_resident(const Op& loop);
  // Resident operands a loop leaves staged for a later loop of its block (emit_for): value ->
  // (offset, bytes), the (dot, operand) it was staged for, and the floor under them.
  std::map<const Value*, std::pair<int64_t, int64_t>> kept_resident_;
  std::map<const Value*, std::pair<const Op*, int>> kept_how_;
  int64_t kept_floor_ = 0;
  // Whether a loop after `loop` in its block stages `v` resident; whether `v`, kept, is staged
  // as operand `idx` of `dot` stages it.
  bool later_loop_stages(const Op& loop, const Value* v);
  bool same_resident_staging(const Value* v, const Op* dot, int idx);
  // The tensor-core dot operands (dot, 0 for A or 1 for B) in `loop`'s body (and its ifs') that
  // are defined outside it and not copied by a pipeline; those dots whose A each thread holds
  // as fragments across the loop instead (a_fragments_fit).
  std::vector<std::pair<const Op*, int>> invariant_operands(const Op& loop);
  std::vector<const Op*> held_a_dots(const Op& loop);
  void emit_if(const Op& op);
  void emit_reshape(const Op& op);
  void emit_assert(const Op& op);
  void emit_print(const Op& op);

  // --- elementwise ops, views and casts (lower_elementwise.cpp)
  Elems compute(const Op& op, LayoutId l);
  Elems view(const Op& op, LayoutId l);
  llvm::Value* unary(OpKind k, DType t, llvm::Value* x);
  llvm::Value* binary(OpKind k, const ir::ElemType& e, llvm::Value* x, llvm::Value* y);
  llvm::Value* cast(llvm::Value* x, DType from, DType to);

  // --- memory: loads, stores, atomics (lower_memory.cpp)
  // Vector width, static alignment and mask uniformity of a memory access.
  using AccessPlan = LayoutPlan::VectorAccess;
  AccessPlan plan_access(const Op& op, LayoutId l) const { return plan_.vector_access(op, l); }
  llvm::Value* all_of(const Elems& preds, size_t from, size_t n);
  llvm::Value* and_pred(llvm::Value* a, llvm::Value* b) { return !a ? b : !b ? a : b_.CreateAnd(a, b); }
  void emit_load(const Op& op);
  void emit_store(const Op& op);
  void emit_atomic(const Op& op);

  // --- reductions and scans (lower_reduce.cpp)
  // x op y for a reduce or scan, on the values it carries (floats as f32, integers as i32 or
  // i64); kind combine runs the op's region on them, in its dtype.
  llvm::Value* combine(const Op& op, llvm::Value* x, llvm::Value* y);
  llvm::Value* shuffle_xor(llvm::Value* v, int mask);
  void emit_reduce(const Op& op);
  void emit_scan(const Op& op);

  // --- dot on CUDA cores, and the K loop both dots run (lower_dot.cpp)
  void emit_dot(const Op& op);
  bool mma_eligible(const Op& op) const;
  // A dot's K loop, run at least once: k = 0, step, ... while below `end`, carrying the f32
  // values `init` through `body`, which returns their next values. Returns the last ones.
  Elems k_loop(const char* name, int64_t end, int64_t step, const Elems& init,
               const std::function<Elems(llvm::Value* k, const Elems& carried)>& body);

  // --- dot on the tensor cores (lower_dot_mma.cpp)
  void emit_dot_mma(const Op& op);
  // How operand `idx` (0: A, 1: B) of a tensor-core dot is staged in shared memory (k-major
  // or not, its row stride), and the writes of its elements there from `base`.
  MmaStaging mma_operand_staging(const Op& op, int idx);
  void stage_mma_operand(const Op& op, int idx, const MmaStaging& st, llvm::Value* base);
  // Byte (row, col_byte) of staging `st` from its start (staged_offset, in IR).
  llvm::Value* staged_byte(const MmaStaging& st, llvm::Value* row, llvm::Value* col_byte);

  // --- dot on Hopper's warpgroup MMA (lower_dot_wgmma.cpp)
  void emit_dot_wgmma(const Op& op);
  // Whether a warpgroup MMA's A (16-bit, in layout `la`) is in wgmma_layout: its elements are
  // the thread's register A fragments (pair_fragments: its accumulator registers in order).
  bool wgmma_a_in_registers(const Op& op, LayoutId la);
  // The later warpgroup MMA of `op`'s block whose B, staged, is byte for byte the staging of
  // `op`'s B (one value read as K^T by one and as V by the other: MLA's latent K tile); null
  // if none. Such a B is staged once, by `op`, in a region held under a raised scratch floor
  // until the later dot has read it (held_b_).
  const Op* wgmma_b_sharer(const Op& op);
  // Descriptors a warpgroup MMA may leave to LLVM to hoist out of a loop (emit_dot_wgmma).
  static constexpr int64_t kHoistedDescriptors = 16;
  struct HeldStaging {
    int64_t lo = 0, hi = 0;    // the region in scratch
    int64_t floor_before = 0;  // the scratch floor to restore after the last reader
  };
  std::map<const Op*, HeldStaging> held_b_; // by the dot that reads it last
  // A fragment register without ldmatrix: elements (k, k + 1) at ptr(k), ptr(k + 1), one 32-bit
  // load when k-major, else two 16-bit ones; zero where `out` holds.
  llvm::Value* mma_frag_word(const MmaDot& dot, bool kmajor, const std::function<llvm::Value*(llvm::Value*)>& ptr,
                             llvm::Value* k, llvm::Value* out, const char* what);
  // One ldmatrix of the matrices `mats` ((row, col) offsets of each 8x8 block in the
  // operand's [m or n][k] coordinates); `addr(mn, k)` addresses an element. Returns a register
  // per matrix. `row_bytes`: the staged operand's row stride.
  std::vector<llvm::Value*> mma_ldmatrix(const MmaDot& dot, const std::vector<std::pair<int64_t, int64_t>>& mats,
                                         bool kmajor, llvm::Value* mn0, llvm::Value* k0, int64_t mn_limit,
                                         const std::function<llvm::Value*(llvm::Value*, llvm::Value*)>& addr,
                                         const char* what, int64_t row_bytes, bool wrap_rows = false);
  // A's fragment registers for row tile m0 at k step kk (zeros where the padding is).
  std::array<llvm::Value*, 4> mma_frag_a(const MmaDot& dot, llvm::Value* m0, llvm::Value* kk);
  // B's fragment registers for `ntiles` adjacent column tiles from n0 at k step kk; tile q
  // starts q tile_stride columns and q k_stride k past the first (k_stride 16, tile_stride
  // 0: one column tile at consecutive k steps).
  std::vector<llvm::Value*> mma_frag_b(const MmaDot& dot, llvm::Value* n0, llvm::Value* kk, int ntiles,
                                       int64_t tile_stride = 8, int64_t k_stride = 0);
  // One k step: an MMA per column tile, from A's fragments `af`, B's `bfs` (two per tile) and
  // the accumulator registers `acc` (four per tile). Returns the new accumulators.
  Elems mma_step(const MmaDot& dot, const std::array<llvm::Value*, 4>& af, const std::vector<llvm::Value*>& bfs,
                 int ntiles, const Elems& acc);
  // The result in the MMA accumulator's own layout `l`: the fragments are its elements.
  Elems mma_direct(const Op& op, const MmaDot& dot, LayoutId l);
  // Whether a direct dot's A, in layout `la`, is in the MMA accumulator's layout with its rows
  // where the result's are (warps along M in both): its fragments are its own registers.
  bool a_in_registers(const Op& op, LayoutId la);
  // A's elements in layout `l` as A fragments, [row tile * K / 16 + k step], each row tile
  // `tile_rows` apart and its two halves `half_rows` (lower_dot_mma.cpp).
  std::vector<std::array<llvm::Value*, 4>> pair_fragments(const Elems& vals, LayoutId l, const ir::Type& t,
                                                          int64_t tile_rows, int64_t half_rows);
  // Whether a dot's loop-invariant A may be held as fragments in registers across its loop
  // (a direct dot with warps along M, whose fragments take at most kHeldFragmentRegisters), and
  // loads them (before the loop and its first copies: emit_for) into a_frags_.
  static constexpr int64_t kHeldFragmentRegisters = 32;
  bool a_fragments_fit(const Op& op);
  void hold_a_fragments(const Op& op);
  // One warp's `ntiles` adjacent output tiles from (m0, n0): the accumulator read from and
  // the result written to shared memory.
  void mma_tile_group(const MmaDot& dot, llvm::Value* m0, llvm::Value* n0, int ntiles);

  // --- tensor-core operands copied asynchronously, and software pipelining, as pipes_ plans
  // them (lower_pipeline.cpp)
  using AsyncOperand = PipelinePlan::AsyncOperand;
  using Pipeline = PipelinePlan::Pipeline;
  // Where `slot` of pipeline `pl`'s buffer `stage` (an i32) starts in shared memory.
  llvm::Value* pipe_buffer(const Pipeline& pl, llvm::Value* stage, int slot);
  // Where the asynchronous operand `x` of a pipelined loop is read this iteration.
  llvm::Value* pipe_read_buffer(const AsyncOperand& x) {
    return pipe_buffer(pipes_.pipelines()[size_t(x.pipeline)], read_stage_[size_t(x.pipeline)], x.slot);
  }
  void issue_ahead(const Pipeline& pl, llvm::Value* iv, llvm::Value* stage, bool in_loop);
  // The copies of pipeline `pl`'s late slots (or its others) for the iteration whose slice
  // values are in vals_, with ahead_pred_.
  void issue_slots(const Pipeline& pl, llvm::Value* stage, bool late);
  // The late slots' copies for the next trip, at the end of this one (after its last barrier).
  void issue_late(const Pipeline& pl);
  void issue_copies(const AsyncOperand& x, llvm::Value* base, const char* what);
  // TMA (sm_90): the mbarrier `index` (an i32) of the group from byte offset `first`; one thread
  // arming it for the copies of `xs` into `bases` and issuing them (with ahead_pred_); and every
  // thread waiting for its next phase, whose parity each thread tracks per mbarrier.
  llvm::Value* mbarrier(int64_t first, llvm::Value* index);
  void issue_tma(const std::vector<const AsyncOperand*>& xs, const std::vector<llvm::Value*>& bases, llvm::Value* bar,
                 const char* what);
  void wait_tma(int64_t first, llvm::Value* index, const char* what = "TMA copies waited for");
  void init_mbarriers();
  // Warp specialization (codegen/lower_warp_specialize.cpp, PipelinePlan::warp_specialized):
  // the block's threads with the producer warpgroup; the register ceilings each side sets;
  // the branch that sends the producer warpgroup through its own copy loop (it then returns)
  // and leaves the insertion point where the consumers go on; a consumer's arrival on the
  // empty mbarrier of the stage the retired group read.
  int block_threads() const;
  struct RegisterSplit {
    int launch = 0, producer = 0, consumer = 0;
  };
  RegisterSplit register_split() const;
  void emit_producer(const Pipeline& pl, llvm::Value* lb, llvm::Value* ub, llvm::Value* step);
  void release_stage(const Pipeline& pl, llvm::Value* iv, llvm::Value* lb, llvm::Value* stage);
  // A TMA store (a desc_store prepare_descriptors kept): the block staged in scratch as its
  // tensor map's boxes lay it out, then thread 0's copies out, waited for before the scratch
  // is used again.
  void emit_tma_store(const Op& op);

  const ir::Function& fn_;
  const CompileOptions& opts_;
  TargetHooks& hooks_;
  llvm::Module& m_;
  llvm::LLVMContext& c_;
  AxisAnalysis axis_;
  LayoutPlan plan_;
  PipelinePlan pipes_;
  std::vector<llvm::Value*> read_stage_; // per pipeline, while its body is lowered: the buffer it reads
  llvm::Value* ahead_pred_ = nullptr;     // while issue_ahead emits a slice: the iteration exists
  // The slice's values and predicate for the next iteration, for its late slots' copies.
  std::map<std::pair<const Value*, LayoutId>, Elems> late_vals_;
  llvm::Value* late_pred_ = nullptr;
  bool emitting_ahead_ = false;
  bool pipe_read_unfenced_ = false; // a dot read a pipeline buffer since the last barrier
  llvm::IRBuilder<> b_;  // the body
  llvm::IRBuilder<> pb_; // the entry block (values every block can use)
  llvm::Function* kernel_ = nullptr;
  llvm::Value* tid_ = nullptr;
  llvm::Value* lane_ = nullptr;
  llvm::Value* warp_ = nullptr;
  llvm::Value* smem_base_ = nullptr;
  std::map<std::pair<const Value*, LayoutId>, Elems> vals_;
  std::map<std::pair<LayoutId, ir::Shape>, ThreadElems> elems_cache_;
  std::map<LayoutId, std::vector<llvm::Value*>> base_cache_;
  std::map<std::pair<LayoutId, ir::Shape>, std::vector<llvm::Value*>> starts_cache_;
  std::vector<Elems> yielded_;
  // Scratch shared memory (scratch_begin): the regions accessed since the last barrier, the
  // current exchange's region, and the floor under which loops keep resident operands.
  std::vector<Access> touched_;
  Access region_{kScratch, 0, 0, true};
  int loops_open_ = 0; // loops whose body is being lowered (scratch_begin)
  std::vector<ir::ParamAccess> param_access_; // per kernel parameter
  int64_t scratch_floor_ = 0;
  // A pipeline's copies may be writing its buffers: from its first copies issued to the wait
  // for its last (TMA copies: to the kernel's end). Scratch may use the buffers only outside.
  bool copies_in_flight_ = false;
  // Per loop being lowered, innermost last: whether a barrier ran on every path since its body
  // began, and the scratch its body wrote before that.
  struct LoopFence {
    bool fenced = false;
    std::vector<Access> exposed;
  };
  std::vector<LoopFence> loop_fences_;
  // Dot operands a loop stages once before it (loop-invariant, emit_for): (dot, operand) ->
  // where in scratch.
  std::map<std::pair<const Op*, int>, int64_t> resident_;
  // The A fragments a loop loaded before it for its dots with a loop-invariant A (stage_resident).
  std::map<const Op*, std::vector<std::array<llvm::Value*, 4>>> a_frags_;
  bool pipe_landed_unfenced_ = false; // a pipeline's copies were waited for since the last barrier
  bool pipe_written_unfenced_ = false; // a pipelined loop ended (its last copies landed) since the last barrier
  const Op* cur_op_ = nullptr; // the op being lowered, for shared-memory access sites
  std::vector<llvm::Value*> tensor_maps_; // the kernel's tensor map parameters (pointers)
  // Per group of mbarriers (by its first one's byte offset): bit i is the parity of the phase
  // mbarrier i completes next, in a stack slot SROA turns into registers.
  std::map<int64_t, llvm::AllocaInst*> mbar_phases_;
  // The thread that arms the mbarriers and issues the TMA copies (0; a warp-specialized
  // kernel's producer, its first thread), and whether only the consumer warps run on here.
  uint32_t tma_thread_ = 0;
  bool consumers_only_ = false;
  LoweringStats stats_;
  bool has_wgmma_ = false; // some dot runs as warpgroup MMAs
  // Warpgroup MMA groups committed so far, and the results of those not waited for yet: each
  // is waited for at its first read (get), with wgmma.wait_group N for the N groups committed
  // after it, so the code between its issue and that read (a softmax, another dot's issue)
  // overlaps the tensor cores; every one still open is waited for before an op with regions
  // and a block's terminator (retire_wgmma).
  struct PendingWgmma {
    const Value* res;
    LayoutId layout;
    uint64_t group;                      // wgmma_commits_ after its commit
    std::vector<llvm::Value*> a_regs;    // a register A, kept live until the wait
  };
  uint64_t wgmma_commits_ = 0;
  std::vector<PendingWgmma> pending_wgmma_;
  // Waits for the group of `v`'s pending result (null: every group) and every older one, and
  // passes their registers through an operand fence.
  void retire_wgmma(const Value* v);
  // This thread wrote shared memory through the generic proxy (stores, landed cp.async) since
  // its last fence.proxy.async: the next barrier fences first (in a kernel with wgmma).
  bool proxy_unfenced_ = false;
  void cp_async_wait(int groups) {
    hooks_.cp_async_wait(b_, groups);
    proxy_unfenced_ = true;
  }
};

} // namespace tilec::codegen::detail
