// Paged attention at every query length, compiled (docs/PAGED_ATTENTION.md "Query tiles"): the
// default config compiles without spills and within the arch's shared memory at prefill
// lengths, and the prefill tile's K/V loop is pinned.
#include <catch2/catch.hpp>

#include "abi/limits.h"
#include "codegen/compile.h"
#include "codegen/ptx_loops.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"
#include "tests/codegen/codegen_test_util.h"

using namespace tilec;

namespace {

templates::ParamMap pa_shape(int64_t sq, int64_t head_dim) {
  templates::ParamMap shape = templates::resolve_params(templates::find_template("paged_attention")->shape, {}, "--shape");
  shape["batch"] = 1, shape["hq"] = 32, shape["hkv"] = 8, shape["sq"] = sq, shape["head_dim"] = head_dim;
  shape["block_size"] = 16, shape["max_blocks"] = std::max<int64_t>(16, sq / 16), shape["dtype"] = 2; // bf16
  shape["causal"] = 1;
  return shape;
}

templates::ParamMap pa_defaults() {
  return templates::resolve_params(templates::find_template("paged_attention")->params, {}, "--set");
}

} // namespace

TEST_CASE("paged attention's default config compiles without spills within shared memory at every query length",
          "[codegen][paged_attention][prefill][nvptx]") {
  if (!codegen::test::have_ptxas()) return;
  const templates::KernelTemplate* t = templates::find_template("paged_attention");
  REQUIRE(t);
  for (const char* arch : {"sm_80", "sm_90"})
    for (int64_t head_dim : {64, 128, 256})
      for (int64_t sq : {1, 4, 16, 64, 128, 512, 2048, 8192}) {
        INFO(arch << " head_dim " << head_dim << " sq " << sq);
        const templates::ParamMap params = pa_defaults(), shape = pa_shape(sq, head_dim);
        codegen::CompileOptions o;
        o.arch = arch;
        o.num_warps = int(params.at("num_warps"));
        codegen::CompiledKernel ck = codegen::compile(*t->build(params, shape), o);
        REQUIRE(ck.ptxas);
        CHECK(ck.ptxas->spill_stores + ck.ptxas->spill_loads == 0);
        CHECK(ck.shared_bytes <= max_shared_bytes(arch));
        // The tile is bounded whatever Sq is: the 32 x 8 / 8 = 4 query heads of a KV head times
        // Sq rows, in tiles of at most 2048 x 4 warps / (head_dim + block_n 32) rows.
        const templates::PagedAttentionShape s = templates::paged_attention_shape(shape);
        const templates::PagedAttentionConfig cfg = templates::paged_attention_config(params);
        const int64_t bm = templates::paged_attention_block_m(s, cfg);
        CHECK(bm * (head_dim + 32) <= 2048 * 4);
        if (sq >= 16) CHECK(bm >= 16);
        CHECK(templates::paged_attention_query_tiles(s, cfg) * bm >= 4 * sq);
      }
}

// The pinned prefill tile: 128 packed rows (4 query heads x 32 positions of one KV head) x 64
// keys a step, head_dim 128, bf16, 8 warps, no causal mask.
static codegen::CompiledKernel compile_prefill_tile(const char* arch) {
  const templates::KernelTemplate* t = templates::find_template("paged_attention");
  templates::ParamMap params = pa_defaults();
  params["block_n"] = 64, params["num_warps"] = 8, params["block_m"] = 128, params["head_group"] = 4;
  templates::ParamMap shape = pa_shape(512, 128);
  shape["causal"] = 0;
  codegen::CompileOptions o;
  o.arch = arch;
  o.num_warps = 8;
  return codegen::compile(*t->build(params, shape), o);
}

TEST_CASE("a prefill tile's K/V loop: 128 query rows x 64 keys, head_dim 128, bf16, warps along M (sm_80)",
          "[codegen][paged_attention][prefill][nvptx]") {
  // 8 warps of 16 rows: S = q K^T is 128 x 64 x 128 and O += P V 128 x 128 x 64, 16 x 8 x 16 MMAs
  // of which each warp runs (1 x 8 x 8) + (1 x 16 x 4) = 128 per 64 keys.
  codegen::CompiledKernel ck = compile_prefill_tile("sm_80");
  std::vector<codegen::PtxLoop> loops = codegen::ptx_loops(ck.ptx);
  const codegen::PtxLoop* l = codegen::main_loop(loops);
  REQUIRE(l);
  WARN("prefill K/V loop: " << l->instructions << " PTX instructions per 64-key step, " << l->count("mma") << " mma, "
                            << l->count("ldmatrix") << " ldmatrix, " << l->count("bar.sync") << " barriers; registers "
                            << (ck.ptxas ? std::to_string(ck.ptxas->registers) : std::string("(no ptxas)")) << ", "
                            << ck.shared_bytes << " B of shared memory");
  CHECK(l->inner_loops == 0);
  CHECK(l->count("mma") == 128);
  CHECK(l->count("cp.async.cg") == 8); // K and V: 64 rows x 256 bytes / 256 threads, 16 bytes each
  // Triton 3.9's flash-attention forward at the same tile (bench/prefill_vs_triton.py): 532 PTX
  // instructions per trip, 2 barriers, 65,536 B of shared memory.
  CHECK(l->instructions < 532);
  CHECK(l->count("bar.sync") <= 2);
  CHECK(ck.shared_bytes <= 65536 * 11 / 10);
  // Q's fragments are loaded once, before the walk: the trip's ldmatrix are K's 32 and V's 32,
  // and nothing but the block table's page numbers (one word) is stored to shared memory.
  CHECK(l->count("ldmatrix") == 64);
  CHECK(l->count("st.shared") <= 1);
  // P (f32) becomes the second product's A in registers, rounded two at a time.
  CHECK(l->count("cvt.rn.bf16x2") == 16);
  CHECK(l->count("cvt.rn.bf16") == l->count("cvt.rn.bf16x2")); // no single conversions
  // The softmax in log2 units: one multiply a score and an exp2, no exp's extra multiply.
  CHECK(l->count("ex2") <= 34);
  CHECK(l->count("mul.rn.f32") <= 100);
  // P . V accumulates into O's registers (the add of a separate product is folded into the dot).
  CHECK(l->count("add.rn.f32") <= 40);
  if (codegen::test::have_ptxas()) {
    REQUIRE(ck.ptxas);
    CHECK(ck.ptxas->spill_stores + ck.ptxas->spill_loads == 0);
  }
}

TEST_CASE("the same prefill tile on sm_90: both products on wgmma, Q resident, P as register A rounded in pairs",
          "[codegen][paged_attention][prefill][nvptx][wgmma]") {
  codegen::CompiledKernel ck = compile_prefill_tile("sm_90");
  const std::vector<codegen::PtxLoop> loops = codegen::ptx_loops(ck.ptx);
  const codegen::PtxLoop* l = codegen::main_loop(loops);
  REQUIRE(l);
  WARN("sm_90 prefill K/V loop: " << l->instructions << " PTX instructions, " << l->count("wgmma.mma_async")
                                  << " wgmma, " << l->count("bar.sync") << " barriers, " << ck.shared_bytes << " B");
  // 128 x 64 x 128 and 128 x 128 x 64 as m64nNk16 per warpgroup: 8 x n64 and 4 x n128.
  CHECK(l->count("wgmma.mma_async") == 12);
  // Triton 3.9's flash-attention forward compiled for sm_90 at the same tile
  // (bench/prefill_vs_triton.py --arch 90): 429 PTX instructions a trip, 3 barriers.
  CHECK(l->instructions < 429);
  // P is the second product's A from registers (wgmma's register-A form): its fragments are the
  // first product's accumulator registers rounded in pairs, with no shared-memory exchange, its
  // stores, barrier and proxy fence: two barriers a trip (the pipeline's), not three, and one
  // proxy fence (for the copies that landed K and V), not two. Both loops' P.V take it (whole
  // steps and the partial last one).
  CHECK(ck.stats.wgmma_register_a == 2);
  CHECK(l->count("bar.sync") <= 2);
  CHECK(l->count("fence.proxy.async") == 1);
  // Q (32 KiB and its swizzle alignment) is staged once, before the walk: no vector stores a
  // trip; P's 16 pairs are each rounded by one instruction.
  CHECK(l->count("st.shared.v4") == 0);
  CHECK(l->count("cvt.rn.bf16x2") == 16);
  CHECK(l->count("cvt.rn.bf16") == l->count("cvt.rn.bf16x2"));
  // The first product's accumulator is not zeroed by moves (64 a thread): its first MMAs
  // ignore it (scale-d 0).
  CHECK(l->count("mov.f32") <= 4);
  if (codegen::test::have_ptxas()) {
    REQUIRE(ck.ptxas);
    CHECK(ck.ptxas->spill_stores + ck.ptxas->spill_loads == 0);
  }
}
