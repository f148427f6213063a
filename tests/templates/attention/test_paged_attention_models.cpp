// The attention layers of the models served in 2026 (docs/PAGED_ATTENTION.md "Models"), at their
// real head counts (per tensor-parallel shard where a model is served sharded), head dims and
// with the features they use: MLA's latent cache, attention sinks, sliding windows and chunked
// local attention at their real lengths. Both paths against the reference, each on its own
// decode problem (the fused path at contexts that cross the window or chunk; the
// decomposition, whose cost grows with the padded capacity, at a shorter one).
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "autotune/space.h"
#include "autotune/tuner.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"
#include "tests/templates/attention/pa_test_util.h"
#include "tests/templates/test_util.h"

using namespace tilec;
using namespace tilec::templates;

namespace {

struct Layer {
  const char* name;
  int64_t hq, hkv, head_dim, head_dim_v, latent, sinks, window, chunk;
};

// Hq and Hkv per GPU as served: DeepSeek-V3 / R1 with 128 heads over TP 8, Kimi-K2's 64 over
// TP 8 (MLA: every query head on the one 576-wide latent KV head, V its first 512 columns);
// gpt-oss's 64 query and 8 KV heads of 64 with a sink per head, every other layer a 128-token
// window; Llama-4's three chunked (8192) layers of four and its global one; Qwen3-235B-A22B,
// GLM-4.5, MiniMax-M2; Gemma-3-27B's 1024-token local layers (five of six) and global ones.
const Layer kLayers[] = {
    {"deepseek-v3 (tp8)", 16, 1, 576, 512, 1, 0, 0, 0},  {"kimi-k2 (tp8)", 8, 1, 576, 512, 1, 0, 0, 0},
    {"gpt-oss-20b sliding", 64, 8, 64, 0, 0, 1, 128, 0}, {"gpt-oss-120b full", 64, 8, 64, 0, 0, 1, 0, 0},
    {"llama-4-scout chunked", 40, 8, 128, 0, 0, 0, 0, 8192}, {"llama-4-maverick global", 40, 8, 128, 0, 0, 0, 0, 0},
    {"qwen3-235b-a22b", 64, 4, 128, 0, 0, 0, 0, 0},      {"glm-4.5", 96, 8, 128, 0, 0, 0, 0, 0},
    {"minimax-m2", 48, 8, 128, 0, 0, 0, 0, 0},            {"gemma-3-27b local", 32, 16, 128, 0, 0, 0, 1024, 0}};

} // namespace

TEST_CASE("the attention layers of the models served in 2026 match the reference on both paths",
          "[templates][emulator][paged_attention][models]") {
  const KernelTemplate& t = tilec::templates::test::paged_attention();
  int index = 0;
  for (const Layer& m : kLayers) {
    ParamMap shape = resolve_params(t.shape, {}, "--shape");
    shape["batch"] = 1, shape["hq"] = m.hq, shape["hkv"] = m.hkv, shape["head_dim"] = m.head_dim;
    shape["head_dim_v"] = m.head_dim_v, shape["latent"] = m.latent, shape["sinks"] = m.sinks;
    shape["window"] = m.window, shape["chunk"] = m.chunk, shape["dtype"] = 2, shape["block_size"] = 64;
    // f16 for every other model; an fp8 cache for every third (the latent one too).
    if (index % 2) shape["dtype"] = 1;
    if (index % 3 == 0) shape["kv_dtype"] = 1;
    ParamMap params = resolve_params(t.params, {}, "--set");
    // The fused path: a decode row just past the window or chunk edge, so both matter; the
    // short form (the suite's) stops at 300 keys elsewhere, TILEC_TEST_FULL=1 goes on to 2000.
    const int64_t edge = m.chunk ? m.chunk : m.window;
    const int64_t ctx = edge ? edge + 37 : tilec::templates::test::full_sweeps() ? 2000 : 300;
    shape["ctx"] = ctx;
    params["num_splits"] = ctx > 1000 ? 4 : 1;
    {
      INFO(m.name << " fused, ctx " << ctx << " dtype " << shape["dtype"] << " kv_dtype " << shape["kv_dtype"]);
      tilec::templates::test::Run r = tilec::templates::test::run_emulated("fused", params, {shape, 17, {}, {}});
      Comparison cmp = compare_outputs(r.p);
      INFO(cmp.first_mismatch);
      CHECK(cmp.ok);
      std::string why = traffic_error(t, "fused", params, r.p, r.stats);
      INFO(why);
      CHECK(why.empty());
    }
    // The decomposition: a capacity of two pages, with the window and chunk scaled into it.
    shape["ctx"] = 100, shape["max_blocks"] = 2;
    if (m.window) shape["window"] = 30;
    if (m.chunk) shape["chunk"] = 64;
    params["num_splits"] = 1;
    {
      INFO(m.name << " decompose");
      tilec::templates::test::Run r = tilec::templates::test::run_emulated("decompose", params, {shape, 17, {}, {}});
      Comparison cmp = compare_outputs(r.p);
      INFO(cmp.first_mismatch);
      CHECK(cmp.ok);
    }
    ++index;
  }
}

TEST_CASE("the shipped paged-attention space tunes every model layer at every query length it buckets",
          "[templates][autotune][paged_attention][models]") {
  const KernelTemplate& t = tilec::templates::test::paged_attention();
  const autotune::SearchSpace space = autotune::load_space(std::string(TILEC_SOURCE_DIR) + "/configs/paged_attention.toml",
                                                           autotune::space_names(t));
  for (const Layer& m : kLayers)
    for (int64_t sq : {1, 4, 16}) {
      ParamMap shape = resolve_params(t.shape, {}, "--shape");
      shape["batch"] = 1, shape["hq"] = m.hq, shape["hkv"] = m.hkv, shape["head_dim"] = m.head_dim;
      shape["head_dim_v"] = m.head_dim_v, shape["latent"] = m.latent, shape["sinks"] = m.sinks;
      shape["window"] = m.window, shape["chunk"] = m.chunk, shape["dtype"] = 2, shape["block_size"] = 64;
      shape["sq"] = sq, shape["causal"] = sq > 1, shape["ctx"] = 4096;
      const autotune::Values values(shape.begin(), shape.end());
      const autotune::Enumeration en = autotune::enumerate_for(t, space, values);
      INFO(m.name << " sq " << sq << ": " << en.candidates.size() << " candidates, " << en.rejected.size()
                  << " rejected");
      REQUIRE(!en.candidates.empty());
      // All heads of a KV head in one program (head_group 0: 5 for Llama-4, 16 for MLA) is among
      // them, and more than one block_n (MLA's 576 columns included).
      const int64_t group = m.hq / m.hkv;
      std::set<int64_t> groups, block_ns;
      for (const autotune::Values& c : en.candidates) {
        groups.insert(c.at("head_group"));
        block_ns.insert(c.at("block_n"));
        CHECK((c.at("head_group") == 0 || group % c.at("head_group") == 0));
        CHECK(c.at("head_group") != group); // (that is 0's kernel)
      }
      CHECK(groups.count(0) == 1);
      CHECK(block_ns.size() >= 2);
    }
}
