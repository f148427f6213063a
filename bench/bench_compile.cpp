// Compile latency per template kernel: DSL -> tile IR (with passes), tile IR ->
// LLVM IR (O3) -> PTX, and ptxas when present. Median of repeated compiles.
//   bench_compile [repeats=9] [arch=sm_90]
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "bench/bench_common.h"
#include "codegen/compile.h"
#include "kernels/paged_attention.h"
#include "kernels/registry.h"

using namespace tilec;

int main(int argc, char** argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 9;
  std::string arch = argc > 2 ? argv[2] : "sm_90";
  bool ptxas = codegen::find_ptxas().has_value();
  fmt::print("{:<18} {:>10} {:>12} {:>12} {:>12}  (median of {}, {})\n", "kernel", "build ms", "to PTX ms",
             ptxas ? "+ptxas ms" : "(no ptxas)", "registers", repeats, arch);
  for (const auto& t : kernels::all_templates()) {
    kernels::ParamMap params, shape;
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
  return 0;
}
