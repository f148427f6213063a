// Attention sinks (gpt-oss, docs/PAGED_ATTENTION.md "Attention sinks"): one logit per query
// head that joins each row's softmax denominator and adds no value. Both paths against the
// reference, alone and with every feature a model combines them with; the definition checked
// by hand on a tiny problem; split-KV counting the sink once; bad sinks refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "runtime/npy.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"
#include "tests/templates/attention/pa_test_util.h"
#include "tests/tilec_process.h"

using namespace tilec;
using namespace tilec::templates;
using tilec::test::Process;
using tilec::test::run_tilec;

namespace {

using tilec::templates::test::output;
using tilec::templates::test::paged_attention;
using tilec::templates::test::Run;

ParamMap base_shape() {
  ParamMap shape = resolve_params(paged_attention().shape, {}, "--shape");
  shape["batch"] = 2, shape["hq"] = 8, shape["hkv"] = 2, shape["head_dim"] = 32, shape["block_size"] = 8;
  shape["sinks"] = 1;
  return shape;
}

} // namespace

TEST_CASE("attention sinks match the reference on both paths, alone and with every feature they combine with",
          "[templates][emulator][paged_attention][sinks]") {
  std::mt19937_64 rng(43);
  auto pick = [&](std::vector<int64_t> v) { return v[size_t(rng() % v.size())]; };
  struct Case {
    int64_t sq, causal, window, chunk, splits, block_m, varlen, alibi;
  };
  // Decode (the transposed tile in f16/bf16), split-KV (the combine adds the sink once), query
  // tiles with causal rows, gpt-oss's sliding layers, chunks, a mixed batch, ALiBi.
  const Case cases[] = {{1, 0, 0, 0, 1, 0, 0, 0},  {1, 0, 0, 0, 4, 0, 0, 0},  {1, 0, 16, 0, 2, 0, 0, 0},
                        {4, 1, 0, 0, 1, 0, 0, 0},  {8, 1, 0, 0, 2, 4, 0, 0},  {8, 1, 12, 0, 1, 8, 0, 0},
                        {4, 1, 0, 8, 1, 0, 0, 0},  {4, 1, 0, 0, 1, 0, 1, 0},  {4, 1, 0, 0, 2, 0, 1, 0},
                        {1, 0, 0, 0, 1, 0, 0, 1}};
  for (const Case& c : cases) {
    ParamMap shape = base_shape();
    shape["sq"] = c.sq, shape["causal"] = c.causal, shape["window"] = c.window, shape["chunk"] = c.chunk;
    shape["varlen"] = c.varlen, shape["alibi"] = c.alibi;
    shape["dtype"] = pick({0, 1, 2});
    shape["kv_dtype"] = shape["dtype"] ? pick({0, 0, 1, 2}) : 0;
    shape["ctx"] = c.causal ? c.sq + pick({0, 9, 40}) : pick({-1, 0, 50});
    ParamMap params = resolve_params(paged_attention().params, {}, "--set");
    params["block_n"] = pick({8, 16});
    params["num_splits"] = c.splits;
    params["block_m"] = c.block_m;
    params["head_group"] = c.block_m ? 2 : 0;
    std::vector<const char*> paths = {"fused"};
    if (!c.varlen) paths.push_back("decompose");
    for (const char* path : paths) {
      INFO(path << " sq " << c.sq << " causal " << c.causal << " window " << c.window << " chunk " << c.chunk
                << " splits " << c.splits << " block_m " << c.block_m << " varlen " << c.varlen << " alibi " << c.alibi
                << " ctx " << shape["ctx"] << " dtype " << shape["dtype"] << " kv_dtype " << shape["kv_dtype"]);
      Run r = tilec::templates::test::run_emulated(path, params, {shape, 11, {}, {}});
      Comparison cmp = compare_outputs(r.p);
      INFO(cmp.first_mismatch);
      CHECK(cmp.ok);
      if (std::string(path) == "fused") {
        std::string why = traffic_error(paged_attention(), "fused", params, r.p, r.stats);
        INFO(why);
        CHECK(why.empty());
        const auto& in = std::any_cast<const PagedAttentionInputs&>(r.p.context);
        const PagedAttentionTraffic model = paged_attention_traffic(in, paged_attention_config(params));
        REQUIRE(r.stats.request_bytes);
        CHECK(std::abs(double(model.total() - *r.stats.request_bytes)) <= 0.02 * double(*r.stats.request_bytes));
        CHECK(model.sinks == r.stats.buffer_request_bytes.at("sinks"));
      }
    }
  }
}

TEST_CASE("a sink is one more logit in the denominator: checked by hand on a small problem",
          "[templates][emulator][paged_attention][sinks]") {
  // One sequence, one head, f32: the scores by hand, then the sink set to the row's
  // log-sum-exp halves the output, -inf leaves it as without sinks, and a huge one zeroes it.
  PagedAttentionShape s;
  s.batch = 1, s.hq = 1, s.hkv = 1, s.head_dim = 16, s.block_size = 4, s.max_blocks = 4, s.sinks = true;
  const int64_t ctx = 13;
  PagedAttentionInputs in = make_paged_attention_inputs(s, 5, ctx);
  PagedAttentionShape plain_shape = in.shape;
  plain_shape.sinks = false;
  PagedAttentionInputs plain = in;
  plain.shape = plain_shape;
  auto launcher = backends::make_emulate_launcher();
  const launch::Buffer without = run_paged_attention_fused(plain, {}, *launcher);

  double m = -INFINITY;
  std::vector<double> scores;
  for (int64_t j = 0; j < ctx; ++j) {
    const int64_t page = in.block_table.get_int(size_t(j / s.block_size));
    double dot = 0;
    for (int64_t d = 0; d < s.head_dim; ++d)
      dot += in.q.get(size_t(d)) * in.k_cache.get(size_t((page * s.block_size + j % s.block_size) * s.head_dim + d));
    scores.push_back(dot / std::sqrt(double(s.head_dim)));
    m = std::max(m, scores.back());
  }
  double sum = 0;
  for (double x : scores) sum += std::exp(x - m);
  const double lse = m + std::log(sum);

  for (int variant = 0; variant < 3; ++variant) {
    const double sink = variant == 0 ? lse : variant == 1 ? -INFINITY : 1e30;
    in.sinks.set(0, sink);
    INFO("sink " << sink);
    for (const char* path : {"fused", "decompose"}) {
      INFO(path);
      const launch::Buffer got = std::string(path) == "fused" ? run_paged_attention_fused(in, {}, *launcher)
                                                              : run_paged_attention_decomposed(in, *launcher);
      const launch::Buffer want = paged_attention_reference(in);
      for (int64_t d = 0; d < s.head_dim; ++d) {
        const double expect = variant == 0 ? without.get(size_t(d)) / 2 : variant == 1 ? without.get(size_t(d)) : 0.0;
        CHECK(got.get(size_t(d)) == Approx(expect).margin(1e-6));
        CHECK(want.get(size_t(d)) == Approx(expect).margin(1e-6));
      }
    }
  }
}

TEST_CASE("a row that sees no key gets zeros with a sink, and sinks change what rows with keys get",
          "[templates][emulator][paged_attention][sinks]") {
  ParamMap shape = base_shape();
  shape["ctx"] = 0;
  ParamMap params = resolve_params(paged_attention().params, {}, "--set");
  for (int64_t splits : {1, 2}) {
    params["num_splits"] = splits;
    Run r = tilec::templates::test::run_emulated("fused", params, {shape, 3, {}, {}});
    CHECK(compare_outputs(r.p).ok);
    for (size_t i = 0; i < output(r.p).count(); ++i) CHECK(output(r.p).get(i) == 0.0);
  }
  // With keys, the answer with sinks differs from the one without by far more than the
  // tolerance: a kernel that dropped the sink would fail the comparison.
  shape["ctx"] = 40;
  Run with = tilec::templates::test::run_emulated("fused", params, {shape, 3, {}, {}});
  shape["sinks"] = 0;
  Run without = tilec::templates::test::run_emulated("fused", params, {shape, 3, {}, {}});
  double largest = 0;
  for (size_t i = 0; i < output(with.p).count(); ++i)
    largest = std::max(largest, std::abs(output(with.p).get(i) - output(without.p).get(i)));
  CHECK(largest > 100 * (with.p.atol + with.p.rtol));
}

TEST_CASE("sinks from files: read, written and refused with exit 2 when malformed", "[templates][paged_attention][sinks]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("tilec_sinks_{}", ::getpid());
  fs::remove_all(dir);
  PagedAttentionShape s;
  s.batch = 2, s.hq = 4, s.hkv = 2, s.head_dim = 16, s.block_size = 4, s.max_blocks = 3, s.sinks = true;
  write_paged_attention_inputs(dir.string(), make_paged_attention_inputs(s, 2));
  REQUIRE(fs::exists(dir / "sinks.npy"));
  auto back = read_paged_attention_inputs(dir.string(), 0.0, std::nullopt);
  CHECK(back.shape.sinks);
  CHECK(back.sinks.count() == 4);
  CHECK(std::isinf(back.sinks.get(3))); // the generated last head has none
  {
    Process p = run_tilec({"run", "paged_attention", "--backend", "emulate", "--inputs", dir.string()});
    INFO(p.text());
    CHECK(p.exit_code == 0);
  }
  auto put = [&](std::string descr, std::vector<int64_t> shape, std::vector<float> values) {
    std::vector<std::byte> bytes(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    rt::write_npy((dir / "sinks.npy").string(), rt::NpyArray{std::move(descr), std::move(shape), std::move(bytes)});
  };
  struct Bad {
    std::string descr;
    std::vector<int64_t> shape;
    std::vector<float> values;
    std::string words;
  };
  const Bad bad[] = {{"<f4", {4}, {0, NAN, 1, 2}, "sinks[1] = nan"},
                     {"<f4", {4}, {0, 1, INFINITY, 2}, "sinks[2] = inf"},
                     {"<f4", {3}, {0, 1, 2}, "[Hq=4]"},
                     {"<f4", {2, 2}, {0, 1, 2, 3}, "2 dimensions"},
                     {"<i4", {4}, {0, 0, 0, 0}, "is not <f4"}};
  for (const Bad& b : bad) {
    put(b.descr, b.shape, b.values);
    for (const char* path : {"fused", "decompose"}) {
      Process p = run_tilec({"run", "paged_attention", "--backend", "emulate", "--path", path, "--inputs", dir.string()});
      INFO(b.words << " " << path << ": " << p.text());
      CHECK(p.exit_code == 2);
      CHECK_THAT(p.text(), Catch::Contains(b.words));
    }
  }
  fs::remove(dir / "sinks.npy");
  Process p = run_tilec({"run", "paged_attention", "--backend", "emulate", "--shape", "sinks=1", "--inputs", dir.string()});
  INFO(p.text());
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.text(), Catch::Contains("sinks.npy"));
  fs::remove_all(dir);
}
