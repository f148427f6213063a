// Warp specialization of a TMA pipeline (PipelinePlan::Pipeline::warp_specialized): one
// producer warpgroup after the kernel's warps issues every copy of the loop, the kernel's
// warps (the consumers) only wait for them and compute, and two mbarriers per stage hand the
// buffers back and forth (docs/ARCHITECTURE.md, "Warp specialization").
#include "codegen/lowering.h"

namespace tilec::codegen::detail {

namespace {
// What the producer warpgroup keeps: its copy loop needs a few dozen registers.
constexpr int kProducerRegisters = 40;
// The most a consumer asks for (CUTLASS's and FlashAttention-3's choice with two consumer
// warpgroups is 232 or 240).
constexpr int kConsumerRegisters = 240;
constexpr int kRegisterFile = 65536;
int floor8(int v) { return v / 8 * 8; }
} // namespace

int Lowering::block_threads() const { return 32 * opts_.num_warps + (pipes_.warp_specialized() ? 128 : 0); }

// The register file shared out: every warp starts at the launch ceiling (the file divided by
// the block's threads, at most what a consumer gets); the producer warpgroup gives registers
// back, the consumers take as many as then fit (a multiple of 8, at most kConsumerRegisters).
Lowering::RegisterSplit Lowering::register_split() const {
  RegisterSplit r;
  r.producer = kProducerRegisters;
  r.consumer = std::min(kConsumerRegisters, floor8((kRegisterFile - 128 * kProducerRegisters) / (32 * opts_.num_warps)));
  r.launch = std::min(r.consumer, floor8(kRegisterFile / block_threads()));
  return r;
}

// Threads 32 W and up (the producer warpgroup) lower their register ceiling, and the first of
// them runs the loop's trips: for iteration i into stage i mod S, after the first S it waits
// until the consumers have emptied the stage (its empty mbarrier's next phase), then arms the
// full mbarrier and issues the copies; then they all return. The consumers raise theirs and
// go on at the insertion point.
void Lowering::emit_producer(const Pipeline& pl, llvm::Value* lb, llvm::Value* ub, llvm::Value* step) {
  const uint32_t consumers = uint32_t(32 * opts_.num_warps);
  const RegisterSplit regs = register_split();
  const int64_t S = pl.stages;
  llvm::BasicBlock* producer = llvm::BasicBlock::Create(c_, "ws.producer", kernel_);
  llvm::BasicBlock* issuer = llvm::BasicBlock::Create(c_, "ws.issuer", kernel_);
  llvm::BasicBlock* header = llvm::BasicBlock::Create(c_, "ws.header", kernel_);
  llvm::BasicBlock* body = llvm::BasicBlock::Create(c_, "ws.body", kernel_);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(c_, "ws.done", kernel_);
  llvm::BasicBlock* consumer = llvm::BasicBlock::Create(c_, "ws.consumer", kernel_);
  b_.CreateCondBr(b_.CreateICmpUGE(tid_, b_.getInt32(consumers)), producer, consumer);

  b_.SetInsertPoint(producer);
  hooks_.setmaxnreg(b_, false, regs.producer, regs.launch, site("producer warpgroup's registers"));
  b_.CreateCondBr(b_.CreateICmpEQ(tid_, b_.getInt32(consumers)), issuer, done);
  b_.SetInsertPoint(issuer);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* iv = b_.CreatePHI(lb->getType(), 2, "ws.iv");
  llvm::PHINode* stage = b_.CreatePHI(b_.getInt32Ty(), 2, "ws.stage");
  iv->addIncoming(lb, issuer);
  stage->addIncoming(b_.getInt32(0), issuer);
  b_.CreateCondBr(b_.CreateICmpSLT(iv, ub), body, done);
  b_.SetInsertPoint(body);
  // The bookkeeping is the consumers': what the producer emits touches no scratch.
  const SyncState sync = sync_state();
  const uint32_t saved_thread = tma_thread_;
  tma_thread_ = consumers;
  llvm::Value* refill = b_.CreateICmpSGE(iv, b_.CreateAdd(lb, b_.CreateMul(step, llvm::ConstantInt::get(lb->getType(), uint64_t(S)))));
  guarded(b_, refill, [&]() -> llvm::Value* {
    wait_tma(pl.empty_mbarriers, stage, "stage emptied, waited for by the producer");
    return nullptr;
  });
  issue_ahead(pl, iv, stage, true);
  tma_thread_ = saved_thread;
  set_sync_state(sync);
  llvm::Value* s1 = b_.CreateAdd(stage, b_.getInt32(1));
  iv->addIncoming(b_.CreateAdd(iv, step), b_.GetInsertBlock());
  stage->addIncoming(b_.CreateSelect(b_.CreateICmpEQ(s1, b_.getInt32(uint32_t(S))), b_.getInt32(0), s1),
                     b_.GetInsertBlock());
  b_.CreateBr(header);
  b_.SetInsertPoint(done);
  b_.CreateRetVoid();

  b_.SetInsertPoint(consumer);
  hooks_.setmaxnreg(b_, true, regs.consumer, regs.launch, site("consumer warpgroups' registers"));
  consumers_only_ = true;
}

// Every consumer thread arrives on the empty mbarrier of `stage` (the buffer the group the
// trip's wait retired read), except on the first trip, which retired none.
void Lowering::release_stage(const Pipeline& pl, llvm::Value* iv, llvm::Value* lb, llvm::Value* stage) {
  guarded(b_, b_.CreateICmpNE(iv, lb), [&]() -> llvm::Value* {
    hooks_.mbarrier_arrive(b_, mbarrier(pl.empty_mbarriers, stage), site("stage emptied (its wgmma retired)"));
    return nullptr;
  });
}

} // namespace tilec::codegen::detail
