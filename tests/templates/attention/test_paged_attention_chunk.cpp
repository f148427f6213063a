// Chunked local attention (Llama-4's local layers, docs/PAGED_ATTENTION.md "Chunked local
// attention"): a query at position p sees key j only when j // chunk == p // chunk. Both paths
// against the reference, alone and with causal, window, fp8, splits and query tiles that
// straddle a chunk's edge; a decode row reads only its chunk's keys.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "backends/launchers.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"
#include "tests/templates/attention/pa_test_util.h"

using namespace tilec;
using namespace tilec::templates;

namespace {

using tilec::templates::test::output;
using tilec::templates::test::paged_attention;
using tilec::templates::test::Run;

int64_t kv_bytes(const launch::LaunchStats& st) {
  return st.buffer_request_bytes.at("k_cache") + st.buffer_request_bytes.at("v_cache");
}

} // namespace

TEST_CASE("chunked local attention matches the reference on both paths, alone and with every feature it combines with",
          "[templates][emulator][paged_attention][chunk]") {
  std::mt19937_64 rng(41);
  auto pick = [&](std::vector<int64_t> v) { return v[size_t(rng() % v.size())]; };
  struct Case {
    int64_t sq, chunk, causal, window, block_m, splits;
  };
  // Decode rows; several positions in one tile; query tiles whose rows straddle a chunk edge
  // (block_m below the packed rows); a chunk of one key; one longer than any context.
  const Case cases[] = {{1, 16, 0, 0, 0, 1}, {1, 8, 0, 0, 0, 4},   {1, 5, 0, 3, 0, 2},  {4, 8, 1, 0, 0, 1},
                        {4, 6, 0, 0, 0, 1},  {16, 8, 1, 0, 4, 1},  {16, 8, 0, 0, 4, 2}, {7, 4, 1, 3, 2, 1},
                        {3, 1, 1, 0, 0, 1},  {2, 1 << 20, 1, 0, 0, 1}};
  for (const Case& c : cases) {
    ParamMap shape = resolve_params(paged_attention().shape, {}, "--shape");
    shape["batch"] = 2, shape["hq"] = 4, shape["hkv"] = 2, shape["head_dim"] = 32, shape["block_size"] = 8;
    shape["sq"] = c.sq, shape["chunk"] = c.chunk, shape["causal"] = c.causal, shape["window"] = c.window;
    shape["dtype"] = pick({0, 1, 2});
    shape["kv_dtype"] = shape["dtype"] ? pick({0, 0, 1}) : 0;
    // Causal rows need ctx >= sq; without causal, ragged contexts (-1) and one shorter than Sq
    // put rows at negative positions, which see no key.
    shape["ctx"] = c.causal ? c.sq + pick({0, 5, 13, 30}) : pick({-1, 2, c.sq + 13});
    ParamMap params = resolve_params(paged_attention().params, {}, "--set");
    params["block_n"] = pick({8, 16});
    params["block_m"] = c.block_m;
    params["num_splits"] = c.splits;
    params["head_group"] = c.block_m ? 1 : 0;
    for (const char* path : {"fused", "decompose"}) {
      INFO(path << " sq " << c.sq << " chunk " << c.chunk << " causal " << c.causal << " window " << c.window
                << " block_m " << c.block_m << " splits " << c.splits << " ctx " << shape["ctx"] << " dtype "
                << shape["dtype"] << " kv_dtype " << shape["kv_dtype"]);
      Run r = tilec::templates::test::run_emulated(path, params, {shape, 7, {}, {}});
      Comparison cmp = compare_outputs(r.p);
      INFO(cmp.first_mismatch);
      CHECK(cmp.ok);
      if (std::string(path) == "fused") {
        std::string why = traffic_error(paged_attention(), "fused", params, r.p, r.stats);
        INFO(why);
        CHECK(why.empty());
        // The host's replay of the walk is the emulator's count within 2%.
        const auto& in = std::any_cast<const PagedAttentionInputs&>(r.p.context);
        const int64_t model = paged_attention_traffic(in, paged_attention_config(params)).total();
        REQUIRE(r.stats.request_bytes);
        CHECK(std::abs(double(model - *r.stats.request_bytes)) <= 0.02 * double(*r.stats.request_bytes));
      }
    }
  }
}

TEST_CASE("a decode row under chunked attention reads only its chunk's keys, as a window of that many would",
          "[templates][emulator][paged_attention][chunk]") {
  // At position p = ctx - 1 a chunk of C keys shows the p mod C + 1 keys of p's chunk: what a
  // window of that length shows. Same walk, same bytes, same result.
  ParamMap params = resolve_params(paged_attention().params, {}, "--set");
  params["block_n"] = 16;
  for (int64_t ctx : {100, 96, 97, 5}) {
    ParamMap shape = resolve_params(paged_attention().shape, {}, "--shape");
    shape["batch"] = 1, shape["hq"] = 4, shape["hkv"] = 1, shape["head_dim"] = 64, shape["ctx"] = ctx;
    shape["max_blocks"] = 8, shape["block_size"] = 16, shape["dtype"] = 2;
    const int64_t C = 32;
    INFO("ctx " << ctx);
    shape["chunk"] = C;
    Run chunked = tilec::templates::test::run_emulated("fused", params, {shape, 3, {}, {}});
    CHECK(compare_outputs(chunked.p).ok);
    shape["chunk"] = 0, shape["window"] = (ctx - 1) % C + 1;
    Run windowed = tilec::templates::test::run_emulated("fused", params, {shape, 3, {}, {}});
    CHECK(kv_bytes(chunked.stats) == kv_bytes(windowed.stats));
    CHECK(*chunked.p.ideal_bytes == *windowed.p.ideal_bytes);
    CHECK(output(chunked.p).bytes == output(windowed.p).bytes);
    // The reference agrees with itself the same way, computed from the two definitions.
    CHECK(chunked.p.expected.at(0).bytes == windowed.p.expected.at(0).bytes);
    // And without either, the whole context is read.
    shape["window"] = 0;
    Run whole = tilec::templates::test::run_emulated("fused", params, {shape, 3, {}, {}});
    if (ctx > C) CHECK(kv_bytes(whole.stats) > 2 * kv_bytes(chunked.stats));
  }
}

TEST_CASE("the chunk every computation applies: cut to the capacity, keys a position sees", "[templates][paged_attention][chunk]") {
  PagedAttentionShape s;
  s.block_size = 16, s.max_blocks = 4; // capacity 64
  s.chunk = 0;
  CHECK(s.effective_chunk() == 0);
  CHECK(s.chunk_keys(10, 50) == std::pair<int64_t, int64_t>{0, 50});
  s.chunk = 16;
  CHECK(s.effective_chunk() == 16);
  CHECK(s.chunk_keys(10, 50) == std::pair<int64_t, int64_t>{0, 16});
  CHECK(s.chunk_keys(49, 50) == std::pair<int64_t, int64_t>{48, 50});
  CHECK(s.chunk_keys(-1, 50) == std::pair<int64_t, int64_t>{0, 0}); // a negative position sees nothing
  CHECK(s.first_key(50, 1) == 48);
  CHECK(s.first_key(50, 20) == 16); // the first row sits at 30
  CHECK(s.first_key(10, 20) == 0);  // rows at negative positions, then chunk 0
  s.chunk = int64_t(1) << 40;
  CHECK(s.effective_chunk() == 64);
  s.window = 5;
  CHECK(s.first_key(50, 1) == 45); // the window is the tighter
}
