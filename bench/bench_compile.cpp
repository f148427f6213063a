// Compile latency per template kernel in one warm process: DSL -> tile IR (with passes),
// tile IR -> LLVM IR (tilec's pipeline) -> PTX, and ptxas when present. Median of repeated
// compiles; then the phases of the paged-attention configuration bench/compile_bench.py
// times in cold processes (what the first compile of a process adds is their difference).
// Last, that configuration compiled in turn with every optional NVPTX pass, the LLVM IR text and
// the verifier (CompileOptions) and as the tools compile it (without them), and whether the
// PTX is the same (the exit status is 1 if not).
//   bench_compile [repeats=9] [arch=sm_90]
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <vector>
#include <string>

#include "bench/bench_common.h"
#include "codegen/compile.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"

using namespace tilec;

int main(int argc, char** argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 9;
  std::string arch = argc > 2 ? argv[2] : "sm_90";
  bool ptxas = codegen::find_ptxas().has_value();
  fmt::print("{:<18} {:>10} {:>12} {:>12} {:>12}  (median of {}, {})\n", "kernel", "build ms", "to PTX ms",
             ptxas ? "+ptxas ms" : "(no ptxas)", "registers", repeats, arch);
  for (const auto& t : templates::all_templates()) {
    templates::ParamMap params, shape;
    for (const auto& p : t.params) params[p.name] = p.value;
    for (const auto& p : t.shape) shape[p.name] = p.value;
    ir::Kernel k;
    auto build = bench::time_repeated(repeats, [&] { k = t.build(params, shape); });
    codegen::CompileOptions opts;
    opts.arch = arch;
    opts.num_warps = static_cast<int>(params.count("num_warps") ? params.at("num_warps") : 4);
    opts.run_ptxas = false;
    auto to_ptx = bench::time_repeated(repeats, [&] { codegen::compile(*k, opts); });
    opts.run_ptxas = true;
    codegen::CompiledKernel ck;
    auto full = bench::time_repeated(repeats, [&] { ck = codegen::compile(*k, opts); });
    fmt::print("{:<18} {:>10.2f} {:>12.2f} {:>12} {:>12}\n", t.name, build.median_ms, to_ptx.median_ms,
               ptxas ? fmt::format("{:.2f}", full.median_ms) : "-",
               ck.ptxas ? std::to_string(ck.ptxas->registers) : "-");
  }
  // bf16, Hq=32, Hkv=8, D=128, block_n=64, head_group=4, 4 warps: the phases of one compile.
  const templates::KernelTemplate* pa = templates::find_template("paged_attention");
  templates::ParamMap params, shape;
  for (const auto& p : pa->params) params[p.name] = p.value;
  for (const auto& p : pa->shape) shape[p.name] = p.value;
  params["block_n"] = 64;
  params["head_group"] = 4;
  params["num_warps"] = 4;
  shape["hq"] = 32;
  shape["hkv"] = 8;
  shape["head_dim"] = 128;
  shape["dtype"] = 2; // bf16
  std::vector<double> lower, optimize, codegen;
  for (int i = 0; i < repeats; ++i) {
    ir::Kernel k = pa->build(params, shape);
    codegen::CompileOptions opts;
    opts.arch = arch;
    opts.run_ptxas = false;
    codegen::CompiledKernel ck = codegen::compile(*k, opts);
    lower.push_back(ck.phases.lower_ms);
    optimize.push_back(ck.phases.optimize_ms);
    codegen.push_back(ck.phases.codegen_ms);
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  fmt::print("paged_attention bf16 32/8/128 block_n=64 head_group=4, warm: lowering {:.2f} ms, LLVM passes {:.2f} ms, "
             "NVPTX {:.2f} ms\n",
             med(lower), med(optimize), med(codegen));
  // The same kernel compiled, in turn, with what the tools leave out put back (every optional
  // NVPTX pass, the LLVM IR text, its verification: CompileOptions) and as the tools compile
  // it: what leaving them out saves here and now, and that the PTX is the same.
  std::vector<double> full_d2p, lean_d2p, full_total, lean_total;
  bool same_ptx = true;
  for (int i = 0; i < repeats; ++i) {
    ir::Kernel k = pa->build(params, shape);
    codegen::CompileOptions lean;
    lean.arch = arch;
    lean.run_ptxas = false;
    lean.llvm_ir_text = false;
    lean.verify_llvm = false;
    codegen::CompileOptions full = lean;
    full.llvm_ir_text = full.verify_llvm = full.all_codegen_passes = true;
    codegen::CompiledKernel a = codegen::compile(*k, full), b = codegen::compile(*k, lean);
    auto d2p = [](const codegen::CompiledKernel& c) {
      return c.phases.lower_ms + c.phases.optimize_ms + c.phases.codegen_ms;
    };
    full_d2p.push_back(d2p(a));
    lean_d2p.push_back(d2p(b));
    full_total.push_back(a.compile_ms);
    lean_total.push_back(b.compile_ms);
    same_ptx = same_ptx && a.ptx == b.ptx;
  }
  fmt::print("  every NVPTX pass, IR text and verifier: tile IR->PTX {:.2f} ms (compile {:.2f}); as the tools compile: "
             "{:.2f} ms (compile {:.2f}); PTX {}\n",
             med(full_d2p), med(full_total), med(lean_d2p), med(lean_total), same_ptx ? "identical" : "DIFFERENT");
  return same_ptx ? 0 : 1;
}
