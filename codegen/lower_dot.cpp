// dot on CUDA cores (FMA), the choice between it and the tensor cores, and the K loop
// both run.
#include "codegen/lowering.h"

namespace tilec::codegen::detail {

// f16 x f16 or bf16 x bf16 with an f32 accumulator takes the tensor cores (emit_dot_mma)
// unless CompileOptions::tensor_cores is off; everything else runs on CUDA cores.
bool Lowering::mma_eligible(const Op& op) const {
  return opts_.tensor_cores && (dot_on_tensor_cores(op) || plan_.is_wgmma(&op));
}

Elems Lowering::k_loop(const char* name, int64_t end, int64_t step, const Elems& init,
                       const std::function<Elems(llvm::Value* k, const Elems& carried)>& body) {
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  llvm::BasicBlock* loop = llvm::BasicBlock::Create(c_, std::string(name) + ".k", kernel_);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(c_, std::string(name) + ".end", kernel_);
  b_.CreateBr(loop);
  b_.SetInsertPoint(loop);
  llvm::PHINode* k = b_.CreatePHI(b_.getInt32Ty(), 2, "k");
  k->addIncoming(b_.getInt32(0), pre);
  std::vector<llvm::PHINode*> phis;
  for (llvm::Value* v : init) {
    phis.push_back(b_.CreatePHI(v->getType(), 2));
    phis.back()->addIncoming(v, pre);
  }
  Elems next = body(k, Elems(phis.begin(), phis.end()));
  llvm::Value* k_next = b_.CreateAdd(k, b_.getInt32(uint32_t(step)));
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  k->addIncoming(k_next, latch);
  for (size_t i = 0; i < phis.size(); ++i) phis[i]->addIncoming(next[i], latch);
  b_.CreateCondBr(b_.CreateICmpULT(k_next, b_.getInt32(uint32_t(end))), loop, exit);
  b_.SetInsertPoint(exit);
  return next;
}

// dot on CUDA cores: A (transposed) and B staged in shared memory, then each
// thread runs the K loop with FMAs into its f32 accumulators.
void Lowering::emit_dot(const Op& op) {
  if (mma_eligible(op)) return emit_dot_mma(op);
  const Value* a = op.operands[0];
  const Value* bv = op.operands[1];
  const Value* res = op.results[0];
  std::vector<LayoutId> ls = plan_.op_layouts(&op);
  int64_t m = a->type.shape[0], k = a->type.shape[1], n = bv->type.shape[1];
  const ir::ElemType e = a->type.elem;
  llvm::Type* ty = mem_type(e);
  int eb = mem_bytes(e);
  constexpr int64_t kPad = 4;
  int64_t sa = m + kPad, sb = n + kPad;
  int64_t off_b = (k * sa * eb + 15) / 16 * 16;
  scratch_begin(off_b + k * sb * eb);
  // Vector accesses of up to 16 bytes, and no wider than the row strides keep aligned.
  const int64_t cap_a = std::min<int64_t>(16 / eb, sa & -sa), cap_b = std::min<int64_t>(16 / eb, sb & -sb);
  {
    const ir::Shape& sha = a->type.shape;
    store_runs(get(a, ls[0]), ls[0], sha, 0, int(16 / cap_a), e.dtype, [&](size_t j) {
      auto c = coord_of(ls[0], sha, j);
      return smem(ty, b_.CreateAdd(b_.CreateMul(c[1], b_.getInt32(static_cast<uint32_t>(sa))), c[0]));
    }, "dot operand A write");
    const ir::Shape& shb = bv->type.shape;
    store_runs(get(bv, ls[1]), ls[1], shb, 1, int(16 / cap_b), bv->type.elem.dtype, [&](size_t j) {
      auto c = coord_of(ls[1], shb, j);
      return smem(ty, b_.CreateAdd(b_.CreateMul(c[0], b_.getInt32(static_cast<uint32_t>(sb))), c[1]), off_b);
    }, "dot operand B write");
  }
  barrier();
  const ir::Shape& rs = res->type.shape;
  const ThreadElems& td = elems_of(ls[2], rs);
  auto cd = coords(ls[2], rs);
  Elems init = get(op.operands[2], ls[2]);
  std::map<int64_t, size_t> rows, cols;
  std::vector<llvm::Value*> row_coord, col_coord;
  std::vector<std::pair<size_t, size_t>> rc(td.count);
  for (int64_t j = 0; j < td.count; ++j) {
    auto [ri, rnew] = rows.try_emplace(td.offset[j][0], row_coord.size());
    if (rnew) row_coord.push_back(cd[j][0]);
    auto [ci, cnew] = cols.try_emplace(td.offset[j][1], col_coord.size());
    if (cnew) col_coord.push_back(cd[j][1]);
    rc[j] = {ri->second, ci->second};
  }
  // The thread's rows (columns) in groups of consecutive ones, one vector load per group and k:
  // (offset of the first, count), each count a power of two of at most `cap` dividing the first
  // offset (the thread's first row is a multiple of its rows per block, so the group is aligned).
  auto groups = [](const std::map<int64_t, size_t>& offs, int64_t cap) {
    std::vector<std::pair<int64_t, int64_t>> g;
    for (auto it = offs.begin(); it != offs.end();) {
      int64_t o = it->first, n = cap;
      auto consecutive = [&](int64_t len) {
        if (o % len != 0) return false;
        for (int64_t q = 1; q < len; ++q)
          if (!offs.count(o + q)) return false;
        return true;
      };
      while (n > 1 && !consecutive(n)) n /= 2;
      g.push_back({o, n});
      std::advance(it, n);
    }
    return g;
  };
  const auto row_groups = groups(rows, cap_a), col_groups = groups(cols, cap_b);
  // Loads group by group into per-row (per-column) values, as f32.
  auto load_groups = [&](const std::vector<std::pair<int64_t, int64_t>>& gs, const std::map<int64_t, size_t>& index,
                         const std::vector<llvm::Value*>& coord, llvm::Value* k_off, int64_t byte_off,
                         const char* what) {
    std::vector<llvm::Value*> vals(coord.size());
    for (auto [o, n] : gs) {
      llvm::Value* at = smem(ty, b_.CreateAdd(k_off, coord[index.at(o)]), byte_off);
      llvm::Value* x = smem_load(n > 1 ? llvm::FixedVectorType::get(ty, unsigned(n)) : ty, at, what);
      for (int64_t q = 0; q < n; ++q)
        vals[index.at(o + q)] = to_f32(n > 1 ? b_.CreateExtractElement(x, uint64_t(q)) : x, e.dtype);
    }
    return vals;
  };
  Elems out = k_loop("dot", k, 1, init, [&](llvm::Value* kk, const Elems& acc) {
    llvm::Value* ka = b_.CreateMul(kk, b_.getInt32(static_cast<uint32_t>(sa)));
    llvm::Value* kb = b_.CreateMul(kk, b_.getInt32(static_cast<uint32_t>(sb)));
    std::vector<llvm::Value*> av = load_groups(row_groups, rows, row_coord, ka, 0, "dot operand A read");
    std::vector<llvm::Value*> bvv = load_groups(col_groups, cols, col_coord, kb, off_b, "dot operand B read");
    Elems next(td.count);
    for (int64_t j = 0; j < td.count; ++j)
      next[j] = b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {b_.getFloatTy()},
                                   {av[rc[j].first], bvv[rc[j].second], acc[size_t(j)]});
    return next;
  });
  scratch_end();
  define(res, ls[2], std::move(out));
}

} // namespace tilec::codegen::detail
