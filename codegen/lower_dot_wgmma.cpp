// dot on Hopper's warpgroup MMA (wgmma.mma_async, sm_90a): the operands staged k-major in
// shared memory in a swizzled layout (or copied there by cp.async, lower_pipeline.cpp), read
// by the instruction itself through matrix descriptors; the accumulator in registers, in
// the layout wgmma gives it (wgmma_layout).
#include "codegen/lowering.h"

namespace tilec::codegen::detail {

namespace {

// The constant part of a matrix descriptor for an operand staged as `st` says (PTX ISA,
// "Matrix Descriptor Format"): bits 0-13 hold the start address >> 4, 16-29 the leading
// dimension byte offset >> 4, 32-45 the stride dimension byte offset >> 4, 62-63 the swizzle
// mode (1: 128 bytes, 2: 64, 3: 32). The stride offset is the distance between 8-row groups
// (8 rows of `swizzle` bytes); the leading offset is unused by a k-major swizzled layout (1,
// as the ISA assumes it) and is the distance between panels of an MN-major one.
uint64_t descriptor_bits(const MmaStaging& st) {
  const int s = st.swizzle;
  const uint64_t mode = s == 128 ? 1 : s == 64 ? 2 : 3;
  const uint64_t lbo = st.kmajor ? 1 : uint64_t(st.rows * s) >> 4;
  return (lbo << 16) | (uint64_t(8 * s >> 4) << 32) | (mode << 62);
}

// Where the k step kk of the rows (k-major) or columns (MN-major) from mn0 (a multiple of the
// panel's width) starts, from the staging's start.
// A k step is 32 bytes of K: 16 16-bit or 32 8-bit elements.
int64_t step_start(const MmaStaging& st, int64_t mn0, int64_t kk, int64_t eb) {
  const int64_t s = st.swizzle, panel = st.rows * s, k0 = kk * wgmma_k_step(int(eb));
  if (st.kmajor) return (k0 * eb / s) * panel + mn0 * s + k0 * eb % s;
  return (mn0 * eb / s) * panel + mn0 * eb % s + k0 * s;
}

} // namespace

// Warpgroup q (warps 4q .. 4q + 3) computes, for every pass p of the result (16 W rows, W the
// warps), the 64 rows from 16 W p + 64 q: one wgmma.mma_async.m64nNk16 per pass and k step
// of 16, all of them one group, waited for before the result is used (or, for a pipeline's
// dot whose group stays in flight, Pipeline::wgmma_in_flight: the previous trip's group is
// waited for, and the accumulator's registers pass to the next trip's MMAs untouched, which
// the hardware orders after these). Thread (warp w, lane g * 4 + t) receives rows 16 w + g
// (+ 8) of its pass, which is wgmma_layout's ownership, so the registers are the result's
// elements. With G warpgroups along N (wgmma_groups_along_n: fewer than 16 rows a warp), a
// pass is 64 rows and warpgroup q computes every pass's N / G columns from q N / G with
// m64n(N/G)k16: B's descriptors start at its slice (a k-major B's rows from q N / G, an
// N-major B's panels), A's are the same for every warpgroup, and thread (warp 4 q + r, lane
// g * 4 + t) receives rows 16 r + g (+ 8) of its slice. The A rows of a pass start at a
// multiple of 64 and the k steps at multiples of 32 bytes: each descriptor's start address is
// the staging's start plus the byte offset of its first row and column, and the hardware
// applies the swizzle to the address bits as staged_offset wrote them.
void Lowering::emit_dot_wgmma(const Op& op) {
  const Value* a = op.operands[0];
  const Value* res = op.results[0];
  std::vector<LayoutId> ls = plan_.op_layouts(&op);
  const int64_t M = a->type.shape[0], K = a->type.shape[1], N = op.operands[1]->type.shape[1];
  const DType dt = a->type.dtype();
  const int64_t eb = ir::dtype_bytes(dt), W = opts_.num_warps;
  // The warpgroups along N, the columns of each, the rows of a pass.
  const int64_t G = wgmma_groups_along_n(M, N, int(W)), n = N / G, pass_rows = 16 * W / G;
  const AsyncOperand* async_a = pipes_.async_operand(&op, 0);
  const AsyncOperand* async_b = pipes_.async_operand(&op, 1);
  const MmaStaging st_a = wgmma_staging(op, 0, plan_.wgmma_kmajor(&op, 0)),
                   st_b = wgmma_staging(op, 1, plan_.wgmma_kmajor(&op, 1));
  const bool pipe_a = async_a && async_a->pipeline >= 0, pipe_b = async_b && async_b->pipeline >= 0;
  const auto res_a = resident_.find({&op, 0}), res_b = resident_.find({&op, 1});
  const bool keep_a = res_a != resident_.end(), keep_b = res_b != resident_.end();
  // A already in a wgmma accumulator's layout with its rows where the result's are (attention's
  // P, the first product rounded, as the second's A): its elements are the thread's A fragment
  // registers, and it skips shared memory.
  const bool regs_a = !pipe_a && !keep_a && wgmma_a_in_registers(op, ls[0]);
  // A B an earlier dot of the block staged for this one (held_b_), or one this dot stages for
  // a later one: in a region of its own under a raised floor, not in this dot's scratch.
  const auto held = held_b_.find(&op);
  const bool read_held_b = held != held_b_.end();
  const Op* sharer = !pipe_b && !keep_b && !read_held_b ? wgmma_b_sharer(op) : nullptr;
  const bool stage_a = !pipe_a && !keep_a && !regs_a, stage_b = !pipe_b && !keep_b && !read_held_b && !sharer;
  const bool zero_acc = is_positive_zero(op.operands[2]);
  constexpr int64_t kAlign = MmaStaging::kSwizzleAlign;
  const int64_t off_b = stage_a ? (st_a.bytes() + kAlign - 1) / kAlign * kAlign : 0;
  const bool uses_scratch = stage_a || stage_b;
  if (sharer) {
    HeldStaging h{0, 0, scratch_floor_};
    h.lo = (scratch_floor_ + kAlign - 1) / kAlign * kAlign;
    h.hi = h.lo + st_b.bytes();
    if (conflicts_with_touched({kScratch, h.lo, h.hi, true})) barrier();
    scratch_floor_ = h.hi;
    need_smem(h.hi);
    touch({kScratch, h.lo, h.hi, true});
    held_b_[sharer] = h;
  }
  if (uses_scratch) scratch_begin(off_b + (stage_b ? st_b.bytes() : 0), kAlign);
  // The hardware swizzles absolute shared addresses: every staging starts on the pattern.
  internal_assert(pipes_.buffer_bytes() % kAlign == 0 && (!uses_scratch || region_.lo % kAlign == 0) &&
                      (!keep_a || res_a->second % kAlign == 0) && (!keep_b || res_b->second % kAlign == 0),
                  "a warpgroup MMA's operands start at multiples of the swizzle pattern");
  const int64_t held_at = read_held_b ? held->second.lo : sharer ? held_b_.at(sharer).lo : -1;
  for (const AsyncOperand* x : {pipe_a ? async_a : nullptr, pipe_b ? async_b : nullptr})
    internal_assert(!x || !pipes_.pipelines()[size_t(x->pipeline)].late[size_t(x->slot)],
                    "a warpgroup MMA's operand is never a late pipeline slot (its A has 64 rows or more)");
  llvm::Value* base_a = pipe_a   ? pipe_read_buffer(*async_a)
                        : keep_a ? smem_at(b_.getInt8Ty(), b_.getInt32(0), res_a->second)
                        : regs_a ? nullptr
                                 : smem(b_.getInt8Ty(), b_.getInt32(0), 0);
  llvm::Value* base_b = pipe_b        ? pipe_read_buffer(*async_b)
                        : keep_b      ? smem_at(b_.getInt8Ty(), b_.getInt32(0), res_b->second)
                        : held_at >= 0 ? smem_at(b_.getInt8Ty(), b_.getInt32(0), held_at)
                                      : smem(b_.getInt8Ty(), b_.getInt32(0), off_b);
  // TMA copies of operands not pipelined: into scratch after a barrier (every earlier access
  // to it done, and fenced to the async proxy the copy engine writes through), then waited for.
  const bool tma_a = async_a && !pipe_a && async_a->tma(), tma_b = async_b && !pipe_b && !read_held_b && async_b->tma();
  if (tma_a || tma_b) {
    proxy_unfenced_ = true;
    barrier();
  }
  for (const auto& [x, base, is_tma] : {std::tuple{async_a, base_a, tma_a}, std::tuple{async_b, base_b, tma_b}})
    if (is_tma) {
      issue_tma({x}, {base}, mbarrier(x->mbarrier, b_.getInt32(0)), "dot (wgmma) operand, TMA copy");
      wait_tma(x->mbarrier, b_.getInt32(0));
    }
  const bool cp_a = async_a && !pipe_a && !tma_a, cp_b = async_b && !pipe_b && !tma_b && !read_held_b;
  if (cp_a) issue_copies(*async_a, base_a, "dot (wgmma) operand A, asynchronous copy");
  else if (stage_a && !tma_a) stage_mma_operand(op, 0, st_a, base_a);
  if (cp_b) issue_copies(*async_b, base_b, "dot (wgmma) operand B, asynchronous copy");
  else if ((stage_b || sharer) && !tma_b) stage_mma_operand(op, 1, st_b, base_b);
  if (cp_a || cp_b) {
    hooks_.cp_async_commit(b_);
    cp_async_wait(0);
  }
  // Every thread's writes (and waited copies) reach the async proxy (barrier() fences it) and
  // the other threads before any warpgroup's MMA reads them.
  if (uses_scratch || sharer || ((pipe_a || pipe_b) && pipe_landed_unfenced_)) barrier();

  // The accumulator's elements by (row, column) offset from the thread's first, then as each
  // pass's registers in the instruction's order: register i is row 8 ((i / 2) % 2), column
  // 8 (i / 4) + i % 2 of the thread's part of the pass.
  const ThreadElems& te = elems_of(ls[2], res->type.shape);
  std::map<std::pair<int64_t, int64_t>, size_t> elem;
  for (size_t j = 0; j < size_t(te.count); ++j) elem[{te.offset[j][0], te.offset[j][1]}] = j;
  const int64_t passes = M / pass_rows, regs = n / 2;
  internal_assert(int64_t(elem.size()) == te.count && te.count == passes * regs,
                  "the wgmma layout's elements are the instructions' registers");
  auto slot = [&](int64_t p, int64_t i) {
    return elem.at({p * pass_rows + 8 * ((i / 2) % 2), 8 * (i / 4) + i % 2});
  };
  const Elems* acc = zero_acc ? nullptr : &get(op.operands[2], ls[2]);
  auto d = std::vector<Elems>(size_t(passes));
  for (int64_t p = 0; p < passes; ++p)
    for (int64_t i = 0; i < regs; ++i)
      // A zero accumulator's registers are never read: the first k step's MMAs ignore them
      // (scale-d 0), so they start undefined rather than zeroed by a move each.
      d[size_t(p)].push_back(acc ? (*acc)[slot(p, i)] : llvm::PoisonValue::get(b_.getFloatTy()));

  // Descriptors: one built at run time per operand (A: from this warpgroup's first row; B:
  // from its first column with warpgroups along N), the others from it by a constant: a k
  // step's or pass's byte offset >> 4 added to the start address field, which cannot carry
  // out of it (shared memory ends below 2^18 bytes). A dot of many descriptors (MLA's scores
  // over 512 columns: 64) builds them where it issues: its start addresses pass through an
  // operand fence, so that a loop over operands that stay put (resident, held) does not hoist
  // them all, two registers each, beside the accumulators.
  const int64_t steps = K / wgmma_k_step(int(eb));
  const bool rebuild = G > 1 || steps * ((regs_a ? 0 : passes) + 1) > kHoistedDescriptors;
  auto descriptor = [&](llvm::Value* start, const MmaStaging& st) {
    if (rebuild) start = hooks_.fence_operands(b_, {start})[0];
    llvm::Value* field = b_.CreateAnd(b_.CreateZExt(b_.CreateLShr(start, 4), b_.getInt64Ty()), 0x3fff);
    return b_.CreateOr(field, b_.getInt64(descriptor_bits(st)));
  };
  internal_assert(regs_a || st_a.kmajor || 64 * eb % st_a.swizzle == 0,
                  "an M-major A's warpgroups start at whole panels");
  internal_assert(G == 1 || st_b.kmajor || n * eb % st_b.swizzle == 0,
                  "an N-major B's warpgroups start at whole panels");
  // This warpgroup's offset into an operand: A's rows (along M) or B's columns (along N).
  auto warpgroup_at = [&](llvm::Value* base, int64_t bytes) {
    llvm::Value* q = b_.CreateLShr(warp_, 2);
    return b_.CreateAdd(hooks_.shared_address(b_, base), b_.CreateMul(q, b_.getInt32(uint32_t(bytes))));
  };
  llvm::Value* desc_a0 = nullptr;
  if (!regs_a)
    desc_a0 = descriptor(G == 1 ? warpgroup_at(base_a, step_start(st_a, 64, 0, eb)) : hooks_.shared_address(b_, base_a),
                         st_a);
  // A's fragments, pass p and k step kk at p * (K / 16) + kk, fenced with the accumulator.
  std::vector<llvm::Value*> a_regs;
  if (regs_a)
    for (const std::array<llvm::Value*, 4>& q : pair_fragments(get(a, ls[0]), ls[0], a->type, 16 * W, 8))
      a_regs.insert(a_regs.end(), q.begin(), q.end());
  a_regs = hooks_.fence_operands(b_, a_regs);
  llvm::Value* desc_b0 =
      descriptor(G == 1 ? hooks_.shared_address(b_, base_b) : warpgroup_at(base_b, step_start(st_b, n, 0, eb)), st_b);
  auto plus = [&](llvm::Value* desc, int64_t bytes) {
    internal_assert(bytes % 16 == 0, "descriptor offsets are whole 16 bytes");
    return bytes ? b_.CreateAdd(desc, b_.getInt64(uint64_t(bytes >> 4)), "", true, true) : desc;
  };
  for (Elems& x : d) x = hooks_.fence_operands(b_, x);
  hooks_.wgmma_fence(b_);
  const std::string where = site("dot (wgmma) operands A and B read");
  for (int64_t kk = 0; kk < steps; ++kk) {
    llvm::Value* desc_b = plus(desc_b0, step_start(st_b, 0, kk, eb));
    for (int64_t p = 0; p < passes; ++p) {
      const size_t q = size_t(4 * (p * (K / 16) + kk));
      d[size_t(p)] = regs_a ? hooks_.wgmma(b_, dt, int(n), nullptr, {a_regs.begin() + q, a_regs.begin() + q + 4}, desc_b,
                                           d[size_t(p)], !(zero_acc && kk == 0), false, !st_b.kmajor, where)
                            : hooks_.wgmma(b_, dt, int(n), plus(desc_a0, step_start(st_a, p * pass_rows, kk, eb)), {},
                                           desc_b, d[size_t(p)], !(zero_acc && kk == 0), !st_a.kmajor, !st_b.kmajor,
                                           where);
    }
  }
  // The pipeline's dot whose group stays in flight waits only for the previous trip's group
  // (its buffer is refilled after the trip's barrier; the loop's exit waits for the last).
  const Pipeline* pl = pipe_a   ? &pipes_.pipelines()[size_t(async_a->pipeline)]
                       : pipe_b ? &pipes_.pipelines()[size_t(async_b->pipeline)]
                                : nullptr;
  hooks_.wgmma_commit(b_);
  ++wgmma_commits_;
  // A result read only in its own layout, from operands no later code in the block overwrites
  // (pipeline buffers and resident operands change only past a barrier that follows the wait
  // at the block's end; scratch is reused at once), is waited for at its first read
  // (retire_wgmma): the code in between overlaps the MMAs.
  const bool in_flight = pl && pl->wgmma_in_flight == &op;
  const std::vector<LayoutId>& wants = plan_.requests(res);
  const bool lazy = !in_flight && !uses_scratch && !read_held_b &&
                    std::all_of(wants.begin(), wants.end(), [&](LayoutId l) { return l == ls[2]; });
  if (!lazy) hooks_.wgmma_wait(b_, in_flight ? 1 : 0);
  Elems out(size_t(te.count), nullptr);
  for (int64_t p = 0; p < passes; ++p) {
    Elems x = lazy ? d[size_t(p)] : hooks_.fence_operands(b_, d[size_t(p)]);
    for (int64_t i = 0; i < regs; ++i) out[slot(p, i)] = x[size_t(i)];
  }
  if (lazy) pending_wgmma_.push_back({res, ls[2], wgmma_commits_, a_regs});
  ++stats_.wgmma_dots;
  if (regs_a) ++stats_.wgmma_register_a;
  if (pipe_a || pipe_b) pipe_read_unfenced_ = true; // until the barrier: the buffer may not be refilled
  if (uses_scratch) scratch_end();
  if (read_held_b) { // its last reader waited: the region is scratch again once a barrier follows
    scratch_floor_ = held->second.floor_before;
    touched_.push_back({kScratch, held->second.lo, held->second.hi, false});
    held_b_.erase(held);
  }
  define(res, ls[2], std::move(out));
}

const Op* Lowering::wgmma_b_sharer(const Op& op) {
  if (!op.parent) return nullptr;
  const auto& ops = op.parent->ops;
  auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& o) { return o.get() == &op; });
  for (++it; it != ops.end(); ++it) {
    const Op& o = **it;
    if (!o.regions.empty()) return nullptr; // straight code only: the held region ends in the block
    // Its B not copied ahead or resident: staged by it, or copied by it from the load this
    // dot copies (PipelinePlan: one asynchronous operand for both).
    if (o.kind == OpKind::Dot && pipes_.async_operand(&o, 1) == pipes_.async_operand(&op, 1) &&
        !resident_.count({&o, 1}) && plan_.wgmma_same_b_staging(op, o))
      return &o;
  }
  return nullptr;
}

bool Lowering::wgmma_a_in_registers(const Op& op, LayoutId la) {
  const ir::Type& a = op.operands[0]->type;
  const int64_t M = a.shape[0], K = a.shape[1], W = opts_.num_warps;
  // Only with the warpgroups along M: along N, each warpgroup holds a slice of A's columns
  // (attention's P split along the keys) but reads all of them, through shared memory.
  return ir::dtype_bytes(a.dtype()) == 2 && K % 16 == 0 && M % (16 * W) == 0 &&
         plan_.layout(la) == wgmma_layout(M, K, int(W));
}

} // namespace tilec::codegen::detail
