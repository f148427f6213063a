// 8-bit floats <-> f32 in plain LLVM IR, with abi/float8.h's semantics bit for bit: the
// emulator's conversions, and the GPU's where the arch has no cvt for them (before sm_89).
// Integer and f32 operations only: no f16 type (the emulator keeps halves as i16) and no
// f32 subnormal arithmetic (a GPU may flush those).
#include <cmath>

#include "codegen/target.h"

namespace tilec::codegen {

namespace {

struct Format {
  int m, bias;
  float max_finite;
};
Format format_of(ir::DType t) {
  return t == ir::DType::f8e4m3 ? Format{3, 7, 448.0f} : Format{2, 15, 57344.0f};
}

} // namespace

llvm::Value* fp8_to_f32_ir(llvm::IRBuilder<>& b, llvm::Value* bits, ir::DType t) {
  const Format f = format_of(t);
  auto i32 = [&](uint32_t v) { return b.getInt32(v); };
  llvm::Value* x = b.CreateZExt(bits, b.getInt32Ty());
  llvm::Value* sign = b.CreateShl(b.CreateAnd(x, i32(0x80)), 24);
  llvm::Value* mag = b.CreateAnd(x, i32(0x7f));
  llvm::Value* exp_field = b.CreateLShr(mag, uint64_t(f.m));
  llvm::Value* man = b.CreateAnd(mag, i32((1u << f.m) - 1));
  // Normal: the fields move into f32's, the exponent rebiased.
  llvm::Value* normal = b.CreateAdd(b.CreateShl(mag, uint64_t(23 - f.m)), i32(uint32_t(127 - f.bias) << 23));
  // Subnormal: man * 2^(1 - bias - m), a normal f32 (or zero).
  llvm::Value* sub = b.CreateBitCast(
      b.CreateFMul(b.CreateUIToFP(man, b.getFloatTy()),
                   llvm::ConstantFP::get(b.getFloatTy(), std::ldexp(1.0, 1 - f.bias - f.m))),
      b.getInt32Ty());
  llvm::Value* r = b.CreateSelect(b.CreateICmpEQ(exp_field, i32(0)), sub, normal);
  if (t == ir::DType::f8e4m3) { // S.1111.111 is NaN; no infinities
    r = b.CreateSelect(b.CreateICmpEQ(mag, i32(0x7f)), i32(0x7fc00000), r);
  } else { // exponent field 31: infinities and NaNs, as f16's
    llvm::Value* special = b.CreateOr(i32(0x7f800000), b.CreateShl(man, 21));
    r = b.CreateSelect(b.CreateICmpEQ(exp_field, i32(31)), special, r);
  }
  return b.CreateBitCast(b.CreateOr(r, sign), b.getFloatTy());
}

llvm::Value* f32_to_fp8_ir(llvm::IRBuilder<>& b, llvm::Value* x, ir::DType t) {
  const Format f = format_of(t);
  auto i32 = [&](uint32_t v) { return b.getInt32(v); };
  llvm::Type* f32 = b.getFloatTy();
  llvm::Value* xb = b.CreateBitCast(x, b.getInt32Ty());
  llvm::Value* sign = b.CreateAnd(b.CreateLShr(xb, 24), i32(0x80));
  // Saturate first (infinities included); NaN is chosen at the end.
  llvm::Value* a = b.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x),
                                           llvm::ConstantFP::get(f32, f.max_finite));
  // a's biased f32 exponent, at least that of the smallest normal fp8 binade.
  llvm::Value* e = b.CreateLShr(b.CreateBitCast(a, b.getInt32Ty()), 23);
  e = b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, e, i32(uint32_t(128 - f.bias)));
  // k = a / 2^(e - 127 - m) rounded to nearest even: an exact scaling by a power of two.
  llvm::Value* inv_quantum = b.CreateBitCast(b.CreateShl(b.CreateSub(i32(uint32_t(254 + f.m)), e), 23), f32);
  llvm::Value* k = b.CreateFPToUI(b.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, b.CreateFMul(a, inv_quantum)),
                                  b.getInt32Ty());
  // ((e - 127 + bias) << m) + k - 2^m: k = 2^(m+1) carries into the exponent, and k < 2^m
  // in the lowest binade is a subnormal.
  llvm::Value* enc = b.CreateAdd(b.CreateShl(b.CreateSub(e, i32(uint32_t(127 - f.bias))), uint64_t(f.m)),
                                 b.CreateSub(k, i32(1u << f.m)));
  llvm::Value* r = b.CreateSelect(b.CreateFCmpUNO(x, x), i32(0x7f), b.CreateOr(enc, sign));
  return b.CreateTrunc(r, b.getInt8Ty());
}

llvm::Value* TargetHooks::fp8_to_f32(Builder& b, llvm::Value* bits, ir::DType t) { return fp8_to_f32_ir(b, bits, t); }
llvm::Value* TargetHooks::f32_to_fp8(Builder& b, llvm::Value* x, ir::DType t) { return f32_to_fp8_ir(b, x, t); }

} // namespace tilec::codegen
