#include "codegen/llvm_target.h"

#include <fmt/format.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Target/TargetOptions.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>

#include "ir/error.h"

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
void LLVMInitializeX86TargetInfo();
void LLVMInitializeX86Target();
void LLVMInitializeX86TargetMC();
void LLVMInitializeX86AsmPrinter();
}

namespace tilec::codegen {

namespace {

std::atomic<int> target_machines_made{0};

void init_llvm_targets() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    // 32-bit shared-memory pointers (address space 3), as shared addresses are: half the
    // registers for the many shared addresses a kernel keeps, and no 64-bit arithmetic on them.
    auto& options = llvm::cl::getRegisteredOptions();
    if (auto it = options.find("nvptx-short-ptr"); it != options.end())
      static_cast<llvm::cl::opt<bool>*>(it->second)->setValue(true);
    // Most of O3's time on tilec's kernels went to alias queries from LICM's scalar promotion
    // and DSE's MemorySSA walks over hundreds of shared-memory accesses off one base, which
    // find nothing the lowering left to find: cap both (the PTX of the repository's kernels is
    // unchanged, tests/codegen pins their counts).
    if (auto it = options.find("licm-mssa-max-acc-promotion"); it != options.end())
      static_cast<llvm::cl::opt<unsigned>*>(it->second)->setValue(0);
    if (auto it = options.find("dse-memoryssa-walklimit"); it != options.end())
      static_cast<llvm::cl::opt<unsigned>*>(it->second)->setValue(10);
  });
}

// Optional passes of LLVM's NVPTX code generation that skipping costs tilec's kernels nothing
// that matters:
//   SROA, Infer address spaces   the pipeline's SROA left no allocas; address spaces are explicit
//   Canonicalize Freeze ...      no freeze instructions
//   Constant Hoisting            no constants expensive to materialize on the GPU
//   GPU Load and Store Vectorizer  the lowering emits its vector accesses itself
//   Early CSE, the second        the first and the third (after LSR) find all it would
// Without these six the PTX of every kernel the tests and benchmarks compile is byte for byte
// the same (measured on the decode kernel with callgrind: together a twentieth of code
// generation's instructions).
//   Straight line strength reduction, Nary reassociation
//                                rewrite address arithmetic the lowering and tilec's pipeline
//                                have already shared (reassociate, LICM); they find a few
//                                instructions before the main loops (the decode kernel's PTX:
//                                1,257 instructions with them, 1,262 without) and nothing in
//                                any loop, for a tenth of the whole compile's instructions.
// tests/codegen/test_compile_speed.cpp holds every kernel's loops to the same instructions and
// the rest to within 1% (CompileOptions::all_codegen_passes runs them all). Passes LLVM requires
// are never asked, so they always run.
struct IdlePass {
  std::string_view name;
  int occurrence; // which time the pass is asked for one function (1 = the first); 0: every time
};
constexpr std::array<IdlePass, 8> kIdleCodegenPasses = {{
    {"Straight line strength reduction", 0},
    {"Nary reassociation", 0},
    {"SROA", 0},
    {"Infer address spaces", 0},
    {"Canonicalize Freeze Instructions in Loops", 0},
    {"Constant Hoisting", 0},
    {"GPU Load and Store Vectorizer", 0},
    {"Early CSE", 2},
}};

} // namespace

std::string ptx_arch(const CompileOptions& o, bool uses_wgmma) { return uses_wgmma ? o.arch + "a" : o.arch; }

llvm::TargetMachine& target_machine(const CompileOptions& o, bool uses_wgmma) {
  init_llvm_targets();
  bool gpu = o.target == Target::nvptx;
  std::string triple = gpu ? "nvptx64-nvidia-cuda" : "x86_64-unknown-linux-gnu";
  std::string cpu = gpu ? ptx_arch(o, uses_wgmma) : "x86-64";
  // After tilec's pipeline the NVPTX backend gives the same PTX at its default level as at
  // Aggressive, which only swaps its EarlyCSE for GVN (a fifth of code generation's time).
  auto level = gpu && !o.stock_o3 ? llvm::CodeGenOptLevel::Default : llvm::CodeGenOptLevel::Aggressive;
  thread_local std::map<std::string, std::unique_ptr<llvm::TargetMachine>> machines;
  std::unique_ptr<llvm::TargetMachine>& tm = machines[fmt::format("{} {} {}", triple, cpu, int(level))];
  if (tm) return *tm;
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!t) internal_fail("LLVM target " + triple + " is missing: " + err);
  llvm::TargetOptions to;
  tm.reset(t->createTargetMachine(triple, cpu, gpu ? "+ptx80" : "", to, llvm::Reloc::PIC_, std::nullopt, level));
  if (!tm) internal_fail("cannot create a target machine for " + triple);
  ++target_machines_made;
  return *tm;
}


bool SkipIdlePasses::shouldRunPass(const llvm::StringRef pass, llvm::StringRef ir) {
  std::string_view name(pass.data(), pass.size());
  auto idle = std::find_if(kIdleCodegenPasses.begin(), kIdleCodegenPasses.end(),
                           [&](const IdlePass& p) { return p.name == name; });
  if (idle == kIdleCodegenPasses.end()) return true;
  // `ir` names the function the pass is asked for ("function (paged_attention)").
  const int asked = ++asked_[pass.str() + " " + ir.str()];
  if (idle->occurrence && idle->occurrence != asked) return true;
  skipped_.emplace_back(name);
  return false;
}

int target_machines_created() { return target_machines_made.load(); }

} // namespace tilec::codegen
