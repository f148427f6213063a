// Split-KV by size (split_tokens, docs/PAGED_ATTENTION.md "Ragged batches: split by size"): on
// ragged batches the fused path matches the reference with every feature it combines with and
// moves what the traffic model says; no program walks more than one split's keys, where the
// uniform split's busiest program walks a long sequence's whole share; and a sequence's output
// rows are bit for bit the same alone and inside other batches.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/launchers.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"
#include "tests/templates/attention/pa_test_util.h"

using namespace tilec;
using namespace tilec::templates;
using tilec::templates::test::paged_attention;

namespace {

// Inputs with every page of the cache live in the block table, then the given context lengths.
PagedAttentionInputs ragged(PagedAttentionShape s, const std::vector<int64_t>& lens,
                            uint64_t seed) {
  s.batch = int64_t(lens.size());
  PagedAttentionInputs in = make_paged_attention_inputs(s, seed, s.capacity());
  for (size_t b = 0; b < lens.size(); ++b)
    in.context_lens.set_int(b, lens[b]);
  return in;
}

struct Fused {
  launch::Buffer out;
  launch::LaunchStats stats;
};

Fused fused(const PagedAttentionInputs& in, const PagedAttentionConfig& cfg) {
  auto launcher = backends::make_emulate_launcher();
  launch::Buffer out = run_paged_attention_fused(in, cfg, *launcher);
  return {std::move(out), launcher->stats()};
}

void check_against_reference(const PagedAttentionInputs& in, const launch::Buffer& out) {
  PagedAttentionMagnitudes mag;
  const launch::Buffer want = paged_attention_reference(in, &mag);
  const PagedAttentionTolerance tol = paged_attention_tolerance(in.shape, mag);
  size_t bad = 0;
  for (size_t i = 0; i < want.count(); ++i) {
    const double w = want.get(i), g = out.get(i);
    if (!(std::abs(g - w) <= tol.atol + tol.rtol * std::abs(w)) && bad++ < 3)
      INFO("out[" << i << "] = " << g << ", want " << w);
  }
  CHECK(bad == 0);
}

// A planned run (plan_programs) checked against the reference: the work of its attention
// launch's programs (the plan's launch is the first).
launch::LaunchStats::ProgramWork planned_work(const PagedAttentionInputs& in, const PagedAttentionConfig& cfg) {
  Fused r = fused(in, cfg);
  check_against_reference(in, r.out);
  const launch::LaunchStats::ProgramWork& w = r.stats.program_work.at(1);
  REQUIRE(w.kernel == "paged_attention");
  return w;
}

} // namespace

TEST_CASE("split by size matches the reference on ragged batches with every feature, and moves "
          "what the model says",
          "[templates][emulator][paged_attention][split_size]") {
  struct Case {
    const char* what;
    std::vector<int64_t> lens;
    int64_t sq = 1, window = 0, chunk = 0;
    bool causal = false, sinks = false, softcap = false;
    ir::DType dtype = ir::DType::bf16;
    bool varlen = false; // a mixed batch: query lengths 1, then 0 to sq, the last sq
  };
  // Empty sequences, one token, one giant beside tiny ones, exact multiples of a split.
  const Case cases[] = {
      {"ragged decode", {1, 17, 0, 300, 64, 2, 129}},
      {"one giant sequence", {480, 1, 0, 3}},
      {"sinks and a window", {200, 33, 0, 96}, 1, 40, 0, false, true},
      {"chunked local attention", {250, 7, 128}, 1, 0, 48},
      {"causal prefill chunks", {150, 9, 64}, 4, 0, 0, true},
      {"softcap in f16", {64, 65, 1, 0}, 1, 0, 0, false, false, true, ir::DType::f16},
      {"varlen prefill chunks", {140, 8, 70, 16, 300}, 8, 0, 0, true, false, false, ir::DType::bf16, true},
  };
  for (const Case& c : cases) {
    PagedAttentionShape s;
    s.hq = 8, s.hkv = 2, s.head_dim = 64, s.block_size = 16, s.max_blocks = 32, s.dtype = c.dtype;
    s.sq = c.sq, s.window = c.window, s.chunk = c.chunk, s.causal = c.causal, s.sinks = c.sinks;
    if (c.softcap) s.softcap = 30.0;
    s.varlen = c.varlen;
    for (auto [split_tokens, plan_programs] :
         {std::pair<int64_t, int64_t>{32, 0}, {64, 0}, {32, 3}, {64, 40}}) {
      INFO(c.what << ", split_tokens " << split_tokens << ", plan_programs " << plan_programs);
      PagedAttentionInputs in = ragged(s, c.lens, 5);
      PagedAttentionConfig cfg;
      cfg.block_n = 32, cfg.split_tokens = split_tokens, cfg.plan_programs = plan_programs;
      Fused r = fused(in, cfg);
      check_against_reference(in, r.out);
      // The host's replay of the walk is the emulator's count within 2%, as for every path.
      const int64_t model = paged_attention_traffic(in, cfg).total();
      REQUIRE(r.stats.request_bytes);
      CHECK(std::abs(double(model - *r.stats.request_bytes)) <=
            0.02 * double(*r.stats.request_bytes));
      // The grid holds the splits the capacity (512 keys) needs, whatever the batch's lengths;
      // planned, the plan's one program, then plan_programs.
      REQUIRE(r.stats.program_work.size() == (plan_programs ? 3u : 2u));
      if (plan_programs) {
        CHECK(r.stats.program_work[0].programs == 1);
        CHECK(r.stats.program_work[1].programs == plan_programs);
      } else {
        CHECK(r.stats.program_work[0].programs ==
              int64_t(c.lens.size()) * s.hkv * (512 / split_tokens));
      }
    }
  }
}

TEST_CASE("split by size bounds every program's walk where a uniform split leaves one program most "
          "of the work",
          "[templates][emulator][paged_attention][split_size]") {
  PagedAttentionShape s;
  s.hq = 8, s.hkv = 2, s.head_dim = 64, s.block_size = 16, s.max_blocks = 64,
  s.dtype = ir::DType::bf16;
  // A few short sequences beside a long one (Hq/Hkv = 4 heads a program, decode).
  PagedAttentionInputs in = ragged(s, {1, 17, 64, 900, 2, 120}, 3);
  PagedAttentionConfig uniform;
  uniform.num_splits = 4;
  PagedAttentionConfig by_size;
  by_size.split_tokens = 128;
  const launch::LaunchStats::ProgramWork u = fused(in, uniform).stats.program_work.at(0);
  const launch::LaunchStats::ProgramWork z = fused(in, by_size).stats.program_work.at(0);
  // A program's bytes are its q rows, its walk's page entries and K/V rows, and its partials:
  // at most one split's keys by size (128 keys x 2 caches x 64 x 2 bytes, and the rest), and a
  // quarter of the 900-key sequence uniformly.
  const int64_t split_kv = 128 * 2 * 64 * 2;
  CHECK(z.max_bytes <= split_kv + split_kv / 4);
  CHECK(u.max_bytes >= 225 * 2 * 64 * 2);
  CHECK(double(z.max_bytes) / z.busy_mean_bytes < 1.15 * 1.5);
  CHECK(double(u.max_bytes) / u.busy_mean_bytes > 2.0);
}

TEST_CASE("planned, a fixed grid of programs shares a ragged batch's pieces evenly",
          "[templates][emulator][paged_attention][split_size][plan]") {
  // The batch, a tenth as long (1 to 3,100 keys), Hq 32, Hkv 8: 8 KV heads x 99 pieces of
  // 64 keys over 48 programs, about 16 pieces each.
  PagedAttentionShape s;
  s.hq = 32, s.hkv = 8, s.head_dim = 16, s.block_size = 16, s.max_blocks = 194,
  s.dtype = ir::DType::f16;
  PagedAttentionInputs in = ragged(s, {1, 17, 64, 90, 3100, 409, 2, 1200}, 4);
  PagedAttentionConfig cfg;
  cfg.block_n = 64, cfg.split_tokens = 64, cfg.plan_programs = 48;
  const launch::LaunchStats::ProgramWork w = planned_work(in, cfg);
  CHECK(w.programs == 48);
  CHECK(w.min_bytes > 0); // no program idle
  // Every program of the grid, idle ones included: the busiest within 15% of the mean.
  INFO("busiest " << w.max_bytes << " bytes, mean " << w.mean_bytes);
  CHECK(double(w.max_bytes) <= 1.15 * w.mean_bytes);
  // Without the plan, a program per piece the capacity allows: most of the grid idle.
  cfg.plan_programs = 0;
  const launch::LaunchStats::ProgramWork g = fused(in, cfg).stats.program_work.at(0);
  CHECK(g.programs == 8 * 8 * 64);
  CHECK(double(g.max_bytes) > 3 * g.mean_bytes);
}

TEST_CASE("planned, the programs share the pieces by cost (keys and a fixed cost per piece), not by count",
          "[templates][emulator][paged_attention][split_size][plan]") {
  // One 4,096-key sequence (16 pieces of 256 keys, plan_piece_cost 18 each) before 48 one-key
  // ones (3 each): 432 over 8 programs, 54 each. By cost, no program walks more than 3 long
  // pieces; shared by count (8 pieces each) two programs would walk 8 long pieces and the other
  // six the one-key ones.
  PagedAttentionShape s;
  s.hq = 4, s.hkv = 1, s.head_dim = 64, s.block_size = 16, s.max_blocks = 256, s.dtype = ir::DType::f16;
  std::vector<int64_t> lens(49, 1);
  lens[0] = 4096;
  PagedAttentionInputs in = ragged(s, lens, 5);
  PagedAttentionConfig cfg;
  cfg.block_n = 64, cfg.split_tokens = 256, cfg.plan_programs = 8;
  const launch::LaunchStats::ProgramWork w = planned_work(in, cfg);
  const int64_t piece_kv = 256 * 2 * 64 * 2; // a long piece's K and V rows
  INFO("busiest " << w.max_bytes << " bytes, a long piece's K and V " << piece_kv);
  CHECK(w.max_bytes < 4 * piece_kv);
  CHECK(w.max_bytes > 2 * piece_kv);
  CHECK(w.min_bytes > 0);
}

TEST_CASE("a sequence's output rows are bit for bit the same alone and inside other batches",
          "[templates][emulator][paged_attention][split_size][invariance]") {
  PagedAttentionShape s;
  s.hq = 8, s.hkv = 2, s.head_dim = 64, s.block_size = 16, s.max_blocks = 32,
  s.dtype = ir::DType::bf16;
  s.sinks = true;
  const std::vector<int64_t> lens = {300, 5, 77, 0, 512, 129};
  const PagedAttentionInputs batch = ragged(s, lens, 9);
  for (int way : {0, 1, 2}) {
    PagedAttentionConfig cfg;
    if (way == 0)
      cfg.num_splits = 4;
    else
      cfg.split_tokens = 64;
    if (way == 2)
      cfg.plan_programs = 5; // which program runs a piece changes with the batch; its result not
    INFO((way == 0   ? "num_splits 4"
          : way == 1 ? "split_tokens 64"
                     : "split_tokens 64, plan_programs 5"));
    const launch::Buffer all = fused(batch, cfg).out;
    const size_t row = size_t(s.hq * s.sq * s.head_dim); // a sequence's output elements
    // The batch reversed, and with the other sequences' lengths changed: a sequence's rows
    // depend on its own length, q and pages alone.
    PagedAttentionInputs reversed = batch, others = batch;
    for (size_t b = 0; b < lens.size(); ++b) {
      const size_t from = lens.size() - 1 - b;
      std::memcpy(reinterpret_cast<char*>(reversed.q.bytes.data()) + b * row * 2,
                  reinterpret_cast<const char*>(batch.q.bytes.data()) + from * row * 2, row * 2);
      reversed.context_lens.set_int(b, lens[from]);
      for (int64_t j = 0; j < s.max_blocks; ++j)
        reversed.block_table.set_int(
            b * size_t(s.max_blocks) + size_t(j),
            batch.block_table.get_int(from * size_t(s.max_blocks) + size_t(j)));
      if (b % 2) others.context_lens.set_int(b, (lens[b] * 7 + 3) % 512);
    }
    const launch::Buffer rev = fused(reversed, cfg).out, oth = fused(others, cfg).out;
    for (size_t b = 0; b < lens.size(); ++b) {
      INFO("sequence " << b << " (" << lens[b] << " keys)");
      // Alone: a batch of one holding this sequence's q, block-table row and length.
      PagedAttentionShape single = batch.shape;
      single.batch = 1;
      single.num_blocks = batch.shape.batch * s.max_blocks;
      PagedAttentionInputs one = make_paged_attention_inputs(single, 1, 1);
      one.k_cache = batch.k_cache, one.v_cache = batch.v_cache, one.sinks = batch.sinks;
      std::memcpy(one.q.bytes.data(),
                  reinterpret_cast<const char*>(batch.q.bytes.data()) + b * row * 2, row * 2);
      one.context_lens.set_int(0, lens[b]);
      for (int64_t j = 0; j < s.max_blocks; ++j)
        one.block_table.set_int(size_t(j),
                                batch.block_table.get_int(b * size_t(s.max_blocks) + size_t(j)));
      const launch::Buffer alone = fused(one, cfg).out;
      const char* in_batch = reinterpret_cast<const char*>(all.bytes.data()) + b * row * 2;
      CHECK(std::memcmp(alone.bytes.data(), in_batch, row * 2) == 0);
      CHECK(std::memcmp(reinterpret_cast<const char*>(rev.bytes.data()) +
                            (lens.size() - 1 - b) * row * 2,
                        in_batch, row * 2) == 0);
      if (b % 2 == 0)
        CHECK(std::memcmp(reinterpret_cast<const char*>(oth.bytes.data()) + b * row * 2, in_batch,
                          row * 2) == 0);
    }
  }
}

TEST_CASE("split_tokens that cannot be is refused naming the numbers",
          "[templates][paged_attention][split_size]") {
  PagedAttentionShape s;
  s.max_blocks = 4096, s.block_size = 16;
  PagedAttentionConfig cfg;
  cfg.split_tokens = 48;
  CHECK_THROWS_WITH(paged_attention_splits(s, cfg),
                    "paged_attention: split_tokens 48 must be 0 or a multiple of block_n 32");
  cfg.split_tokens = 64, cfg.num_splits = 2;
  CHECK_THROWS_WITH(
      paged_attention_splits(s, cfg),
      "paged_attention: split_tokens 64 sets the splits by size; num_splits must be 1, not 2");
  cfg.num_splits = 1;
  CHECK_THROWS_WITH(
      paged_attention_splits(s, cfg),
      Catch::Contains(
          "cuts the cache's 65536 keys (max_blocks 4096 x block_size 16) into 1024 splits, more "
          "than 256"));
  cfg.split_tokens = 256;
  CHECK(paged_attention_splits(s, cfg) == 256);
  cfg.split_tokens = 320; // 204.8 pieces: 205, rounded up to 256
  CHECK(paged_attention_splits(s, cfg) == 256);
  ParamMap shape = resolve_params(paged_attention().shape, {}, "--shape");
  ParamMap params = resolve_params(paged_attention().params, {"plan_programs=4"}, "--set");
  CHECK_THROWS_WITH(
      build_kernels(paged_attention(), params, shape),
      "paged_attention: plan_programs 4 must be 0, or with split_tokens from 1 to 1048576");
}
