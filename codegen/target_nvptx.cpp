// Target hooks for NVIDIA GPUs: NVVM intrinsics, global memory in address
// space 1, shared memory in address space 3, ptx_kernel entry points.
#include <fmt/format.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Metadata.h>

#include <algorithm>
#include <numbers>

#include "abi/limits.h"
#include "codegen/target.h"

namespace tilec::codegen {

namespace {

constexpr unsigned kGlobal = 1;
constexpr unsigned kShared = 3;

class NvptxHooks final : public TargetHooks {
public:
  explicit NvptxHooks(int sm) : fp8_cvt_(sm >= 89), arch_("sm_" + std::to_string(sm)) {}

  llvm::Function* create_kernel(llvm::Module& m, const std::string& name,
                                const std::vector<llvm::Type*>& params, int threads, int tensor_maps) override {
    std::vector<llvm::Type*> all = params;
    all.insert(all.end(), size_t(tensor_maps), llvm::PointerType::get(m.getContext(), 0));
    auto* fty = llvm::FunctionType::get(llvm::Type::getVoidTy(m.getContext()), all, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, name, m);
    fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
    for (auto& a : fn_->args()) {
      if (a.getArgNo() >= params.size()) { // a CUtensorMap by value: 128 bytes, 64-byte aligned
        a.addAttr(llvm::Attribute::getWithByValType(m.getContext(), llvm::ArrayType::get(llvm::Type::getInt8Ty(m.getContext()), 128)));
        a.addAttr(llvm::Attribute::getWithAlignment(m.getContext(), llvm::Align(64)));
        grid_constants_.push_back(int(a.getArgNo()) + 1);
      } else if (a.getType()->isPointerTy()) { // pointer arguments are 16-byte aligned (SEMANTICS.md)
        a.addAttr(llvm::Attribute::getWithAlignment(m.getContext(), llvm::Align(16)));
      }
    }
    return fn_;
  }

  std::vector<llvm::Value*> kernel_params(Builder&) override {
    std::vector<llvm::Value*> r;
    for (auto& a : fn_->args()) r.push_back(&a);
    return r;
  }

  llvm::Value* thread_id(Builder& b) override {
    return b.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {}, {});
  }
  llvm::Value* block_id(Builder& b, int axis) override {
    static constexpr llvm::Intrinsic::ID ids[] = {llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x,
                                                  llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y,
                                                  llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z};
    return b.CreateIntrinsic(ids[axis], {}, {});
  }
  llvm::Value* num_blocks(Builder& b, int axis) override {
    static constexpr llvm::Intrinsic::ID ids[] = {llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x,
                                                  llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y,
                                                  llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_z};
    return b.CreateIntrinsic(ids[axis], {}, {});
  }
  void barrier(Builder& b) override { b.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {}); }
  void barrier_among(Builder& b, int threads) override {
    b.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_sync_cnt, {}, {b.getInt32(1), b.getInt32(uint32_t(threads))});
  }

  llvm::Value* shared_base(Builder& b) override {
    llvm::Module& m = *b.GetInsertBlock()->getModule();
    if (auto* g = m.getNamedGlobal("tilec_smem")) return g;
    auto* ty = llvm::ArrayType::get(b.getInt8Ty(), 0);
    auto* g = new llvm::GlobalVariable(m, ty, false, llvm::GlobalValue::ExternalLinkage, nullptr,
                                       "tilec_smem", nullptr, llvm::GlobalValue::NotThreadLocal,
                                       kShared);
    g->setAlignment(llvm::Align(16)); // 1024 with wgmma (finish_kernel)
    return g;
  }

  llvm::Value* shfl_xor(Builder& b, llvm::Value* v, int lane_mask) override {
    // A float's bits shuffle as the float (the f32 form), with no moves between register kinds.
    if (auto* bc = llvm::dyn_cast<llvm::BitCastInst>(v); bc && bc->getSrcTy()->isFloatTy())
      return b.CreateBitCast(b.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_f32, {},
                                               {b.getInt32(0xffffffffu), bc->getOperand(0), b.getInt32(lane_mask),
                                                b.getInt32(0x1f)}),
                             b.getInt32Ty());
    return b.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, {},
                             {b.getInt32(0xffffffffu), v, b.getInt32(lane_mask), b.getInt32(0x1f)});
  }
  llvm::Value* shfl_idx(Builder& b, llvm::Value* v, llvm::Value* lane) override {
    return b.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_idx_i32, {},
                             {b.getInt32(0xffffffffu), v, lane, b.getInt32(0x1f)});
  }

  std::array<llvm::Value*, 4> mma_m16n8k16(Builder& b, ir::DType operands, const std::array<llvm::Value*, 4>& a,
                                           const std::array<llvm::Value*, 2>& bf,
                                           const std::array<llvm::Value*, 4>& c) override {
    // f16 operands: the f32.f32 variant (f32 C and D); bf16 has one variant, f32 C and D.
    auto id = operands == ir::DType::bf16 ? llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_bf16
                                          : llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_f32_f32;
    llvm::Function* f = llvm::Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(), id);
    llvm::FunctionType* fty = f->getFunctionType();
    std::vector<llvm::Value*> args;
    for (llvm::Value* v : a) args.push_back(v);
    for (llvm::Value* v : bf) args.push_back(v);
    for (size_t i = 0; i < args.size(); ++i) args[i] = b.CreateBitCast(args[i], fty->getParamType(unsigned(i)));
    for (llvm::Value* v : c) args.push_back(v);
    llvm::Value* d = b.CreateCall(f, args);
    return {b.CreateExtractValue(d, 0), b.CreateExtractValue(d, 1), b.CreateExtractValue(d, 2),
            b.CreateExtractValue(d, 3)};
  }

  std::vector<llvm::Value*> ldmatrix(Builder& b, llvm::Value* row, int count, bool trans,
                                     const std::string& site) override {
    static constexpr llvm::Intrinsic::ID ids[2][3] = {
        {llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x1_b16, llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x2_b16,
         llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_b16},
        {llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x1_trans_b16,
         llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x2_trans_b16,
         llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_trans_b16}};
    llvm::Function* f = llvm::Intrinsic::getDeclaration(b.GetInsertBlock()->getModule(),
                                                        ids[trans][count == 1 ? 0 : count == 2 ? 1 : 2], {row->getType()});
    llvm::CallInst* call = b.CreateCall(f, {row});
    tag(*call, site, 0);
    std::vector<llvm::Value*> r;
    if (count == 1 && !call->getType()->isStructTy()) return {call};
    for (int i = 0; i < count; ++i) r.push_back(b.CreateExtractValue(call, unsigned(i)));
    return r;
  }

  // Inline PTX: LLVM 19's NVPTX back end has no pattern for cp.async with 32-bit shared
  // pointers (what tilec uses). Tagged `tilec.asm` so the emulator's rewrite knows it.
  void cp_async_16(Builder& b, llvm::Value* dst, llvm::Value* src, llvm::Value* pred, const std::string& site) override {
    llvm::Value* size = pred ? b.CreateSelect(pred, b.getInt32(16), b.getInt32(0)) : b.getInt32(16);
    // A constant offset from the destination's address goes into the instruction ([r + imm]),
    // as LLVM folds one into a load or store: the copies of one row pattern share a register.
    const llvm::DataLayout& dl = b.GetInsertBlock()->getModule()->getDataLayout();
    llvm::APInt off(dl.getIndexTypeSizeInBits(dst->getType()), 0);
    llvm::Value* base = dst->stripAndAccumulateConstantOffsets(dl, off, true);
    const int64_t imm = off.getSExtValue();
    if (imm == 0 || imm < INT32_MIN || imm > INT32_MAX || base->getType() != dst->getType()) {
      base = dst;
      off = 0;
    }
    std::vector<llvm::Type*> tys{dst->getType(), src->getType(), b.getInt32Ty()};
    std::vector<llvm::Value*> args{base, src, size};
    if (!off.isZero()) {
      tys.push_back(b.getInt32Ty());
      args.push_back(b.getInt32(uint32_t(off.getSExtValue())));
    }
    auto* fty = llvm::FunctionType::get(b.getVoidTy(), tys, false);
    auto* asm_ = off.isZero() ? llvm::InlineAsm::get(fty, "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r,~{memory}", true)
                              : llvm::InlineAsm::get(fty, "cp.async.cg.shared.global [$0+$3], [$1], 16, $2;",
                                                     "r,l,r,n,~{memory}", true);
    llvm::CallInst* c = b.CreateCall(fty, asm_, args);
    tag(*c, site, 0);
    tag_asm(*c, "cp.async.16");
  }
  // Warpgroup MMA: inline PTX (LLVM 19's NVPTX back end has no wgmma intrinsics), tagged for
  // the emulator's rewrite. The asm takes the accumulator as tied "+f" operands.
  std::vector<llvm::Value*> wgmma(Builder& b, ir::DType operands, int n, llvm::Value* desc_a,
                                  const std::vector<llvm::Value*>& a_regs, llvm::Value* desc_b,
                                  const std::vector<llvm::Value*>& acc, bool scale_d, bool trans_a, bool trans_b,
                                  const std::string& site) override {
    const int regs = n / 2;
    const char* t = operands == ir::DType::bf16     ? "bf16"
                    : operands == ir::DType::f8e4m3 ? "e4m3"
                    : operands == ir::DType::f8e5m2 ? "e5m2"
                                                    : "f16";
    const bool fp8 = ir::is_fp8(operands); // k32, and no transposes (8-bit operands are K-major)
    // scale-d, imm-scale-a/b (and imm-trans-a/b) as immediates: D = A B + (scale-d ? C : 0).
    std::string text = fmt::format("wgmma.mma_async.sync.aligned.m64n{}k{}.f32.{}.{} {{", n, fp8 ? 32 : 16, t, t);
    std::string cons;
    for (int i = 0; i < regs; ++i) {
      text += (i ? ", $" : "$") + std::to_string(i);
      cons += (i ? ",=f" : "=f");
    }
    if (fp8) internal_assert(!trans_a && !trans_b, "8-bit wgmma operands are K-major");
    // A from registers: {$regs .. $regs + 3}, then B's descriptor, and only imm-trans-b.
    const bool rs = !a_regs.empty();
    internal_assert(!rs || (a_regs.size() == 4 && !fp8 && !trans_a), "a wgmma's register A is four 16-bit pairs");
    const int nb = rs ? regs + 4 : regs + 1; // B's descriptor operand
    const std::string a_text = rs ? fmt::format("{{${}, ${}, ${}, ${}}}", regs, regs + 1, regs + 2, regs + 3)
                                  : fmt::format("${}", regs);
    text += fp8  ? fmt::format("}}, {}, ${}, {}, 1, 1;", a_text, nb, scale_d ? 1 : 0)
            : rs ? fmt::format("}}, {}, ${}, {}, 1, 1, {};", a_text, nb, scale_d ? 1 : 0, trans_b ? 1 : 0)
                 : fmt::format("}}, {}, ${}, {}, 1, 1, {}, {};", a_text, nb, scale_d ? 1 : 0, trans_a ? 1 : 0,
                               trans_b ? 1 : 0);
    cons += rs ? ",r,r,r,r,l" : ",l,l";
    for (int i = 0; i < regs; ++i) cons += "," + std::to_string(i);
    cons += ",~{memory}";
    std::vector<llvm::Type*> outs(size_t(regs), b.getFloatTy());
    std::vector<llvm::Type*> ins;
    if (rs) ins.assign(4, b.getInt32Ty());
    else ins.push_back(b.getInt64Ty());
    ins.push_back(b.getInt64Ty());
    ins.insert(ins.end(), size_t(regs), b.getFloatTy());
    auto* fty = llvm::FunctionType::get(llvm::StructType::get(b.getContext(), outs), ins, false);
    std::vector<llvm::Value*> args = rs ? a_regs : std::vector<llvm::Value*>{desc_a};
    args.push_back(desc_b);
    args.insert(args.end(), acc.begin(), acc.end());
    llvm::CallInst* c = b.CreateCall(fty, llvm::InlineAsm::get(fty, text, cons, true), args);
    c->addFnAttr(llvm::Attribute::Convergent);
    tag(*c, site, 0);
    // wgmma.N.T.AB.S: A / B M- / N-major (1) or K-major (0), or A r: from registers; S scale-d.
    tag_asm(*c, fmt::format("wgmma.{}.{}.{}{}.{}", n, t, rs ? "r" : trans_a ? "1" : "0", trans_b ? 1 : 0,
                            scale_d ? 1 : 0));
    std::vector<llvm::Value*> d;
    for (int i = 0; i < regs; ++i) d.push_back(b.CreateExtractValue(c, unsigned(i)));
    uses_wgmma_ = true;
    return d;
  }
  // mbarriers and TMA: inline PTX, tagged for the emulator's rewrite (mbarrier.N / tma.load.R).
  void mbarrier_init(Builder& b, llvm::Value* bar, int count) override {
    auto* fty = llvm::FunctionType::get(b.getVoidTy(), {bar->getType(), b.getInt32Ty()}, false);
    llvm::CallInst* c = b.CreateCall(
        fty, llvm::InlineAsm::get(fty, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}", true),
        {bar, b.getInt32(uint32_t(count))});
    tag_asm(*c, "mbarrier.init");
  }
  void mbarrier_init_fence(Builder& b) override {
    asm_statement(b, "fence.mbarrier_init.release.cluster;", "fence.mbarrier_init");
  }
  void mbarrier_arrive_expect_tx(Builder& b, llvm::Value* bar, int64_t bytes, const std::string& site) override {
    auto* fty = llvm::FunctionType::get(b.getVoidTy(), {bar->getType(), b.getInt32Ty()}, false);
    llvm::CallInst* c = b.CreateCall(
        fty,
        llvm::InlineAsm::get(fty, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r,~{memory}", true),
        {bar, b.getInt32(uint32_t(bytes))});
    tag(*c, site, 0);
    tag_asm(*c, "mbarrier.expect_tx");
  }
  void mbarrier_wait(Builder& b, llvm::Value* bar, llvm::Value* parity, const std::string& site) override {
    auto* fty = llvm::FunctionType::get(b.getVoidTy(), {bar->getType(), b.getInt32Ty()}, false);
    const char* text = "{\n\t.reg .pred p;\n"
                       "tilec_mbar_wait_${:uid}:\n\t"
                       "mbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1;\n\t"
                       "@!p bra tilec_mbar_wait_${:uid};\n}";
    llvm::CallInst* c = b.CreateCall(fty, llvm::InlineAsm::get(fty, text, "r,r,~{memory}", true), {bar, parity});
    tag(*c, site, 0);
    tag_asm(*c, "mbarrier.wait");
  }
  void mbarrier_arrive(Builder& b, llvm::Value* bar, const std::string& site) override {
    auto* fty = llvm::FunctionType::get(b.getVoidTy(), {bar->getType()}, false);
    llvm::CallInst* c = b.CreateCall(
        fty, llvm::InlineAsm::get(fty, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", true), {bar});
    tag(*c, site, 0);
    tag_asm(*c, "mbarrier.arrive");
  }
  // Tagged setmaxnreg.{inc,dec}.COUNT.LAUNCH for the emulator's rewrite.
  void setmaxnreg(Builder& b, bool inc, int count, int launch_count, const std::string& site) override {
    const char* action = inc ? "inc" : "dec";
    auto* fty = llvm::FunctionType::get(b.getVoidTy(), {}, false);
    llvm::CallInst* c = b.CreateCall(
        fty, llvm::InlineAsm::get(fty, fmt::format("setmaxnreg.{}.sync.aligned.u32 {};", action, count), "~{memory}", true),
        {});
    c->addFnAttr(llvm::Attribute::Convergent);
    tag(*c, site, 0);
    tag_asm(*c, fmt::format("setmaxnreg.{}.{}.{}", action, count, launch_count));
  }
  // A TMA instruction's operands: `first` (with their constraints), then the coordinates as
  // $2, $3, ...; returns the coordinate list "$2, $3" for the instruction text.
  static std::string tma_operands(Builder& b, std::vector<llvm::Value*> first, const std::vector<llvm::Value*>& coords,
                                  std::vector<llvm::Type*>& types, std::vector<llvm::Value*>& args) {
    args = std::move(first);
    for (llvm::Value* v : args) types.push_back(v->getType());
    std::string list;
    for (size_t i = 0; i < coords.size(); ++i) {
      list += fmt::format("{}${}", i ? ", " : "", i + args.size());
      types.push_back(b.getInt32Ty());
    }
    args.insert(args.end(), coords.begin(), coords.end());
    return list;
  }
  void tma_load(Builder& b, llvm::Value* dst, llvm::Value* tensor_map, const std::vector<llvm::Value*>& coords,
                llvm::Value* bar, const std::string& site) override {
    std::vector<llvm::Type*> types;
    std::vector<llvm::Value*> args;
    const std::string list = tma_operands(b, {dst, tensor_map}, coords, types, args);
    std::string cons = "r,l";
    for (size_t i = 0; i < coords.size(); ++i) cons += ",r";
    types.push_back(bar->getType());
    args.push_back(bar);
    cons += ",r,~{memory}";
    auto* fty = llvm::FunctionType::get(b.getVoidTy(), types, false);
    std::string text = fmt::format(
        "cp.async.bulk.tensor.{}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [$0], [$1, {{{}}}], [${}];",
        coords.size(), list, coords.size() + 2);
    llvm::CallInst* c = b.CreateCall(fty, llvm::InlineAsm::get(fty, text, cons, true), args);
    tag(*c, site, 0);
    tag_asm(*c, fmt::format("tma.load.{}", coords.size()));
    uses_tma_ = true;
  }
  void tma_store(Builder& b, llvm::Value* src, llvm::Value* tensor_map, const std::vector<llvm::Value*>& coords,
                 const std::string& site) override {
    std::vector<llvm::Type*> types;
    std::vector<llvm::Value*> args;
    const std::string list = tma_operands(b, {tensor_map, src}, coords, types, args);
    std::string cons = "l,r";
    for (size_t i = 0; i < coords.size(); ++i) cons += ",r";
    cons += ",~{memory}";
    auto* fty = llvm::FunctionType::get(b.getVoidTy(), types, false);
    std::string text = fmt::format("cp.async.bulk.tensor.{}d.global.shared::cta.bulk_group [$0, {{{}}}], [$1];",
                                   coords.size(), list);
    llvm::CallInst* c = b.CreateCall(fty, llvm::InlineAsm::get(fty, text, cons, true), args);
    tag(*c, site, 0);
    tag_asm(*c, fmt::format("tma.store.{}", coords.size()));
    uses_tma_ = true;
  }
  void bulk_commit(Builder& b) override { asm_statement(b, "cp.async.bulk.commit_group;", "bulk.commit"); }
  void bulk_wait(Builder& b, int groups) override {
    asm_statement(b, fmt::format("cp.async.bulk.wait_group {};", groups), fmt::format("bulk.wait.{}", groups));
  }
  void wgmma_fence(Builder& b) override { asm_statement(b, "wgmma.fence.sync.aligned;", "wgmma.fence"); }
  void wgmma_commit(Builder& b) override { asm_statement(b, "wgmma.commit_group.sync.aligned;", "wgmma.commit"); }
  void wgmma_wait(Builder& b, int groups) override {
    asm_statement(b, fmt::format("wgmma.wait_group.sync.aligned {};", groups), fmt::format("wgmma.wait.{}", groups));
  }
  void fence_proxy_async(Builder& b) override {
    asm_statement(b, "fence.proxy.async.shared::cta;", "fence.proxy.async");
  }
  // One empty asm statement taking and giving every register ("+f", or "+r" for the 32-bit
  // pairs of a register A), ordered with the wgmma statements around it: no code moves across it.
  std::vector<llvm::Value*> fence_operands(Builder& b, const std::vector<llvm::Value*>& regs) override {
    if (regs.empty()) return regs;
    std::string cons;
    std::vector<llvm::Type*> tys;
    for (size_t i = 0; i < regs.size(); ++i) {
      tys.push_back(regs[i]->getType());
      internal_assert(tys.back()->isFloatTy() || tys.back()->isIntegerTy(32), "operand fences take f32 or i32");
      cons += std::string(i ? "," : "") + (tys.back()->isFloatTy() ? "=f" : "=r");
    }
    for (size_t i = 0; i < regs.size(); ++i) cons += "," + std::to_string(i);
    cons += ",~{memory}";
    auto* fty = llvm::FunctionType::get(llvm::StructType::get(b.getContext(), tys), tys, false);
    llvm::CallInst* c = b.CreateCall(fty, llvm::InlineAsm::get(fty, "", cons, true), regs);
    tag_asm(*c, "fence.operand");
    std::vector<llvm::Value*> r;
    for (unsigned i = 0; i < regs.size(); ++i) r.push_back(b.CreateExtractValue(c, i));
    return r;
  }
  llvm::Value* shared_address(Builder& b, llvm::Value* ptr) override { return b.CreatePtrToInt(ptr, b.getInt32Ty()); }

  void cp_async_commit(Builder& b) override { b.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_commit_group, {}, {}); }
  void cp_async_wait(Builder& b, int groups) override {
    b.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_wait_group, {}, {b.getInt32(uint32_t(groups))});
  }

  llvm::Value* exp2(Builder& b, llvm::Value* x) override {
    return b.CreateIntrinsic(llvm::Intrinsic::nvvm_ex2_approx_f, {}, {x});
  }
  llvm::Value* log2(Builder& b, llvm::Value* x) override {
    return b.CreateIntrinsic(llvm::Intrinsic::nvvm_lg2_approx_f, {}, {x});
  }
  llvm::Value* sqrt(Builder& b, llvm::Value* x) override {
    return b.CreateIntrinsic(llvm::Intrinsic::sqrt, {x->getType()}, {x});
  }
  llvm::Value* rsqrt(Builder& b, llvm::Value* x) override {
    return b.CreateIntrinsic(llvm::Intrinsic::nvvm_rsqrt_approx_f, {}, {x});
  }
  // tanh from ex2: 1 - 2 / (2^(2|x| log2 e) + 1), with the sign of x; an odd
  // polynomial near zero, where that form loses relative precision.
  llvm::Value* tanh(Builder& b, llvm::Value* x) override {
    llvm::Type* f = x->getType();
    auto c = [&](double v) { return llvm::ConstantFP::get(f, v); };
    llvm::Value* ax = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
    llvm::Value* e = exp2(b, b.CreateFMul(ax, c(2.0 * std::numbers::log2e)));
    llvm::Value* t = b.CreateFSub(c(1.0), b.CreateFDiv(c(2.0), b.CreateFAdd(e, c(1.0))));
    llvm::Value* big = b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, t, x);
    llvm::Value* x2 = b.CreateFMul(x, x);
    llvm::Value* p = b.CreateFAdd(c(2.0 / 15.0), b.CreateFMul(x2, c(-17.0 / 315.0)));
    p = b.CreateFAdd(c(-1.0 / 3.0), b.CreateFMul(x2, p));
    llvm::Value* small = b.CreateFAdd(x, b.CreateFMul(b.CreateFMul(x, x2), p));
    return b.CreateSelect(b.CreateFCmpOLT(ax, c(0.125)), small, big);
  }

  // CUDA's assert system call, __assertfail(message, file, line, function, char size): the
  // driver prints the message with the block and thread and the launch fails.
  void assert_fail(Builder& b, const std::string& where) override {
    llvm::Module& m = *b.GetInsertBlock()->getModule();
    auto str = [&](const std::string& s) -> llvm::Value* {
      auto* init = llvm::ConstantDataArray::getString(m.getContext(), s);
      auto* g = new llvm::GlobalVariable(m, init->getType(), true, llvm::GlobalValue::PrivateLinkage, init, "assert_str",
                                         nullptr, llvm::GlobalValue::NotThreadLocal, kGlobal);
      return b.CreateAddrSpaceCast(g, b.getPtrTy());
    };
    auto f = m.getOrInsertFunction("__assertfail", b.getVoidTy(), b.getPtrTy(), b.getPtrTy(), b.getInt32Ty(),
                                   b.getPtrTy(), b.getInt64Ty());
    llvm::CallInst* c = b.CreateCall(f, {str(where), str("tilec"), b.getInt32(0), str(fn_->getName().str()), b.getInt64(1)});
    tag(*c, where, 0);
  }

  llvm::Value* umulhi(Builder& b, llvm::Value* x, llvm::Value* y) override {
    switch (x->getType()->getIntegerBitWidth()) {
    case 16: return b.CreateIntrinsic(llvm::Intrinsic::nvvm_mulhi_us, {}, {x, y});
    case 32: return b.CreateIntrinsic(llvm::Intrinsic::nvvm_mulhi_ui, {}, {x, y});
    case 64: return b.CreateIntrinsic(llvm::Intrinsic::nvvm_mulhi_ull, {}, {x, y});
    default: return umulhi_ir(b, x, y);
    }
  }
  llvm::Value* libm(Builder& b, const std::string& name, const std::vector<llvm::Value*>& args) override {
    return call_float_function(b, "__nv_" + name, args);
  }

  llvm::Type* half_type(llvm::LLVMContext& c, ir::DType t) override {
    return t == ir::DType::bf16 ? llvm::Type::getBFloatTy(c) : llvm::Type::getHalfTy(c);
  }
  llvm::Value* to_f32(Builder& b, llvm::Value* v, ir::DType) override {
    return b.CreateFPExt(v, b.getFloatTy());
  }
  llvm::Value* from_f32(Builder& b, llvm::Value* v, ir::DType t) override {
    return b.CreateFPTrunc(v, half_type(b.getContext(), t));
  }

  // sm_80+: cvt.rn.{f16,bf16}x2.f32 (its first operand goes to the upper half).
  std::optional<llvm::Value*> f32x2_to_half2(Builder& b, llvm::Value* lo, llvm::Value* hi, ir::DType t) override {
    return b.CreateIntrinsic(t == ir::DType::bf16 ? llvm::Intrinsic::nvvm_ff2bf16x2_rn : llvm::Intrinsic::nvvm_ff2f16x2_rn,
                             {}, {hi, lo});
  }

  // sm_89+: cvt.rn.f16x2.{e4m3,e5m2}x2 and cvt.rn.satfinite.{e4m3,e5m2}x2.f32 as inline PTX
  // (LLVM 19 has no intrinsics for them), on one of each pair's lanes: the low byte and the
  // low half. Tagged `tilec.asm` for the emulator's rewrite. Earlier archs: the IR default.
  llvm::Value* fp8_to_f32(Builder& b, llvm::Value* bits, ir::DType t) override {
    if (!fp8_cvt_) return TargetHooks::fp8_to_f32(b, bits, t);
    return b.CreateFPExt((*fp8x2_to_f16(b, bits, b.getInt8(0), t))[0], b.getFloatTy());
  }
  std::optional<std::array<llvm::Value*, 2>> fp8x2_to_f16(Builder& b, llvm::Value* lo, llvm::Value* hi,
                                                           ir::DType t) override {
    if (!fp8_cvt_) return std::nullopt;
    const char* fmt = t == ir::DType::f8e4m3 ? "e4m3" : "e5m2";
    auto* fty = llvm::FunctionType::get(b.getInt32Ty(), {b.getInt16Ty()}, false);
    auto* asm_ = llvm::InlineAsm::get(fty, fmt::format("cvt.rn.f16x2.{}x2 $0, $1;", fmt), "=r,h", false);
    llvm::Value* pair = byte_pair(b, lo, hi);
    llvm::CallInst* c = b.CreateCall(fty, asm_, {pair});
    tag_asm(*c, fmt::format("cvt.f16x2.{}x2", fmt));
    auto half = [&](unsigned shift) {
      return b.CreateBitCast(b.CreateTrunc(b.CreateLShr(c, shift), b.getInt16Ty()), b.getHalfTy());
    };
    return std::array<llvm::Value*, 2>{half(0), half(16)};
  }
  llvm::Value* f32_to_fp8(Builder& b, llvm::Value* x, ir::DType t) override {
    if (!fp8_cvt_) return TargetHooks::f32_to_fp8(b, x, t);
    const char* fmt = t == ir::DType::f8e4m3 ? "e4m3" : "e5m2";
    auto* fty = llvm::FunctionType::get(b.getInt16Ty(), {b.getFloatTy(), b.getFloatTy()}, false);
    auto* asm_ = llvm::InlineAsm::get(fty, fmt::format("cvt.rn.satfinite.{}x2.f32 $0, $1, $2;", fmt), "=h,f,f", false);
    // The second source lands in the low byte.
    llvm::CallInst* c = b.CreateCall(fty, asm_, {llvm::ConstantFP::get(b.getFloatTy(), 0.0), x});
    tag_asm(*c, fmt::format("cvt.{}x2.f32", fmt));
    return b.CreateTrunc(c, b.getInt8Ty());
  }

  unsigned global_address_space() const override { return kGlobal; }

  // The site and float type ride along as metadata (ignored by the NVPTX back end) for
  // when this IR runs on the emulator (nvptx_on_cpu.cpp).
  llvm::Value* shared_load(Builder& b, llvm::Value* ptr, llvm::Type* ty, const std::string& site) override {
    llvm::LoadInst* ld = b.CreateLoad(ty, ptr);
    tag(*ld, site, 0);
    return ld;
  }
  void shared_store(Builder& b, llvm::Value* ptr, llvm::Value* v, const std::string& site,
                    unsigned float_type) override {
    tag(*b.CreateStore(v, ptr), site, float_type);
  }

  llvm::Value* load(Builder& b, llvm::Value* ptr, llvm::Type* ty, unsigned align,
                    llvm::Value* pred) override {
    return guarded(b, pred, [&]() -> llvm::Value* {
      return b.CreateAlignedLoad(ty, ptr, llvm::Align(align));
    });
  }
  void store(Builder& b, llvm::Value* ptr, llvm::Value* v, unsigned align, llvm::Value* pred) override {
    guarded(b, pred, [&]() -> llvm::Value* {
      b.CreateAlignedStore(v, ptr, llvm::Align(align));
      return nullptr;
    });
  }
  // Relaxed (monotonic) atomics at GPU scope: atom.global.{add,max,min,and,or,xor,exch,cas}.
  // f32 max/min are a cas loop around abi/atomic_ops.h's max_number/min_number (LLVM's
  // maxnum leaves the sign of a zero result open; these order -0.0 below +0.0).
  llvm::Value* atomic(Builder& b, AtomicOp op, llvm::Value* ptr, llvm::Value* v, llvm::Value* cmp,
                      llvm::Value* pred) override {
    return guarded(b, pred, [&]() -> llvm::Value* {
      const bool f = v->getType()->isFloatingPointTy();
      const auto order = llvm::AtomicOrdering::Monotonic;
      if (f && (op == AtomicOp::max || op == AtomicOp::min)) return float_minmax_loop(b, op == AtomicOp::max, ptr, v);
      if (op == AtomicOp::cas || (op == AtomicOp::xchg && f)) { // on the bits
        llvm::Value* bits = b.CreateBitCast(v, b.getInt32Ty());
        llvm::Value* old = nullptr;
        if (op == AtomicOp::cas)
          old = b.CreateExtractValue(b.CreateAtomicCmpXchg(ptr, b.CreateBitCast(cmp, b.getInt32Ty()), bits,
                                                           llvm::MaybeAlign(), order, order),
                                     0);
        else
          old = b.CreateAtomicRMW(llvm::AtomicRMWInst::Xchg, ptr, bits, llvm::MaybeAlign(), order);
        return b.CreateBitCast(old, v->getType());
      }
      llvm::AtomicRMWInst::BinOp k = llvm::AtomicRMWInst::Add;
      switch (op) {
      case AtomicOp::add: k = f ? llvm::AtomicRMWInst::FAdd : llvm::AtomicRMWInst::Add; break;
      case AtomicOp::max: k = f ? llvm::AtomicRMWInst::FMax : llvm::AtomicRMWInst::Max; break;
      case AtomicOp::min: k = f ? llvm::AtomicRMWInst::FMin : llvm::AtomicRMWInst::Min; break;
      case AtomicOp::umax: k = llvm::AtomicRMWInst::UMax; break;
      case AtomicOp::umin: k = llvm::AtomicRMWInst::UMin; break;
      case AtomicOp::and_: k = llvm::AtomicRMWInst::And; break;
      case AtomicOp::or_: k = llvm::AtomicRMWInst::Or; break;
      case AtomicOp::xor_: k = llvm::AtomicRMWInst::Xor; break;
      case AtomicOp::xchg: k = llvm::AtomicRMWInst::Xchg; break;
      case AtomicOp::cas: break;
      }
      return b.CreateAtomicRMW(k, ptr, v, llvm::MaybeAlign(), order);
    });
  }

  // max_number / min_number (abi/atomic_ops.h) in IR.
  static llvm::Value* minmax_number(Builder& b, bool max, llvm::Value* a, llvm::Value* x) {
    llvm::Value* nan_a = b.CreateFCmpUNO(a, a);
    llvm::Value* nan_x = b.CreateFCmpUNO(x, x);
    llvm::Value* neg_a = b.CreateICmpSLT(b.CreateBitCast(a, b.getInt32Ty()), b.getInt32(0));
    llvm::Value* on_tie = max ? b.CreateSelect(neg_a, x, a) : b.CreateSelect(neg_a, a, x);
    llvm::Value* better = max ? b.CreateFCmpOGT(a, x) : b.CreateFCmpOLT(a, x);
    llvm::Value* r = b.CreateSelect(b.CreateFCmpOEQ(a, x), on_tie, b.CreateSelect(better, a, x));
    r = b.CreateSelect(nan_x, a, r);
    return b.CreateSelect(nan_a, x, r);
  }

  // old = *p; until cas(p, old, f(old, v)) sees old: the usual compare-and-swap loop.
  static llvm::Value* float_minmax_loop(Builder& b, bool max, llvm::Value* ptr, llvm::Value* v) {
    llvm::Function* fn = b.GetInsertBlock()->getParent();
    llvm::LLVMContext& c = fn->getContext();
    llvm::BasicBlock* entry = b.GetInsertBlock();
    llvm::Value* first = b.CreateLoad(b.getInt32Ty(), ptr);
    llvm::BasicBlock* loop = llvm::BasicBlock::Create(c, "atomic.loop", fn);
    llvm::BasicBlock* done = llvm::BasicBlock::Create(c, "atomic.done", fn);
    b.CreateBr(loop);
    b.SetInsertPoint(loop);
    llvm::PHINode* old = b.CreatePHI(b.getInt32Ty(), 2);
    old->addIncoming(first, entry);
    llvm::Value* next = b.CreateBitCast(minmax_number(b, max, b.CreateBitCast(old, b.getFloatTy()), v), b.getInt32Ty());
    const auto order = llvm::AtomicOrdering::Monotonic;
    llvm::Value* cx = b.CreateAtomicCmpXchg(ptr, old, next, llvm::MaybeAlign(4), order, order);
    llvm::Value* seen = b.CreateExtractValue(cx, 0);
    old->addIncoming(seen, loop);
    b.CreateCondBr(b.CreateExtractValue(cx, 1), done, loop);
    b.SetInsertPoint(done);
    return b.CreateBitCast(seen, b.getFloatTy());
  }

  void finish_kernel(llvm::Module& m, llvm::Function* f, int threads, int min_blocks, int max_registers,
                     int64_t shared_bytes) override {
    llvm::LLVMContext& c = m.getContext();
    auto* md = m.getOrInsertNamedMetadata("nvvm.annotations");
    auto i32 = [&](int v) {
      return llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(c), v));
    };
    llvm::Metadata* fm = llvm::ConstantAsMetadata::get(f);
    // wgmma's 128-byte swizzle repeats every 1024 bytes of address, and the lowering places
    // swizzled operands at multiples of 1024 from the region's start.
    if (auto* g = m.getNamedGlobal("tilec_smem"); g && (uses_wgmma_ || uses_tma_)) g->setAlignment(llvm::Align(1024));
    md->addOperand(llvm::MDNode::get(c, {fm, llvm::MDString::get(c, "kernel"), i32(1)}));
    // Tensor maps are __grid_constant__: the copies read them where the launch put them (their
    // address taken with cvta.param), never from a local copy.
    if (!grid_constants_.empty()) {
      std::vector<llvm::Metadata*> args;
      for (int a : grid_constants_) args.push_back(i32(a));
      md->addOperand(llvm::MDNode::get(c, {fm, llvm::MDString::get(c, "grid_constant"), llvm::MDNode::get(c, args)}));
    }
    md->addOperand(llvm::MDNode::get(c, {fm, llvm::MDString::get(c, "maxntidx"), i32(threads)}));
    // An explicit register ceiling: every register one block can have (64 K per SM, at most
    // 255 per thread). With .maxntid alone ptxas aims for several blocks per SM and spills
    // to get there (a tensor-core matmul: 56 registers and 32 bytes of spills instead of 70
    // registers and none); spills cost a kernel more than the occupancy they buy.
    // A kernel that asks for min_blocks blocks per SM gets the registers that many can have,
    // or as many as its shared memory lets share an SM, if fewer: registers for blocks that
    // cannot be there would only cost spills.
    int64_t blocks = min_blocks;
    if (const int64_t by_smem = blocks_by_shared_memory(arch_, shared_bytes); by_smem > 0)
      blocks = std::min(blocks, by_smem);
    int maxnreg = std::min<int>(255, int(65536 / (threads * std::max<int64_t>(1, blocks)) / 8 * 8));
    // A ceiling of the kernel's own (or the compile's) holds where it is lower.
    if (max_registers > 0) maxnreg = std::min(maxnreg, max_registers);
    md->addOperand(llvm::MDNode::get(c, {fm, llvm::MDString::get(c, "maxnreg"), i32(maxnreg)}));
  }

private:
  // lo | hi << 8 as an i16: when they are bytes 2k and 2k+1 of one vector (a vector load's
  // elements), its k-th 16-bit half, which the back end takes from the register as it is.
  static llvm::Value* byte_pair(Builder& b, llvm::Value* lo, llvm::Value* hi) {
    auto* el = llvm::dyn_cast<llvm::ExtractElementInst>(lo);
    auto* eh = llvm::dyn_cast<llvm::ExtractElementInst>(hi);
    if (el && eh && el->getVectorOperand() == eh->getVectorOperand()) {
      auto* il = llvm::dyn_cast<llvm::ConstantInt>(el->getIndexOperand());
      auto* ih = llvm::dyn_cast<llvm::ConstantInt>(eh->getIndexOperand());
      auto* vty = llvm::cast<llvm::FixedVectorType>(el->getVectorOperandType());
      if (il && ih && il->getZExtValue() % 2 == 0 && ih->getZExtValue() == il->getZExtValue() + 1 &&
          vty->getNumElements() % 2 == 0) {
        auto* halves = llvm::FixedVectorType::get(b.getInt16Ty(), vty->getNumElements() / 2);
        return b.CreateExtractElement(b.CreateBitCast(el->getVectorOperand(), halves), il->getZExtValue() / 2);
      }
    }
    return b.CreateOr(b.CreateZExt(lo, b.getInt16Ty()), b.CreateShl(b.CreateZExt(hi, b.getInt16Ty()), 8));
  }
  // A PTX statement with no operands, ordered with memory and other such statements.
  static void asm_statement(Builder& b, const std::string& text, const std::string& what) {
    auto* fty = llvm::FunctionType::get(b.getVoidTy(), {}, false);
    llvm::CallInst* c = b.CreateCall(fty, llvm::InlineAsm::get(fty, text, "~{memory}", true), {});
    c->addFnAttr(llvm::Attribute::Convergent);
    tag_asm(*c, what);
  }
  static void tag_asm(llvm::CallInst& c, const std::string& what) {
    llvm::LLVMContext& ctx = c.getContext();
    c.setMetadata("tilec.asm", llvm::MDNode::get(ctx, llvm::MDString::get(ctx, what)));
  }
  static void tag(llvm::Instruction& i, const std::string& site, unsigned float_type) {
    llvm::LLVMContext& c = i.getContext();
    i.setMetadata("tilec.site", llvm::MDNode::get(c, llvm::MDString::get(c, site)));
    if (float_type)
      i.setMetadata("tilec.float_type", llvm::MDNode::get(c, llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(
                                                               llvm::Type::getInt32Ty(c), float_type))));
  }

  llvm::Function* fn_ = nullptr;
  bool uses_wgmma_ = false;
  bool uses_tma_ = false; // TMA copies' swizzles, like wgmma's, are by absolute address
  std::vector<int> grid_constants_; // the tensor maps' parameters, numbered from 1
  bool fp8_cvt_;     // sm_89+: cvt converts fp8
  std::string arch_; // "sm_80", ...: its shared memory per SM bounds the blocks a kernel asks for
};

} // namespace

std::unique_ptr<TargetHooks> make_nvptx_hooks(int sm) { return std::make_unique<NvptxHooks>(sm); }

} // namespace tilec::codegen
