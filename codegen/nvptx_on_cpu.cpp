// The nvptx lowering, run on the CPU: rewrites a kernel lowered with the nvptx target hooks
// (NVVM intrinsics, global memory in address space 1, shared memory in address space 3, a
// ptx_kernel entry) into a module for the emulator (abi/emu_abi.h). Each GPU instruction is
// replaced by an emulator call with the semantics PTX gives it, and nothing else is touched,
// so a bug in target_nvptx.cpp's code (a shuffle's member mask, a conversion that truncates,
// a missing address space) runs and fails in CI, which has no GPU.
//
//   thread/block ids, grid size     tilec_emu_thread_id / block_id / num_blocks
//   barrier0                        tilec_emu_barrier, numbered in program order
//   barrier.sync.cnt 1, n            tilec_emu_barrier_among (n threads), numbered alike
//   shfl.sync.{idx,bfly}.i32        tilec_emu_shfl_sync, which checks mask and clamp operands
//   load/store, address space 3     tilec_emu_shared_load/store (race, bounds, initcheck), with
//                                   the site the lowering attached as !tilec.site metadata
//   load/store, address space 1     tilec_emu_load/store (bounds, byte counts)
//   atomicrmw / cmpxchg, space 1    tilec_emu_atomic_i32/f32 with the op's tilec::AtomicOp code
//   fpext/fptrunc f16/bf16 <-> f32  tilec_emu_*_to_*: cvt.f32.{f16,bf16} and cvt.rn.{f16,bf16}.f32
//   ex2/lg2/rsqrt .approx           llvm.exp2 / llvm.log2 / 1/sqrt on the host
//   fma/mul/add .rn, fabs, floor,   their exact IEEE equivalents (libdevice's code, which
//   trunc, round, f2i.rn            compile.cpp links and inlines here when it finds it)
//   mma.m16n8k16 f16/bf16 -> f32    tilec_emu_mma_m16n8k16 (the warp's fragments, PTX's layout)
//   ldmatrix.m8n8.x{1,2,4}[.trans]  tilec_emu_ldmatrix (rows read through the shared checks)
//   cp.async.cg 16 / commit / wait   tilec_emu_cp_async / _commit / _wait (copies land at the wait)
//   wgmma.mma_async m64nNk16 / k32  tilec_emu_wgmma (the warpgroup's accumulators, PTX's layout;
//                                   operands decoded from the matrix descriptors)
//   wgmma.fence / commit / wait,     tilec_emu_wgmma_fence / _commit / _wait,
//   fence.proxy.async                tilec_emu_fence_proxy_async
//   mbarrier.init / arrive.expect_tx tilec_emu_mbarrier_init / _arrive_expect_tx (the init
//   / try_wait.parity loop           fence is dropped), tilec_emu_mbarrier_wait
//   mbarrier.arrive                  tilec_emu_mbarrier_arrive
//   setmaxnreg.{inc,dec}             tilec_emu_setmaxnreg (count and launch ceiling from the tag)
//   cp.async.bulk.tensor (TMA)       tilec_emu_tma_load / _tma_store (the tensor map: the
//                                    launch's, by pointer where the GPU takes it by value)
//   cp.async.bulk commit / wait     tilec_emu_bulk_commit / _bulk_wait
//   ptrtoint of a shared pointer     its offset in the block's region (what descriptors hold)
//
// Before the rewrite, every use of a wgmma's accumulator is checked: another wgmma (which the
// hardware orders after it) or an operand fence after a wgmma.commit_group and a
// wgmma.wait_group N that retire it (N at most the groups committed after its own, on the way
// from it to the fence through the fence's dominators); or, for a group kept in flight, a
// fence after a wgmma.wait_group that does not retire it whose registers reach, through phis
// only, the fence opening the next trip's MMAs or one after a wgmma.wait_group 0.
// Anything else reads registers the asynchronous MMA may still write, and is an internal
// error naming the kernel.
//
// Any other NVVM intrinsic or address space is an internal error naming it, so a new target
// hook cannot go unmapped silently.
#include <fmt/format.h>
#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/ReplaceConstant.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "abi/error.h"
#include "codegen/target.h"

namespace tilec::codegen {

namespace {

constexpr unsigned kGlobal = 1;
constexpr unsigned kShared = 3;

class Retarget {
public:
  explicit Retarget(llvm::Module& m) : m_(m), c_(m.getContext()) {}

  void run() {
    llvm::Function* kernel = nullptr;
    for (llvm::Function& f : m_)
      if (f.getCallingConv() == llvm::CallingConv::PTX_Kernel) kernel = &f;
    if (!kernel) internal_fail("nvptx module has no ptx_kernel function");
    fn_ = make_entry(*kernel);
    if (auto* md = m_.getNamedMetadata("nvvm.annotations")) md->eraseFromParent();
    emu_.bind(fn_);
    check_wgmma_reads();
    replace_shared_global();

    std::vector<llvm::Instruction*> work;
    for (llvm::BasicBlock& bb : *fn_)
      for (llvm::Instruction& i : bb) work.push_back(&i);
    for (llvm::Instruction* i : work) rewrite(*i);
    // Intrinsic declarations nobody calls any more.
    std::vector<llvm::Function*> dead;
    for (llvm::Function& f : m_)
      if (f.isDeclaration() && f.use_empty()) dead.push_back(&f);
    for (llvm::Function* f : dead) f->eraseFromParent();
    define_bf16_truncation();
  }

private:
  using Builder = llvm::IRBuilder<>;

  // The emulator's entry S(ctx, args): the kernel's blocks, its parameters read from args.
  llvm::Function* make_entry(llvm::Function& k) {
    auto* ptr = llvm::PointerType::get(c_, 0);
    auto* fty = llvm::FunctionType::get(llvm::Type::getVoidTy(c_), {ptr, ptr}, false);
    std::string name = k.getName().str();
    k.setName(name + ".nvptx");
    llvm::Function* f = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, name, m_);
    f->getArg(0)->setName("ctx");
    f->getArg(1)->setName("args");
    f->splice(f->end(), &k);
    Builder b(&f->getEntryBlock(), f->getEntryBlock().getFirstInsertionPt());
    for (llvm::Argument& a : k.args()) {
      llvm::Value* slot = b.CreateConstGEP1_64(b.getPtrTy(), f->getArg(1), a.getArgNo());
      llvm::Value* p = b.CreateLoad(b.getPtrTy(), slot);
      // A tensor map (by value on the GPU): args[i] points at it.
      a.replaceAllUsesWith(a.hasByValAttr() ? p : b.CreateLoad(a.getType(), p, a.getName()));
    }
    k.eraseFromParent();
    return f;
  }

  // The shared region is an external addrspace(3) array on the GPU; here it is the block's
  // region the emulator hands out, read once in the entry block.
  void replace_shared_global() {
    llvm::GlobalVariable* g = m_.getNamedGlobal("tilec_smem");
    if (!g) return;
    llvm::convertUsersOfConstantsToInstructions({g});
    Builder b(&fn_->getEntryBlock(), fn_->getEntryBlock().getFirstInsertionPt());
    llvm::Value* base = emu_.call(b, "tilec_emu_shared_base", b.getPtrTy(), {});
    shared_base_ = base;
    g->replaceAllUsesWith(b.CreateAddrSpaceCast(base, g->getType()));
    g->eraseFromParent();
  }

  static std::string asm_tag(const llvm::Instruction& i) {
    if (auto* md = i.getMetadata("tilec.asm"))
      if (auto* s = llvm::dyn_cast<llvm::MDString>(md->getOperand(0))) return s->getString().str();
    return "";
  }
  static bool is_wgmma_mma(const std::string& tag) {
    return tag.starts_with("wgmma.") && tag != "wgmma.fence" && tag != "wgmma.commit" && !tag.starts_with("wgmma.wait");
  }

  // A wgmma's results are read only by later wgmmas (as their accumulator) or by an operand
  // fence that a wgmma.wait_group retiring it precedes: on the way to the fence (back through
  // its block and its dominators), the wgmma's group is committed and a wait_group N follows
  // with N at most the groups committed after it.
  void check_wgmma_reads() {
    llvm::DominatorTree dt(*fn_);
    for (llvm::BasicBlock& bb : *fn_)
      for (llvm::Instruction& i : bb) {
        auto* call = llvm::dyn_cast<llvm::CallInst>(&i);
        if (!call || !call->isInlineAsm() || !is_wgmma_mma(asm_tag(*call))) continue;
        for (llvm::User* u : call->users()) {
          auto* ev = llvm::dyn_cast<llvm::ExtractValueInst>(u);
          if (!ev) internal_fail("nvptx on CPU: a wgmma's results are taken apart by extractvalue only");
          for (llvm::User* r : ev->users()) {
            auto* rc = llvm::dyn_cast<llvm::CallInst>(r);
            const std::string tag = rc && rc->isInlineAsm() ? asm_tag(*rc) : "";
            if (is_wgmma_mma(tag)) continue;
            // Retired: its group committed, then a wait that leaves fewer groups in flight than
            // were committed after it; or a wait that keeps it in flight, its registers then
            // carried only into the next trip's MMAs.
            bool committed = false, waited = false, in_flight = false;
            uint64_t later = 0;
            std::vector<std::string> tags;
            if (tag == "fence.operand" && asm_tags_between(call, rc, dt, tags))
              for (const std::string& t : tags) {
                if (t == "wgmma.commit") {
                  if (committed) ++later;
                  committed = true;
                } else if (committed && t.starts_with("wgmma.wait.")) {
                  (uint64_t(std::stoi(t.substr(11))) <= later ? waited : in_flight) = true;
                }
              }
            if (!waited && !(in_flight && carried_to_mmas(rc)))
              internal_fail(fmt::format("kernel '{}': a wgmma accumulator register ({}) is read before the "
                                        "wgmma.wait_group that retires its MMA: it may still be written",
                                        fn_->getName().str(), site_of(*call, "wgmma")));
          }
        }
      }
  }

  // The tags of the inline asm statements strictly between `from` and `to`, in program order,
  // along `to`'s block and its dominators back to `from`; false if `from` is not on that way.
  static bool asm_tags_between(llvm::Instruction* from, llvm::Instruction* to, llvm::DominatorTree& dt,
                               std::vector<std::string>& tags) {
    llvm::BasicBlock* bb = to->getParent();
    for (llvm::Instruction* x = to->getPrevNode();;) {
      if (!x) {
        llvm::DomTreeNode* n = dt.getNode(bb);
        if (!n || !n->getIDom()) return false;
        bb = n->getIDom()->getBlock();
        x = bb->getTerminator();
        continue;
      }
      if (x == from) break;
      if (auto* c = llvm::dyn_cast<llvm::CallInst>(x); c && c->isInlineAsm()) tags.push_back(asm_tag(*c));
      x = x->getPrevNode();
    }
    std::reverse(tags.begin(), tags.end());
    return true;
  }

  // The registers a fence after a wait_group N > 0 gives (still being written) flow through
  // phis only, into operand fences that either open the next MMAs (a wgmma.fence follows) or
  // follow a wgmma.wait_group 0 in their block.
  bool carried_to_mmas(llvm::CallInst* fence) {
    std::vector<llvm::Value*> work;
    std::set<llvm::Value*> seen;
    for (llvm::User* u : fence->users()) work.push_back(u);
    while (!work.empty()) {
      llvm::Value* v = work.back();
      work.pop_back();
      if (!seen.insert(v).second) continue;
      for (llvm::User* u : v->users()) {
        if (llvm::isa<llvm::PHINode>(u)) {
          work.push_back(u);
          continue;
        }
        auto* f = llvm::dyn_cast<llvm::CallInst>(u);
        if (!f || !f->isInlineAsm() || asm_tag(*f) != "fence.operand") return false;
        bool ok = false;
        for (llvm::Instruction* x = f->getPrevNode(); x && !ok; x = x->getPrevNode())
          if (auto* w = llvm::dyn_cast<llvm::CallInst>(x); w && w->isInlineAsm()) ok = asm_tag(*w) == "wgmma.wait.0";
        for (llvm::Instruction* x = f->getNextNode(); x && !ok; x = x->getNextNode())
          if (auto* w = llvm::dyn_cast<llvm::CallInst>(x); w && w->isInlineAsm() && asm_tag(*w) != "fence.operand") {
            ok = asm_tag(*w) == "wgmma.fence";
            break;
          }
        if (!ok) return false;
      }
    }
    return true;
  }

  void rewrite_ptrtoint(llvm::PtrToIntInst& p) {
    if (p.getPointerAddressSpace() != kShared) return;
    if (!shared_base_) internal_fail("nvptx on CPU: a shared address without the shared region");
    Builder b(&p);
    llvm::Value* off = b.CreateSub(b.CreatePtrToInt(flat(b, p.getPointerOperand()), b.getInt64Ty()),
                                   b.CreatePtrToInt(shared_base_, b.getInt64Ty()));
    replace(p, b.CreateZExtOrTrunc(off, p.getType()));
  }

  void rewrite(llvm::Instruction& i) {
    if (auto* ld = llvm::dyn_cast<llvm::LoadInst>(&i)) return rewrite_load(*ld);
    if (auto* st = llvm::dyn_cast<llvm::StoreInst>(&i)) return rewrite_store(*st);
    if (auto* rmw = llvm::dyn_cast<llvm::AtomicRMWInst>(&i)) return rewrite_atomic(*rmw);
    if (auto* cx = llvm::dyn_cast<llvm::AtomicCmpXchgInst>(&i)) return rewrite_cmpxchg(*cx);
    if (auto* ext = llvm::dyn_cast<llvm::FPExtInst>(&i)) return rewrite_fpext(*ext);
    if (auto* tr = llvm::dyn_cast<llvm::FPTruncInst>(&i)) return rewrite_fptrunc(*tr);
    if (auto* ii = llvm::dyn_cast<llvm::IntrinsicInst>(&i)) return rewrite_intrinsic(*ii);
    if (auto* call = llvm::dyn_cast<llvm::CallInst>(&i); call && call->isInlineAsm()) return rewrite_asm(*call);
    if (auto* p = llvm::dyn_cast<llvm::PtrToIntInst>(&i)) return rewrite_ptrtoint(*p);
    if (auto* call = llvm::dyn_cast<llvm::CallInst>(&i)) return rewrite_libdevice(*call);
  }

  // libdevice's __nv_NAME (not linked in here) is the C library's NAME on the CPU;
  // __assertfail is the emulator's (its message is the call's site).
  void rewrite_libdevice(llvm::CallInst& call) {
    llvm::Function* f = call.getCalledFunction();
    if (f && f->getName() == "__assertfail") {
      Builder b(&call);
      emu_.call(b, "tilec_emu_assert_fail", b.getVoidTy(), {emu_.site(b, site_of(call, "device_assert"))});
      call.eraseFromParent();
      return;
    }
    if (!f || !f->getName().starts_with("__nv_")) return;
    auto libc = m_.getOrInsertFunction(f->getName().substr(5), f->getFunctionType(), f->getAttributes());
    call.setCalledFunction(libc);
  }

  // Inline PTX the nvptx hooks emit, known by its `tilec.asm` tag.
  void rewrite_asm(llvm::CallInst& call) {
    const std::string tag = asm_tag(call);
    Builder b(&call);
    // cvt between fp8 pairs and f16 / f32 pairs (format 0 e4m3, 1 e5m2).
    for (int format : {0, 1}) {
      const std::string name = format == 0 ? "e4m3x2" : "e5m2x2";
      if (tag == "cvt.f16x2." + name) {
        replace(call, emu_.call(b, "tilec_emu_fp8x2_to_f16x2", b.getInt32Ty(), {call.getArgOperand(0), b.getInt32(format)}));
        return;
      }
      if (tag == "cvt." + name + ".f32") {
        replace(call, emu_.call(b, "tilec_emu_f32x2_to_fp8x2", b.getInt16Ty(),
                                {call.getArgOperand(0), call.getArgOperand(1), b.getInt32(format)}));
        return;
      }
    }
    // libdevice's own inline PTX (its sinf/cosf argument reduction, its powf).
    if (tag.empty()) {
      const std::string text = llvm::cast<llvm::InlineAsm>(call.getCalledOperand())->getAsmString();
      if (text.find("mad.lo.cc.u32") != std::string::npos && text.find("madc.hi.u32") != std::string::npos) {
        // {lo, hi} of a * b + c in 64 bits.
        auto* i64 = b.getInt64Ty();
        llvm::Value* p = b.CreateAdd(b.CreateMul(b.CreateZExt(call.getArgOperand(0), i64), b.CreateZExt(call.getArgOperand(1), i64)),
                                     b.CreateZExt(call.getArgOperand(2), i64));
        llvm::Value* r = llvm::PoisonValue::get(call.getType());
        r = b.CreateInsertValue(r, b.CreateTrunc(p, b.getInt32Ty()), 0);
        r = b.CreateInsertValue(r, b.CreateTrunc(b.CreateLShr(p, 32), b.getInt32Ty()), 1);
        replace(call, r);
        return;
      }
      if (text.find("rcp.approx.ftz.f32") != std::string::npos) { // the host's 1/x, not the GPU's bits
        replace(call, b.CreateFDiv(llvm::ConstantFP::get(b.getFloatTy(), 1.0), call.getArgOperand(0)));
        return;
      }
    }
    if (tag == "wgmma.fence" || tag == "wgmma.commit" || tag == "fence.proxy.async") {
      const char* fn = tag == "wgmma.fence"    ? "tilec_emu_wgmma_fence"
                       : tag == "wgmma.commit" ? "tilec_emu_wgmma_commit"
                                               : "tilec_emu_fence_proxy_async";
      emu_.call(b, fn, b.getVoidTy(), {}, tag != "fence.proxy.async");
      call.eraseFromParent();
      return;
    }
    // mbarriers and TMA copies (their shared operands flat pointers here).
    if (tag == "fence.mbarrier_init") { // the emulator's inits are seen at once
      call.eraseFromParent();
      return;
    }
    if (tag == "mbarrier.init" || tag == "mbarrier.expect_tx" || tag == "mbarrier.wait") {
      llvm::Value* bar = flat(b, call.getArgOperand(0));
      if (tag == "mbarrier.init")
        emu_.call(b, "tilec_emu_mbarrier_init", b.getVoidTy(), {bar, call.getArgOperand(1)});
      else
        emu_.call(b, tag == "mbarrier.wait" ? "tilec_emu_mbarrier_wait" : "tilec_emu_mbarrier_arrive_expect_tx",
                  b.getVoidTy(), {bar, call.getArgOperand(1), emu_.site(b, site_of(call, "nvptx mbarrier"))});
      call.eraseFromParent();
      return;
    }
    if (tag == "mbarrier.arrive") {
      emu_.call(b, "tilec_emu_mbarrier_arrive", b.getVoidTy(),
                {flat(b, call.getArgOperand(0)), emu_.site(b, site_of(call, "nvptx mbarrier.arrive"))});
      call.eraseFromParent();
      return;
    }
    if (tag.starts_with("setmaxnreg.")) { // setmaxnreg.{inc,dec}.COUNT.LAUNCH
      const bool inc = tag.starts_with("setmaxnreg.inc.");
      const std::string rest = tag.substr(15);
      const size_t dot = rest.find('.');
      emu_.call(b, "tilec_emu_setmaxnreg", b.getVoidTy(),
                {b.getInt32(uint32_t(std::stoul(rest.substr(0, dot)))), b.getInt32(inc),
                 b.getInt32(uint32_t(std::stoul(rest.substr(dot + 1)))), emu_.site(b, site_of(call, "nvptx setmaxnreg"))},
                true);
      call.eraseFromParent();
      return;
    }
    if (tag.starts_with("tma.load.")) { // operands dst, tensor map, coordinates, mbarrier
      const unsigned rank = unsigned(std::stoi(tag.substr(9)));
      std::vector<llvm::Value*> coords;
      for (unsigned i = 0; i < rank; ++i) coords.push_back(call.getArgOperand(2 + i));
      emu_tma_load(b, emu_, flat(b, call.getArgOperand(0)), call.getArgOperand(1), coords,
                   flat(b, call.getArgOperand(2 + rank)), emu_.site(b, site_of(call, "nvptx cp.async.bulk.tensor")));
      call.eraseFromParent();
      return;
    }
    if (tag.starts_with("tma.store.")) { // operands tensor map, src, coordinates
      const unsigned rank = unsigned(std::stoi(tag.substr(10)));
      std::vector<llvm::Value*> coords;
      for (unsigned i = 0; i < rank; ++i) coords.push_back(call.getArgOperand(2 + i));
      emu_tma_store(b, emu_, flat(b, call.getArgOperand(1)), call.getArgOperand(0), coords,
                    emu_.site(b, site_of(call, "nvptx cp.async.bulk.tensor store")));
      call.eraseFromParent();
      return;
    }
    if (tag == "bulk.commit") {
      emu_.call(b, "tilec_emu_bulk_commit", b.getVoidTy(), {});
      call.eraseFromParent();
      return;
    }
    if (tag.starts_with("bulk.wait.")) {
      emu_.call(b, "tilec_emu_bulk_wait", b.getVoidTy(), {b.getInt32(uint32_t(std::stoi(tag.substr(10))))});
      call.eraseFromParent();
      return;
    }
    if (tag.starts_with("wgmma.wait.")) {
      emu_.call(b, "tilec_emu_wgmma_wait", b.getVoidTy(), {b.getInt32(uint32_t(std::stoi(tag.substr(11))))}, true);
      call.eraseFromParent();
      return;
    }
    if (tag == "fence.operand") { // the registers, with the results of retired wgmmas delivered
      std::vector<llvm::Value*> regs(call.arg_begin(), call.arg_end());
      regs = emu_fence_operands(b, emu_, regs);
      llvm::Value* r = llvm::PoisonValue::get(call.getType());
      for (unsigned i = 0; i < regs.size(); ++i) r = b.CreateInsertValue(r, regs[i], i);
      replace(call, r);
      return;
    }
    // wgmma.N.T.AB.S (A, B: 1 when M- / N-major, A r from registers; S: scale-d): operands
    // desc_a (or A's four registers), desc_b, accumulator.
    if (is_wgmma_mma(tag)) {
      const size_t d1 = tag.find('.', 6), d2 = tag.find('.', d1 + 1);
      const int n = std::stoi(tag.substr(6, d1 - 6));
      const std::string t = tag.substr(d1 + 1, d2 - d1 - 1);
      const unsigned dtype = t == "bf16" ? 3 : t == "e4m3" ? 4 : t == "e5m2" ? 5 : 2;
      const bool rs = tag[d2 + 1] == 'r';
      const unsigned trans = (tag[d2 + 1] == '1' ? 1u : 0u) | (tag[d2 + 2] == '1' ? 2u : 0u);
      const bool scale_d = tag[d2 + 4] == '1';
      const unsigned nb = rs ? 4 : 1; // B's descriptor
      std::vector<llvm::Value*> a_regs, acc;
      for (unsigned i = 0; rs && i < 4; ++i) a_regs.push_back(call.getArgOperand(i));
      for (unsigned i = nb + 1; i < call.arg_size(); ++i) acc.push_back(call.getArgOperand(i));
      std::vector<llvm::Value*> d = emu_wgmma(b, emu_, dtype, n, rs ? nullptr : call.getArgOperand(0), a_regs,
                                              call.getArgOperand(nb), b.getInt32(scale_d ? 1 : 0), trans, acc,
                                              emu_.site(b, site_of(call, "nvptx wgmma")));
      llvm::Value* r = llvm::PoisonValue::get(call.getType());
      for (unsigned i = 0; i < d.size(); ++i) r = b.CreateInsertValue(r, d[i], i);
      replace(call, r);
      return;
    }
    if (tag != "cp.async.16")
      internal_fail("nvptx on CPU: inline asm without a known tilec.asm tag ('" + tag + "') has no mapping");
    llvm::Value* dst = call.getArgOperand(0); // plus the offset the instruction adds ([r + imm]), if any
    if (call.arg_size() > 3) dst = b.CreateGEP(b.getInt8Ty(), dst, call.getArgOperand(3));
    emu_.call(b, "tilec_emu_cp_async", b.getVoidTy(),
             {flat(b, dst), flat(b, call.getArgOperand(1)), call.getArgOperand(2),
              emu_.site(b, site_of(call, "nvptx cp.async"))});
    call.eraseFromParent();
  }

  static std::string site_of(const llvm::Instruction& i, const char* fallback) {
    if (auto* md = i.getMetadata("tilec.site"))
      if (auto* s = llvm::dyn_cast<llvm::MDString>(md->getOperand(0))) return s->getString().str();
    return fallback;
  }
  static unsigned float_type_of(const llvm::Instruction& i) {
    if (auto* md = i.getMetadata("tilec.float_type"))
      if (auto* c = llvm::mdconst::dyn_extract<llvm::ConstantInt>(md->getOperand(0)))
        return static_cast<unsigned>(c->getZExtValue());
    return 0;
  }

  void rewrite_load(llvm::LoadInst& ld) {
    unsigned as = ld.getPointerAddressSpace();
    if (as == 0) return; // the kernel's own stack
    Builder b(&ld);
    llvm::Type* ty = ld.getType();
    llvm::Value* p = flat(b, ld.getPointerOperand());
    // A table of the module's own (libdevice's sinf reduction reads one), not a buffer.
    if (auto* g = llvm::dyn_cast<llvm::GlobalVariable>(llvm::getUnderlyingObject(ld.getPointerOperand()));
        g && g->hasInitializer())
      return replace(ld, b.CreateLoad(ty, p));
    llvm::Value* tmp = emu_.scratch(ty);
    if (as == kShared)
      emu_.call(b, "tilec_emu_shared_load", b.getVoidTy(), {p, b.getInt32(emu_.bytes(ty)), tmp, emu_.site(b, site_of(ld, "nvptx shared load"))});
    else if (as == kGlobal)
      emu_.call(b, "tilec_emu_load", b.getVoidTy(), {p, b.getInt32(emu_.bytes(ty)), tmp});
    else
      unmapped_space(as, ld);
    replace(ld, b.CreateLoad(ty, tmp));
  }

  void rewrite_store(llvm::StoreInst& st) {
    unsigned as = st.getPointerAddressSpace();
    if (as == 0) return;
    Builder b(&st);
    llvm::Value* v = st.getValueOperand();
    llvm::Value* tmp = emu_.scratch(v->getType());
    b.CreateStore(v, tmp);
    llvm::Value* p = flat(b, st.getPointerOperand());
    unsigned n = emu_.bytes(v->getType());
    if (as == kShared)
      emu_.call(b, "tilec_emu_shared_store", b.getVoidTy(),
           {p, b.getInt32(n), tmp, emu_.site(b, site_of(st, "nvptx shared store")), b.getInt32(float_type_of(st))});
    else if (as == kGlobal)
      emu_.call(b, "tilec_emu_store", b.getVoidTy(), {p, b.getInt32(n), tmp});
    else
      unmapped_space(as, st);
    st.eraseFromParent();
  }

  void rewrite_atomic(llvm::AtomicRMWInst& a) {
    if (a.getPointerAddressSpace() != kGlobal) unmapped_space(a.getPointerAddressSpace(), a);
    Builder b(&a);
    llvm::Type* ty = a.getValOperand()->getType();
    using K = llvm::AtomicRMWInst;
    std::optional<AtomicOp> op;
    const bool f = ty->isFloatTy(), i = ty->isIntegerTy(32);
    switch (a.getOperation()) {
    case K::FAdd: if (f) op = AtomicOp::add; break;
    case K::FMax: if (f) op = AtomicOp::max; break;
    case K::FMin: if (f) op = AtomicOp::min; break;
    case K::Add: if (i) op = AtomicOp::add; break;
    case K::Max: if (i) op = AtomicOp::max; break;
    case K::Min: if (i) op = AtomicOp::min; break;
    case K::UMax: if (i) op = AtomicOp::umax; break;
    case K::UMin: if (i) op = AtomicOp::umin; break;
    case K::And: if (i) op = AtomicOp::and_; break;
    case K::Or: if (i) op = AtomicOp::or_; break;
    case K::Xor: if (i) op = AtomicOp::xor_; break;
    case K::Xchg: if (i || f) op = AtomicOp::xchg; break;
    default: break;
    }
    if (!op)
      internal_fail(fmt::format("nvptx on CPU: atomicrmw {} on {} has no mapping",
                                llvm::AtomicRMWInst::getOperationName(a.getOperation()).str(), type_name(ty)));
    replace(a, emu_.call(b, f ? "tilec_emu_atomic_f32" : "tilec_emu_atomic_i32", ty,
                         {flat(b, a.getPointerOperand()), b.getInt32(uint32_t(*op)), a.getValOperand(),
                          llvm::Constant::getNullValue(ty)}));
  }

  // atom.cas.b32: the old value and whether it matched, as cmpxchg yields them.
  void rewrite_cmpxchg(llvm::AtomicCmpXchgInst& c) {
    if (c.getPointerAddressSpace() != kGlobal) unmapped_space(c.getPointerAddressSpace(), c);
    llvm::Type* ty = c.getNewValOperand()->getType();
    if (!ty->isIntegerTy(32)) internal_fail("nvptx on CPU: cmpxchg on " + type_name(ty) + " has no mapping");
    Builder b(&c);
    llvm::Value* old = emu_.call(b, "tilec_emu_atomic_i32", ty,
                                 {flat(b, c.getPointerOperand()), b.getInt32(uint32_t(AtomicOp::cas)),
                                  c.getNewValOperand(), c.getCompareOperand()});
    llvm::Value* r = llvm::UndefValue::get(c.getType());
    r = b.CreateInsertValue(r, old, 0);
    r = b.CreateInsertValue(r, b.CreateICmpEQ(old, c.getCompareOperand()), 1);
    replace(c, r);
  }

  // cvt.f32.f16 / cvt.f32.bf16: exact.
  void rewrite_fpext(llvm::FPExtInst& e) {
    llvm::Type* from = e.getSrcTy();
    if (from->isFloatTy() && e.getDestTy()->isDoubleTy()) return; // exact on both (libdevice uses it)
    if (!e.getDestTy()->isFloatTy() || !(from->isHalfTy() || from->isBFloatTy()))
      internal_fail("nvptx on CPU: fpext from " + type_name(from) + " to " + type_name(e.getDestTy()) + " has no mapping");
    Builder b(&e);
    llvm::Value* bits = b.CreateBitCast(e.getOperand(0), b.getInt16Ty());
    replace(e, emu_.call(b, from->isBFloatTy() ? "tilec_emu_bf16_to_f32" : "tilec_emu_f16_to_f32", b.getFloatTy(), {bits}));
  }

  // cvt.rn.f16.f32 / cvt.rn.bf16.f32: round to nearest even, as the NVPTX back end selects
  // for LLVM's fptrunc.
  void rewrite_fptrunc(llvm::FPTruncInst& t) {
    llvm::Type* to = t.getDestTy();
    if (t.getSrcTy()->isDoubleTy() && to->isFloatTy()) return; // IEEE round to nearest on both
    if (!t.getSrcTy()->isFloatTy() || !(to->isHalfTy() || to->isBFloatTy()))
      internal_fail("nvptx on CPU: fptrunc from " + type_name(t.getSrcTy()) + " to " + type_name(to) +
                    " has no mapping");
    Builder b(&t);
    llvm::Value* bits =
        emu_.call(b, to->isBFloatTy() ? "tilec_emu_f32_to_bf16" : "tilec_emu_f32_to_f16", b.getInt16Ty(), {t.getOperand(0)});
    replace(t, b.CreateBitCast(bits, to));
  }

  void rewrite_intrinsic(llvm::IntrinsicInst& ii) {
    Builder b(&ii);
    auto arg = [&](unsigned k) { return ii.getArgOperand(k); };
    switch (ii.getIntrinsicID()) {
    case llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x:
      return replace(ii, emu_.call(b, "tilec_emu_thread_id", b.getInt32Ty(), {}));
    case llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x:
    case llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y:
    case llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_z: {
      unsigned axis = ii.getIntrinsicID() - llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x;
      return replace(ii, emu_.call(b, "tilec_emu_block_id", b.getInt32Ty(), {b.getInt32(axis)}));
    }
    case llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x:
    case llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y:
    case llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_z: {
      unsigned axis = ii.getIntrinsicID() - llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x;
      return replace(ii, emu_.call(b, "tilec_emu_num_blocks", b.getInt32Ty(), {b.getInt32(axis)}));
    }
    case llvm::Intrinsic::nvvm_mulhi_us:
    case llvm::Intrinsic::nvvm_mulhi_ui:
    case llvm::Intrinsic::nvvm_mulhi_ull:
      return replace(ii, umulhi_ir(b, arg(0), arg(1)));
    case llvm::Intrinsic::nvvm_barrier0:
      emu_.call(b, "tilec_emu_barrier", b.getVoidTy(), {b.getInt32(next_barrier_++)}, true);
      ii.eraseFromParent();
      return;
    case llvm::Intrinsic::nvvm_barrier_sync_cnt:
      emu_.call(b, "tilec_emu_barrier_among", b.getVoidTy(), {b.getInt32(next_barrier_++), arg(1)}, true);
      ii.eraseFromParent();
      return;
    case llvm::Intrinsic::nvvm_shfl_sync_idx_i32:
    case llvm::Intrinsic::nvvm_shfl_sync_bfly_i32: {
      unsigned mode = ii.getIntrinsicID() == llvm::Intrinsic::nvvm_shfl_sync_idx_i32 ? 0 : 1;
      return replace(ii, emu_.call(b, "tilec_emu_shfl_sync", b.getInt32Ty(),
                              {b.getInt32(mode), arg(0), arg(1), arg(2), arg(3)}, true));
    }
    case llvm::Intrinsic::nvvm_shfl_sync_bfly_f32: // the same on the float's bits
      return replace(ii, b.CreateBitCast(emu_.call(b, "tilec_emu_shfl_sync", b.getInt32Ty(),
                                                   {b.getInt32(1), arg(0), b.CreateBitCast(arg(1), b.getInt32Ty()),
                                                    arg(2), arg(3)},
                                                   true),
                                         b.getFloatTy()));
    case llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_f32_f32:
    case llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_bf16: {
      unsigned dtype = ii.getIntrinsicID() == llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_bf16 ? 3 : 2;
      std::array<llvm::Value*, 4> d = emu_mma(b, emu_.ctx(), dtype, {arg(0), arg(1), arg(2), arg(3)}, {arg(4), arg(5)},
                                              {arg(6), arg(7), arg(8), arg(9)}, emu_.mma());
      llvm::Value* r = llvm::PoisonValue::get(ii.getType());
      for (unsigned i = 0; i < 4; ++i) r = b.CreateInsertValue(r, d[i], i);
      return replace(ii, r);
    }
    case llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x1_b16:
    case llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x2_b16:
    case llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_b16:
    case llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x1_trans_b16:
    case llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x2_trans_b16:
    case llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_trans_b16: {
      auto id = ii.getIntrinsicID();
      using I = llvm::Intrinsic::ID;
      auto is = [&](std::initializer_list<I> ids) { return std::find(ids.begin(), ids.end(), id) != ids.end(); };
      int count = is({llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x1_b16,
                      llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x1_trans_b16})   ? 1
                  : is({llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x2_b16,
                        llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x2_trans_b16}) ? 2
                                                                                        : 4;
      bool trans = is({llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x1_trans_b16,
                       llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x2_trans_b16,
                       llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_trans_b16});
      std::vector<llvm::Value*> regs =
          emu_ldmatrix(b, emu_.ctx(), arg(0), count, trans, emu_.site(b, site_of(ii, "nvptx ldmatrix")), emu_.mma());
      if (!ii.getType()->isStructTy()) return replace(ii, regs[0]);
      llvm::Value* r = llvm::PoisonValue::get(ii.getType());
      for (int i = 0; i < count; ++i) r = b.CreateInsertValue(r, regs[size_t(i)], unsigned(i));
      return replace(ii, r);
    }
    case llvm::Intrinsic::nvvm_cp_async_cg_shared_global_16_s:
      emu_.call(b, "tilec_emu_cp_async", b.getVoidTy(),
           {flat(b, arg(0)), flat(b, arg(1)), arg(2), emu_.site(b, site_of(ii, "nvptx cp.async"))});
      ii.eraseFromParent();
      return;
    case llvm::Intrinsic::nvvm_cp_async_commit_group:
      emu_.call(b, "tilec_emu_cp_async_commit", b.getVoidTy(), {});
      ii.eraseFromParent();
      return;
    case llvm::Intrinsic::nvvm_cp_async_wait_group:
      emu_.call(b, "tilec_emu_cp_async_wait", b.getVoidTy(), {arg(0)});
      ii.eraseFromParent();
      return;
    case llvm::Intrinsic::nvvm_ex2_approx_f:
    case llvm::Intrinsic::nvvm_ex2_approx_ftz_f: // libdevice's erff (the host's exp2, not the GPU's bits)
      return replace(ii, b.CreateUnaryIntrinsic(llvm::Intrinsic::exp2, arg(0)));
    // libdevice's arithmetic, each correctly rounded as PTX defines it, so exact here. The
    // .ftz forms sit on branches __nvvm_reflect("__CUDA_FTZ") = 0 never takes.
    case llvm::Intrinsic::nvvm_fma_rn_f:
    case llvm::Intrinsic::nvvm_fma_rn_ftz_f:
      return replace(ii, b.CreateIntrinsic(llvm::Intrinsic::fma, {arg(0)->getType()}, {arg(0), arg(1), arg(2)}));
    case llvm::Intrinsic::nvvm_mul_rn_f:
    case llvm::Intrinsic::nvvm_mul_rn_ftz_f: return replace(ii, b.CreateFMul(arg(0), arg(1)));
    case llvm::Intrinsic::nvvm_add_rn_f:
    case llvm::Intrinsic::nvvm_add_rn_ftz_f: return replace(ii, b.CreateFAdd(arg(0), arg(1)));
    case llvm::Intrinsic::nvvm_fabs_f:
    case llvm::Intrinsic::nvvm_fabs_ftz_f: return replace(ii, b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, arg(0)));
    case llvm::Intrinsic::nvvm_floor_f:
    case llvm::Intrinsic::nvvm_floor_ftz_f: return replace(ii, b.CreateUnaryIntrinsic(llvm::Intrinsic::floor, arg(0)));
    case llvm::Intrinsic::nvvm_trunc_f:
    case llvm::Intrinsic::nvvm_trunc_ftz_f: return replace(ii, b.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, arg(0)));
    case llvm::Intrinsic::nvvm_round_f: // cvt.rni: to nearest, ties to even
    case llvm::Intrinsic::nvvm_round_ftz_f:
      return replace(ii, b.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, arg(0)));
    case llvm::Intrinsic::nvvm_f2i_rn: // cvt.rni.s32.f32: saturating, NaN gives 0
    case llvm::Intrinsic::nvvm_f2i_rn_ftz:
      return replace(ii, b.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {b.getInt32Ty(), arg(0)->getType()},
                                           {b.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, arg(0))}));
    case llvm::Intrinsic::nvvm_ff2bf16x2_rn: // cvt.rn.bf16x2.f32 d, hi, lo
    case llvm::Intrinsic::nvvm_ff2f16x2_rn: {
      const bool bf = ii.getIntrinsicID() == llvm::Intrinsic::nvvm_ff2bf16x2_rn;
      llvm::Type* ht = bf ? b.getBFloatTy() : b.getHalfTy();
      auto round = [&](llvm::Value* x) {
        return b.CreateBitCast(emu_.call(b, bf ? "tilec_emu_f32_to_bf16" : "tilec_emu_f32_to_f16", b.getInt16Ty(), {x}), ht);
      };
      llvm::Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(ht, 2));
      v = b.CreateInsertElement(v, round(arg(1)), uint64_t(0));
      return replace(ii, b.CreateInsertElement(v, round(arg(0)), uint64_t(1)));
    }
    case llvm::Intrinsic::nvvm_lg2_approx_f:
      return replace(ii, b.CreateUnaryIntrinsic(llvm::Intrinsic::log2, arg(0)));
    case llvm::Intrinsic::nvvm_rsqrt_approx_f:
      return replace(ii, b.CreateFDiv(llvm::ConstantFP::get(arg(0)->getType(), 1.0),
                                      b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, arg(0))));
    default:
      if (ii.getCalledFunction()->getName().starts_with("llvm.nvvm."))
        internal_fail("nvptx on CPU: " + ii.getCalledFunction()->getName().str() +
                      " has no emulator mapping (codegen/nvptx_on_cpu.cpp)");
    }
  }

  // The x86 back end keeps bf16 values in f32 registers and rounds them back with a call to
  // __truncsfbf2 (exact: the values came from bf16), which libgcc before GCC 13 lacks. The
  // module brings its own, hidden, by the project's one converter.
  void define_bf16_truncation() {
    if (m_.getFunction("__truncsfbf2")) return;
    auto* fty = llvm::FunctionType::get(llvm::Type::getBFloatTy(c_), {llvm::Type::getFloatTy(c_)}, false);
    llvm::Function* f = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, "__truncsfbf2", m_);
    f->setVisibility(llvm::GlobalValue::HiddenVisibility);
    Builder b(llvm::BasicBlock::Create(c_, "entry", f));
    auto conv = m_.getOrInsertFunction("tilec_emu_f32_to_bf16", b.getInt16Ty(), b.getPtrTy(), b.getFloatTy());
    llvm::Value* bits = b.CreateCall(conv, {llvm::ConstantPointerNull::get(b.getPtrTy()), f->getArg(0)});
    b.CreateRet(b.CreateBitCast(bits, b.getBFloatTy()));
  }

  [[noreturn]] static void unmapped_space(unsigned as, const llvm::Instruction& i) {
    std::string s;
    llvm::raw_string_ostream os(s);
    i.print(os);
    internal_fail(fmt::format("nvptx on CPU: address space {} has no mapping: {}", as, s));
  }

  static std::string type_name(llvm::Type* t) {
    std::string s;
    llvm::raw_string_ostream os(s);
    t->print(os);
    return s;
  }

  void replace(llvm::Instruction& old, llvm::Value* v) {
    old.replaceAllUsesWith(v);
    old.eraseFromParent();
  }

  // Address spaces 1 and 3 are flat host pointers on the CPU.
  llvm::Value* flat(Builder& b, llvm::Value* p) { return b.CreateAddrSpaceCast(p, b.getPtrTy()); }
  llvm::Value* shared_base_ = nullptr; // the block's region, from the emulator

  llvm::Module& m_;
  llvm::LLVMContext& c_;
  llvm::Function* fn_ = nullptr;
  std::uint32_t next_barrier_ = 0;
  EmuCalls emu_;
};

} // namespace

void retarget_nvptx_for_emulator(llvm::Module& m) { Retarget(m).run(); }

} // namespace tilec::codegen
