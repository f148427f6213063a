#pragma once
// The SIMT lowering of one tile IR kernel into an LLVM module (internal to
// codegen/; includes LLVM headers).
#include <llvm/IR/Module.h>

#include <memory>

#include "codegen/compile.h"
#include "codegen/target.h"

namespace tilec::codegen {

struct LoweredModule {
  std::unique_ptr<llvm::Module> module;
  std::string symbol;
  LoweringStats stats;
};

// `m` must already carry the target's triple and data layout.
LoweringStats lower_kernel(const ir::Function& fn, const CompileOptions& opts, TargetHooks& hooks,
                           llvm::Module& m);

} // namespace tilec::codegen
