// Target hooks for the CPU emulator: every GPU-specific action is a call into
// the emulator runtime through the C ABI of abi/emu_abi.h, passing the
// calling thread's context (the kernel's hidden first argument).
#include <map>
#include <string>

#include "codegen/target.h"

namespace tilec::codegen {

std::array<llvm::Value*, 4> emu_mma(llvm::IRBuilder<>& b, llvm::Value* ctx, unsigned dtype,
                                    const std::array<llvm::Value*, 4>& a, const std::array<llvm::Value*, 2>& bf,
                                    const std::array<llvm::Value*, 4>& c, MmaScratch& scratch) {
  llvm::Function* fn = b.GetInsertBlock()->getParent();
  llvm::Module& m = *fn->getParent();
  if (!scratch.a) {
    llvm::IRBuilder<> eb(&fn->getEntryBlock(), fn->getEntryBlock().begin());
    scratch.a = eb.CreateAlloca(llvm::ArrayType::get(eb.getInt32Ty(), 4));
    scratch.b = eb.CreateAlloca(llvm::ArrayType::get(eb.getInt32Ty(), 2));
    scratch.c = eb.CreateAlloca(llvm::ArrayType::get(eb.getFloatTy(), 4));
    scratch.d = eb.CreateAlloca(llvm::ArrayType::get(eb.getFloatTy(), 4));
  }
  auto put = [&](llvm::AllocaInst* arr, unsigned i, llvm::Value* v) {
    b.CreateStore(v, b.CreateConstInBoundsGEP2_32(arr->getAllocatedType(), arr, 0, i));
  };
  for (unsigned i = 0; i < 4; ++i) put(scratch.a, i, b.CreateBitCast(a[i], b.getInt32Ty()));
  for (unsigned i = 0; i < 2; ++i) put(scratch.b, i, b.CreateBitCast(bf[i], b.getInt32Ty()));
  for (unsigned i = 0; i < 4; ++i) put(scratch.c, i, c[i]);
  auto* ptr = b.getPtrTy();
  auto f = m.getOrInsertFunction(
      "tilec_emu_mma_m16n8k16",
      llvm::FunctionType::get(b.getVoidTy(), {ptr, b.getInt32Ty(), ptr, ptr, ptr, ptr}, false));
  llvm::cast<llvm::Function>(f.getCallee())->addFnAttr(llvm::Attribute::Convergent);
  llvm::CallInst* call = b.CreateCall(f, {ctx, b.getInt32(dtype), scratch.a, scratch.b, scratch.c, scratch.d});
  call->addFnAttr(llvm::Attribute::Convergent);
  std::array<llvm::Value*, 4> d;
  for (unsigned i = 0; i < 4; ++i)
    d[i] = b.CreateLoad(b.getFloatTy(), b.CreateConstInBoundsGEP2_32(scratch.d->getAllocatedType(), scratch.d, 0, i));
  return d;
}

std::vector<llvm::Value*> emu_ldmatrix(llvm::IRBuilder<>& b, llvm::Value* ctx, llvm::Value* row, int count, bool trans,
                                       llvm::Value* site, MmaScratch& scratch) {
  llvm::Function* fn = b.GetInsertBlock()->getParent();
  if (!scratch.ldm) {
    llvm::IRBuilder<> eb(&fn->getEntryBlock(), fn->getEntryBlock().begin());
    scratch.ldm = eb.CreateAlloca(llvm::ArrayType::get(eb.getInt32Ty(), 4));
  }
  auto* ptr = b.getPtrTy();
  auto f = fn->getParent()->getOrInsertFunction(
      "tilec_emu_ldmatrix",
      llvm::FunctionType::get(b.getVoidTy(), {ptr, b.getInt32Ty(), b.getInt32Ty(), ptr, ptr, ptr}, false));
  llvm::cast<llvm::Function>(f.getCallee())->addFnAttr(llvm::Attribute::Convergent);
  llvm::Value* flat = b.CreateAddrSpaceCast(row, ptr);
  llvm::CallInst* call =
      b.CreateCall(f, {ctx, b.getInt32(uint32_t(count)), b.getInt32(trans ? 1 : 0), flat, scratch.ldm, site});
  call->addFnAttr(llvm::Attribute::Convergent);
  std::vector<llvm::Value*> r;
  for (int i = 0; i < count; ++i)
    r.push_back(b.CreateLoad(b.getInt32Ty(),
                             b.CreateConstInBoundsGEP2_32(scratch.ldm->getAllocatedType(), scratch.ldm, 0, unsigned(i))));
  return r;
}

std::vector<llvm::Value*> emu_wgmma(llvm::IRBuilder<>& b, EmuCalls& emu, unsigned dtype, int n, llvm::Value* desc_a,
                                    const std::vector<llvm::Value*>& a_regs, llvm::Value* desc_b, llvm::Value* scale_d,
                                    unsigned trans, const std::vector<llvm::Value*>& acc, llvm::Value* site) {
  auto* arr_ty = llvm::ArrayType::get(b.getFloatTy(), uint64_t(n / 2));
  llvm::Value* arr = emu.scratch(arr_ty);
  for (unsigned i = 0; i < unsigned(n / 2); ++i) b.CreateStore(acc[i], b.CreateConstInBoundsGEP2_32(arr_ty, arr, 0, i));
  if (a_regs.empty()) {
    emu.call(b, "tilec_emu_wgmma", b.getVoidTy(),
             {b.getInt32(dtype), b.getInt32(uint32_t(n)), desc_a, desc_b, scale_d, b.getInt32(trans), arr, site}, true);
  } else {
    internal_assert(a_regs.size() == 4, "a warpgroup MMA's A from registers is four fragment registers");
    auto* a_ty = llvm::ArrayType::get(b.getInt32Ty(), 4);
    llvm::Value* a = emu.scratch(a_ty);
    for (unsigned i = 0; i < 4; ++i) b.CreateStore(a_regs[i], b.CreateConstInBoundsGEP2_32(a_ty, a, 0, i));
    emu.call(b, "tilec_emu_wgmma_rs", b.getVoidTy(),
             {b.getInt32(dtype), b.getInt32(uint32_t(n)), a, desc_b, scale_d, b.getInt32(trans), arr, site}, true);
  }
  std::vector<llvm::Value*> d;
  for (unsigned i = 0; i < unsigned(n / 2); ++i)
    d.push_back(b.CreateLoad(b.getFloatTy(), b.CreateConstInBoundsGEP2_32(arr_ty, arr, 0, i)));
  return d;
}

std::vector<llvm::Value*> emu_fence_operands(llvm::IRBuilder<>& b, EmuCalls& emu, const std::vector<llvm::Value*>& regs) {
  if (regs.empty() || !regs[0]->getType()->isFloatTy()) return regs;
  auto* arr_ty = llvm::ArrayType::get(b.getFloatTy(), uint64_t(regs.size()));
  llvm::Value* arr = emu.scratch(arr_ty);
  for (unsigned i = 0; i < unsigned(regs.size()); ++i) b.CreateStore(regs[i], b.CreateConstInBoundsGEP2_32(arr_ty, arr, 0, i));
  emu.call(b, "tilec_emu_wgmma_fence_operands", b.getVoidTy(), {arr, b.getInt32(uint32_t(regs.size()))}, true);
  std::vector<llvm::Value*> r;
  for (unsigned i = 0; i < unsigned(regs.size()); ++i)
    r.push_back(b.CreateLoad(b.getFloatTy(), b.CreateConstInBoundsGEP2_32(arr_ty, arr, 0, i)));
  return r;
}

void emu_tma_load(llvm::IRBuilder<>& b, EmuCalls& emu, llvm::Value* dst, llvm::Value* tensor_map,
                  const std::vector<llvm::Value*>& coords, llvm::Value* bar, llvm::Value* site) {
  internal_assert(!coords.empty() && coords.size() <= 5, "a TMA copy has 1 to 5 coordinates");
  std::vector<llvm::Value*> args{dst, tensor_map, b.getInt32(uint32_t(coords.size()))};
  for (size_t i = 0; i < 5; ++i) args.push_back(i < coords.size() ? coords[i] : b.getInt32(0));
  args.push_back(bar);
  args.push_back(site);
  emu.call(b, "tilec_emu_tma_load", b.getVoidTy(), args);
}

void emu_tma_store(llvm::IRBuilder<>& b, EmuCalls& emu, llvm::Value* src, llvm::Value* tensor_map,
                   const std::vector<llvm::Value*>& coords, llvm::Value* site) {
  internal_assert(!coords.empty() && coords.size() <= 5, "a TMA store has 1 to 5 coordinates");
  std::vector<llvm::Value*> args{src, tensor_map, b.getInt32(uint32_t(coords.size()))};
  for (size_t i = 0; i < 5; ++i) args.push_back(i < coords.size() ? coords[i] : b.getInt32(0));
  args.push_back(site);
  emu.call(b, "tilec_emu_tma_store", b.getVoidTy(), args);
}

namespace {

class EmuHooks final : public TargetHooks {
public:
  llvm::Function* create_kernel(llvm::Module& m, const std::string& name,
                                const std::vector<llvm::Type*>& params, int, int tensor_maps) override {
    llvm::LLVMContext& c = m.getContext();
    auto* ptr = llvm::PointerType::get(c, 0);
    auto* fty = llvm::FunctionType::get(llvm::Type::getVoidTy(c), {ptr, ptr}, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, name, m);
    fn_->getArg(0)->setName("ctx");
    emu_.bind(fn_);
    fn_->getArg(1)->setName("args");
    params_ = params;
    tensor_maps_ = tensor_maps;
    return fn_;
  }

  std::vector<llvm::Value*> kernel_params(Builder& b) override {
    std::vector<llvm::Value*> r;
    for (size_t i = 0; i < params_.size(); ++i) {
      llvm::Value* slot = b.CreateConstGEP1_64(b.getPtrTy(), fn_->getArg(1), i);
      llvm::Value* p = b.CreateLoad(b.getPtrTy(), slot);
      r.push_back(b.CreateLoad(params_[i], p));
    }
    for (int i = 0; i < tensor_maps_; ++i) // args[i] points at the map itself
      r.push_back(b.CreateLoad(b.getPtrTy(), b.CreateConstGEP1_64(b.getPtrTy(), fn_->getArg(1), params_.size() + size_t(i))));
    return r;
  }

  llvm::Value* thread_id(Builder& b) override { return emu_.call(b, "tilec_emu_thread_id", b.getInt32Ty(), {}); }
  llvm::Value* block_id(Builder& b, int axis) override {
    return emu_.call(b, "tilec_emu_block_id", b.getInt32Ty(), {b.getInt32(axis)});
  }
  llvm::Value* num_blocks(Builder& b, int axis) override {
    return emu_.call(b, "tilec_emu_num_blocks", b.getInt32Ty(), {b.getInt32(axis)});
  }
  void barrier(Builder& b) override {
    emu_.call(b, "tilec_emu_barrier", b.getVoidTy(), {b.getInt32(next_barrier_++)}, true);
  }
  llvm::Value* shared_base(Builder& b) override {
    return emu_.call(b, "tilec_emu_shared_base", b.getPtrTy(), {});
  }
  llvm::Value* shared_load(Builder& b, llvm::Value* ptr, llvm::Type* ty, const std::string& site) override {
    llvm::Value* tmp = emu_.scratch(ty);
    emu_.call(b, "tilec_emu_shared_load", b.getVoidTy(), {ptr, b.getInt32(emu_.bytes(ty)), tmp, emu_.site(b, site)});
    return b.CreateLoad(ty, tmp);
  }
  void shared_store(Builder& b, llvm::Value* ptr, llvm::Value* v, const std::string& site,
                    unsigned float_type) override {
    llvm::Value* tmp = emu_.scratch(v->getType());
    b.CreateStore(v, tmp);
    emu_.call(b, "tilec_emu_shared_store", b.getVoidTy(),
         {ptr, b.getInt32(emu_.bytes(v->getType())), tmp, emu_.site(b, site), b.getInt32(float_type)});
  }
  llvm::Value* shfl_xor(Builder& b, llvm::Value* v, int lane_mask) override {
    return emu_.call(b, "tilec_emu_shfl_xor", b.getInt32Ty(), {v, b.getInt32(lane_mask)}, true);
  }
  llvm::Value* shfl_idx(Builder& b, llvm::Value* v, llvm::Value* lane) override {
    return emu_.call(b, "tilec_emu_shfl_idx", b.getInt32Ty(), {v, lane}, true);
  }

  std::array<llvm::Value*, 4> mma_m16n8k16(Builder& b, ir::DType operands, const std::array<llvm::Value*, 4>& a,
                                           const std::array<llvm::Value*, 2>& bf,
                                           const std::array<llvm::Value*, 4>& c) override {
    return emu_mma(b, emu_.ctx(), operands == ir::DType::bf16 ? 3 : 2, a, bf, c, emu_.mma());
  }

  std::vector<llvm::Value*> ldmatrix(Builder& b, llvm::Value* row, int count, bool trans,
                                     const std::string& site) override {
    return emu_ldmatrix(b, emu_.ctx(), row, count, trans, emu_.site(b, site), emu_.mma());
  }

  void cp_async_16(Builder& b, llvm::Value* dst, llvm::Value* src, llvm::Value* pred, const std::string& site) override {
    llvm::Value* size = pred ? b.CreateSelect(pred, b.getInt32(16), b.getInt32(0)) : b.getInt32(16);
    emu_.call(b, "tilec_emu_cp_async", b.getVoidTy(), {dst, src, size, emu_.site(b, site)});
  }
  void cp_async_commit(Builder& b) override { emu_.call(b, "tilec_emu_cp_async_commit", b.getVoidTy(), {}); }
  void cp_async_wait(Builder& b, int groups) override {
    emu_.call(b, "tilec_emu_cp_async_wait", b.getVoidTy(), {b.getInt32(uint32_t(groups))});
  }

  std::vector<llvm::Value*> wgmma(Builder& b, ir::DType operands, int n, llvm::Value* desc_a,
                                  const std::vector<llvm::Value*>& a_regs, llvm::Value* desc_b,
                                  const std::vector<llvm::Value*>& acc, bool scale_d, bool trans_a, bool trans_b,
                                  const std::string& site) override {
    const unsigned dtype = operands == ir::DType::bf16     ? 3
                           : operands == ir::DType::f8e4m3 ? 4
                           : operands == ir::DType::f8e5m2 ? 5
                                                           : 2;
    return emu_wgmma(b, emu_, dtype, n, desc_a, a_regs, desc_b, b.getInt32(scale_d ? 1 : 0),
                     (trans_a ? 1u : 0u) | (trans_b ? 2u : 0u), acc, emu_.site(b, site));
  }
  std::vector<llvm::Value*> fence_operands(Builder& b, const std::vector<llvm::Value*>& regs) override {
    return emu_fence_operands(b, emu_, regs);
  }
  void wgmma_fence(Builder& b) override { emu_.call(b, "tilec_emu_wgmma_fence", b.getVoidTy(), {}, true); }
  void wgmma_commit(Builder& b) override { emu_.call(b, "tilec_emu_wgmma_commit", b.getVoidTy(), {}, true); }
  void wgmma_wait(Builder& b, int groups) override {
    emu_.call(b, "tilec_emu_wgmma_wait", b.getVoidTy(), {b.getInt32(uint32_t(groups))}, true);
  }
  void fence_proxy_async(Builder& b) override { emu_.call(b, "tilec_emu_fence_proxy_async", b.getVoidTy(), {}); }
  void mbarrier_init(Builder& b, llvm::Value* bar, int count) override {
    emu_.call(b, "tilec_emu_mbarrier_init", b.getVoidTy(), {bar, b.getInt32(uint32_t(count))});
  }
  void mbarrier_arrive_expect_tx(Builder& b, llvm::Value* bar, int64_t bytes, const std::string& site) override {
    emu_.call(b, "tilec_emu_mbarrier_arrive_expect_tx", b.getVoidTy(), {bar, b.getInt32(uint32_t(bytes)), emu_.site(b, site)});
  }
  void mbarrier_wait(Builder& b, llvm::Value* bar, llvm::Value* parity, const std::string& site) override {
    emu_.call(b, "tilec_emu_mbarrier_wait", b.getVoidTy(), {bar, parity, emu_.site(b, site)});
  }
  void mbarrier_arrive(Builder& b, llvm::Value* bar, const std::string& site) override {
    emu_.call(b, "tilec_emu_mbarrier_arrive", b.getVoidTy(), {bar, emu_.site(b, site)});
  }
  void setmaxnreg(Builder& b, bool inc, int count, int launch_count, const std::string& site) override {
    emu_.call(b, "tilec_emu_setmaxnreg", b.getVoidTy(),
              {b.getInt32(uint32_t(count)), b.getInt32(inc), b.getInt32(uint32_t(launch_count)), emu_.site(b, site)}, true);
  }
  void barrier_among(Builder& b, int threads) override {
    emu_.call(b, "tilec_emu_barrier_among", b.getVoidTy(), {b.getInt32(next_barrier_++), b.getInt32(uint32_t(threads))},
              true);
  }
  void tma_load(Builder& b, llvm::Value* dst, llvm::Value* tensor_map, const std::vector<llvm::Value*>& coords,
                llvm::Value* bar, const std::string& site) override {
    emu_tma_load(b, emu_, dst, tensor_map, coords, bar, emu_.site(b, site));
  }
  void tma_store(Builder& b, llvm::Value* src, llvm::Value* tensor_map, const std::vector<llvm::Value*>& coords,
                 const std::string& site) override {
    emu_tma_store(b, emu_, src, tensor_map, coords, emu_.site(b, site));
  }
  void bulk_commit(Builder& b) override { emu_.call(b, "tilec_emu_bulk_commit", b.getVoidTy(), {}); }
  void bulk_wait(Builder& b, int groups) override {
    emu_.call(b, "tilec_emu_bulk_wait", b.getVoidTy(), {b.getInt32(uint32_t(groups))});
  }
  llvm::Value* shared_address(Builder& b, llvm::Value* ptr) override {
    llvm::Value* off = b.CreateSub(b.CreatePtrToInt(ptr, b.getInt64Ty()), b.CreatePtrToInt(shared_base(b), b.getInt64Ty()));
    return b.CreateTrunc(off, b.getInt32Ty());
  }

  llvm::Value* exp2(Builder& b, llvm::Value* x) override { return b.CreateUnaryIntrinsic(llvm::Intrinsic::exp2, x); }
  llvm::Value* log2(Builder& b, llvm::Value* x) override { return b.CreateUnaryIntrinsic(llvm::Intrinsic::log2, x); }
  llvm::Value* sqrt(Builder& b, llvm::Value* x) override { return b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x); }
  llvm::Value* rsqrt(Builder& b, llvm::Value* x) override {
    return b.CreateFDiv(llvm::ConstantFP::get(x->getType(), 1.0), sqrt(b, x));
  }
  llvm::Value* tanh(Builder& b, llvm::Value* x) override {
    llvm::Module& m = *b.GetInsertBlock()->getModule();
    auto f = m.getOrInsertFunction("tanhf", b.getFloatTy(), b.getFloatTy());
    return b.CreateCall(f, {x});
  }

  void assert_fail(Builder& b, const std::string& where) override {
    emu_.call(b, "tilec_emu_assert_fail", b.getVoidTy(), {emu_.site(b, where)});
  }

  void print_op(Builder& b) override { emu_.call(b, "tilec_emu_print_op", b.getVoidTy(), {}); }
  void print(Builder& b, const std::string& prefix, const std::string& shape, llvm::Value* linear, llvm::Value* v,
             PrintedValue kind) override {
    const bool is_float = kind == PrintedValue::float_;
    emu_.call(b, "tilec_emu_print", b.getVoidTy(),
              {emu_.site(b, prefix), emu_.site(b, shape), linear, b.getInt32(uint32_t(kind)),
               is_float ? b.getInt64(0) : v, is_float ? v : llvm::ConstantFP::get(b.getFloatTy(), 0.0)});
  }

  llvm::Value* libm(Builder& b, const std::string& name, const std::vector<llvm::Value*>& args) override {
    return call_float_function(b, name, args);
  }

  llvm::Type* half_type(llvm::LLVMContext& c, ir::DType) override { return llvm::Type::getInt16Ty(c); }
  llvm::Value* to_f32(Builder& b, llvm::Value* v, ir::DType t) override {
    return emu_.call(b, t == ir::DType::bf16 ? "tilec_emu_bf16_to_f32" : "tilec_emu_f16_to_f32",
                b.getFloatTy(), {v});
  }
  llvm::Value* from_f32(Builder& b, llvm::Value* v, ir::DType t) override {
    return emu_.call(b, t == ir::DType::bf16 ? "tilec_emu_f32_to_bf16" : "tilec_emu_f32_to_f16",
                b.getInt16Ty(), {v});
  }

  unsigned global_address_space() const override { return 0; }

  llvm::Value* load(Builder& b, llvm::Value* ptr, llvm::Type* ty, unsigned, llvm::Value* pred) override {
    return guarded(b, pred, [&]() -> llvm::Value* {
      llvm::Value* tmp = emu_.scratch(ty);
      emu_.call(b, "tilec_emu_load", b.getVoidTy(), {ptr, b.getInt32(emu_.bytes(ty)), tmp});
      return b.CreateLoad(ty, tmp);
    });
  }
  void store(Builder& b, llvm::Value* ptr, llvm::Value* v, unsigned, llvm::Value* pred) override {
    guarded(b, pred, [&]() -> llvm::Value* {
      llvm::Value* tmp = emu_.scratch(v->getType());
      b.CreateStore(v, tmp);
      emu_.call(b, "tilec_emu_store", b.getVoidTy(), {ptr, b.getInt32(emu_.bytes(v->getType())), tmp});
      return nullptr;
    });
  }
  llvm::Value* atomic(Builder& b, AtomicOp op, llvm::Value* ptr, llvm::Value* v, llvm::Value* cmp,
                      llvm::Value* pred) override {
    return guarded(b, pred, [&]() -> llvm::Value* {
      bool f = v->getType()->isFloatingPointTy();
      if (!cmp) cmp = llvm::Constant::getNullValue(v->getType());
      return emu_.call(b, f ? "tilec_emu_atomic_f32" : "tilec_emu_atomic_i32", v->getType(),
                       {ptr, b.getInt32(uint32_t(op)), v, cmp});
    });
  }

private:
  llvm::Function* fn_ = nullptr;
  std::vector<llvm::Type*> params_;
  int tensor_maps_ = 0;
  std::uint32_t next_barrier_ = 0; // the number of the next barrier of this kernel
  EmuCalls emu_;
};

} // namespace

std::unique_ptr<TargetHooks> make_emu_hooks() { return std::make_unique<EmuHooks>(); }

} // namespace tilec::codegen
