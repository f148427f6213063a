// Paged attention at every query length (docs/PAGED_ATTENTION.md "Query tiles"): the fused
// kernel in query tiles of block_m packed rows against the reference over many Sq, with every
// feature mixed in and on both emulator lowerings; causal tiles load only the triangle.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <random>
#include <string>
#include <vector>

#include "backends/launchers.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"

using namespace tilec;
using namespace tilec::templates;

namespace {

const KernelTemplate& paged_attention() {
  const KernelTemplate* t = find_template("paged_attention");
  REQUIRE(t);
  return *t;
}

ParamMap default_params() { return resolve_params(paged_attention().params, {}, "--set"); }

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

// The run matches the reference, stays within the traffic budget, and the host replay of the
// tiles' walks is within 2% of the emulator's count.
void check_run(const Run& r, const ParamMap& params) {
  Comparison cmp = compare_outputs(r.p);
  INFO(cmp.first_mismatch);
  CHECK(cmp.ok);
  std::string why = traffic_error(paged_attention(), "fused", params, r.p, r.stats);
  INFO(why);
  CHECK(why.empty());
  const auto& in = std::any_cast<const PagedAttentionInputs&>(r.p.context);
  const int64_t model = paged_attention_traffic(in, paged_attention_config(params)).total();
  REQUIRE(r.stats.request_bytes);
  CHECK(std::abs(double(model - *r.stats.request_bytes)) <= 0.02 * double(*r.stats.request_bytes));
}

int64_t kv_bytes(const launch::LaunchStats& st) {
  return st.buffer_request_bytes.at("k_cache") + st.buffer_request_bytes.at("v_cache");
}

} // namespace

TEST_CASE("the fused kernel in query tiles matches the reference at every Sq, with every feature, on both lowerings",
          "[templates][emulator][paged_attention][prefill]") {
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
      check_run(r, params);
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
    ParamMap shape = resolve_params(paged_attention().shape, {}, "--shape");
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

TEST_CASE("a mixed batch (query_start_loc) matches the reference: decode rows and prefill chunks in one launch",
          "[templates][emulator][paged_attention][prefill][varlen]") {
  const KernelTemplate& t = paged_attention();
  std::mt19937_64 rng(32);
  auto pick = [&](std::vector<int64_t> v) { return v[size_t(rng() % v.size())]; };
  int index = 0;
  for (int64_t sq : {1, 3, 16, 40, 100})
    for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
      ParamMap shape = resolve_params(t.shape, {}, "--shape");
      const int64_t hkv = pick({1, 2}), ratio = pick({1, 2, 4});
      shape["batch"] = pick({2, 3, 4}), shape["hkv"] = hkv, shape["hq"] = hkv * ratio, shape["sq"] = sq;
      shape["head_dim"] = pick({16, 64, 80}), shape["block_size"] = pick({4, 16}), shape["varlen"] = 1;
      shape["causal"] = pick({0, 1}), shape["window"] = pick({0, 0, 9}), shape["alibi"] = pick({0, 1});
      shape["dtype"] = pick({0, 2}), shape["ctx"] = pick({-1, sq + 20});
      shape["max_blocks"] = (sq + 40) / shape["block_size"] + 1; // room for causal rows at any ctx
      ParamMap params = default_params();
      params["block_m"] = pick({0, 4, 16, 64}), params["num_splits"] = pick({1, 2}), params["block_n"] = pick({16, 32});
      std::string desc = fmt::format("case {}:", index);
      for (const auto& [name, v] : shape) desc += fmt::format(" {}={}", name, v);
      for (const auto& [name, v] : params) desc += fmt::format(" {}={}", name, v);
      INFO(desc);
      Run r = run_fused(params, {shape, uint64_t(900 + index++), {}, {}}, lowering);
      const auto& in = std::any_cast<const PagedAttentionInputs&>(r.p.context);
      if (shape["batch"] > 1) CHECK(in.query_len(0) == 1); // a decode row beside the longer queries
      CHECK(in.query_len(shape["batch"] - 1) == sq);
      check_run(r, params);
    }
}

TEST_CASE("the same queries in the seed's [B, Hq, Sq, D] layout and packed as a mixed batch give the same output",
          "[templates][emulator][paged_attention][prefill][varlen]") {
  PagedAttentionShape s;
  s.batch = 3, s.hq = 4, s.hkv = 2, s.sq = 6, s.head_dim = 32, s.block_size = 8, s.max_blocks = 8, s.causal = true;
  const PagedAttentionInputs fixed = make_paged_attention_inputs(s, 11);
  // The same rows packed: sequence b's row i of head h at (b * Sq + i) * Hq + h.
  PagedAttentionInputs packed = fixed;
  packed.shape.varlen = true;
  packed.query_start_loc = launch::Buffer("query_start_loc", ir::DType::i32, size_t(s.batch + 1));
  for (int64_t b = 0; b <= s.batch; ++b) packed.query_start_loc.set_int(size_t(b), b * s.sq);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.hq; ++h)
      for (int64_t i = 0; i < s.sq; ++i)
        for (int64_t d = 0; d < s.head_dim; ++d)
          packed.q.set(packed.q_offset(b, h, i) + size_t(d), fixed.q.get(fixed.q_offset(b, h, i) + size_t(d)));
  validate_paged_attention(packed, false);
  const launch::Buffer want_fixed = paged_attention_reference(fixed), want_packed = paged_attention_reference(packed);
  PagedAttentionConfig cfg;
  cfg.block_m = 4; // tiles of 4 of the 2 x 6 packed rows per KV head
  auto emu = backends::make_emulate_launcher();
  const launch::Buffer got_fixed = run_paged_attention_fused(fixed, cfg, *emu);
  const launch::Buffer got_packed = run_paged_attention_fused(packed, cfg, *emu);
  double worst = 0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.hq; ++h)
      for (int64_t i = 0; i < s.sq; ++i)
        for (int64_t d = 0; d < s.head_dim; ++d) {
          const size_t f = fixed.q_offset(b, h, i) + size_t(d), p = packed.q_offset(b, h, i) + size_t(d);
          CHECK(want_packed.get(p) == want_fixed.get(f)); // one reference for both layouts
          CHECK(got_packed.get(p) == got_fixed.get(f));   // and the same arithmetic in the kernel
          worst = std::max(worst, std::abs(got_fixed.get(f) - want_fixed.get(f)));
        }
  CHECK(worst < 1e-5);
  // Malformed offsets are refused, naming the entries.
  packed.query_start_loc.set_int(1, 0); // sequence 0 empty, sequence 1 twelve rows: more than sq
  CHECK_THROWS_WITH(validate_paged_attention(packed, false),
                    Catch::Contains("query_start_loc[2] - query_start_loc[1] = 12") && Catch::Contains("sq = 6"));
  packed.query_start_loc.set_int(0, 1);
  CHECK_THROWS_WITH(validate_paged_attention(packed, false), Catch::Contains("query_start_loc[0] = 1"));
}
