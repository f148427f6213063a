// Elementwise ops (one scalar loop per element a thread holds, the trivial ops as table
// rows), views (broadcast, expand_dims, permute, trivial reshapes: a thread's elements
// renamed, nothing moved) and casts.
#include <fmt/format.h>

#include <numbers>

#include "codegen/lowering.h"

namespace tilec::codegen::detail {

namespace {

struct ArithRow {
  OpKind op;
  llvm::Instruction::BinaryOps int_op, float_op;
};
constexpr llvm::Instruction::BinaryOps kNoOp = llvm::Instruction::BinaryOpsEnd;
constexpr ArithRow kArith[] = {
    {OpKind::Add, llvm::Instruction::Add, llvm::Instruction::FAdd},
    {OpKind::Sub, llvm::Instruction::Sub, llvm::Instruction::FSub},
    {OpKind::Mul, llvm::Instruction::Mul, llvm::Instruction::FMul},
    {OpKind::Div, llvm::Instruction::SDiv, llvm::Instruction::FDiv},
    {OpKind::Rem, llvm::Instruction::SRem, llvm::Instruction::FRem},
    {OpKind::And, llvm::Instruction::And, kNoOp},
    {OpKind::Or, llvm::Instruction::Or, kNoOp},
    {OpKind::Xor, llvm::Instruction::Xor, kNoOp},
};

struct CompareRow {
  OpKind op;
  llvm::CmpInst::Predicate sint, uint, flt;
};
constexpr CompareRow kCompare[] = {
    {OpKind::Eq, llvm::CmpInst::ICMP_EQ, llvm::CmpInst::ICMP_EQ, llvm::CmpInst::FCMP_OEQ},
    {OpKind::Ne, llvm::CmpInst::ICMP_NE, llvm::CmpInst::ICMP_NE, llvm::CmpInst::FCMP_UNE},
    {OpKind::Lt, llvm::CmpInst::ICMP_SLT, llvm::CmpInst::ICMP_ULT, llvm::CmpInst::FCMP_OLT},
    {OpKind::Le, llvm::CmpInst::ICMP_SLE, llvm::CmpInst::ICMP_ULE, llvm::CmpInst::FCMP_OLE},
    {OpKind::Gt, llvm::CmpInst::ICMP_SGT, llvm::CmpInst::ICMP_UGT, llvm::CmpInst::FCMP_OGT},
    {OpKind::Ge, llvm::CmpInst::ICMP_SGE, llvm::CmpInst::ICMP_UGE, llvm::CmpInst::FCMP_OGE},
};

} // namespace

Elems Lowering::compute(const Op& op, LayoutId l) {
  const Value* res = op.results[0];
  const ir::Shape& s = res->type.shape;
  int64_t n = count(l, s);
  switch (op.kind) {
  case OpKind::Arange: {
    Elems r;
    for (auto& c : coords(l, s)) r.push_back(b_.CreateAdd(c[0], b_.getInt32(static_cast<uint32_t>(op.attrs.start))));
    return r;
  }
  case OpKind::Constant: return Elems(n, constant(res->type.elem, op.attrs.value));
  case OpKind::Splat: return Elems(n, get(op.operands[0], kScalar)[0]);
  case OpKind::Broadcast:
  case OpKind::ExpandDims:
  case OpKind::Permute:
  case OpKind::Reshape: return view(op, l);
  default: break;
  }
  // Elementwise: the same scalar code for each element the thread holds.
  std::vector<const Elems*> in;
  for (const Value* v : op.operands) in.push_back(&get(v, v->type.is_scalar() ? kScalar : l));
  const ir::ElemType& e0 = op.operands[0]->type.elem;
  Elems r(n);
  // fp8 to a float: two elements per conversion where the target has one instruction for it.
  // (The hook emits nothing when it answers nullopt, which it does for every pair or none.)
  if (const DType to = res->type.dtype();
      op.kind == OpKind::Cast && ir::is_fp8(e0.dtype) && ir::is_float(to) && !ir::is_fp8(to) && n >= 2) {
    int64_t j = 0;
    for (; j + 1 < n; j += 2) {
      auto h = hooks_.fp8x2_to_f16(b_, (*in[0])[size_t(j)], (*in[0])[size_t(j + 1)], e0.dtype);
      if (!h) break;
      for (int k = 0; k < 2; ++k)
        r[size_t(j + k)] = to == DType::f16 ? (*h)[size_t(k)] : from_f32(hooks_.to_f32(b_, (*h)[size_t(k)], DType::f16), to);
    }
    if (j > 0) {
      if (j < n) r[size_t(j)] = cast((*in[0])[size_t(j)], e0.dtype, to);
      return r;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    auto x = [&](size_t i) { return (*in[i])[j]; };
    switch (op.kind) {
    case OpKind::AddPtr: {
      llvm::Value* off = int_resize(x(1), b_.getInt64Ty(), op.operands[1]->type.dtype());
      r[j] = b_.CreateGEP(mem_type({e0.dtype, false}), x(0), off);
      break;
    }
    case OpKind::Select: r[j] = b_.CreateSelect(x(0), x(1), x(2)); break;
    case OpKind::Fma: {
      DType t = e0.dtype;
      r[j] = from_f32(b_.CreateIntrinsic(llvm::Intrinsic::fma, {b_.getFloatTy()},
                                         {to_f32(x(0), t), to_f32(x(1), t), to_f32(x(2), t)}),
                      t);
      break;
    }
    case OpKind::Cast: r[j] = cast(x(0), e0.dtype, res->type.dtype()); break;
    case OpKind::Bitcast: r[j] = b_.CreateBitCast(x(0), reg_type(res->type.elem)); break;
    default:
      r[j] = ir::is_unary(op.kind) ? unary(op.kind, e0.dtype, x(0)) : binary(op.kind, e0, x(0), x(1));
    }
  }
  return r;
}

Elems Lowering::view(const Op& op, LayoutId l) {
  const Value* src = op.operands[0];
  const Value* res = op.results[0];
  int64_t n = count(l, res->type.shape);
  if (src->type.is_scalar()) return Elems(n, get(src, kScalar)[0]);
  LayoutId sl = plan_.operand_layout(op, src, l);
  const Elems& in = get(src, sl);
  const ThreadElems& ts = elems_of(sl, src->type.shape);
  std::map<std::vector<int64_t>, size_t> index;
  for (size_t j = 0; j < ts.offset.size(); ++j) index[ts.offset[j]] = j;
  const ThreadElems& tr = elems_of(l, res->type.shape);
  const ir::Shape &ss = src->type.shape, &rs = res->type.shape;
  Elems r(n);
  for (int64_t j = 0; j < n; ++j) {
    const std::vector<int64_t>& ro = tr.offset[j];
    std::vector<int64_t> so;
    switch (op.kind) {
    case OpKind::Broadcast:
      so = ro;
      for (size_t d = 0; d < ss.size(); ++d)
        if (ss[d] != rs[d]) so[d] = 0;
      break;
    case OpKind::ExpandDims:
      so = ro;
      so.erase(so.begin() + op.attrs.axis);
      break;
    case OpKind::Permute:
      so.resize(ro.size());
      for (size_t i = 0; i < ro.size(); ++i) so[op.attrs.perm[i]] = ro[i];
      break;
    default: { // trivial reshape: drop the result's size-1 dims, insert the operand's
      std::vector<int64_t> core;
      for (size_t d = 0; d < rs.size(); ++d)
        if (rs[d] != 1) core.push_back(ro[d]);
      size_t k = 0;
      for (size_t d = 0; d < ss.size(); ++d) so.push_back(ss[d] == 1 ? 0 : core[k++]);
    }
    }
    auto it = index.find(so);
    internal_assert(it != index.end(), "view: the operand layout holds the element");
    r[j] = in[it->second];
  }
  return r;
}

llvm::Value* Lowering::unary(OpKind k, DType t, llvm::Value* x) {
  if (ir::is_int(t)) {
    if (k == OpKind::Abs)
      return ir::is_unsigned(t) ? x : b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b_.getFalse());
    if (k == OpKind::Neg) return b_.CreateNeg(x);
    internal_fail("float-only unary op on an integer");
  }
  x = to_f32(x, t);
  auto f = [&](double v) { return llvm::ConstantFP::get(b_.getFloatTy(), v); };
  llvm::Value* r = nullptr;
  switch (k) {
  case OpKind::Exp: r = hooks_.exp2(b_, b_.CreateFMul(x, f(std::numbers::log2e))); break;
  case OpKind::Exp2: r = hooks_.exp2(b_, x); break;
  case OpKind::Log: r = b_.CreateFMul(hooks_.log2(b_, x), f(std::numbers::ln2)); break;
  case OpKind::Tanh: r = hooks_.tanh(b_, x); break;
  case OpKind::Sqrt: r = hooks_.sqrt(b_, x); break;
  case OpKind::Rsqrt: r = hooks_.rsqrt(b_, x); break;
  case OpKind::Abs: r = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x); break;
  case OpKind::Neg: r = b_.CreateFNeg(x); break;
  case OpKind::Log2: r = hooks_.log2(b_, x); break;
  case OpKind::Sigmoid: // 1 / (1 + 2^(-x log2 e))
    r = b_.CreateFDiv(f(1.0), b_.CreateFAdd(f(1.0), hooks_.exp2(b_, b_.CreateFMul(x, f(-std::numbers::log2e)))));
    break;
  case OpKind::Floor: r = b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x); break;
  case OpKind::Ceil: r = b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x); break;
  case OpKind::Round: r = b_.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, x); break;
  case OpKind::Sin: r = hooks_.libm(b_, "sinf", {x}); break;
  case OpKind::Cos: r = hooks_.libm(b_, "cosf", {x}); break;
  case OpKind::Erf: r = hooks_.libm(b_, "erff", {x}); break;
  default: internal_fail("not a unary op");
  }
  return from_f32(r, t);
}

llvm::Value* Lowering::binary(OpKind k, const ir::ElemType& e, llvm::Value* x, llvm::Value* y) {
  bool flt = !e.is_ptr && ir::is_float(e.dtype);
  for (const CompareRow& row : kCompare)
    if (row.op == k) {
      if (flt) return b_.CreateFCmp(row.flt, to_f32(x, e.dtype), to_f32(y, e.dtype));
      bool unsigned_cmp = e.is_ptr || e.dtype == DType::i1 || ir::is_unsigned(e.dtype);
      return b_.CreateICmp(unsigned_cmp ? row.uint : row.sint, x, y);
    }
  if (k == OpKind::Min || k == OpKind::Max) {
    if (!flt) return b_.CreateBinaryIntrinsic(int_minmax(k == OpKind::Max, e.dtype), x, y);
    llvm::Value* r = b_.CreateBinaryIntrinsic(k == OpKind::Min ? llvm::Intrinsic::minnum : llvm::Intrinsic::maxnum,
                                              to_f32(x, e.dtype), to_f32(y, e.dtype));
    return from_f32(r, e.dtype);
  }
  if (k == OpKind::Pow) return from_f32(hooks_.libm(b_, "powf", {to_f32(x, e.dtype), to_f32(y, e.dtype)}), e.dtype);
  if (k == OpKind::Shl || k == OpKind::LShr || k == OpKind::AShr) {
    // Amounts are unsigned; from the width on: 0, or for ashr the sign (ir/int_ops.h).
    unsigned bits = x->getType()->getIntegerBitWidth();
    llvm::Value* width = llvm::ConstantInt::get(y->getType(), bits);
    if (k == OpKind::AShr)
      return b_.CreateAShr(x, b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, y, llvm::ConstantInt::get(y->getType(), bits - 1)));
    llvm::Value* in_range = b_.CreateICmpULT(y, width);
    llvm::Value* safe = b_.CreateSelect(in_range, y, llvm::ConstantInt::get(y->getType(), 0));
    llvm::Value* shifted = k == OpKind::Shl ? b_.CreateShl(x, safe) : b_.CreateLShr(x, safe);
    return b_.CreateSelect(in_range, shifted, llvm::ConstantInt::get(x->getType(), 0));
  }
  if (k == OpKind::UMulHi) return hooks_.umulhi(b_, x, y);
  if (!flt && ir::is_unsigned(e.dtype) && (k == OpKind::Div || k == OpKind::Rem))
    return k == OpKind::Div ? b_.CreateUDiv(x, y) : b_.CreateURem(x, y);
  if (!flt && (k == OpKind::Div || k == OpKind::Rem)) {
    // The minimum value divided by -1 overflows: undefined in LLVM, a trap on x86. The IR
    // wraps (SEMANTICS.md): x / -1 is -x, x % -1 is 0. Divide by 1 instead and fix up.
    llvm::Value* minus_one = b_.CreateICmpEQ(y, llvm::ConstantInt::getSigned(y->getType(), -1));
    llvm::Value* safe = b_.CreateSelect(minus_one, llvm::ConstantInt::get(y->getType(), 1), y);
    if (k == OpKind::Rem) return b_.CreateSRem(x, safe);
    return b_.CreateSelect(minus_one, b_.CreateNeg(x), b_.CreateSDiv(x, safe));
  }
  for (const ArithRow& row : kArith)
    if (row.op == k) {
      if (!flt) return b_.CreateBinOp(row.int_op, x, y);
      internal_assert(row.float_op != kNoOp, "float binary op has an instruction");
      return from_f32(b_.CreateBinOp(row.float_op, to_f32(x, e.dtype), to_f32(y, e.dtype)), e.dtype);
    }
  internal_fail(fmt::format("no lowering for binary op {}", ir::op_name(k)));
}

llvm::Value* Lowering::cast(llvm::Value* x, DType from, DType to) {
  if (from == to) return x;
  llvm::Type* ty = reg_type({to, false});
  if (ir::is_int(from) && ir::is_int(to)) {
    if (to == DType::i1) return b_.CreateICmpNE(x, llvm::ConstantInt::get(x->getType(), 0));
    return int_resize(x, ty, from);
  }
  if (ir::is_int(from)) {
    llvm::Value* f = from == DType::i1 || ir::is_unsigned(from) ? b_.CreateUIToFP(x, b_.getFloatTy())
                                                                : b_.CreateSIToFP(x, b_.getFloatTy());
    return from_f32(f, to);
  }
  llvm::Value* f = to_f32(x, from);
  if (ir::is_float(to)) return from_f32(f, to);
  if (to == DType::i1) return b_.CreateFCmpUNE(f, llvm::ConstantFP::get(b_.getFloatTy(), 0.0));
  // To unsigned: saturating (NaN and negatives give 0), as the interpreter does; to signed,
  // out of range is undefined (ir/SEMANTICS.md).
  if (ir::is_unsigned(to)) return b_.CreateIntrinsic(llvm::Intrinsic::fptoui_sat, {ty, b_.getFloatTy()}, {f});
  return b_.CreateFPToSI(f, ty);
}

} // namespace tilec::codegen::detail
