// The pipeline as a straight list: lower -> verify -> O3 -> PTX / object ->
// ptxas / cc. Each stage is also callable alone (compile.h).
#include "codegen/compile.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/AsmParser/Parser.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/Instructions.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Transforms/Utils/Cloning.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Triple.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "abi/limits.h"
#include "codegen/llvm_target.h"
#include "codegen/lower.h"
#include "codegen/tma.h"
#include "ir/param_access.h"
#include "ir/passes.h"
#include "codegen/target.h"

namespace tilec::codegen {

namespace {

namespace fs = std::filesystem;

CompileOptions without_large_buffers(CompileOptions o) {
  o.large_buffers.clear();
  return o;
}

void check_options(const CompileOptions& o) {
  if (std::string why = num_warps_error(o.num_warps); !why.empty()) throw UserError(why);
  static const char* const kArchs[] = {"sm_80", "sm_86", "sm_89", "sm_90"};
  if (o.target != Target::emu && std::find(std::begin(kArchs), std::end(kArchs), o.arch) == std::end(kArchs))
    throw UserError(fmt::format("unsupported arch '{}' (expected one of {})", o.arch, fmt::join(kArchs, ", ")));
  if (std::string why = ir::Function::max_registers_error(o.max_registers); o.max_registers && !why.empty())
    throw UserError(why);
}

// tilec's pipeline for GPU code, chosen for what the lowering emits: straight-line code per tile
// op in SSA (no allocas but libdevice's), constant-trip inner loops, address arithmetic full of
// identities (x*1, x>>0, select c,0,0) and index expressions to regroup. What O3 spends most of
// its time on here finds nothing the NVPTX backend would not (its own LoadStoreVectorizer,
// GVN, EarlyCSE, straight-line strength reduction and LSR run in codegen), and some of it
// makes the PTX worse (early-cse, loop-rotate, simplifycfg's sinking split vector loads).
//   sroa               libdevice's local arrays (after inlining) into registers
//   simplifycfg        branches libdevice's __nvvm_reflect answers made dead folded away, and
//                      instructions common to both sides of a branch hoisted above it
//   nvvm-intr-range    thread and block ids bounded by the launch's maxntid
//   instcombine        the lowering's identities folded (one iteration each time)
//   reassociate        index expressions regrouped so common parts are shared
//   licm               loop-invariant address arithmetic out of the K/V loop (before unrolling)
//   loop-unroll        the constant-trip inner loops unrolled as O3 unrolls them
//   infer-alignment    alignments the codegen's load/store vectorizer needs for v2/v4 accesses
//   instcombine        what unrolling exposed
//   simplifycfg        what the above left foldable (without sinking)
// tests/codegen/test_pipeline.cpp holds it to PTX no larger and registers no more than O3's
// on the repository's kernels.
constexpr const char* kLeanPipeline =
    "function(sroa,simplifycfg<hoist-common-insts>,nvvm-intr-range,instcombine<max-iterations=1;no-use-loop-info;no-verify-fixpoint>,reassociate,"
    "loop-mssa(licm),loop-unroll<O3>,infer-alignment,"
    "instcombine<max-iterations=1;no-use-loop-info;no-verify-fixpoint>,simplifycfg)";

void optimize(llvm::Module& m, llvm::TargetMachine& tm, bool lean) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm;
  if (lean) {
    if (llvm::Error e = pb.parsePassPipeline(mpm, kLeanPipeline))
      internal_fail("tilec's LLVM pass pipeline does not parse: " + llvm::toString(std::move(e)));
  } else {
    mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  }
  mpm.run(m, mam);
}

std::string module_text(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

void verify(const llvm::Module& m, const std::string& what) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (llvm::verifyModule(m, &os)) internal_fail(fmt::format("{}: invalid LLVM IR: {}", what, s));
}

// Pointer parameters are noalias (the launch refuses a written buffer overlapping another:
// rt::check_launch_args) and those the kernel never writes through are readonly too, so
// LLVM may keep loads from them across stores to others.
void mark_pointer_params(const ir::Function& fn, llvm::Module& m) {
  std::vector<ir::ParamAccess> access = ir::param_access(fn);
  for (llvm::Function& f : m) {
    if (f.getCallingConv() != llvm::CallingConv::PTX_Kernel) continue;
    for (llvm::Argument& a : f.args()) {
      if (!a.getType()->isPointerTy() || a.getArgNo() >= access.size()) continue;
      a.addAttr(llvm::Attribute::NoAlias);
      if (access[a.getArgNo()] == ir::ParamAccess::read) a.addAttr(llvm::Attribute::ReadOnly);
    }
  }
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Links the libdevice functions the module calls (__nv_sinf, ...) into it, internal so that
// O3 inlines them and drops the rest.
void link_libdevice(llvm::Module& m) {
  std::vector<std::string> wanted;
  for (const llvm::Function& f : m)
    if (f.isDeclaration() && f.getName().starts_with("__nv_")) wanted.push_back(f.getName().str());
  if (wanted.empty()) return;
  std::optional<std::string> path = find_libdevice();
  if (!path)
    throw UserError(fmt::format("{} on the GPU needs CUDA's libdevice (nvvm/libdevice/libdevice.10.bc next to "
                                "ptxas, or /usr/local/cuda): not found; set TILEC_LIBDEVICE to its path",
                                wanted.front().substr(5)));
  auto buf = llvm::MemoryBuffer::getFile(*path);
  if (!buf) throw UserError(fmt::format("libdevice {}: {}", *path, buf.getError().message()));
  auto lib = llvm::parseBitcodeFile((*buf)->getMemBufferRef(), m.getContext());
  if (!lib) throw UserError(fmt::format("libdevice {}: {}", *path, llvm::toString(lib.takeError())));
  (*lib)->setTargetTriple(m.getTargetTriple());
  (*lib)->setDataLayout(m.getDataLayout());
  if (llvm::Linker::linkModules(m, std::move(*lib), llvm::Linker::Flags::LinkOnlyNeeded))
    internal_fail("linking libdevice failed");
  for (llvm::Function& f : m)
    if (!f.isDeclaration() && f.getCallingConv() != llvm::CallingConv::PTX_Kernel)
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
}

// libdevice's functions, once linked, inlined into the kernel and dropped, with __nvvm_reflect
// answered as NVVMReflect answers it for tilec's modules (__CUDA_FTZ 0: no flush to zero;
// __CUDA_ARCH the arch): what O3's inliner and NVVMReflect do, for tilec's own pipeline and
// for the emulator (which has neither).
void inline_libdevice(llvm::Module& m, int arch) {
  if (llvm::Function* reflect = m.getFunction("__nvvm_reflect")) {
    std::vector<llvm::CallInst*> uses;
    for (llvm::User* u : reflect->users())
      if (auto* c = llvm::dyn_cast<llvm::CallInst>(u)) uses.push_back(c);
    for (llvm::CallInst* c : uses) {
      llvm::StringRef what;
      llvm::getConstantStringInfo(c->getArgOperand(0), what);
      int answer = what == "__CUDA_ARCH" ? arch * 10 : 0;
      c->replaceAllUsesWith(llvm::ConstantInt::get(c->getType(), answer));
      c->eraseFromParent();
    }
  }
  for (bool inlined = true; inlined;) {
    inlined = false;
    std::vector<llvm::CallInst*> calls_to_inline;
    for (llvm::Function& f : m)
      for (llvm::BasicBlock& bb : f)
        for (llvm::Instruction& i : bb)
          if (auto* c = llvm::dyn_cast<llvm::CallInst>(&i))
            if (llvm::Function* callee = c->getCalledFunction(); callee && !callee->isDeclaration())
              calls_to_inline.push_back(c);
    for (llvm::CallInst* c : calls_to_inline) {
      llvm::InlineFunctionInfo info;
      if (!llvm::InlineFunction(*c, info).isSuccess()) internal_fail("inlining libdevice failed");
      inlined = true;
    }
  }
  std::vector<llvm::Function*> dead;
  for (llvm::Function& f : m)
    if (!f.isDeclaration() && f.getCallingConv() != llvm::CallingConv::PTX_Kernel && f.use_empty()) dead.push_back(&f);
  for (llvm::Function* f : dead) f->eraseFromParent();
}

// For the nvptx lowering run on the CPU: libdevice's own code, linked in and inlined into the
// kernel, with __nvvm_reflect answered as the GPU's compile answers it (__CUDA_FTZ 0, no
// flush to zero; __CUDA_ARCH the arch), so the emulator computes sin, cos, erf and pow with
// the GPU's algorithms (its fma.rn, mul.rn, ... are then mapped exactly, nvptx_on_cpu.cpp).
// Without libdevice the calls stay, and the retargeting gives them the C library's.
void inline_libdevice_for_cpu(llvm::Module& m, int arch) {
  bool calls = false;
  for (const llvm::Function& f : m) calls = calls || (f.isDeclaration() && f.getName().starts_with("__nv_"));
  if (!calls || !find_libdevice()) return;
  link_libdevice(m);
  inline_libdevice(m, arch);
}

std::unique_ptr<llvm::Module> lower_module(const ir::Function& fn, const CompileOptions& o,
                                           llvm::LLVMContext& ctx, llvm::TargetMachine& tm,
                                           LoweringStats& stats, CompilePhases* phases = nullptr) {
  auto t0 = std::chrono::steady_clock::now();
  // Tensor descriptor ops as masked loads and stores, but for the loads TMA copies (first, so
  // large buffers widen the offsets the expansion computes).
  if (ir::Kernel prepared = prepare_descriptors(fn, o)) return lower_module(*prepared, o, ctx, tm, stats, phases);
  ir::Kernel widened; // the kernel with 64-bit offsets into the large buffers
  if (!o.large_buffers.empty()) {
    for (const std::string& name : o.large_buffers) {
      auto p = std::find_if(fn.params.begin(), fn.params.end(), [&](const ir::Value* v) { return v->name == name; });
      if (p == fn.params.end() || !(*p)->type.is_ptr())
        throw UserError(fmt::format("large buffer '{}': kernel '{}' has no pointer parameter of that name", name,
                                    fn.name));
    }
    widened = ir::clone(fn);
    ir::widen_offsets(*widened, o.large_buffers);
    return lower_module(*widened, without_large_buffers(o), ctx, tm, stats, phases);
  }
  auto m = std::make_unique<llvm::Module>(fn.name, ctx);
  m->setTargetTriple(tm.getTargetTriple().str());
  m->setDataLayout(tm.createDataLayout());
  auto hooks = o.target == Target::emu ? make_emu_hooks() : make_nvptx_hooks(std::stoi(o.arch.substr(3)));
  stats = lower_kernel(fn, o, *hooks, *m);
  if (o.target == Target::nvptx) {
    mark_pointer_params(fn, *m);
    link_libdevice(*m);
    if (!o.stock_o3) inline_libdevice(*m, std::stoi(o.arch.substr(3)));
  }
  if (o.verify_llvm) verify(*m, "kernel " + fn.name);
  if (o.target == Target::emu_nvptx) {
    inline_libdevice_for_cpu(*m, std::stoi(o.arch.substr(3)));
    // Retargeted before any optimization: passes that merge, hoist or speculate instructions
    // drop the tilec.asm and tilec.site tags the rewrite reads (running tilec's GPU pipeline
    // first lost an inline asm's tag to simplifycfg's hoisting). The CPU's O3 runs after.
    retarget_nvptx_for_emulator(*m);
    verify(*m, "kernel " + fn.name + " (nvptx lowering retargeted to the emulator)");
  }
  if (phases) phases->lower_ms = ms_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  optimize(*m, tm, o.target == Target::nvptx && !o.stock_o3);
  if (phases) phases->optimize_ms = ms_since(t1);
  return m;
}

std::unique_ptr<llvm::Module> parse_module(const std::string& text, llvm::LLVMContext& ctx) {
  llvm::SMDiagnostic diag;
  auto m = llvm::parseAssemblyString(text, diag, ctx);
  if (!m) {
    std::string s;
    llvm::raw_string_ostream os(s);
    diag.print("llvm_ir", os);
    throw UserError("cannot parse LLVM IR: " + s);
  }
  return m;
}

std::string emit_code(llvm::Module& m, llvm::TargetMachine& tm, llvm::CodeGenFileType kind) {
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  // No verifier here: the module was verified after lowering, and the passes keep it valid.
  if (tm.addPassesToEmitFile(pm, os, nullptr, kind, /*DisableVerify=*/true))
    internal_fail("target cannot emit this file type");
  pm.run(m);
  return std::string(buf.begin(), buf.end());
}

// Runs a command with stdout and stderr captured; returns the exit status.
int run_command(const std::string& cmd, std::string& output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output.append(buf, n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

// A fresh temporary directory, removed when this goes out of scope.
class TempDir {
public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tilec-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw UserError("cannot create a temporary directory in " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

private:
  fs::path path_;
};

void write_file(const fs::path& p, const char* data, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(data, static_cast<std::streamsize>(n));
  if (!f) throw UserError("cannot write " + p.string());
}

std::vector<char> read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

} // namespace

bool wgmma_enabled(const CompileOptions& o) { return o.tensor_cores && o.wgmma && o.arch == "sm_90"; }

LoweredKernel lower_to_llvm(const ir::Function& fn, const CompileOptions& opts) {
  check_options(opts);
  llvm::TargetMachine& tm = target_machine(opts);
  llvm::LLVMContext ctx;
  LoweredKernel r;
  auto m = lower_module(fn, opts, ctx, tm, r.stats);
  r.symbol = fn.name;
  r.llvm_ir = module_text(*m);
  return r;
}

std::string emit_ptx(const std::string& llvm_ir, const CompileOptions& opts) {
  check_options(opts);
  llvm::TargetMachine& tm = target_machine(opts, llvm_ir.find("wgmma.mma_async") != std::string::npos);
  llvm::LLVMContext ctx;
  auto m = parse_module(llvm_ir, ctx);
  return emit_code(*m, tm, llvm::CodeGenFileType::AssemblyFile);
}

std::vector<char> emit_object(const std::string& llvm_ir, const CompileOptions& opts) {
  check_options(opts);
  llvm::TargetMachine& tm = target_machine(opts);
  llvm::LLVMContext ctx;
  auto m = parse_module(llvm_ir, ctx);
  std::string obj = emit_code(*m, tm, llvm::CodeGenFileType::ObjectFile);
  return std::vector<char>(obj.begin(), obj.end());
}

std::optional<std::string> find_libdevice() {
  if (const char* env = std::getenv("TILEC_LIBDEVICE"); env && *env) return std::string(env);
  std::vector<fs::path> candidates;
  if (auto ptxas = find_ptxas()) candidates.push_back(fs::path(*ptxas).parent_path().parent_path());
  candidates.push_back("/usr/local/cuda");
  for (const fs::path& root : candidates)
    if (fs::path p = root / "nvvm" / "libdevice" / "libdevice.10.bc"; fs::exists(p)) return p.string();
  return std::nullopt;
}

std::optional<std::string> find_ptxas() {
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      if (dir.empty()) continue;
      fs::path p = fs::path(dir) / "ptxas";
      if (access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  if (access("/usr/local/cuda/bin/ptxas", X_OK) == 0) return std::string("/usr/local/cuda/bin/ptxas");
  return std::nullopt;
}

PtxasInfo parse_ptxas_log(const std::string& log) {
  PtxasInfo info;
  info.log = log;
  std::smatch m;
  auto grab = [&](const std::regex& re, int& out) {
    if (std::regex_search(log, m, re)) out = std::stoi(m[1].str());
  };
  grab(std::regex(R"(Used (\d+) registers)"), info.registers);
  grab(std::regex(R"((\d+) bytes spill stores)"), info.spill_stores);
  grab(std::regex(R"((\d+) bytes spill loads)"), info.spill_loads);
  grab(std::regex(R"((\d+) bytes smem)"), info.shared_bytes);
  return info;
}

PtxasResult run_ptxas(const std::string& ptx, const std::string& arch, const std::string& ptxas) {
  TempDir dir;
  fs::path in = dir.path() / "kernel.ptx", out = dir.path() / "kernel.cubin";
  write_file(in, ptx.data(), ptx.size());
  std::string log;
  int rc = run_command(fmt::format("{} -arch={} -v -o {} {}", shell_quote(ptxas), arch,
                                   shell_quote(out.string()), shell_quote(in.string())),
                       log);
  if (rc != 0) throw PtxasError(fmt::format("ptxas failed (exit {}) for {}:\n{}", rc, arch, log));
  PtxasResult r;
  r.cubin = read_file(out);
  r.info = parse_ptxas_log(log);
  return r;
}

void link_emu_library(const std::vector<char>& object, const std::string& out_path) {
  TempDir dir;
  fs::path obj = dir.path() / "kernel.o";
  write_file(obj, object.data(), object.size());
  const char* cc = std::getenv("CC");
  std::string driver = cc && *cc ? cc : "cc";
  std::string log;
  int rc = run_command(fmt::format("{} -shared -o {} {} -lm", driver, shell_quote(out_path),
                                   shell_quote(obj.string())),
                       log);
  if (rc != 0) throw UserError(fmt::format("linking the emulator library {} failed (exit {}):\n{}", out_path, rc, log));
}

CompiledKernel compile(const ir::Function& fn, const CompileOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  check_options(opts);
  llvm::TargetMachine* tm = &target_machine(opts);
  CompiledKernel r;
  // Declared before the context, which points to it until its end.
  SkipIdlePasses skip_idle(r.skipped_passes);
  llvm::LLVMContext ctx;
  auto m = lower_module(fn, opts, ctx, *tm, r.stats, &r.phases);
  r.symbol = fn.name;
  if (opts.llvm_ir_text) r.llvm_ir = module_text(*m);
  r.threads_per_block = r.stats.threads_per_block;
  auto t_codegen = std::chrono::steady_clock::now();
  r.shared_bytes = r.stats.shared_bytes;
  if (!runs_on_emulator(opts.target)) {
    if (int64_t limit = max_shared_bytes(opts.arch); limit > 0 && r.shared_bytes > limit)
      throw UserError(fmt::format("kernel '{}' needs {} bytes of shared memory per block{}; {} allows at most {}",
                                  fn.name, r.shared_bytes,
                                  r.stats.pipelined_loops
                                      ? fmt::format(" ({} stages x {} bytes of copies in flight + {} more): lower "
                                                    "num_stages or the tile sizes",
                                                    r.stats.pipeline_stages, r.stats.pipeline_stage_bytes,
                                                    r.shared_bytes - r.stats.pipeline_stages *
                                                                         r.stats.pipeline_stage_bytes)
                                      : std::string(),
                                  opts.arch, limit));
    // A kernel with warpgroup MMAs is code for sm_90a: emitted and assembled for it.
    const bool wgmma = r.stats.wgmma_dots > 0;
    if (wgmma) tm = &target_machine(opts, true);
    // Only code generation is gated: tilec's pipeline above ran every pass it lists.
    if (!opts.stock_o3 && !opts.all_codegen_passes) ctx.setOptPassGate(skip_idle);
    r.ptx = emit_code(*m, *tm, llvm::CodeGenFileType::AssemblyFile);
    r.phases.codegen_ms = ms_since(t_codegen);
    if (opts.run_ptxas)
      if (auto ptxas = find_ptxas()) {
        auto t_ptxas = std::chrono::steady_clock::now();
        PtxasResult p = run_ptxas(r.ptx, ptx_arch(opts, wgmma), *ptxas);
        r.phases.ptxas_ms = ms_since(t_ptxas);
        r.cubin = std::move(p.cubin);
        r.ptxas = std::move(p.info);
      }
  } else {
    std::string obj = emit_code(*m, *tm, llvm::CodeGenFileType::ObjectFile);
    r.object.assign(obj.begin(), obj.end());
    r.phases.codegen_ms = ms_since(t_codegen);
  }
  r.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

} // namespace tilec::codegen
