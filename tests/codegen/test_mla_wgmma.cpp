// MLA decode on Hopper's wgmma with FlashMLA's tile (docs/ARCHITECTURE.md "Warpgroup MMA"): 64
// query heads of the one latent KV head a program, 8 warps, head_dim 576 (512 latent + 64
// rope), head_dim_v 512. The 64 rows are fewer than 16 a warp, so the two warpgroups split N:
// the scores' 64 keys (32 each) and P.V's 512 columns (256 each, a 64 x 256 f32 accumulator a
// warpgroup); P goes between them through shared memory; the K tile is copied once and read
// as both K^T and V. Every product on wgmma, ptxas's verdict, and the kernel against the
// reference on the emulator in both lowerings.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <string>

#include "backends/launchers.h"
#include "codegen/compile.h"
#include "codegen/layout_print.h"
#include "codegen/ptx_loops.h"
#include "ir/ir.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"
#include "tests/codegen/codegen_test_util.h"

using namespace tilec;
using backends::EmuLowering;

namespace {

const templates::KernelTemplate& pa() {
  const templates::KernelTemplate* t = templates::find_template("paged_attention");
  REQUIRE(t);
  return *t;
}

templates::ParamMap mla_params(int64_t block_n) {
  templates::ParamMap p = templates::resolve_params(pa().params, {}, "--set");
  p["head_group"] = 64, p["block_m"] = 64, p["num_warps"] = 8, p["block_n"] = block_n;
  return p;
}

templates::ParamMap mla_shape(int64_t batch, int64_t hq, int64_t sq, int64_t block_size) {
  templates::ParamMap s = templates::resolve_params(pa().shape, {}, "--shape");
  s["batch"] = batch, s["hq"] = hq, s["hkv"] = 1, s["sq"] = sq, s["causal"] = sq > 1 ? 1 : 0;
  s["head_dim"] = 576, s["head_dim_v"] = 512, s["latent"] = 1, s["block_size"] = block_size;
  s["dtype"] = 2; // bf16
  return s;
}

int count_dots(const ir::Function& fn) {
  int n = 0;
  ir::walk(const_cast<ir::Block&>(fn.body), [&](ir::Op& op) { n += op.kind == ir::OpKind::Dot; });
  return n;
}

} // namespace

TEST_CASE("MLA decode, FlashMLA's tile on sm_90: both products on wgmma with warpgroups along N, no spills",
          "[codegen][paged_attention][mla][wgmma][nvptx]") {
  const bool ptxas = codegen::test::have_ptxas();
  for (int64_t block_n : {64, 32})
    for (int64_t sq : {1, 2}) {
      INFO("block_n " << block_n << " sq " << sq);
      ir::Kernel k = pa().build(mla_params(block_n), mla_shape(4, 128, sq, 64));
      codegen::CompileOptions o;
      o.arch = "sm_90";
      o.num_warps = 8;
      const codegen::CompiledKernel ck = codegen::compile(*k, o);
      // The scores' two column tiles (q0 K0^T over 512, q1 K1^T over 64) and P.V, in each of
      // the walk's loops: all of them warpgroup MMAs.
      CHECK(ck.stats.wgmma_dots == count_dots(*k));
      CHECK(ck.stats.wgmma_dots >= 3);
      const std::vector<codegen::PtxLoop> loops = codegen::ptx_loops(ck.ptx);
      const codegen::PtxLoop* l = codegen::main_loop(loops);
      REQUIRE(l);
      WARN("MLA sm_90 block_n " << block_n << " sq " << sq << ": " << l->instructions << " PTX instructions per trip, "
                                << l->count("wgmma.mma_async") << " wgmma, " << l->count("cp.async.cg") << " cp.async, "
                                << l->count("bar.sync") << " barriers; registers "
                                << (ck.ptxas ? std::to_string(ck.ptxas->registers) : std::string("(no ptxas)"))
                                << ", spill stores " << (ck.ptxas ? std::to_string(ck.ptxas->spill_stores) : std::string("-"))
                                << "; " << ck.shared_bytes << " B of shared memory");
      // Per warpgroup and step: K0^T's 32 k steps and K1^T's 4 at n = block_n / 2, and P.V's
      // block_n / 16 at n = 256; so in every loop of the walk (three products each).
      CHECK(l->count("wgmma.mma_async") == 36 + block_n / 16);
      const size_t loops_of_dots = size_t(ck.stats.wgmma_dots / 3);
      const std::string n_s = "wgmma.mma_async.sync.aligned.m64n" + std::to_string(block_n / 2) + "k16.f32.bf16.bf16";
      CHECK(codegen::test::count(ck.ptx, n_s) == 36 * loops_of_dots);
      CHECK(codegen::test::count(ck.ptx, "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16") ==
            size_t(block_n / 16) * loops_of_dots);
      CHECK(l->count("mma.sync") == 0);
      // The K tile is copied once a step (576 columns of block_n rows, 16 bytes a copy over 256
      // threads), for K^T and V both: no global loads of it into registers.
      CHECK(l->count("cp.async.cg") == block_n * 576 * 2 / 16 / 256);
      CHECK(ck.shared_bytes <= 232448);
      // What `tilec ir --stage layouts` shows of it: the accumulators' warp order (warp bits
      // along M first), and P.V reading the scores' copy of the K tile.
      const std::string layouts = codegen::print_layouts(*k, 8, true).text;
      CHECK(layouts.find("warp_order=[0,1]>  // wgmma m64nNk16 accumulator, warpgroups along N") != std::string::npos);
      CHECK(layouts.find("2 warpgroups along N") != std::string::npos);
      const std::string pipelines = codegen::print_pipelines(*k, o);
      INFO(pipelines);
      CHECK(codegen::test::count(pipelines, fmt::format("{} bytes), read as B of ", block_n * 1024)) == 2); // both loops
      if (ptxas) {
        REQUIRE(ck.ptxas);
        INFO(ck.ptxas->log);
        CHECK(ck.ptxas->spill_stores + ck.ptxas->spill_loads == 0);
      }
    }
}

TEST_CASE("MLA decode, FlashMLA's tile: the emulator matches the reference in both lowerings",
          "[templates][emulator][paged_attention][mla][wgmma]") {
  struct Case {
    int64_t block_n, sq, ctx, stages, kv_fp8;
  };
  // Whole steps and a partial last one; a causal pair of positions; one pipeline stage (the K
  // tile copied at its first product into a region held for the second); an fp8 cache (the
  // dequantized K tile staged from registers by the first product, held for the second).
  const Case cases[] = {{64, 1, 100, 2, 0}, {32, 2, 77, 2, 0}, {64, 2, 70, 1, 0}, {32, 2, 45, 2, 1}};
  for (const Case& c : cases)
    for (EmuLowering lowering : {EmuLowering::emu, EmuLowering::nvptx}) {
      INFO("block_n " << c.block_n << " sq " << c.sq << " ctx " << c.ctx << " stages " << c.stages << " fp8 cache "
                      << c.kv_fp8 << " lowering " << (lowering == EmuLowering::nvptx ? "nvptx" : "emu"));
      templates::ParamMap params = mla_params(c.block_n);
      params["num_stages"] = c.stages;
      templates::ParamMap shape = mla_shape(1, 64, c.sq, 32);
      shape["ctx"] = c.ctx, shape["kv_dtype"] = c.kv_fp8; // 1: f8e4m3
      // The emulator's build compiles for sm_90: every product is a warpgroup MMA there too.
      ir::Kernel k = pa().build(params, shape);
      codegen::CompileOptions o;
      o.arch = "sm_90";
      o.num_warps = 8;
      o.target = lowering == EmuLowering::nvptx ? codegen::Target::emu_nvptx : codegen::Target::emu;
      CHECK(codegen::compile(*k, o).stats.wgmma_dots == count_dots(*k));
      templates::Problem p = templates::make_problem(pa(), {shape, 11, {}, {}});
      auto launcher = backends::make_emulate_launcher(lowering);
      templates::run_problem(pa(), "fused", params, p, *launcher);
      const templates::Comparison cmp = templates::compare_outputs(p);
      INFO(cmp.first_mismatch);
      CHECK(cmp.ok);
    }
}
