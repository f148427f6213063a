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

llvm::Value* call_float_function(llvm::IRBuilder<>& b, const std::string& name, const std::vector<llvm::Value*>& args) {
  llvm::Module& m = *b.GetInsertBlock()->getModule();
  std::vector<llvm::Type*> types(args.size(), b.getFloatTy());
  auto f = m.getOrInsertFunction(name, llvm::FunctionType::get(b.getFloatTy(), types, false));
  auto* fn = llvm::cast<llvm::Function>(f.getCallee());
  fn->setDoesNotAccessMemory();
  fn->setDoesNotThrow();
  fn->addFnAttr(llvm::Attribute::WillReturn);
  return b.CreateCall(f, args);
}

llvm::Value* umulhi_ir(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) {
  unsigned bits = x->getType()->getIntegerBitWidth();
  llvm::Type* wide = b.getIntNTy(2 * bits);
  llvm::Value* p = b.CreateMul(b.CreateZExt(x, wide), b.CreateZExt(y, wide));
  return b.CreateTrunc(b.CreateLShr(p, bits), x->getType());
}

llvm::Value* TargetHooks::umulhi(Builder& b, llvm::Value* x, llvm::Value* y) { return umulhi_ir(b, x, y); }

llvm::Value* EmuCalls::call(llvm::IRBuilder<>& b, const char* name, llvm::Type* ret, std::vector<llvm::Value*> args,
                            bool convergent) {
  std::vector<llvm::Type*> types{b.getPtrTy()};
  for (llvm::Value* a : args) types.push_back(a->getType());
  auto f = fn_->getParent()->getOrInsertFunction(name, llvm::FunctionType::get(ret, types, false));
  if (convergent) llvm::cast<llvm::Function>(f.getCallee())->addFnAttr(llvm::Attribute::Convergent);
  args.insert(args.begin(), ctx());
  llvm::CallInst* c = b.CreateCall(f, args);
  if (convergent) c->addFnAttr(llvm::Attribute::Convergent);
  return c;
}

llvm::Value* EmuCalls::site(llvm::IRBuilder<>& b, const std::string& s) {
  auto it = sites_.find(s);
  if (it == sites_.end()) it = sites_.emplace(s, b.CreateGlobalString(s, "tilec.site")).first;
  return it->second;
}

llvm::Value* EmuCalls::scratch(llvm::Type* ty) {
  auto it = scratch_.find(ty);
  if (it != scratch_.end()) return it->second;
  llvm::IRBuilder<> eb(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  llvm::AllocaInst* a = eb.CreateAlloca(ty);
  a->setAlignment(llvm::Align(16));
  return scratch_[ty] = a;
}

unsigned EmuCalls::bytes(llvm::Type* ty) const {
  return static_cast<unsigned>(fn_->getParent()->getDataLayout().getTypeStoreSize(ty));
}

} // namespace tilec::codegen
