// tilec's own LLVM pipeline (codegen/compile.cpp, kLeanPipeline) against LLVM's stock O3 on
// the repository's kernels: the PTX it gives has no more instructions (in all and per trip of
// the main loop), ptxas gives it no more registers, and nothing spills. The counts are
// compared, not pinned, so a change to the lowering that helps or hurts both moves both.
#include <catch2/catch.hpp>

#include <sstream>

#include "codegen/compile.h"
#include "codegen/ptx_loops.h"
#include "dsl/dsl.h"
#include "templates/registry.h"
#include "tests/codegen/codegen_test_util.h"

using namespace tilec;

namespace {

// Instructions in PTX text: statements ending in ';' that are not directives or declarations.
size_t ptx_instructions(const std::string& ptx) {
  std::istringstream in(ptx);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line.find(';') == std::string::npos) continue;
    char c = line[b];
    if (c == '.' || c == '/' || c == '{' || c == '}') continue;
    ++n;
  }
  return n;
}

struct Case {
  std::string name;
  templates::ParamMap params, shape;
};

// libdevice's sin, erf and pow inlined by tilec's pipeline (O3's inliner does it there).
ir::Kernel libdevice_kernel() {
  using namespace dsl;
  KernelBuilder kb("libdevice_math");
  auto x_ptr = kb.arg<Ptr<f32>>("x"), out = kb.arg<Ptr<f32>>("out");
  auto i = program_id(0) * 128 + arange(0, 128);
  auto x = load(x_ptr + i);
  store(out + i, sin(x) + erf(x) * pow(abs(x), x));
  return kb.finish();
}

void compare(const std::string& what, const ir::Function& fn, int num_warps, const std::string& arch) {
  codegen::CompileOptions lean;
  lean.arch = arch;
  lean.num_warps = num_warps;
  codegen::CompileOptions o3 = lean;
  o3.stock_o3 = true;
  codegen::CompiledKernel a = codegen::compile(fn, lean), b = codegen::compile(fn, o3);
  INFO(what << " on " << arch);
  REQUIRE(a.ptxas);
  REQUIRE(b.ptxas);
  size_t ia = ptx_instructions(a.ptx), ib = ptx_instructions(b.ptx);
  WARN(what << " " << arch << ": " << ia << " PTX instructions, " << a.ptxas->registers
            << " registers (stock O3: " << ib << ", " << b.ptxas->registers << "); optimize "
            << a.phases.optimize_ms << " ms vs " << b.phases.optimize_ms << " ms");
  CHECK(ia <= ib);
  // Registers as the hardware allocates them (8 per thread at a time) decide occupancy: ptxas
  // may use a register or two more on fewer instructions within the same allocation.
  auto allocated = [](int r) { return (r + 7) / 8 * 8; };
  CHECK(allocated(a.ptxas->registers) <= allocated(b.ptxas->registers));
  CHECK(a.ptxas->spill_stores + a.ptxas->spill_loads == 0);
  CHECK(a.ptx.find("call.uni") == std::string::npos); // libdevice inlined, no calls left
  std::vector<codegen::PtxLoop> la = codegen::ptx_loops(a.ptx), lb = codegen::ptx_loops(b.ptx);
  // O3 versions loops (unswitching a mask or alignment test into copies of the loop), so its
  // first loop that reads global memory need not be the one that runs: tilec's main loop is
  // held against O3's largest such loop.
  const codegen::PtxLoop* ma = codegen::main_loop(la);
  const codegen::PtxLoop* mb = nullptr;
  for (const codegen::PtxLoop& l : lb)
    if ((l.count("ld.global") || l.count("cp.async")) && (!mb || l.instructions > mb->instructions)) mb = &l;
  CHECK(bool(ma) == bool(mb));
  if (ma && mb) {
    CHECK(ma->instructions <= mb->instructions);
    CHECK(ma->count("mma") == mb->count("mma"));
    CHECK(ma->count("cp.async") == mb->count("cp.async"));
    CHECK(ma->count("ld.global") + ma->count("cp.async") <= mb->count("ld.global") + mb->count("cp.async"));
  }
}

} // namespace

TEST_CASE("tilec's LLVM pipeline gives PTX no larger and registers no more than stock O3", "[codegen][ptxas]") {
  if (!codegen::test::have_ptxas()) return;
  std::vector<Case> cases;
  for (const templates::KernelTemplate& t : templates::all_templates()) cases.push_back({t.name, {}, {}});
  // The paged-attention configuration the compile benchmark uses, and a split-KV one (which
  // adds the combine kernel).
  cases.push_back({"paged_attention",
                   {{"block_n", 64}, {"head_group", 4}, {"num_warps", 4}},
                   {{"hq", 32}, {"hkv", 8}, {"head_dim", 128}, {"dtype", 2}}});
  cases.push_back({"paged_attention",
                   {{"block_n", 32}, {"head_group", 4}, {"num_splits", 4}},
                   {{"hq", 32}, {"hkv", 8}, {"head_dim", 128}, {"dtype", 1}}});
  for (const Case& c : cases) {
    const templates::KernelTemplate* t = templates::find_template(c.name);
    REQUIRE(t);
    templates::ParamMap params, shape;
    for (const auto& p : t->params) params[p.name] = p.value;
    for (const auto& p : t->shape) shape[p.name] = p.value;
    for (const auto& [k, v] : c.params) params[k] = v;
    for (const auto& [k, v] : c.shape) shape[k] = v;
    int warps = int(params.count("num_warps") ? params.at("num_warps") : 4);
    for (const ir::Kernel& k : templates::build_kernels(*t, params, shape))
      for (const char* arch : {"sm_80", "sm_90"}) compare(k->name, *k, warps, arch);
  }
  ir::Kernel math = libdevice_kernel();
  compare("libdevice_math", *math, 4, "sm_90");
}

namespace {

codegen::LoweringStats lowering_stats(const std::string& name, const templates::ParamMap& set,
                                      const templates::ParamMap& shape_set) {
  const templates::KernelTemplate* t = templates::find_template(name);
  REQUIRE(t);
  templates::ParamMap params, shape;
  for (const auto& p : t->params) params[p.name] = p.value;
  for (const auto& p : t->shape) shape[p.name] = p.value;
  for (const auto& [k, v] : set) params[k] = v;
  for (const auto& [k, v] : shape_set) shape[k] = v;
  codegen::CompileOptions o;
  o.arch = "sm_90";
  o.num_warps = int(params.at("num_warps"));
  o.run_ptxas = false;
  return codegen::compile(*templates::build_kernels(*t, params, shape).front(), o).stats;
}

} // namespace

// The lowering itself writes a thread's elements that lie next to each other in shared memory
// as one access of up to 16 bytes (layout conversions, reduction partials, dot operands and
// results), rather than leaving them to the backend's vectorizer. The counts are per thread,
// as emitted; the scalar accesses left are ones whose elements are not contiguous (a
// transposing write, rows of a page table spread over the tile).
TEST_CASE("the lowering moves shared memory in vectors where a thread's elements are contiguous", "[codegen]") {
  // Paged attention, the compile benchmark's configuration: the conversions of the scores and
  // of the output, the reductions' partials and the tensor-core operand A go as vectors.
  codegen::LoweringStats pa = lowering_stats("paged_attention", {{"block_n", 64}, {"head_group", 4}},
                                             {{"hq", 32}, {"hkv", 8}, {"head_dim", 128}, {"dtype", 2}});
  INFO("paged_attention: " << pa.shared_accesses << " accesses, " << pa.shared_vector_accesses << " vectors, "
                           << pa.shared_access_bytes << " B");
  CHECK(pa.shared_vector_accesses >= 12);
  // Two K/V loops (whole steps, the masked last one), 15 or so each, q^T staged once, and the
  // transposed tile's O^T back to rows after them.
  CHECK(pa.shared_accesses <= 70);
  // matmul (f32, CUDA cores): B staged with 16-byte stores, and per k each thread's row and
  // column groups read as vectors.
  codegen::LoweringStats mm = lowering_stats("matmul", {}, {});
  INFO("matmul: " << mm.shared_accesses << " accesses, " << mm.shared_vector_accesses << " vectors");
  CHECK(mm.shared_vector_accesses >= 3);
  CHECK(mm.shared_access_bytes >= 4 * (mm.shared_accesses + 2 * mm.shared_vector_accesses));
  // softmax: the partials of its two 4-warp reductions read as one vector each.
  codegen::LoweringStats sm = lowering_stats("softmax", {}, {});
  INFO("softmax: " << sm.shared_accesses << " accesses, " << sm.shared_vector_accesses << " vectors");
  CHECK(sm.shared_vector_accesses == 2);
  CHECK(sm.shared_accesses == 4);
}
