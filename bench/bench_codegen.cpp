// What two configurations compile to, on CUDA cores, on the tensor cores, and on the tensor
// cores with a 3-stage software pipeline (num_stages): the main loop's PTX instructions per
// trip (codegen/ptx_loops.h), its mma / ldmatrix / cp.async counts, ptxas's registers and
// spills, and the shared memory. Deterministic counts, not timings.
//   bench_codegen [arch=sm_90]
// Paged attention: bf16, Hq=32, Hkv=8, D=128, page 16, block_n=64, head_group=4, 4 warps (one
// trip = 64 tokens). Matmul: C = A B, 512 x 512 x 512 f16 with f32 accumulation, 64x64 tiles,
// K step 32, 4 warps (one trip = one K step).
#include <fmt/format.h>

#include <functional>
#include <string>

#include "codegen/compile.h"
#include "codegen/ptx_loops.h"
#include "dsl/dsl.h"
#include "templates/registry.h"

using namespace tilec;
using namespace tilec::dsl;

namespace {

ir::Kernel matmul_f16(int64_t m, int64_t n, int64_t k, int64_t bm, int64_t bn, int64_t bk, int64_t stages) {
  KernelBuilder kb("matmul_f16");
  auto a = kb.arg(ptr_to(ir::DType::f16), "a");
  auto b = kb.arg(ptr_to(ir::DType::f16), "b");
  auto c = kb.arg(ptr_to(ir::DType::f32), "c");
  auto rm = program_id(0) * bm + arange(0, bm), rn = program_id(1) * bn + arange(0, bn), rk = arange(0, bk);
  Var acc = zeros({bm, bn});
  for_range(0, k, bk, RangeOptions{stages}, [&](Scalar k0) {
    auto at = load(a + rm.col() * k + (k0 + rk).row());
    auto bt = load(b + (k0 + rk).col() * n + rn.row());
    acc = dot(at, bt, acc);
  });
  store(c + rm.col() * n + rn.row(), acc);
  (void)m;
  return kb.finish();
}

void report(const std::string& what, const std::function<ir::Kernel(int64_t stages)>& build, int warps,
            const std::string& arch) {
  for (auto [tc, stages] : {std::pair{false, 1}, std::pair{true, 1}, std::pair{true, 3}}) {
    codegen::CompileOptions o;
    o.arch = arch;
    o.num_warps = warps;
    o.tensor_cores = tc;
    codegen::CompiledKernel ck = codegen::compile(*build(stages), o);
    std::vector<codegen::PtxLoop> loops = codegen::ptx_loops(ck.ptx);
    const codegen::PtxLoop* l = codegen::main_loop(loops);
    std::string on = !tc ? "CUDA cores" : stages > 1 ? fmt::format("TC, {} stages", stages) : "tensor cores";
    fmt::print("{:<28} {:<15} {:>9} {:>6} {:>5} {:>9} {:>9} {:>10} {:>7} {:>8}\n", what, on,
               l ? std::to_string(l->instructions) : "-", l ? std::to_string(l->inner_loops) : "-",
               l ? std::to_string(l->count("mma")) : "-", l ? std::to_string(l->count("ldmatrix")) : "-",
               l ? std::to_string((l->count("cp.async.cg") + l->count("cp.async.ca"))) : "-",
               ck.ptxas ? std::to_string(ck.ptxas->registers) : "-",
               ck.ptxas ? std::to_string(ck.ptxas->spill_stores + ck.ptxas->spill_loads) : "-", ck.shared_bytes);
  }
}

} // namespace

int main(int argc, char** argv) {
  std::string arch = argc > 1 ? argv[1] : "sm_90";
  fmt::print("{:<28} {:<15} {:>9} {:>6} {:>5} {:>9} {:>9} {:>10} {:>7} {:>8}   ({}; loop = the main loop, per trip)\n",
             "kernel", "dot on", "loop PTX", "inner", "mma", "ldmatrix", "cp.async", "registers", "spills",
             "smem B", arch);
  const templates::KernelTemplate* pa = templates::find_template("paged_attention");
  templates::ParamMap shape;
  for (const templates::Param& p : pa->shape) shape[p.name] = p.value;
  shape["batch"] = 1, shape["hq"] = 32, shape["hkv"] = 8, shape["sq"] = 1, shape["head_dim"] = 128;
  shape["block_size"] = 16, shape["dtype"] = 2;
  report("paged_attention bf16 D=128", [&](int64_t stages) {
    templates::ParamMap params{{"block_n", 64}, {"head_group", 4}, {"num_warps", 4}, {"num_splits", 1},
                             {"num_stages", stages}};
    return pa->build(params, shape);
  }, 4, arch);
  report("matmul f16 512^3 64x64x32", [](int64_t stages) { return matmul_f16(512, 512, 512, 64, 64, 32, stages); },
         4, arch);
  fmt::print("(inner: loops inside the main loop, each counted once; their trips add to the per-trip count)\n");
  return 0;
}
