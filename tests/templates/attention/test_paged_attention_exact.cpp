// Paged attention right for every config and every input (issue 28): windows of any length,
// float options the kernels can take, dead cache slots holding NaN or Inf, a traffic budget
// that every valid run meets, and a tolerance that follows the magnitudes of the scores.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/launchers.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"
#include "tests/runtime/helpers.h"
#include "tests/templates/attention/pa_test_util.h"

using namespace tilec;
using namespace tilec::templates;

namespace {

ParamMap defaults(const std::vector<Param>& ps) {
  ParamMap m;
  for (const Param& p : ps) m[p.name] = p.value;
  return m;
}

template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

using tilec::templates::test::paged_attention;
using tilec::templates::test::Run;
using tilec::templates::test::run_emulated;
using tilec::templates::test::output;

} // namespace

TEST_CASE("a window of 2^32 or more is no window on both paths (the fused kernel took 2^32 + 1 as 1)",
          "[templates][emulator][paged_attention][paged_exact]") {
  // The window the computations apply: none once it reaches the capacity or 2^31 - 1, and
  // below that the window itself, which a 32-bit kernel value holds.
  PagedAttentionShape s;
  s.block_size = 16, s.max_blocks = 16; // capacity 256
  for (auto [window, applied] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 0}, {1, 1}, {255, 255}, {256, 0}, {(int64_t(1) << 32) + 1, 0}, {std::numeric_limits<int64_t>::max(), 0}}) {
    s.window = window;
    CHECK(s.effective_window() == applied);
    CHECK(s.first_key(100) == (applied ? std::max<int64_t>(0, 100 - 1 - applied + 1) : 0));
  }
  s.max_blocks = int64_t(1) << 24, s.block_size = 256; // capacity 2^32: the context's limit decides
  s.window = int64_t(1) << 31;
  CHECK(s.effective_window() == 0);
  s.window = (int64_t(1) << 31) - 2;
  CHECK(s.effective_window() == s.window);

  // 2^32 + 1 against no window, on ragged contexts, with several query rows, both paths.
  ParamMap params = defaults(paged_attention().params);
  params["block_n"] = 16;
  for (const char* path : {"fused", "decompose"})
    for (int64_t sq : {1, 3}) {
      ParamMap shape{{"sq", sq}, {"dtype", 1}, {"block_size", 8}, {"max_blocks", 6}};
      INFO("path " << path << " sq " << sq);
      shape["window"] = 0;
      Run none = run_emulated(path, params, {shape, 5, {}, {}});
      shape["window"] = (int64_t(1) << 32) + 1;
      Run huge = run_emulated(path, params, {shape, 5, {}, {}});
      Comparison c = compare_outputs(huge.p);
      INFO(c.first_mismatch);
      CHECK(c.ok);
      CHECK(output(huge.p).bytes == output(none.p).bytes);
      // And a window of one key sees one key: not the same answer.
      shape["window"] = 1;
      CHECK(output(run_emulated(path, params, {shape, 5, {}, {}}).p).bytes != output(none.p).bytes);
    }
}

TEST_CASE("float options that f32 cannot hold are refused and named", "[templates][paged_attention][paged_exact][errors]") {
  // The kernels take them as f32: 1e39 was finite in double, passed, and became inf there.
  const KernelTemplate& t = paged_attention();
  ParamMap fp8{{"kv_dtype", 1}, {"dtype", 1}}, plain;
  auto refused = [&](const ParamMap& shape, const std::string& option, double value) {
    return error_of([&] { make_problem(t, {shape, 1, {{option, value}}, {}}); });
  };
  for (const char* option : {"k-scale", "v-scale"}) {
    INFO(option);
    CHECK_THAT(refused(fp8, option, 1e39), Catch::Contains(fmt::format("--{} 1e+39", option)) &&
                                                Catch::Contains("f32") && Catch::Contains("f8e4m3"));
    CHECK_THAT(refused(fp8, option, 1e-39), Catch::Contains(fmt::format("--{} 1e-39", option))); // an f32 denormal
    CHECK_THAT(refused(fp8, option, 0), Catch::Contains(fmt::format("--{} 0", option)));          // not "choose one"
    CHECK_THAT(refused(fp8, option, -1), Catch::Contains(option[0] == 'k' ? "k_scale" : "v_scale"));
    CHECK(refused(fp8, option, 0.01).empty());
  }
  CHECK_THAT(refused(plain, "softcap", 1e39), Catch::Contains("--softcap 1e+39") && Catch::Contains("f32"));
  CHECK_THAT(refused(plain, "softcap", 0), Catch::Contains("--softcap 0"));
  CHECK_THAT(refused(plain, "softcap", NAN), Catch::Contains("--softcap nan"));
  CHECK_THAT(refused(plain, "softmax-scale", 1e39), Catch::Contains("--softmax-scale 1e+39"));
  CHECK_THAT(refused(plain, "softmax-scale", -1e39), Catch::Contains("--softmax-scale -1e+39"));
  CHECK_THAT(refused(plain, "softmax-scale", 0), Catch::Contains("--softmax-scale 0") &&
                                                    Catch::Contains("leave it out"));
  CHECK_THAT(refused(plain, "softmax-scale", INFINITY), Catch::Contains("--softmax-scale inf"));
  CHECK(refused(plain, "softmax-scale", -0.5).empty()); // unusual, but f32 holds it
  CHECK(refused(plain, "softcap", 3e38).empty());

  // The same rules for a caller of the C++ API, by the inputs' field names; and the product the
  // fused kernel scores with must be an f32 too.
  PagedAttentionShape s;
  s.batch = 1, s.hq = 2, s.hkv = 1, s.head_dim = 16, s.block_size = 4, s.max_blocks = 2;
  auto msg = [](const PagedAttentionInputs& in) { return error_of([&] { validate_paged_attention(in, false); }); };
  PagedAttentionInputs in = make_paged_attention_inputs(s, 1, 5);
  CHECK(msg(in).empty());
  in.shape.softcap = 1e39;
  CHECK_THAT(msg(in), Catch::Contains("softcap 1e+39"));
  in.shape.softcap.reset();
  in.shape.softmax_scale = 1e39;
  CHECK_THAT(msg(in), Catch::Contains("softmax scale 1e+39"));
  in.shape.softmax_scale = 1e-40;
  CHECK_THAT(msg(in), Catch::Contains("softmax scale 1e-40"));
  s.kv_fp8 = ir::DType::f8e5m2, s.dtype = ir::DType::bf16;
  in = make_paged_attention_inputs(s, 1, 5);
  CHECK(msg(in).empty());
  in.shape.k_scale = 1e39;
  CHECK_THAT(msg(in), Catch::Contains("k_scale") && Catch::Contains("1e+39"));
  in.shape.k_scale = 1e20, in.shape.softmax_scale = 1e20; // each an f32, their product not
  CHECK_THAT(msg(in), Catch::Contains("times k_scale"));
}

TEST_CASE("the fp8 scales (--k-scale, --v-scale) are refused for caches that are not fp8 (generated or read from files)",
          "[templates][paged_attention][paged_exact][errors][npy]") {
  const KernelTemplate& t = paged_attention();
  rt::test::TempDir dir;
  PagedAttentionShape s;
  s.batch = 2, s.hq = 4, s.hkv = 2, s.head_dim = 16, s.block_size = 4, s.max_blocks = 3, s.dtype = ir::DType::f16;
  write_paged_attention_inputs(dir.path.string(), make_paged_attention_inputs(s, 3));
  for (const char* option : {"k-scale", "v-scale"})
    for (double value : {0.5, 0.0}) { // 0 once passed as "not given"
      INFO(option << " " << value);
      CHECK_THAT(error_of([&] { make_problem(t, {{}, 1, {{option, value}}, dir.path.string()}); }),
                 Catch::Contains(fmt::format("--{}", option)) && Catch::Contains("not fp8"));
      CHECK_THAT(error_of([&] { make_problem(t, {{{"dtype", 1}}, 1, {{option, value}}, {}}); }),
                 Catch::Contains(fmt::format("--{}", option)) && Catch::Contains("not fp8"));
    }
  CHECK(error_of([&] { make_problem(t, {{}, 1, {}, dir.path.string()}); }).empty());
  // And for a caller of the C++ API.
  PagedAttentionInputs in = make_paged_attention_inputs(s, 3);
  in.shape.v_scale = 0.5;
  CHECK_THAT(error_of([&] { validate_paged_attention(in, false); }), Catch::Contains("v_scale 0.5") &&
                                                                          Catch::Contains("fp8"));
}

TEST_CASE("NaN and Inf in the dead slots of a cache never reach the output on either path",
          "[templates][emulator][paged_attention][paged_exact][fp8]") {
  // Every slot no sequence uses — the tail of each sequence's last live page, and the pages
  // only unused block-table entries name — holds NaN or +-Inf in both caches. The fused kernel
  // never loads them; the decomposition gathers them (its unused entries point at page 0) and
  // must mask them in K and V before any product: 0 * NaN in probs . V was NaN.
  struct Case {
    ir::DType dtype;
    std::optional<ir::DType> kv;
    std::vector<uint16_t> poison; // bit patterns of the cache's element type
  };
  const Case cases[] = {{ir::DType::f16, std::nullopt, {0x7E00, 0x7C00, 0xFC00}}, // NaN, +Inf, -Inf
                        {ir::DType::f32, std::nullopt, {0x7FC0, 0x7F80, 0xFF80}}, // the same (high halves)
                        {ir::DType::f16, ir::DType::f8e4m3, {0x7F, 0xFF}},        // e4m3's NaNs
                        {ir::DType::bf16, ir::DType::f8e5m2, {0x7F, 0x7C, 0xFC}}}; // NaN, +Inf, -Inf
  auto launcher = backends::make_emulate_launcher();
  uint64_t seed = 40;
  for (const Case& c : cases) {
    PagedAttentionShape s;
    s.batch = 4, s.hq = 4, s.hkv = 2, s.sq = 2, s.head_dim = 24, s.block_size = 8, s.max_blocks = 3;
    s.num_blocks = 16, s.dtype = c.dtype, s.kv_fp8 = c.kv, s.alibi = true, s.softcap = 20.0;
    // Generated at full capacity (every block-table entry a valid page), then shortened.
    PagedAttentionInputs in = make_paged_attention_inputs(s, seed++, s.capacity());
    const std::vector<int64_t> lens = {13, 3, 0, 17}; // inside pages, empty, one past a page
    std::vector<char> live(size_t(s.num_blocks * s.block_size), 0);
    for (int64_t b = 0; b < s.batch; ++b) {
      in.context_lens.set_int(size_t(b), lens[size_t(b)]);
      for (int64_t j = 0; j < lens[size_t(b)]; ++j)
        live[size_t(in.block_table.get_int(size_t(b * s.max_blocks + j / s.block_size)) * s.block_size +
                    j % s.block_size)] = 1;
    }
    // The decomposition gathers every entry, those past the live pages pointed at page 0.
    const size_t elem = size_t(ir::dtype_bytes(in.k_cache.dtype)), row = size_t(s.hkv * s.head_dim);
    size_t n = 0, dead = 0;
    for (size_t slot = 0; slot < live.size(); ++slot) {
      if (live[slot]) continue;
      ++dead;
      for (launch::Buffer* cache : {&in.k_cache, &in.v_cache})
        for (size_t e = slot * row; e < (slot + 1) * row; ++e) {
          const uint16_t bits = c.poison[n++ % c.poison.size()];
          std::byte* at = cache->bytes.data() + e * elem;
          if (elem == 1) *at = std::byte(bits);
          else if (elem == 2) std::memcpy(at, &bits, 2);
          else std::memcpy(at + 2, &bits, 2), std::memset(at, 0, 2); // f32: the high half
        }
    }
    REQUIRE(dead > size_t(s.block_size)); // tails and whole pages
    PagedAttentionMagnitudes seen;
    const launch::Buffer want = paged_attention_reference(in, &seen);
    const PagedAttentionTolerance tol = paged_attention_tolerance(in.shape, seen);
    const launch::Buffer table = block_table_unused_cleared(in);
    for (bool fused : {true, false}) {
      INFO((fused ? "fused" : "decompose") << " q " << ir::dtype_name(c.dtype) << " cache "
                                           << ir::dtype_name(in.k_cache.dtype));
      const launch::Buffer got = fused ? run_paged_attention_fused(in, {16, 0, 4, 2, 2}, *launcher)
                                       : run_paged_attention_decomposed(in, *launcher, &table);
      size_t bad = 0;
      for (size_t i = 0; i < got.count(); ++i) {
        const double g = got.get(i), w = want.get(i);
        if (!(std::abs(g - w) <= tol.atol + tol.rtol * std::abs(w)) && bad++ < 3)
          FAIL_CHECK(fmt::format("out[{}]: got {}, want {}", i, g, w));
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("every valid run stays within the traffic budget and matches the reference (emulator sweep)",
          "[templates][emulator][paged_attention][paged_exact][traffic]") {
  // The budget is what the kernels must move (paged_attention_traffic: whole tiles at the window's
  // edge, tiles smaller than the block read by every warp holding them, a warp-uniform context
  // length per warp, page entries per 32-token request, splits that see no key still reading q
  // and writing partials) plus 2%. Four problems that once went over it, then a sweep of
  // kernels (each compiled once) over several problems each.
  const KernelTemplate& t = paged_attention();
  struct Case {
    ParamMap shape, set;
    std::map<std::string, double> options;
  };
  std::vector<Case> cases = {
      {{{"batch", 1}, {"hq", 1}, {"hkv", 1}, {"head_dim", 64}, {"block_size", 16}, {"ctx", 17}, {"window", 1}},
       {{"num_warps", 8}}, {}},
      {{{"batch", 1}, {"hq", 1}, {"hkv", 1}, {"head_dim", 64}, {"ctx", 1}, {"dtype", 1}, {"kv_dtype", 1}}, {}, {}},
      {{{"batch", 1}, {"hq", 4}, {"hkv", 1}, {"head_dim", 128}, {"block_size", 1}, {"ctx", 21}, {"dtype", 2}}, {}, {}},
      {{{"window", 3}, {"batch", 1}, {"hq", 1}, {"hkv", 1}, {"ctx", 100}, {"dtype", 1}, {"kv_dtype", 2}, {"head_dim", 16}},
       {{"num_splits", 8}, {"num_warps", 8}}, {}},
  };
  std::mt19937_64 rng(2028);
  auto pick = [&](std::vector<int64_t> v) { return v[size_t(rng() % v.size())]; };
  for (int kernel = 0; kernel < 20; ++kernel) {
    // What the kernel is specialized on.
    Case k;
    const int64_t hkv = pick({1, 2}), ratio = pick({1, 2, 3, 4}), sq = pick({1, 1, 2, 3});
    k.shape = {{"hkv", hkv}, {"hq", hkv * ratio}, {"sq", sq}, {"head_dim", pick({16, 24, 64, 80, 128})},
               {"block_size", pick({1, 2, 3, 5, 8, 16, 32})}, {"dtype", pick({0, 1, 2})},
               {"alibi", pick({0, 1})}, {"window", pick({0, 0, 1, 2, 3, 7, 40})}, {"causal", pick({0, 0, 1})}};
    k.shape["kv_dtype"] = k.shape["dtype"] ? pick({0, 1, 2}) : 0;
    std::vector<int64_t> groups;
    for (int64_t g = 1; g <= ratio; ++g)
      if (ratio % g == 0) groups.push_back(g);
    k.set = {{"block_n", pick({1, 4, 8, 16, 32, 64, 128})}, {"head_group", pick(groups)},
             {"num_warps", pick({1, 2, 4, 8})}, {"num_splits", pick({1, 1, 2, 4, 8})}, {"num_stages", pick({1, 2, 3})}};
    const bool softcap = pick({0, 1});
    // The problems it serves: ragged or fixed (tiny) contexts.
    for (int problem = 0; problem < 3; ++problem) {
      Case c = k;
      const int64_t ctx = pick({-1, -1, 0, 1, 2, 5, 17, 40, 90});
      c.shape["batch"] = pick({1, 2, 3});
      c.shape["ctx"] = k.shape["causal"] && ctx >= 0 ? std::max(ctx, sq) : ctx;
      const int64_t enough = cdiv(std::max<int64_t>({c.shape["ctx"], sq, 1}), k.shape["block_size"]);
      c.shape["max_blocks"] = c.shape["ctx"] > 0 && pick({0, 1}) ? 0 : enough + pick({0, 1, 3});
      if (softcap) c.options["softcap"] = double(pick({5, 30}));
      if (pick({0, 0, 1})) c.options["softmax-scale"] = 0.05 * double(pick({1, 3, 10}));
      cases.push_back(c);
    }
  }
  int index = 0;
  for (const Case& c : cases) {
    ParamMap params = defaults(t.params);
    for (const auto& [name, v] : c.set) params[name] = v;
    std::string desc = fmt::format("case {}:", index);
    for (const auto& [name, v] : c.shape) desc += fmt::format(" {}={}", name, v);
    for (const auto& [name, v] : params) desc += fmt::format(" {}={}", name, v);
    for (const auto& [name, v] : c.options) desc += fmt::format(" --{} {}", name, v);
    INFO(desc);
    Run r = run_emulated("", params, {c.shape, uint64_t(100 + index++), c.options, {}});
    Comparison cmp = compare_outputs(r.p);
    INFO(cmp.first_mismatch);
    CHECK(cmp.ok);
    REQUIRE(r.stats.request_bytes);
    std::string why = traffic_error(t, "", params, r.p, r.stats);
    INFO(why);
    CHECK(why.empty());
    // The budget follows what the kernels move, so it stays tight: the replay is within 2%
    // of the emulator's count, and on the small problems above one K tile more (an unmasked
    // step, a window start rounded down) is too much.
    const auto& in = std::any_cast<const PagedAttentionInputs&>(r.p.context);
    const int64_t model = paged_attention_traffic(in, paged_attention_config(params)).total();
    CHECK(std::abs(double(model - *r.stats.request_bytes)) <= 0.02 * double(*r.stats.request_bytes));
    if (index <= 4) {
      launch::LaunchStats more = r.stats;
      *more.request_bytes += params["block_n"] * in.shape.head_dim * ir::dtype_bytes(in.shape.cache_dtype());
      CHECK_FALSE(traffic_error(t, "", params, r.p, more).empty());
    }
  }
  CHECK(cases.size() >= 60);
}

TEST_CASE("the reference tolerance follows the scores' magnitude: large ALiBi scores pass and a wrong output fails",
          "[templates][emulator][paged_attention][paged_exact][npy]") {
  // ALiBi slopes 4x the usual, a softcap of 50, head_dim 256, f32: scores reach the thousands,
  // where f32 rounds them by 1e-4 and more, and both paths agree with each other far closer
  // than with the reference. A fixed atol of 1e-5 failed them.
  const KernelTemplate& t = paged_attention();
  rt::test::TempDir dir;
  PagedAttentionShape s;
  s.batch = 2, s.hq = 16, s.hkv = 1, s.head_dim = 256, s.block_size = 16, s.max_blocks = 32, s.alibi = true;
  PagedAttentionInputs in = make_paged_attention_inputs(s, 2, 500);
  for (size_t h = 0; h < in.alibi_slopes.count(); ++h) in.alibi_slopes.set(h, 4 * in.alibi_slopes.get(h));
  write_paged_attention_inputs(dir.path.string(), in);
  ParamMap params = defaults(t.params);
  const ProblemRequest request{{}, 1, {{"softcap", 50.0}}, dir.path.string()};
  std::vector<launch::Buffer> outs;
  for (const char* path : {"fused", "decompose"}) {
    INFO(path);
    Run r = run_emulated(path, params, request);
    Comparison c = compare_outputs(r.p);
    INFO(c.first_mismatch << " max abs err " << c.max_abs_err << " atol " << r.p.atol);
    CHECK(c.ok);
    CHECK(r.p.atol < 1e-3); // still a bound that means something
    Problem fixed = r.p;    // what the fixed f32 tolerance refused
    fixed.atol = 1e-5, fixed.rtol = 1e-4;
    CHECK_FALSE(compare_outputs(fixed).ok);
    outs.push_back(output(r.p));

    // The same output with one element off by 1e-3 (a tenth of a percent of max |v|) fails.
    Problem wrong = r.p;
    launch::Buffer& o = wrong.buffers.at(size_t(wrong.outputs.at(0)));
    o.set(7, o.get(7) + 1e-3);
    CHECK_FALSE(compare_outputs(wrong).ok);
  }
  double agree = 0;
  for (size_t i = 0; i < outs[0].count(); ++i) agree = std::max(agree, std::abs(outs[0].get(i) - outs[1].get(i)));
  // The fused kernel's scores are in log2 units (times log2 e, rounded in f32) and the
  // decomposition's are not: at scores in the thousands, where an f32 ulp is about 1e-4, they
  // round apart by that much and the outputs by 4e-5 (measured), still well inside atol.
  CHECK(agree < 1e-4);

  // The plain generated problem with ALiBi over a long f32 context failed the same way.
  Run longer = run_emulated("", params, {{{"alibi", 1}, {"ctx", 3000}, {"batch", 1}}, 1, {}, {}});
  Comparison c = compare_outputs(longer.p);
  INFO(c.first_mismatch);
  CHECK(c.ok);

  // f16 and bf16 keep the tolerances they had (max |v| = 1 here), the rule's 4 epsilons.
  PagedAttentionMagnitudes unit;
  unit.value = 1, unit.score = 3, unit.keys = 100;
  PagedAttentionShape h;
  h.dtype = ir::DType::f16;
  CHECK(paged_attention_tolerance(h, unit).atol == Approx(4e-3).epsilon(0.03));
  h.dtype = ir::DType::bf16;
  CHECK(paged_attention_tolerance(h, unit).atol == Approx(3.1e-2).epsilon(0.03));
  h.dtype = ir::DType::f32;
  CHECK(paged_attention_tolerance(h, unit).atol < 1e-5);
  unit.value = 0; // all-zero values: the output is exactly zero
  CHECK(paged_attention_tolerance(h, unit).atol == 0);
}
