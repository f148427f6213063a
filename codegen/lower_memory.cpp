// Global memory: loads, stores and atomics, each a vector access per run of contiguous
// elements where the access plan allows it (vector width, alignment, mask uniformity).
#include "codegen/lowering.h"

namespace tilec::codegen::detail {

llvm::Value* Lowering::all_of(const Elems& preds, size_t from, size_t n) {
  llvm::Value* r = preds[from];
  for (size_t k = 1; k < n; ++k) r = b_.CreateAnd(r, preds[from + k]);
  return r;
}

// A chunk of `vec` elements contiguous in memory is one vector access when
// its address is aligned and its mask is all-true; when neither is known at
// compile time, both are checked at run time and the chunk falls back to one
// guarded access per element.
void Lowering::emit_load(const Op& op) {
  const Value* ptr = op.operands[0];
  const Value* res = op.results[0];
  const ir::ElemType e = res->type.elem;
  LayoutId l = res->type.is_scalar() ? kScalar : plan_.op_layouts(&op)[0];
  global_access(ptr, l, false);
  const Elems& P = get(ptr, l);
  const Elems* M = op.mask() ? &get(op.mask(), l) : nullptr;
  const Elems* O = op.other() ? &get(op.other(), l) : nullptr;
  llvm::Type* ty = mem_type(e);
  unsigned eb = static_cast<unsigned>(mem_bytes(e));
  AccessPlan ap = plan_access(op, l);
  size_t n = P.size();
  Elems ahead_mask; // issued ahead (issue_ahead): nothing is read for an iteration past the end
  if (ahead_pred_) {
    for (size_t j = 0; j < n; ++j) ahead_mask.push_back(M ? b_.CreateAnd((*M)[j], ahead_pred_) : ahead_pred_);
    M = &ahead_mask;
  }
  int vec = ap.vec;
  Elems r(n);
  for (size_t j0 = 0; j0 < n; j0 += vec) {
    auto scalar_loads = [&](Elems& out) {
      for (int k = 0; k < vec; ++k)
        out[j0 + k] = hooks_.load(b_, P[j0 + k], ty, eb, M ? (*M)[j0 + k] : nullptr);
    };
    if (vec == 1) {
      scalar_loads(r);
      continue;
    }
    auto* vty = llvm::FixedVectorType::get(ty, vec);
    auto vector_load = [&](Elems& out, llvm::Value* pred) {
      llvm::Value* v = hooks_.load(b_, P[j0], vty, eb * vec, pred);
      for (int k = 0; k < vec; ++k) out[j0 + k] = b_.CreateExtractElement(v, k);
    };
    llvm::Value* fast = nullptr;
    if (!ap.aligned)
      fast = b_.CreateICmpEQ(b_.CreateAnd(b_.CreatePtrToInt(P[j0], b_.getInt64Ty()), eb * vec - 1), b_.getInt64(0));
    if (M && !ap.mask_uniform) fast = and_pred(fast, all_of(*M, j0, vec));
    llvm::Value* upred = M && ap.mask_uniform ? (*M)[j0] : nullptr;
    if (!fast) {
      vector_load(r, upred);
      continue;
    }
    llvm::BasicBlock* fast_bb = llvm::BasicBlock::Create(c_, "ld.vec", kernel_);
    llvm::BasicBlock* slow_bb = llvm::BasicBlock::Create(c_, "ld.scalar", kernel_);
    llvm::BasicBlock* join = llvm::BasicBlock::Create(c_, "ld.join", kernel_);
    b_.CreateCondBr(fast, fast_bb, slow_bb);
    Elems fv(n), sv(n);
    b_.SetInsertPoint(fast_bb);
    vector_load(fv, upred);
    llvm::BasicBlock* fast_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(slow_bb);
    scalar_loads(sv);
    llvm::BasicBlock* slow_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
    for (int k = 0; k < vec; ++k) {
      llvm::PHINode* phi = b_.CreatePHI(ty, 2);
      phi->addIncoming(fv[j0 + k], fast_end);
      phi->addIncoming(sv[j0 + k], slow_end);
      r[j0 + k] = phi;
    }
  }
  // A masked-off element already reads as zero (the target's guarded load): an `other` of
  // +0 needs no select.
  bool other_is_zero = O && is_positive_zero(op.other());
  for (size_t j = 0; j < n; ++j) {
    r[j] = from_mem(r[j], e);
    if (O && !other_is_zero) r[j] = b_.CreateSelect((*M)[j], r[j], (*O)[j]);
  }
  define(res, l, std::move(r));
}

void Lowering::emit_store(const Op& op) {
  const Value* ptr = op.operands[0];
  const Value* val = op.operands[1];
  const ir::ElemType e = val->type.elem;
  LayoutId l = plan_.op_layouts(&op)[0];
  global_access(ptr, l, true);
  const Elems& P = get(ptr, l);
  const Elems& V = get(val, l);
  const Elems* M = op.mask() ? &get(op.mask(), l) : nullptr;
  llvm::Value* own = owner(l, ptr->type.shape);
  unsigned eb = static_cast<unsigned>(mem_bytes(e));
  AccessPlan ap = plan_access(op, l);
  int vec = ap.vec;
  for (size_t j0 = 0; j0 < P.size(); j0 += vec) {
    auto scalar_stores = [&] {
      for (int k = 0; k < vec; ++k)
        hooks_.store(b_, P[j0 + k], to_mem(V[j0 + k], e), eb, and_pred(own, M ? (*M)[j0 + k] : nullptr));
    };
    if (vec == 1) {
      scalar_stores();
      continue;
    }
    auto vector_store = [&](llvm::Value* pred) {
      Elems mem(static_cast<size_t>(vec));
      for (int k = 0; k < vec; ++k) mem[size_t(k)] = to_mem(V[j0 + k], e);
      hooks_.store(b_, P[j0], vector_of(mem, 0, vec), eb * vec, pred);
    };
    llvm::Value* fast = nullptr;
    if (!ap.aligned)
      fast = b_.CreateICmpEQ(b_.CreateAnd(b_.CreatePtrToInt(P[j0], b_.getInt64Ty()), eb * vec - 1), b_.getInt64(0));
    if (M && !ap.mask_uniform) fast = and_pred(fast, all_of(*M, j0, vec));
    llvm::Value* upred = and_pred(own, M && ap.mask_uniform ? (*M)[j0] : nullptr);
    if (!fast) {
      vector_store(upred);
      continue;
    }
    llvm::BasicBlock* fast_bb = llvm::BasicBlock::Create(c_, "st.vec", kernel_);
    llvm::BasicBlock* slow_bb = llvm::BasicBlock::Create(c_, "st.scalar", kernel_);
    llvm::BasicBlock* join = llvm::BasicBlock::Create(c_, "st.join", kernel_);
    b_.CreateCondBr(fast, fast_bb, slow_bb);
    b_.SetInsertPoint(fast_bb);
    vector_store(upred);
    b_.CreateBr(join);
    b_.SetInsertPoint(slow_bb);
    scalar_stores();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
  }
}

void Lowering::emit_atomic(const Op& op) {
  const Value* ptr = op.operands[0];
  const Value* res = op.results[0];
  LayoutId l = res->type.is_scalar() ? kScalar : plan_.op_layouts(&op)[0];
  const bool cas = op.kind == OpKind::AtomicCas;
  const Elems& P = get(ptr, l);
  const Elems& V = get(op.operands[cas ? 2 : 1], l);
  const Elems* C = cas ? &get(op.operands[1], l) : nullptr;
  const Elems* M = op.mask() ? &get(op.mask(), l) : nullptr;
  llvm::Value* own = owner(l, ptr->type.shape);
  Elems r(P.size());
  for (size_t j = 0; j < P.size(); ++j)
    r[j] = hooks_.atomic(b_, ir::atomic_op(op), P[j], V[j], C ? (*C)[j] : nullptr,
                         and_pred(own, M ? (*M)[j] : nullptr));
  // Threads that share an element got no old value: the owner hands it over.
  if (own) r = share_from_owners(r, l, ptr->type.shape, res->type.elem, own);
  define(res, l, std::move(r));
}

} // namespace tilec::codegen::detail
