#pragma once
// Tile IR -> LLVM IR -> PTX -> cubin (or, for the emulator, a host shared
// library). Each stage is a function so `tilec ir --stage` can print any of
// them; compile() runs them all. This header includes no LLVM header.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "abi/manifest.h"
#include "ir/error.h"
#include "ir/ir.h"

namespace tilec::codegen {

// nvptx: PTX and a cubin for the GPU. emu: a host library for the CPU emulator, lowered
// with the emulator's hooks. emu_nvptx: also a host library for the emulator, but lowered
// with the nvptx hooks and rewritten instruction by instruction (nvptx_on_cpu.cpp), so the
// GPU's own target code runs, and is checked, without a GPU.
enum class Target { nvptx, emu, emu_nvptx };
inline bool runs_on_emulator(Target t) { return t != Target::nvptx; }

struct CompileOptions {
  std::string arch = "sm_90"; // sm_80 or sm_90 (nvptx)
  int num_warps = 4;
  Target target = Target::nvptx;
  bool run_ptxas = true; // when ptxas is found
  // dot with f16 or bf16 operands (both the same) on the tensor cores (mma.sync.m16n8k16,
  // sm_80 and later; the emulator executes it with the same fragment ownership). Off: every
  // dot runs on CUDA cores, as dots of other dtypes always do.
  bool tensor_cores = true;
  // On sm_90, a tensor-core dot that fits a warpgroup (wgmma_fits in codegen/layout.h, both
  // operands read along K) runs as Hopper's warpgroup MMA, wgmma.mma_async, from swizzled
  // shared memory, and the module targets sm_90a; the emulator runs it with the same
  // fragment ownership. Off (`tilec compile --no-wgmma`): mma.sync, as on sm_80.
  bool wgmma = true;
  // On sm_90 with wgmma, a tensor descriptor load (dsl::TensorDesc) feeding a warpgroup MMA's
  // operand is a TMA copy (cp.async.bulk.tensor on an mbarrier; codegen/tma.h says when); off
  // (`tilec compile --no-tma`): the masked load it describes, copied by cp.async.
  bool tma = true;
  // device_assert ops: checked (a failed one stops the launch with its message: __assertfail
  // on the GPU, an error naming block and thread in the emulator), or compiled out.
  bool device_asserts = true;
  // LLVM's stock O3 pipeline instead of tilec's own short one (kLeanPipeline in compile.cpp),
  // to compare the two (`tilec compile --stock-o3`). GPU code only: the emulator's is O3.
  bool stock_o3 = false;
  // Run every optional pass of LLVM's NVPTX code generation, also those compile() skips because
  // they find nothing to do in tilec's modules (kIdleCodegenPasses in compile.cpp), to compare:
  // the PTX is the same either way (tests/codegen/test_compile_speed.cpp).
  bool all_codegen_passes = false;
  // Keep the optimized LLVM IR as text in CompiledKernel::llvm_ir. Printing it costs compile()
  // about a tenth of its time on paged attention; the tools, which never read it, turn it off
  // (backends::compile_options).
  bool llvm_ir_text = true;
  // Check the lowered module with LLVM's verifier, so that a lowering bug stops the compile
  // with an internal error saying what is wrong instead of whatever LLVM does with bad IR.
  // On for tests and library callers; the tools turn it off (backends::compile_options).
  bool verify_llvm = true;
  // A ceiling on registers per thread for GPU code (24 to 255, no more than one block can have;
  // `tilec compile --max-registers`), in place of the kernel's own asks (min_blocks_per_sm and
  // max_registers). 0: the kernel's.
  int max_registers = 0;
  // Integer parameters, by name, that the launch guarantees a power of two divides (16: the
  // specialization launchers make, as Triton's does, for arguments that are multiples of
  // 16): index arithmetic from them is known aligned, so a runtime row stride gives vector
  // loads. A module compiled with it records it (Manifest::int_arg_divisibility) and its
  // launch checks the arguments.
  std::map<std::string, int64_t> int_arg_divisibility;
  // Integer parameters, by name, that the launch passes with exactly this value (1: the
  // other specialization Triton's launcher makes): compiled in as constants, so a stride of 1
  // makes its dim contiguous. Recorded in the manifest's [fixed] table and checked at launch.
  std::map<std::string, int64_t> int_arg_values;
  // Pointer parameters, by name, whose buffers may hold more than 2^31 elements: offsets into
  // them are computed in 64 bits (ir::widen_offsets), all others in the kernel's own integer
  // types. Launchers set it from the buffers they pass (templates::large_buffers); a module
  // records it (offsets = 64 on the parameter) and its launch refuses a larger buffer for
  // any other pointer.
  std::set<std::string> large_buffers;
};

// Whether `o` lets tensor-core dots run as warpgroup MMAs (CompileOptions::wgmma on sm_90,
// for the GPU and the emulator alike).
bool wgmma_enabled(const CompileOptions& o);

// Figures from `ptxas -v`.
struct PtxasInfo {
  int registers = 0;
  int spill_stores = 0; // bytes
  int spill_loads = 0;  // bytes
  int shared_bytes = 0; // static shared memory
  std::string log;
};

// What the lowering did, for tests that pin the cost of a kernel.
struct LoweringStats {
  int conversions = 0;      // layout conversions through shared memory
  int barriers = 0;         // barriers emitted (before LLVM's optimizations)
  int shared_bytes = 0;     // dynamic shared memory the kernel needs
  int threads_per_block = 0;
  int staged_loops = 0;         // for loops with num_stages > 1
  int pipelined_loops = 0;      // those whose copies are issued ahead
  int pipeline_stages = 0;      // the most stages of one of them
  int pipeline_stage_bytes = 0; // the most shared memory one stage of one of them takes
  int pipeline_late_bytes = 0;  // and its single buffer for late slots (PipelinePlan::Pipeline::late)
  int wgmma_dots = 0;           // dots lowered to warpgroup MMAs (CompileOptions::wgmma)
  int wgmma_register_a = 0;     // of them, with A from registers (a wgmma accumulator's layout)
  int tma_loads = 0;            // descriptor loads copied by TMA (CompileOptions::tma)
  int tma_stores = 0;           // descriptor stores written by TMA
  // The tensor maps the kernel takes after its own parameters, which its launches encode
  // (the manifest's [[tensor_maps]]).
  std::vector<rt::ModuleTensorMap> tensor_maps;
  // Shared-memory loads and stores the lowering emits (per thread; cp.async and ldmatrix not
  // counted), those of them that are vectors, and the bytes they move.
  int shared_accesses = 0;
  int shared_vector_accesses = 0;
  int shared_access_bytes = 0;
};

struct LoweredKernel {
  std::string symbol;
  std::string llvm_ir; // optimized at O3
  LoweringStats stats;
};

// Where a compile's time went, in milliseconds.
struct CompilePhases {
  double lower_ms = 0;    // tile IR -> LLVM IR (layout plan, SIMT lowering, verification)
  double optimize_ms = 0; // LLVM's O3 pipeline
  double codegen_ms = 0;  // LLVM IR -> PTX (NVPTX) or an x86-64 object
  double ptxas_ms = 0;    // PTX -> cubin
};

struct CompiledKernel {
  std::string symbol;
  std::string llvm_ir;             // unless CompileOptions::llvm_ir_text is off
  std::string ptx;                 // nvptx
  std::vector<char> cubin;         // nvptx, when ptxas ran
  std::optional<PtxasInfo> ptxas;  // nvptx, when ptxas ran
  std::vector<char> object;        // emu: the x86-64 object file
  int threads_per_block = 0;
  int shared_bytes = 0; // dynamic shared memory to launch with
  LoweringStats stats;
  double compile_ms = 0;
  CompilePhases phases;
  // Optional NVPTX code generation passes the compile skipped, in the order LLVM asked (see
  // CompileOptions::all_codegen_passes).
  std::vector<std::string> skipped_passes;
};

// ptxas rejected the PTX; the message carries ptxas's log.
class PtxasError : public UserError {
public:
  using UserError::UserError;
};

// Lowers and optimizes (O3) to LLVM IR text.
LoweredKernel lower_to_llvm(const ir::Function& fn, const CompileOptions& opts);
// LLVM IR text (from lower_to_llvm with target nvptx) -> PTX.
std::string emit_ptx(const std::string& llvm_ir, const CompileOptions& opts);
// LLVM IR text (target emu) -> an x86-64 ELF object file.
std::vector<char> emit_object(const std::string& llvm_ir, const CompileOptions& opts);

// ptxas on PATH, then /usr/local/cuda/bin/ptxas; nullopt if neither exists.
std::optional<std::string> find_ptxas();
// CUDA's libdevice bitcode (sin, cos, erf, pow on the GPU): $TILEC_LIBDEVICE, else
// nvvm/libdevice/libdevice.10.bc under ptxas's CUDA folder or /usr/local/cuda.
std::optional<std::string> find_libdevice();
struct PtxasResult {
  std::vector<char> cubin;
  PtxasInfo info;
};
// Assembles `ptx` for `arch` with `ptxas -v`; throws PtxasError with the log on failure.
PtxasResult run_ptxas(const std::string& ptx, const std::string& arch, const std::string& ptxas);
// Parses the `ptxas -v` log (registers, spills, shared memory).
PtxasInfo parse_ptxas_log(const std::string& log);

// Links an emu object into a shared library at `out_path` with the system C
// compiler driver (`cc -shared`); throws UserError with the driver's output on failure.
void link_emu_library(const std::vector<char>& object, const std::string& out_path);

// All stages. Runs ptxas when opts.run_ptxas and ptxas is found.
CompiledKernel compile(const ir::Function& fn, const CompileOptions& opts);

// LLVM target machines this process has made so far: one per thread and target (arch, sm_90a
// for warpgroup MMAs, the emulator's host), kept for the compiles that follow.
int target_machines_created();

} // namespace tilec::codegen
