// Tensor-core dot operands copied straight from global memory to their shared-memory
// staging (16-byte cp.async), and the copies software-pipelined loops issue ahead, as the
// pipeline plan (codegen/pipeline_plan.h) decided them before emission: this file emits.
#include "codegen/lowering.h"

namespace tilec::codegen::detail {

llvm::Value* Lowering::pipe_buffer(const Pipeline& pl, llvm::Value* stage, int slot) {
  if (!smem_base_) smem_base_ = hooks_.shared_base(pb_);
  if (pl.late[size_t(slot)]) // one buffer, after the rotating ones
    return b_.CreateConstGEP1_64(b_.getInt8Ty(), smem_base_, uint64_t(pl.late_base() + pl.offsets[size_t(slot)]));
  llvm::Value* off = b_.CreateAdd(b_.CreateMul(stage, b_.getInt32(uint32_t(pl.stage_bytes)), "", true, true),
                                  b_.getInt32(uint32_t(pl.base + pl.offsets[size_t(slot)])), "", true, true);
  return b_.CreateGEP(b_.getInt8Ty(), smem_base_, off);
}

// One 16-byte cp.async per chunk x's load would have read, into the operand's staging at
// `base` (zero-filled where the load's mask, or ahead_pred_, is off).
void Lowering::issue_copies(const AsyncOperand& x, llvm::Value* base, const char* what) {
  const Op& load = *x.load;
  const bool transposed = x.transpose != nullptr, is_a = x.idx == 0;
  const MmaStaging& st = x.staging;
  LayoutId ll = plan_.op_layouts(&load)[0];
  const Value* ptr = load.operands[0];
  global_access(ptr, ll, false);
  const Elems& P = get(ptr, ll);
  const Elems* mask = load.mask() ? &get(load.mask(), ll) : nullptr;
  AccessPlan ap = plan_access(load, ll);
  auto cs = coords(ll, ptr->type.shape);
  const ThreadElems& te = elems_of(ll, ptr->type.shape);
  const int64_t eb = ir::dtype_bytes(load.results[0]->type.dtype());
  std::string where = site(what);
  // Element j's (row, column) in the staging from its coordinates (the load's dims 0 and 1).
  auto place = [&](auto c0, auto c1) {
    auto d0 = transposed ? c1 : c0, d1 = transposed ? c0 : c1; // the dot's (m, k) or (k, n)
    auto mn = is_a ? d0 : d1, k = is_a ? d1 : d0;
    return std::pair{st.kmajor ? mn : k, st.kmajor ? k : mn};
  };
  // Unswizzled, a copy's byte is the thread's first element's plus a constant, which goes into
  // the copy's address ([r + imm]): the thread computes one address for all its copies.
  llvm::Value* first = nullptr;
  if (!st.swizzle) {
    auto [row, col] = place(cs[0][0], cs[0][1]);
    first = b_.CreateGEP(b_.getInt8Ty(), base, staged_byte(st, row, b_.CreateMul(col, b_.getInt32(uint32_t(eb)), "", true, true)));
  }
  for (size_t j0 = 0; j0 < P.size(); j0 += size_t(ap.vec)) {
    llvm::Value* dst;
    if (first) {
      auto [row, col] = place(te.offset[j0][0] - te.offset[0][0], te.offset[j0][1] - te.offset[0][1]);
      dst = b_.CreateConstGEP1_64(b_.getInt8Ty(), first, uint64_t(row * st.row_bytes + col * eb));
    } else {
      auto [row, col] = place(cs[j0][0], cs[j0][1]);
      dst = b_.CreateGEP(b_.getInt8Ty(), base, staged_byte(st, row, b_.CreateMul(col, b_.getInt32(uint32_t(eb)), "", true, true)));
    }
    llvm::Value* pred = and_pred(mask ? (*mask)[j0] : nullptr, ahead_pred_);
    hooks_.cp_async_16(b_, dst, P[j0], pred, where);
  }
}

// The copies of iteration `iv` (the induction variable's value) into buffer `stage`: the
// slice is emitted again with the induction variable replaced, its loads guarded by iv <
// the loop's end, then one cp.async group is committed.
void Lowering::issue_ahead(const Pipeline& pl, llvm::Value* iv, llvm::Value* stage, bool in_loop) {
  const ir::Block& body = pl.loop->region(0);
  auto saved = vals_;
  vals_[{body.args[0], kScalar}] = {iv};
  ahead_pred_ = b_.CreateICmpSLT(iv, get(pl.loop->operands[1], kScalar)[0]);
  emitting_ahead_ = true;
  for (const Op* o : pl.slice) {
    // The layout plan lists each conversion of the body once: those of ops only the copies
    // need are counted where the loop issues them, and nowhere else.
    int conversions = stats_.conversions;
    emit_op(*o);
    if (!in_loop || !pipes_.deferred(o)) stats_.conversions = conversions;
  }
  emitting_ahead_ = false;
  issue_slots(pl, stage, false);
  if (pl.cp_async) hooks_.cp_async_commit(b_);
  if (pl.has_late()) {
    if (in_loop) { // at the end of this trip (issue_late), from the slice's values
      late_vals_ = vals_;
      late_pred_ = ahead_pred_;
    } else {
      issue_slots(pl, stage, true);
      hooks_.cp_async_commit(b_);
    }
  }
  ahead_pred_ = nullptr;
  vals_ = std::move(saved);
}

void Lowering::issue_slots(const Pipeline& pl, llvm::Value* stage, bool late) {
  std::vector<const AsyncOperand*> tma;
  std::vector<llvm::Value*> tma_bases;
  for (size_t slot = 0; slot < pl.operands.size(); ++slot) {
    const AsyncOperand& x = pipes_.async_operands()[size_t(pl.operands[slot])];
    if (x.tma() && !pl.late[slot]) {
      tma.push_back(&x);
      tma_bases.push_back(pipe_buffer(pl, stage, int(slot)));
    }
  }
  if (!late && !tma.empty())
    issue_tma(tma, tma_bases, mbarrier(pl.mbarriers, stage), "dot (wgmma) operand, TMA copy issued ahead");
  for (size_t slot = 0; slot < pl.operands.size(); ++slot) {
    if (pl.late[slot] != late) continue;
    const AsyncOperand& x = pipes_.async_operands()[size_t(pl.operands[slot])];
    if (x.tma()) continue;
    const char* what = x.idx == 0 ? "dot (mma) operand A, asynchronous copy issued ahead"
                                  : "dot (mma) operand B, asynchronous copy issued ahead";
    const Op* outer = cur_op_;
    cur_op_ = x.load;
    issue_copies(x, pipe_buffer(pl, stage, int(slot)), what);
    cur_op_ = outer;
  }
}

llvm::Value* Lowering::mbarrier(int64_t first, llvm::Value* index) {
  if (!smem_base_) smem_base_ = hooks_.shared_base(pb_);
  llvm::Value* off = b_.CreateAdd(b_.CreateMul(index, b_.getInt32(8), "", true, true), b_.getInt32(uint32_t(first)), "",
                                  true, true);
  return b_.CreateGEP(b_.getInt8Ty(), smem_base_, off);
}

// Thread 0 arms the mbarrier with the bytes of every copy, then issues one copy per panel of
// each operand's staging: the box at the descriptor load's offsets, the panel's columns on.
// Where ahead_pred_ is false (an iteration past the loop's end) nothing is issued and the
// phase does not begin: no thread waits for it.
void Lowering::issue_tma(const std::vector<const AsyncOperand*>& xs, const std::vector<llvm::Value*>& bases,
                         llvm::Value* bar, const char* what) {
  int64_t bytes = 0;
  for (const AsyncOperand* x : xs) bytes += x->staging.rows * x->staging.row_bytes * x->staging.panels;
  const std::string where = site(what);
  // The coordinates first (every thread may compute them; only thread 0 uses them).
  std::vector<std::vector<std::vector<llvm::Value*>>> coords(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const Op& load = *xs[i]->load;
    const MmaStaging& st = xs[i]->staging;
    auto offset = [&](size_t d, int64_t box) {
      return b_.CreateSExtOrTrunc(get(load.operands[ir::desc_offset_index(load, d, box)], kScalar)[0], b_.getInt32Ty());
    };
    llvm::Value* outer = offset(0, 0);
    llvm::Value* inner = offset(1, 0);
    const int64_t per_panel = st.swizzle / ir::dtype_bytes(load.results[0]->type.dtype());
    // Panel by panel, a copy per box (a gather's boxes each start at their own row).
    for (int64_t p = 0; p < st.panels; ++p)
      for (int64_t box = 0; box < load.attrs.boxes; ++box)
        coords[i].push_back({p ? b_.CreateAdd(inner, b_.getInt32(uint32_t(p * per_panel))) : inner,
                             box ? offset(0, box) : outer});
  }
  llvm::Value* pred = and_pred(b_.CreateICmpEQ(tid_, b_.getInt32(tma_thread_)), ahead_pred_);
  guarded(b_, pred, [&]() -> llvm::Value* {
    hooks_.mbarrier_arrive_expect_tx(b_, bar, bytes, where);
    for (size_t i = 0; i < xs.size(); ++i) {
      const MmaStaging& st = xs[i]->staging;
      llvm::Value* map = tensor_maps_[size_t(xs[i]->tensor_map)];
      const int64_t boxes = xs[i]->load->attrs.boxes, h = st.rows / boxes;
      for (int64_t p = 0; p < st.panels; ++p)
        for (int64_t box = 0; box < boxes; ++box)
          hooks_.tma_load(b_,
                          b_.CreateConstGEP1_64(b_.getInt8Ty(), bases[i],
                                                uint64_t(p * st.rows * st.row_bytes + box * h * st.row_bytes)),
                          map, coords[i][size_t(p * boxes + box)], bar, where);
    }
    return nullptr;
  });
}

void Lowering::wait_tma(int64_t first, llvm::Value* index, const char* what) {
  llvm::AllocaInst*& phases = mbar_phases_[first];
  if (!phases) {
    phases = pb_.CreateAlloca(pb_.getInt32Ty(), nullptr, "mbar.phases");
    pb_.CreateStore(pb_.getInt32(0), phases);
  }
  llvm::Value* bits = b_.CreateLoad(b_.getInt32Ty(), phases);
  llvm::Value* parity = b_.CreateAnd(b_.CreateLShr(bits, index), 1);
  hooks_.mbarrier_wait(b_, mbarrier(first, index), parity, site(what));
  b_.CreateStore(b_.CreateXor(bits, b_.CreateShl(b_.getInt32(1), index)), phases);
}

// Thread 0 initializes every mbarrier (one arrival a phase: its own arrive.expect_tx; a
// warp-specialized pipeline's empty ones, one per consumer thread), fences the inits to the
// copy engine, and a barrier shows them to every thread.
void Lowering::init_mbarriers() {
  if (!pipes_.mbarrier_count()) return;
  const Pipeline* ws = pipes_.warp_specialized();
  guarded(b_, b_.CreateICmpEQ(tid_, b_.getInt32(0)), [&]() -> llvm::Value* {
    for (int64_t i = 0; i < pipes_.mbarrier_count(); ++i) {
      const int64_t at = pipes_.mbarrier_base() + 8 * i;
      const bool empty = ws && at >= ws->empty_mbarriers && at < ws->empty_mbarriers + 8 * ws->stages;
      hooks_.mbarrier_init(b_, mbarrier(pipes_.mbarrier_base(), b_.getInt32(uint32_t(i))),
                           empty ? 32 * opts_.num_warps : 1);
    }
    hooks_.mbarrier_init_fence(b_);
    return nullptr;
  });
  barrier();
}

void Lowering::emit_tma_store(const Op& op) {
  const Value* v = op.operands.back();
  const ir::Shape& s = v->type.shape;
  const LayoutId l = plan_.op_layouts(&op)[0];
  const int map = pipes_.store_tensor_map(&op);
  const TensorMapPlan& t = pipes_.tensor_maps()[size_t(map)];
  const int64_t eb = ir::dtype_bytes(v->type.dtype()), row = s[1] * eb;
  MmaStaging st; // the boxes' layout: rows of one swizzle pattern, panel after panel
  st.kmajor = true;
  st.rows = s[0];
  st.swizzle = t.swizzle;
  st.row_bytes = t.swizzle ? t.swizzle : row;
  st.panels = t.swizzle ? row / t.swizzle : 1;
  // Outside every loop the pipelines' buffers are free once a barrier follows their last reads
  // and copies: a block they hold is staged there (a kernel's epilogue after its K loop), else
  // in scratch.
  const bool in_buffers = loops_open_ == 0 && st.bytes() <= pipes_.buffers_end();
  const Access staging{kScratch, -pipes_.buffer_bytes(), st.bytes() - pipes_.buffer_bytes(), true}; // as scratch offsets
  if (in_buffers &&
      (pipe_read_unfenced_ || pipe_written_unfenced_ || pipe_landed_unfenced_ || conflicts_with_touched(staging)))
    barrier();
  if (!in_buffers) scratch_begin(st.bytes(), MmaStaging::kSwizzleAlign);
  if (!smem_base_) smem_base_ = hooks_.shared_base(pb_);
  llvm::Value* base = in_buffers ? smem_base_ : smem(b_.getInt8Ty(), b_.getInt32(0), 0);
  store_runs(get(v, l), l, s, 1, int(eb), v->type.dtype(), [&](size_t j) {
    auto c = coord_of(l, s, j);
    return b_.CreateGEP(b_.getInt8Ty(), base, staged_byte(st, c[0], b_.CreateMul(c[1], b_.getInt32(uint32_t(eb)), "", true, true)));
  }, "descriptor store (TMA) staging");
  // Every thread's writes reach the async proxy the copy engine reads through, then thread 0
  // copies each panel's box out and waits until the engine has read them.
  hooks_.fence_proxy_async(b_);
  proxy_unfenced_ = false;
  barrier();
  internal_assert(in_buffers || (pipes_.buffer_bytes() % MmaStaging::kSwizzleAlign == 0 &&
                                  region_.lo % MmaStaging::kSwizzleAlign == 0),
                  "a TMA store's staging starts on the swizzle pattern");
  auto offset = [&](size_t d) { return b_.CreateSExtOrTrunc(get(op.operands[5 + d], kScalar)[0], b_.getInt32Ty()); };
  llvm::Value* outer = offset(0);
  llvm::Value* inner = offset(1);
  const std::string where = site("descriptor store (TMA)");
  guarded(b_, b_.CreateICmpEQ(tid_, b_.getInt32(0)), [&]() -> llvm::Value* {
    for (int64_t p = 0; p < st.panels; ++p)
      hooks_.tma_store(b_, b_.CreateConstGEP1_64(b_.getInt8Ty(), base, uint64_t(p * st.rows * st.row_bytes)),
                       tensor_maps_[size_t(map)],
                       {p ? b_.CreateAdd(inner, b_.getInt32(uint32_t(p * st.row_bytes / eb))) : inner, outer}, where);
    hooks_.bulk_commit(b_);
    hooks_.bulk_wait(b_, 0);
    return nullptr;
  });
  if (in_buffers) { // read by the copy engine until thread 0's wait: the next writer waits at a barrier
    pipe_written_unfenced_ = true;
    touch({kScratch, staging.lo, staging.hi, false});
  } else {
    scratch_end();
  }
  ++stats_.tma_stores;
}

void Lowering::issue_late(const Pipeline& pl) {
  auto saved = vals_;
  vals_ = std::move(late_vals_);
  late_vals_.clear();
  ahead_pred_ = late_pred_;
  issue_slots(pl, nullptr, true);
  hooks_.cp_async_commit(b_);
  ahead_pred_ = late_pred_ = nullptr;
  vals_ = std::move(saved);
}

} // namespace tilec::codegen::detail
