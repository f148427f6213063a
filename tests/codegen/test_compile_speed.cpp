// What compile() leaves out to compile faster, held to giving the same code: the optional NVPTX
// code generation passes it skips (CompileOptions::all_codegen_passes runs them), the target
// machine it keeps per thread and target, and the LLVM IR text and verification the tools turn
// off. Times are not asserted (bench/bench_compile and bench/compile_bench.py measure them);
// what is counted here is deterministic.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <thread>

#include "backends/module_builder.h"
#include "codegen/compile.h"
#include "codegen/ptx_loops.h"
#include "dsl/dsl.h"
#include "templates/registry.h"

using namespace tilec;

namespace {

struct Case {
  std::string name;
  templates::ParamMap params, shape;
};

// Every template at its defaults, the compile benchmark's decode configuration, a prefill tile,
// a split-KV decode (with its combine kernel) and a bf16 GEMM tile on wgmma with TMA copies.
std::vector<Case> cases() {
  std::vector<Case> out;
  for (const templates::KernelTemplate& t : templates::all_templates()) out.push_back({t.name, {}, {}});
  out.push_back({"paged_attention",
                 {{"block_n", 64}, {"head_group", 4}, {"num_warps", 4}, {"num_stages", 2}},
                 {{"hq", 32}, {"hkv", 8}, {"head_dim", 128}, {"dtype", 2}}});
  out.push_back({"paged_attention",
                 {{"block_n", 64}, {"head_group", 4}, {"num_warps", 8}, {"block_m", 128}},
                 {{"batch", 1}, {"hq", 32}, {"hkv", 8}, {"sq", 512}, {"head_dim", 128}, {"max_blocks", 64}, {"dtype", 2}}});
  out.push_back({"paged_attention",
                 {{"block_n", 32}, {"head_group", 4}, {"num_splits", 4}},
                 {{"hq", 32}, {"hkv", 8}, {"head_dim", 128}, {"dtype", 1}}});
  out.push_back({"matmul",
                 {{"block_m", 128}, {"block_n", 128}, {"block_k", 64}, {"num_stages", 3}},
                 {{"m", 512}, {"n", 512}, {"k", 512}, {"dtype", 2}}});
  return out;
}

std::vector<ir::Kernel> kernels_of(const Case& c, int& warps) {
  const templates::KernelTemplate* t = templates::find_template(c.name);
  REQUIRE(t);
  templates::ParamMap params, shape;
  for (const auto& p : t->params) params[p.name] = p.value;
  for (const auto& p : t->shape) shape[p.name] = p.value;
  for (const auto& [k, v] : c.params) params[k] = v;
  for (const auto& [k, v] : c.shape) shape[k] = v;
  warps = int(params.count("num_warps") ? params.at("num_warps") : 4);
  return templates::build_kernels(*t, params, shape);
}

codegen::CompileOptions gpu_options(const std::string& arch, int warps) {
  codegen::CompileOptions o;
  o.arch = arch;
  o.num_warps = warps;
  o.run_ptxas = false; // the PTX is compared; ptxas sees the same text either way
  return o;
}

// PTX instructions: lines that end an instruction (labels, directives and braces do not).
int ptx_instructions(const std::string& ptx) {
  int n = 0;
  size_t at = 0;
  while (at < ptx.size()) {
    size_t end = ptx.find('\n', at);
    if (end == std::string::npos) end = ptx.size();
    std::string_view line(ptx.data() + at, end - at);
    size_t first = line.find_first_not_of(" \t");
    if (first != std::string_view::npos && line[first] != '.' && line[first] != '/' && line.ends_with(";")) ++n;
    at = end + 1;
  }
  return n;
}

} // namespace

TEST_CASE("compile: the NVPTX passes it skips change no kernel's loops", "[codegen]") {
  size_t compared = 0;
  for (const Case& c : cases()) {
    int warps = 4;
    for (const ir::Kernel& k : kernels_of(c, warps))
      for (const char* arch : {"sm_80", "sm_90"}) {
        codegen::CompileOptions lean = gpu_options(arch, warps), all = lean;
        all.all_codegen_passes = true;
        codegen::CompiledKernel a = codegen::compile(*k, lean), b = codegen::compile(*k, all);
        INFO(c.name << " " << k->name << " on " << arch);
        CHECK(!a.skipped_passes.empty());
        CHECK(b.skipped_passes.empty());
        // Every loop issues the same instructions; outside them, at most 1% more.
        std::vector<codegen::PtxLoop> la = codegen::ptx_loops(a.ptx), lb = codegen::ptx_loops(b.ptx);
        REQUIRE(la.size() == lb.size());
        for (size_t i = 0; i < la.size(); ++i) {
          CHECK(la[i].instructions == lb[i].instructions);
          CHECK(la[i].opcodes == lb[i].opcodes);
        }
        const int na = ptx_instructions(a.ptx), nb = ptx_instructions(b.ptx);
        CHECK(nb > 0);
        CHECK(na * 100 <= nb * 101);
        ++compared;
      }
  }
  CHECK(compared >= 2 * cases().size());
}

TEST_CASE("compile: the idle passes are all found by name", "[codegen]") {
  // A pass LLVM renames would silently run again: each of the 8 names is asked for and
  // skipped on the decode kernel (a module with loops, so the loop passes are asked too),
  // Early CSE once of its three times.
  Case decode = cases()[templates::all_templates().size()];
  int warps = 4;
  std::vector<ir::Kernel> ks = kernels_of(decode, warps);
  codegen::CompiledKernel k = codegen::compile(*ks.front(), gpu_options("sm_80", warps));
  std::set<std::string> names(k.skipped_passes.begin(), k.skipped_passes.end());
  INFO(fmt::format("{}", fmt::join(names, ", ")));
  CHECK(names.size() == 8);
  CHECK(std::count(k.skipped_passes.begin(), k.skipped_passes.end(), "Early CSE") == 1);
  // --stock-o3 runs LLVM's own pipeline, code generation included, untouched.
  codegen::CompileOptions o3 = gpu_options("sm_80", warps);
  o3.stock_o3 = true;
  CHECK(codegen::compile(*ks.front(), o3).skipped_passes.empty());
}

TEST_CASE("compile: one target machine per thread and target, and the same code from a used one", "[codegen]") {
  const templates::KernelTemplate* t = templates::find_template("vector_add");
  REQUIRE(t);
  templates::ParamMap params, shape;
  for (const auto& p : t->params) params[p.name] = p.value;
  for (const auto& p : t->shape) shape[p.name] = p.value;
  ir::Kernel k = templates::build_kernels(*t, params, shape).front();
  codegen::CompileOptions o = gpu_options("sm_80", 4);
  std::string first = codegen::compile(*k, o).ptx;
  const int made = codegen::target_machines_created();
  for (int i = 0; i < 3; ++i) CHECK(codegen::compile(*k, o).ptx == first);
  CHECK(codegen::target_machines_created() == made); // reused, not made again
  o.arch = "sm_90";
  codegen::compile(*k, o);
  const int with_sm90 = codegen::target_machines_created();
  CHECK(with_sm90 <= made + 1);
  codegen::compile(*k, o);
  CHECK(codegen::target_machines_created() == with_sm90);
  // Another thread makes its own, and gets the same PTX from it as this thread's used one.
  o.arch = "sm_80";
  std::string fresh;
  std::thread([&] { fresh = codegen::compile(*k, o).ptx; }).join();
  CHECK(codegen::target_machines_created() == with_sm90 + 1);
  CHECK(fresh == first);
}

TEST_CASE("compile: without the IR text and the verifier, the same PTX", "[codegen]") {
  const templates::KernelTemplate* t = templates::find_template("softmax");
  REQUIRE(t);
  templates::ParamMap params, shape;
  for (const auto& p : t->params) params[p.name] = p.value;
  for (const auto& p : t->shape) shape[p.name] = p.value;
  ir::Kernel k = templates::build_kernels(*t, params, shape).front();
  codegen::CompileOptions tools = backends::compile_options(params, "sm_90", "nvptx");
  tools.run_ptxas = false;
  codegen::CompileOptions full = gpu_options("sm_90", tools.num_warps);
  CHECK_FALSE(tools.llvm_ir_text);
  CHECK_FALSE(tools.verify_llvm);
  codegen::CompiledKernel a = codegen::compile(*k, full), b = codegen::compile(*k, tools);
  CHECK(!a.llvm_ir.empty());
  CHECK(b.llvm_ir.empty());
  CHECK(a.ptx == b.ptx);
}
