// Paged attention at every query length (docs/PAGED_ATTENTION.md "Query tiles"): the fused
// kernel in query tiles of block_m packed rows against the reference over many Sq, with every
// feature mixed in and on both emulator lowerings; causal tiles load only the triangle.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <random>
#include <string>
#include <vector>

#include "backends/launchers.h"
#include "templates/paged_attention.h"
#include "templates/registry.h"

using namespace tilec;
using namespace tilec::templates;

namespace {

const KernelTemplate& paged_attention() {
  const KernelTemplate* t = find_template("paged_attention");
  REQUIRE(t);
  return *t;
}

ParamMap default_params() {
  ParamMap m;
  for (const Param& p : paged_attention().params) m[p.name] = p.value;
  return m;
}

struct Run {
  Problem p;
  launch::LaunchStats stats;
};

Run run_fused(const ParamMap& params, const ProblemRequest& request,
              backends::EmuLowering lowering = backends::EmuLowering::emu) {
  const KernelTemplate& t = paged_attention();
  Run r{make_problem(t, request), {}};
  auto launcher = backends::make_emulate_launcher(lowering);
  run_problem(t, "fused", params, r.p, *launcher);
  r.stats = launcher->stats();
  return r;
}

int64_t kv_bytes(const launch::LaunchStats& st) {
  return st.buffer_request_bytes.at("k_cache") + st.buffer_request_bytes.at("v_cache");
}

} // namespace

TEST_CASE("the fused kernel in query tiles matches the reference at every Sq, with every feature, on both lowerings",
          "[templates][emulator][paged_attention][prefill]") {
  const KernelTemplate& t = paged_attention();
  std::mt19937_64 rng(29);
  auto pick = [&](std::vector<int64_t> v) { return v[size_t(rng() % v.size())]; };
  int index = 0;
  for (int64_t sq : {1, 2, 3, 4, 7, 8, 16, 33, 64, 128})
    for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
      const int64_t hkv = pick({1, 2}), ratio = pick({1, 2, 3, 4}), causal = pick({0, 1, 1});
      ParamMap shape = {{"batch", pick({1, 2})}, {"hq", hkv * ratio}, {"hkv", hkv}, {"sq", sq},
                        {"head_dim", pick({16, 32, 64, 80})}, {"block_size", pick({1, 4, 16, 32})},
                        {"dtype", pick({0, 1, 2})}, {"alibi", pick({0, 1})}, {"window", pick({0, 0, 5, 40})},
                        {"causal", causal}, {"max_blocks", 0}};
      shape["kv_dtype"] = shape["dtype"] ? pick({0, 0, 1, 2}) : 0;
      shape["ctx"] = sq + pick({0, 3, 17, 60});
      std::vector<int64_t> groups;
      for (int64_t g = 1; g <= ratio; ++g)
        if (ratio % g == 0) groups.push_back(g);
      ParamMap params = default_params();
      params["block_n"] = pick({8, 16, 32, 64});
      params["head_group"] = pick(groups);
      params["num_warps"] = pick({1, 2, 4});
      params["num_splits"] = pick({1, 1, 2, 4});
      params["num_stages"] = pick({1, 2});
      params["block_m"] = pick({0, 1, 4, 16, 32, 64});
      std::map<std::string, double> options;
      if (pick({0, 1})) options["softcap"] = 30;
      std::string desc = fmt::format("case {} ({}):", index, lowering == backends::EmuLowering::emu ? "emu" : "nvptx");
      for (const auto& [name, v] : shape) desc += fmt::format(" {}={}", name, v);
      for (const auto& [name, v] : params) desc += fmt::format(" {}={}", name, v);
      for (const auto& [name, v] : options) desc += fmt::format(" --{} {}", name, v);
      INFO(desc);
      Run r = run_fused(params, {shape, uint64_t(700 + index++), options, {}}, lowering);
      Comparison cmp = compare_outputs(r.p);
      INFO(cmp.first_mismatch);
      CHECK(cmp.ok);
      // Within the budget, and the host replay of the tiles' walks within 2% of the count.
      std::string why = traffic_error(t, "fused", params, r.p, r.stats);
      INFO(why);
      CHECK(why.empty());
      const auto& in = std::any_cast<const PagedAttentionInputs&>(r.p.context);
      const int64_t model = paged_attention_traffic(in, paged_attention_config(params)).total();
      REQUIRE(r.stats.request_bytes);
      CHECK(std::abs(double(model - *r.stats.request_bytes)) <= 0.02 * double(*r.stats.request_bytes));
    }
}

TEST_CASE("causal query tiles load only the triangle of K and V", "[templates][emulator][paged_attention][prefill]") {
  // Sq = ctx, so the tiles' last positions split the context evenly: tile t of T walks
  // (t + 1) / T of it, (T + 1) / 2T in all: 5/8 at 4 tiles, 17/32 at 16.
  struct Case {
    int64_t hq, hkv, sq, block_m, tiles;
    double bound;
  };
  for (const Case& c : {Case{4, 1, 64, 64, 4, 0.65}, Case{8, 2, 256, 64, 16, 0.65}, Case{4, 4, 128, 32, 4, 0.65}}) {
    INFO("hq " << c.hq << " hkv " << c.hkv << " sq " << c.sq << " block_m " << c.block_m);
    ParamMap params = default_params();
    params["block_m"] = c.block_m;
    ParamMap shape;
    for (const Param& p : paged_attention().shape) shape[p.name] = p.value;
    shape["batch"] = 2, shape["hq"] = c.hq, shape["hkv"] = c.hkv, shape["sq"] = c.sq, shape["head_dim"] = 64;
    shape["ctx"] = c.sq;
    PagedAttentionShape s = paged_attention_shape(shape);
    REQUIRE(paged_attention_query_tiles(s, paged_attention_config(params)) == c.tiles);
    Run full = run_fused(params, {shape, 3, {}, {}});
    shape["causal"] = 1;
    Run tri = run_fused(params, {shape, 3, {}, {}});
    CHECK(compare_outputs(full.p).ok);
    CHECK(compare_outputs(tri.p).ok);
    const double ratio = double(kv_bytes(tri.stats)) / double(kv_bytes(full.stats));
    INFO("K/V bytes causal " << kv_bytes(tri.stats) << " / without " << kv_bytes(full.stats) << " = " << ratio);
    CHECK(ratio <= c.bound);
    CHECK(ratio >= double(c.tiles + 1) / double(2 * c.tiles) - 0.01); // the triangle needs that much
  }
}
