// A serving loop as an engine runs it, through the runtime a host links (rt::OpStore over a
// folder of modules and kernel cards, as `autotune --export` writes one, on the emulator):
// each step writes its new tokens' K and V into the paged cache with reshape_and_cache, then
// attends over the cache with paged_attention. Every step's output is held to attention
// computed here from the definitions, over the tokens each sequence has been given (kept in
// plain arrays, never read back from the cache), so a token written to the wrong slot, a
// page lost or read twice, or a padding token that lands anywhere shows at the step it happens.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends/module_builder.h"
#include "runtime/op_store.h"
#include "templates/registry.h"
#include "tests/runtime/helpers.h"

using namespace tilec;
using namespace tilec::templates;

namespace {

// One attention layer of a served model, shrunk to a few pages.
struct Layer {
  const char* name;
  int64_t hq, hkv, head_dim, head_dim_v; // head_dim_v: V's and out's
  bool latent;                           // MLA: one cache, V its first head_dim_v columns
  bool sinks;                            // gpt-oss: a sink logit per query head
  int64_t window;                        // 0: none
  int64_t sq;                            // query rows a step (causal when > 1: multi-token prediction)
  std::vector<std::string> attention_config; // over the card's defaults
};

constexpr int64_t kBatch = 2, kBlockSize = 4, kMaxBlocks = 6, kNumBlocks = 12;
constexpr ir::DType kDtype = ir::DType::bf16;

const KernelTemplate& find(const char* name) {
  const KernelTemplate* t = find_template(name);
  REQUIRE(t);
  return *t;
}

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> w;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    if (end > at) w.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return w;
}

rt::OpTensorArg tensor(const char* name, launch::Buffer& b, std::vector<int64_t> dims) {
  return {name, reinterpret_cast<uint64_t>(b.bytes.data()), b.dtype, std::move(dims), {}};
}

// The serving loop for `layer`: sequences of prompt lengths 5 and 9 (the second past two
// pages), then three steps of `sq` new tokens each; each step's write carries one padding token
// (slot -1) whose row must land nowhere. Pages come from a shuffled free list as positions
// cross page edges, so neither sequence's pages are contiguous.
void serve(const Layer& layer) {
  const KernelTemplate& rac = find("reshape_and_cache");
  const KernelTemplate& pa = find("paged_attention");
  const int64_t D = layer.head_dim, DV = layer.head_dim_v, HKV = layer.hkv, HQ = layer.hq, SQ = layer.sq;
  const double scale = 1.0 / std::sqrt(double(D == 576 ? 192 : D)); // MLA scales by its 192-wide query

  // The folder a host opens: both ops' modules for the one config each runs, and their cards.
  rt::test::TempDir dir;
  const std::string common = fmt::format("hkv={} head_dim={} num_blocks={} block_size={} dtype=bf16{}", HKV, D,
                                         kNumBlocks, kBlockSize, layer.latent ? " latent=1" : "");
  const ParamMap rac_params = resolve_params(rac.params, {}, "--set");
  backends::write_template_modules(rac, rac_params, resolve_params(rac.shape, words(common), "--shape"), "host",
                                   dir.path, true);
  const std::string pa_shape =
      fmt::format("batch={} hq={} hkv={} sq={} head_dim={} block_size={} max_blocks={} num_blocks={} dtype=bf16{}{}{}{}",
                  kBatch, HQ, HKV, SQ, D, kBlockSize, kMaxBlocks, kNumBlocks, layer.latent ? " latent=1" : "",
                  DV != D ? fmt::format(" head_dim_v={}", DV) : "", layer.sinks ? " sinks=1" : "",
                  layer.window ? fmt::format(" window={}", layer.window) : "");
  const ParamMap pa_params = resolve_params(pa.params, layer.attention_config, "--set");
  backends::write_template_modules(pa, pa_params, resolve_params(pa.shape, words(pa_shape + (SQ > 1 ? " causal=1" : "")),
                                                                 "--shape"),
                                   "host", dir.path, true);
  rt::write_kernel_card(kernel_card(rac), dir.path);
  rt::write_kernel_card(kernel_card(pa), dir.path);
  auto store = rt::OpStore::open(dir.path, "emulate");
  const rt::Op& write = store->op("reshape_and_cache");
  const rt::Op& attend = store->op("paged_attention");

  // The engine's state: the caches (every slot NaN until written: a read of a slot no token
  // was written to poisons the output), the block table, and each sequence's tokens as given.
  launch::Buffer k_cache("k_cache", kDtype, size_t(kNumBlocks * kBlockSize * HKV * D));
  launch::Buffer v_cache("v_cache", kDtype, layer.latent ? 0 : size_t(kNumBlocks * kBlockSize * HKV * DV));
  for (size_t i = 0; i < k_cache.count(); ++i) k_cache.set(i, std::numeric_limits<double>::quiet_NaN());
  for (size_t i = 0; i < v_cache.count(); ++i) v_cache.set(i, std::numeric_limits<double>::quiet_NaN());
  launch::Buffer block_table("block_table", ir::DType::i32, size_t(kBatch * kMaxBlocks));
  std::vector<int64_t> free_pages = {7, 2, 10, 0, 5, 9, 3, 11, 1, 6, 4, 8};
  std::vector<std::vector<double>> keys(kBatch), values(kBatch); // [token][HKV x D], [token][HKV x DV]
  std::vector<float> sinks(static_cast<size_t>(HQ));
  for (int64_t h = 0; h < HQ; ++h) sinks[size_t(h)] = h == HQ - 1 ? -INFINITY : float(-1.0 + 0.5 * double(h % 7));

  std::mt19937_64 rng(1234);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  const std::vector<std::vector<int64_t>> new_tokens = {{5, 9}, {SQ, SQ}, {SQ, SQ}, {SQ, SQ}};
  int64_t steps = 0;
  for (const std::vector<int64_t>& step : new_tokens) {
    INFO(fmt::format("{}: step {}", layer.name, steps));
    // 1. Write: the step's tokens, sequence by sequence, and a padding token first.
    const int64_t T = 1 + step[0] + step[1];
    launch::Buffer key("key", kDtype, size_t(T * HKV * D)), value("value", kDtype, size_t(T * HKV * DV));
    launch::Buffer slots("slot_mapping", ir::DType::i64, size_t(T));
    for (size_t i = 0; i < key.count(); ++i) key.set(i, i < size_t(HKV * D) ? 1000.0 : uniform(rng));
    for (size_t i = 0; i < value.count(); ++i) value.set(i, i < size_t(HKV * DV) ? 1000.0 : uniform(rng));
    slots.set_int(0, -1);
    int64_t t = 1;
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t n = 0; n < step[size_t(b)]; ++n, ++t) {
        const int64_t pos = int64_t(keys[size_t(b)].size()) / (HKV * D); // tokens so far
        if (pos % kBlockSize == 0) {
          REQUIRE(!free_pages.empty());
          block_table.set_int(size_t(b * kMaxBlocks + pos / kBlockSize), free_pages.front());
          free_pages.erase(free_pages.begin());
        }
        const int64_t page = block_table.get_int(size_t(b * kMaxBlocks + pos / kBlockSize));
        slots.set_int(size_t(t), page * kBlockSize + pos % kBlockSize);
        // The token as the cache holds it: latent, V is the first DV columns of its K row.
        std::vector<double> k(size_t(HKV * D)), v(size_t(HKV * DV));
        for (int64_t i = 0; i < HKV * D; ++i) k[size_t(i)] = key.get(size_t(t * HKV * D + i));
        for (int64_t h = 0; h < HKV; ++h)
          for (int64_t d = 0; d < DV; ++d)
            v[size_t(h * DV + d)] = layer.latent ? k[size_t(h * D + d)] : value.get(size_t((t * HKV + h) * DV + d));
        keys[size_t(b)].insert(keys[size_t(b)].end(), k.begin(), k.end());
        values[size_t(b)].insert(values[size_t(b)].end(), v.begin(), v.end());
      }
    rt::OpArgs w;
    w.tensors = {tensor("key", key, {T, HKV, D}), tensor("slot_mapping", slots, {T}),
                 tensor("k_cache", k_cache, {kNumBlocks, kBlockSize, HKV, D})};
    if (!layer.latent) {
      w.tensors.push_back(tensor("value", value, {T, HKV, DV}));
      w.tensors.push_back(tensor("v_cache", v_cache, {kNumBlocks, kBlockSize, HKV, DV}));
    }
    rt::OpCall wc = write.prepare(w);
    write.run(wc, 0, 0, nullptr);

    // 2. Attend: each sequence's last SQ tokens are the queries.
    launch::Buffer q("q", kDtype, size_t(kBatch * HQ * SQ * D)), out("out", kDtype, size_t(kBatch * HQ * SQ * DV));
    launch::Buffer lens("context_lens", ir::DType::i32, size_t(kBatch)), sink("sinks", ir::DType::f32, size_t(HQ));
    for (size_t i = 0; i < q.count(); ++i) q.set(i, uniform(rng));
    for (size_t i = 0; i < out.count(); ++i) out.set(i, std::numeric_limits<double>::quiet_NaN());
    for (int64_t b = 0; b < kBatch; ++b) lens.set_int(size_t(b), int64_t(keys[size_t(b)].size()) / (HKV * D));
    for (int64_t h = 0; h < HQ; ++h) sink.set(size_t(h), sinks[size_t(h)]);
    rt::OpArgs a;
    a.tensors = {tensor("q", q, {kBatch, HQ, SQ, D}), tensor("k_cache", k_cache, {kNumBlocks, kBlockSize, HKV, D}),
                 tensor("block_table", block_table, {kBatch, kMaxBlocks}), tensor("context_lens", lens, {kBatch}),
                 tensor("out", out, {kBatch, HQ, SQ, DV})};
    if (!layer.latent) a.tensors.push_back(tensor("v_cache", v_cache, {kNumBlocks, kBlockSize, HKV, DV}));
    if (layer.sinks) a.tensors.push_back(tensor("sinks", sink, {HQ}));
    a.scalars = {{"softmax_scale", scale}};
    if (SQ > 1) a.sizes["causal"] = int64_t(1);
    if (layer.window) a.sizes["window"] = layer.window;
    for (const auto& [k, v] : pa_params) a.config[k] = v;
    rt::OpCall ac = attend.prepare(a);
    attend.run(ac, 0, 0, nullptr);

    // 3. The definition: row i of sequence b sits at position p = len - SQ + i and sees keys
    //    j <= p (causal, or all of them at SQ 1) within the window; the sink joins the
    //    denominator. Scores in double from the bf16 values given.
    double worst = 0;
    for (int64_t b = 0; b < kBatch; ++b) {
      const int64_t len = lens.get_int(size_t(b));
      for (int64_t h = 0; h < HQ; ++h) {
        const int64_t kvh = h / (HQ / HKV);
        for (int64_t i = 0; i < SQ; ++i) {
          const int64_t p = len - SQ + i;
          const size_t row = size_t(((b * HQ + h) * SQ + i));
          std::vector<double> s;
          double m = layer.sinks ? double(sinks[size_t(h)]) : -INFINITY;
          const int64_t first = layer.window ? std::max<int64_t>(0, p - layer.window + 1) : 0;
          for (int64_t j = first; j <= p; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot += q.get(row * size_t(D) + size_t(d)) * keys[size_t(b)][size_t((j * HKV + kvh) * D + d)];
            s.push_back(dot * scale);
            m = std::max(m, s.back());
          }
          double den = layer.sinks && std::isfinite(sinks[size_t(h)]) ? std::exp(double(sinks[size_t(h)]) - m) : 0.0;
          std::vector<double> o(size_t(DV), 0.0);
          for (size_t n = 0; n < s.size(); ++n) {
            const double e = std::exp(s[n] - m);
            den += e;
            for (int64_t d = 0; d < DV; ++d)
              o[size_t(d)] += e * values[size_t(b)][size_t(((first + int64_t(n)) * HKV + kvh) * DV + d)];
          }
          for (int64_t d = 0; d < DV; ++d) {
            const double want = o[size_t(d)] / den, got = out.get(row * size_t(DV) + size_t(d));
            INFO(fmt::format("out[{}, {}, {}, {}]: got {}, expected {}", b, h, i, d, got, want));
            REQUIRE(std::abs(got - want) <= 1e-2 + 1e-2 * std::abs(want)); // bf16 out
            worst = std::max(worst, std::abs(got - want));
          }
        }
      }
    }
    CHECK(worst > 0); // compared something, in bf16
    ++steps;
  }
  CHECK(steps == 4);
  int64_t pages = 0; // each sequence holds the pages its tokens reach, and no more were taken
  for (const std::vector<double>& k : keys) pages += (int64_t(k.size()) / (HKV * D) + kBlockSize - 1) / kBlockSize;
  CHECK(int64_t(free_pages.size()) == kNumBlocks - pages);
  CHECK(pages >= 5); // both sequences crossed page edges
}

} // namespace

TEST_CASE("a serving loop writes then attends through the runtime, each step matching the definition",
          "[templates][paged_attention][reshape_and_cache][serving]") {
  // gpt-oss's sliding layers (sinks, a window of 6 over pages of 4), split in two so the combine
  // kernel counts each sink once; its full layers, also planned; DeepSeek-V3's MLA per TP-8 shard with two
  // query tokens a step (multi-token prediction, causal).
  serve({"gpt-oss sliding", 8, 2, 64, 64, false, true, 6, 1, {"num_splits=2", "block_n=16"}});
  serve({"gpt-oss full", 8, 2, 64, 64, false, true, 0, 1, {}});
  // The same layer planned: a plan on the device shares pieces of 8 keys among 3 programs (the
  // plan, attention and combine launches, and the plan's workspace, through the runtime).
  serve({"gpt-oss full, planned", 8, 2, 64, 64, false, true, 0, 1, {"split_tokens=8", "block_n=8", "plan_programs=3"}});
  serve({"DeepSeek-V3 MLA", 16, 1, 576, 512, true, false, 0, 2, {}});
}
