// Reductions (within the thread, across lanes by shuffle, across warps through shared
// memory) and scans (through shared memory), and the combine step both share.
#include "codegen/lowering.h"

namespace tilec::codegen::detail {

llvm::Value* Lowering::combine(const Op& op, llvm::Value* x, llvm::Value* y) {
  bool flt = x->getType()->isFloatTy();
  switch (op.attrs.reduce) {
  case ir::ReduceKind::combine: {
    const ir::Block& fn = op.region(0);
    const ir::ElemType& e = op.operands[0]->type.elem;
    auto to_dtype = [&](llvm::Value* v) { return flt ? from_f32(v, e.dtype) : b_.CreateTrunc(v, reg_type(e)); };
    define(fn.args[0], kScalar, {to_dtype(x)});
    define(fn.args[1], kScalar, {to_dtype(y)});
    for (const auto& inner : fn.ops)
      if (inner->kind != OpKind::Yield) emit_op(*inner);
    llvm::Value* r = get(fn.terminator()->operands[0], kScalar)[0];
    return flt ? to_f32(r, e.dtype) : int_resize(r, x->getType(), e.dtype);
  }
  case ir::ReduceKind::sum: return flt ? b_.CreateFAdd(x, y) : b_.CreateAdd(x, y);
  case ir::ReduceKind::max:
    return b_.CreateBinaryIntrinsic(flt ? llvm::Intrinsic::maxnum : int_minmax(true, op.operands[0]->type.dtype()), x, y);
  case ir::ReduceKind::min:
    return b_.CreateBinaryIntrinsic(flt ? llvm::Intrinsic::minnum : int_minmax(false, op.operands[0]->type.dtype()), x, y);
  case ir::ReduceKind::prod: return flt ? b_.CreateFMul(x, y) : b_.CreateMul(x, y);
  }
  internal_fail("bad reduce kind");
}

// An inclusive scan along one axis, Hillis-Steele through shared memory: the owners write the
// elements at their row-major index; each of log2(n) steps adds (combines) the element d
// places back along the axis (d = 1, 2, 4, ...) from one buffer into the other, with a
// barrier between steps. Every thread then holds its elements' prefixes, replicas included.
// Floats combine in f32 and round to the dtype once; integers in i32 (i64), wrapping.
void Lowering::emit_scan(const Op& op) {
  const Value* src = op.operands[0];
  const Value* res = op.results[0];
  const ir::Shape& s = src->type.shape;
  const int axis = static_cast<int>(op.attrs.axis);
  const LayoutId l = plan_.op_layouts(&op)[0];
  const DType dt = src->type.dtype();
  llvm::Type* ct = ir::is_float(dt) ? b_.getFloatTy() : ir::dtype_bits(dt) == 64 ? b_.getInt64Ty() : b_.getInt32Ty();
  const DType cdt = ir::is_float(dt) ? DType::f32 : ir::dtype_bits(dt) == 64 ? DType::i64 : DType::i32;
  const int64_t n = s[size_t(axis)], total = ir::num_elements(s), cb = ct->isIntegerTy(64) ? 8 : 4;
  int64_t stride = 1;
  for (size_t d = size_t(axis) + 1; d < s.size(); ++d) stride *= s[d];
  const Elems& in = get(src, l);
  Elems cur(in.size());
  for (size_t j = 0; j < in.size(); ++j) cur[j] = ir::is_float(dt) ? to_f32(in[j], dt) : int_resize(in[j], ct, dt);
  if (n > 1) {
    auto cs = coords(l, s);
    std::vector<llvm::Value*> idx, along;
    for (auto& c : cs) {
      idx.push_back(linear_index(c, s));
      along.push_back(c[size_t(axis)]);
    }
    llvm::Value* own = owner(l, s);
    scratch_begin(2 * total * cb);
    auto write = [&](int buf) {
      guarded(b_, own, [&]() -> llvm::Value* {
        for (size_t j = 0; j < cur.size(); ++j)
          smem_store(cur[j], smem(ct, idx[j], buf * total * cb), "scan write", cdt);
        return nullptr;
      });
      barrier();
    };
    int buf = 0;
    write(buf);
    for (int64_t d = 1; d < n; d *= 2) {
      for (size_t j = 0; j < cur.size(); ++j) {
        llvm::Value* has = b_.CreateICmpSGE(along[j], b_.getInt32(uint32_t(d)));
        // Elements less than d from the start read themselves (in bounds) and keep their value.
        llvm::Value* from = b_.CreateSelect(has, b_.CreateSub(idx[j], b_.getInt32(uint32_t(d * stride))), idx[j]);
        llvm::Value* prev = smem_load(ct, smem(ct, from, buf * total * cb), "scan read");
        cur[j] = b_.CreateSelect(has, combine(op, prev, cur[j]), cur[j]);
      }
      if (2 * d < n) write(buf = 1 - buf);
    }
    scratch_end();
  }
  Elems out(cur.size());
  for (size_t j = 0; j < cur.size(); ++j)
    out[j] = ir::is_float(dt) ? from_f32(cur[j], dt) : b_.CreateTrunc(cur[j], reg_type(res->type.elem));
  define(res, l, std::move(out));
}

llvm::Value* Lowering::shuffle_xor(llvm::Value* v, int mask) {
  llvm::Type* t = v->getType();
  if (t->isIntegerTy(64)) {
    llvm::Value* lo = hooks_.shfl_xor(b_, b_.CreateTrunc(v, b_.getInt32Ty()), mask);
    llvm::Value* hi = hooks_.shfl_xor(b_, b_.CreateTrunc(b_.CreateLShr(v, 32), b_.getInt32Ty()), mask);
    return b_.CreateOr(b_.CreateZExt(lo, t), b_.CreateShl(b_.CreateZExt(hi, t), 32));
  }
  if (t->isFloatTy()) return b_.CreateBitCast(hooks_.shfl_xor(b_, b_.CreateBitCast(v, b_.getInt32Ty()), mask), t);
  return hooks_.shfl_xor(b_, v, mask);
}

// Within the thread, then across lanes by shuffle-xor, then across warps
// through shared memory; only positions holding distinct data take part.
void Lowering::emit_reduce(const Op& op) {
  const Value* src = op.operands[0];
  const Value* res = op.results[0];
  const ir::Shape& s = src->type.shape;
  const ir::Shape& rs = res->type.shape;
  int axis = static_cast<int>(op.attrs.axis);
  LayoutId pl = plan_.op_layouts(&op)[0];
  Layout lay = plan_.layout(pl);
  int bd = lay.dims[axis];
  DType dt = src->type.dtype();
  llvm::Type* ct = ir::is_float(dt) ? b_.getFloatTy() : ir::dtype_bits(dt) == 64 ? b_.getInt64Ty() : b_.getInt32Ty();
  const Elems& in = get(src, pl);
  const ThreadElems& te = elems_of(pl, s);
  LayoutId rl = res->type.is_scalar() ? kScalar : plan_.native(res);
  size_t nres = 1;
  std::map<std::vector<int64_t>, size_t> index;
  if (rl != kScalar) {
    const ThreadElems& tr = elems_of(rl, rs);
    nres = tr.count;
    for (size_t i = 0; i < nres; ++i) index[tr.offset[i]] = i;
  }
  Elems acc(nres, nullptr);
  for (size_t j = 0; j < in.size(); ++j) {
    size_t i = 0;
    if (rl != kScalar) {
      std::vector<int64_t> key = te.offset[j];
      key.erase(key.begin() + axis);
      auto it = index.find(key);
      internal_assert(it != index.end(), "reduce: result layout holds the element");
      i = it->second;
    }
    llvm::Value* v = ir::is_float(dt) ? to_f32(in[j], dt) : int_resize(in[j], ct, dt);
    acc[i] = acc[i] ? combine(op, acc[i], v) : v;
  }
  int64_t extent = s[axis];
  int64_t tpw = lay.base.threads_per_warp[bd], wpb = lay.base.warps_per_block[bd];
  int64_t spt_eff = std::min<int64_t>(lay.base.size_per_thread[bd], extent);
  int64_t distinct = std::min<int64_t>(tpw * wpb, std::max<int64_t>(1, extent / spt_eff));
  int64_t lanes = std::min<int64_t>(tpw, distinct);
  int64_t warps = lanes == tpw ? distinct / tpw : 1;
  if (lay.base.repeat(bd) > 1) // a warp's span holds its lanes' pattern several times: fewer warps hold distinct elements
    warps = lanes == tpw ? std::clamp<int64_t>(extent / lay.base.warp_span(bd), 1, wpb) : 1;
  for (int k = 0; k < log2i(lanes); ++k)
    for (auto& a : acc) a = combine(op, a, shuffle_xor(a, 1 << (lane_shift(lay.base, bd) + k)));
  if (warps > 1) {
    int cb = ct->isIntegerTy(64) ? 8 : 4;
    scratch_begin(std::max<int64_t>(1, ir::num_elements(rs)) * warps * cb);
    llvm::Value* wc = b_.CreateAnd(b_.CreateLShr(warp_, warp_shift(lay.base, bd)), static_cast<uint64_t>(warps - 1));
    std::vector<llvm::Value*> lin;
    if (rl == kScalar) lin.push_back(b_.getInt32(0));
    else
      for (auto& c : coords(rl, rs)) lin.push_back(linear_index(c, rs));
    // Result i's partials at [lin * warps, lin * warps + warps): the warp's offset added to the
    // pointer, not the index, so that the constant offsets of the reads fold into their addresses.
    std::vector<llvm::Value*> slots(nres);
    for (size_t i = 0; i < nres; ++i)
      slots[i] = smem(ct, b_.CreateMul(lin[i], b_.getInt32(static_cast<uint32_t>(warps)), "", true, true));
    for (size_t i = 0; i < nres; ++i) smem_store(acc[i], b_.CreateInBoundsGEP(ct, slots[i], wc), "reduction partial write",
                                                    ir::is_float(dt) ? DType::f32 : DType::i64);
    barrier();
    // A result's partials are consecutive (warps a power of two): read as vectors of up to 16 bytes.
    const int64_t per_load = std::min<int64_t>(warps, 16 / cb);
    for (size_t i = 0; i < nres; ++i) {
      llvm::Value* v = nullptr;
      for (int64_t w = 0; w < warps; w += per_load) {
        llvm::Value* at = w ? b_.CreateConstInBoundsGEP1_32(ct, slots[i], unsigned(w)) : slots[i];
        llvm::Value* x = smem_load(per_load > 1 ? llvm::FixedVectorType::get(ct, unsigned(per_load)) : ct, at,
                                   "reduction partial read");
        for (int64_t k = 0; k < per_load; ++k) {
          llvm::Value* part = per_load > 1 ? b_.CreateExtractElement(x, uint64_t(k)) : x;
          v = v ? combine(op, v, part) : part;
        }
      }
      acc[i] = v;
    }
    scratch_end();
  }
  for (auto& a : acc) a = ir::is_float(dt) ? from_f32(a, dt) : b_.CreateTrunc(a, reg_type(res->type.elem));
  define(res, rl, std::move(acc));
}

} // namespace tilec::codegen::detail
