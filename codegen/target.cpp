#include "codegen/target.h"

namespace tilec::codegen {

llvm::Value* guarded(llvm::IRBuilder<>& b, llvm::Value* pred,
                     const std::function<llvm::Value*()>& body) {
  if (!pred) return body();
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(pred); c && c->isOne()) return body();
  llvm::Function* f = b.GetInsertBlock()->getParent();
  llvm::LLVMContext& ctx = f->getContext();
  llvm::BasicBlock* from = b.GetInsertBlock();
  llvm::BasicBlock* then_bb = llvm::BasicBlock::Create(ctx, "guard", f);
  llvm::BasicBlock* cont = llvm::BasicBlock::Create(ctx, "guard.end", f);
  b.CreateCondBr(pred, then_bb, cont);
  b.SetInsertPoint(then_bb);
  llvm::Value* v = body();
  llvm::BasicBlock* then_end = b.GetInsertBlock();
  b.CreateBr(cont);
  b.SetInsertPoint(cont);
  if (!v) return nullptr;
  llvm::PHINode* phi = b.CreatePHI(v->getType(), 2);
  phi->addIncoming(v, then_end);
  phi->addIncoming(llvm::Constant::getNullValue(v->getType()), from);
  return phi;
}

} // namespace tilec::codegen
