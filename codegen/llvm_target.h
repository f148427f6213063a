#pragma once
// The LLVM side of compile.cpp's setup: the targets registered once, a target machine per thread
// and target, and the pass gate that skips NVPTX code generation passes idle on tilec's
// modules. Internal to codegen/ (it includes LLVM headers; compile.h does not).
#include <llvm/IR/OptBisect.h>
#include <llvm/Target/TargetMachine.h>

#include <map>
#include <string>
#include <vector>

#include "codegen/compile.h"

namespace tilec::codegen {

// The PTX target a kernel's code needs: sm_90a (the arch-specific features wgmma is one of)
// when it runs warpgroup MMAs, else the arch itself.
std::string ptx_arch(const CompileOptions& o, bool uses_wgmma);

// The target machine for `o`'s target: one per thread and configuration, made on first use
// and kept, since a process (the tuner, an engine's warm-up) compiles one kernel after another
// for the same few targets; a thread of its own each, as a TargetMachine is used by one
// compile at a time. Compiles leave it as they found it: the same module gives the same code
// on a fresh machine and on a used one (tests/codegen/test_compile_speed.cpp).
llvm::TargetMachine& target_machine(const CompileOptions& o, bool uses_wgmma = false);

// LLVM asks the context's pass gate before each optional pass (what -opt-bisect-limit uses);
// this one says no to the NVPTX code generation passes that find nothing to do in tilec's
// modules (kIdleCodegenPasses in llvm_target.cpp) and records each it skipped.
class SkipIdlePasses final : public llvm::OptPassGate {
public:
  explicit SkipIdlePasses(std::vector<std::string>& skipped) : skipped_(skipped) {}
  bool isEnabled() const override { return true; }
  bool shouldRunPass(const llvm::StringRef pass, llvm::StringRef ir) override;

private:
  std::vector<std::string>& skipped_;
  std::map<std::string, int> asked_; // times each idle pass was asked, per function
};

} // namespace tilec::codegen
