// Every template: its IR round-trips through the printer and parser, and the
// interpreter matches its C++ reference on random (ragged) shapes.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <array>
#include <random>

#include "backends/launchers.h"
#include "tests/templates/test_util.h"
#include "codegen/compile.h"
#include "interp/launcher.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"
#include "tests/codegen/codegen_test_util.h"

using namespace tilec;
using namespace tilec::templates;

namespace {
ParamMap defaults(const std::vector<Param>& ps) {
  ParamMap m;
  for (const auto& p : ps) m[p.name] = p.value;
  return m;
}

// Runs path `path` of `t` on the emulator over the problem of (params, shape, seed) and checks
// it against the reference and the template's traffic budget; returns the problem and the
// launcher's figures.
std::pair<Problem, launch::LaunchStats> check_emulated(const KernelTemplate& t, const std::string& path,
                                               const ParamMap& params, const ParamMap& shape, uint64_t seed,
                                               backends::EmuLowering lowering = backends::default_emu_lowering()) {
  Problem p = make_problem(t, {shape, seed, {}, {}});
  auto launcher = backends::make_emulate_launcher(lowering);
  run_problem(t, path, params, p, *launcher);
  Comparison c = compare_outputs(p);
  INFO(c.first_mismatch);
  CHECK(c.ok);
  std::string why = traffic_error(t, path, params, p, launcher->stats());
  INFO(why);
  CHECK(why.empty());
  return {std::move(p), launcher->stats()};
}
} // namespace

TEST_CASE("every template's tile IR reads back to an identical print", "[templates]") {
  for (const auto& t : all_templates()) {
    INFO(t.name);
    ir::Kernel k = t.build(defaults(t.params), defaults(t.shape));
    std::string text = ir::print(*k);
    CHECK(ir::print(*ir::parse(text, t.name)) == text);
  }
}

TEST_CASE("templates match their references on random ragged shapes (interpreter)", "[templates]") {
  std::mt19937 rng(42);
  auto launcher = interp::make_interpret_launcher();
  for (const auto& t : all_templates()) {
    if (!t.make_problem) continue;
    for (int trial = 0; trial < 4; ++trial) {
      ParamMap params = defaults(t.params), shape = defaults(t.shape);
      if (t.name == "vector_add") {
        params["block"] = 64 << (rng() % 4);
        shape["n"] = 1 + rng() % 3000;
      } else if (t.name == "softmax") {
        params["block"] = 128;
        shape["rows"] = 1 + rng() % 9;
        shape["cols"] = 1 + rng() % 128;
      } else if (t.name == "matmul") {
        params["block_m"] = 16;
        params["block_n"] = 32;
        params["block_k"] = 8;
        for (const char* d : {"m", "n", "k"}) shape[d] = 1 + rng() % 70;
      }
      INFO(t.name << " trial " << trial);
      Problem p = make_problem(t, {shape, rng(), {}, {}});
      run_problem(t, "", params, p, *launcher);
      Comparison c = compare_outputs(p);
      INFO(c.first_mismatch);
      CHECK(c.ok);
    }
  }
}

TEST_CASE("fused paged attention compiles with zero spills over its config space", "[templates][codegen][paged_attention]") {
  // A representative slice of configs/paged_attention.toml's space, across
  // dtypes, head dims and the softcap/ALiBi variants.
  struct Case {
    int64_t head_dim, hq, hkv, sq;
    ir::DType dtype;
    bool alibi, softcap;
    PagedAttentionConfig cfg;
  };
  std::vector<Case> cases = {
      {64, 8, 2, 1, ir::DType::f16, false, false, {32, 4, 4, 1, 2}},
      {64, 8, 2, 1, ir::DType::f16, false, false, {16, 1, 2, 2, 3}},
      {64, 8, 2, 1, ir::DType::bf16, true, true, {64, 2, 8, 4, 3}},
      {128, 32, 8, 1, ir::DType::f16, false, true, {32, 4, 4, 1, 1}},
      {128, 32, 8, 1, ir::DType::bf16, true, false, {16, 4, 8, 2, 3}},
      {128, 32, 8, 1, ir::DType::bf16, false, false, {64, 4, 4, 1, 3}},
      {128, 32, 4, 1, ir::DType::f16, false, false, {64, 8, 2, 1, 2}},
      {128, 8, 8, 1, ir::DType::f32, false, false, {64, 1, 4, 1, 2}},
      {16, 4, 1, 3, ir::DType::f32, true, true, {16, 4, 2, 1, 1}},
      {256, 16, 2, 1, ir::DType::f16, false, false, {16, 8, 8, 1, 3}},
  };
  bool ptxas = codegen::test::have_ptxas();
  for (const auto& c : cases) {
    PagedAttentionShape s;
    s.head_dim = c.head_dim;
    s.hq = c.hq;
    s.hkv = c.hkv;
    s.sq = c.sq;
    s.dtype = c.dtype;
    s.alibi = c.alibi;
    if (c.softcap) s.softcap = 30.0;
    ir::Kernel k = paged_attention_fused_kernel(s, c.cfg);
    codegen::CompileOptions o;
    o.arch = "sm_90";
    o.num_warps = int(c.cfg.num_warps);
    INFO("head_dim " << c.head_dim << " " << ir::dtype_name(c.dtype) << " block_n " << c.cfg.block_n
                     << " head_group " << c.cfg.head_group << " warps " << c.cfg.num_warps << " stages "
                     << c.cfg.num_stages);
    codegen::CompiledKernel ck = codegen::compile(*k, o);
    CHECK(!ck.ptx.empty());
    if (ptxas) {
      REQUIRE(ck.ptxas.has_value());
      CHECK(ck.ptxas->spill_stores == 0);
      CHECK(ck.ptxas->spill_loads == 0);
    }
  }
}

TEST_CASE("as capacity grows with the live context fixed, only the decomposition moves more bytes",
          "[templates][emulator][paged_attention]") {
  // The point of the fused kernel: its traffic follows context_lens, the
  // decomposition's follows the padded capacity (max_blocks * block_size).
  auto bytes = [](int64_t max_blocks, bool fused) {
    PagedAttentionShape s;
    s.batch = 2;
    s.hq = 4;
    s.hkv = 2;
    s.head_dim = 16;
    s.block_size = 4;
    s.max_blocks = max_blocks;
    s.dtype = ir::DType::f16;
    auto in = make_paged_attention_inputs(s, 11, 8);
    auto launcher = backends::make_emulate_launcher();
    auto out = fused ? run_paged_attention_fused(in, {8, 0, 2, 1}, *launcher)
                     : run_paged_attention_decomposed(in, *launcher);
    REQUIRE(launcher->stats().unique_bytes.has_value());
    return *launcher->stats().unique_bytes;
  };
  int64_t fused_small = bytes(2, true), fused_large = bytes(16, true);
  int64_t dec_small = bytes(2, false), dec_large = bytes(16, false);
  WARN("unique bytes, capacity 8 -> 64 tokens: fused " << fused_small << " -> " << fused_large << ", decompose "
                                                       << dec_small << " -> " << dec_large);
  // Equal but for the block-table rows, which may straddle one more 32-byte
  // sector when rows are longer (at most one per sequence).
  CHECK(std::abs(fused_large - fused_small) <= 2 * 32);
  CHECK(dec_large > 4 * dec_small);
}

TEST_CASE("fused and decomposed paged attention match the reference on the emulator over the config grid",
          "[templates][emulator][paged_attention]") {
  auto launcher = backends::make_emulate_launcher();
  uint64_t seed = 500;
  for (ir::DType dt : {ir::DType::f32, ir::DType::f16, ir::DType::bf16})
    for (int64_t ratio : {1, 2, 4})
      for (int64_t sq : {1, 3})
        for (bool alibi : {false, true})
          for (bool softcap : {false, true}) {
            PagedAttentionShape s;
            s.batch = 2;
            s.hkv = 2;
            s.hq = 2 * ratio;
            s.sq = sq;
            s.head_dim = 16;
            s.block_size = 4;
            s.max_blocks = 3;
            s.dtype = dt;
            s.alibi = alibi;
            if (softcap) s.softcap = 5.0;
            auto in = make_paged_attention_inputs(s, seed++);
            in.context_lens.set_int(0, 0); // an empty sequence next to a ragged one
            auto want = paged_attention_reference(in);
            INFO(ir::dtype_name(dt) << " ratio " << ratio << " sq " << sq << " alibi " << alibi << " softcap "
                                    << softcap);
            for (bool fused : {true, false}) {
              INFO((fused ? "fused" : "decompose"));
              auto got = fused ? run_paged_attention_fused(in, {8, 0, 2, sq == 1 ? 2 : 1}, *launcher)
                               : run_paged_attention_decomposed(in, *launcher);
              CHECK(test::max_err(got, want) <= test::paged_attention_tolerance(dt));
            }
          }
}

TEST_CASE("fused paged attention stays within its traffic budget across configs (default problem, emulator)",
          "[templates][emulator][paged_attention]") {
  // The default problem has ragged contexts, a partial last page and block-table entries
  // past the live pages that point nowhere: a load the masks should stop fails the bounds
  // check, one wider than needed fails the budget.
  const KernelTemplate* t = find_template("paged_attention");
  REQUIRE(t);
  ParamMap shape;
  for (const Param& p : t->shape) shape[p.name] = p.value;
  shape["dtype"] = 1; // f16
  for (auto [block_n, head_group, splits, warps, stages] : std::vector<std::array<int64_t, 5>>{
           {32, 0, 1, 4, 2}, {16, 1, 1, 2, 3}, {64, 4, 1, 4, 1}, {16, 4, 4, 1, 4}, {64, 1, 2, 2, 3}}) {
    ParamMap params{{"block_n", block_n}, {"head_group", head_group}, {"num_splits", splits}, {"num_warps", warps},
                    {"num_stages", stages}};
    INFO("block_n " << block_n << " head_group " << head_group << " num_splits " << splits << " num_warps " << warps
                    << " num_stages " << stages);
    auto [p, stats] = check_emulated(*t, "", params, shape, 9);
    REQUIRE(stats.request_bytes);
    // Every live K/V byte at least once: the budget is not met by skipping work.
    CHECK(*stats.request_bytes >= *p.ideal_bytes);
  }
}

TEST_CASE("a run over its traffic budget is an error naming the numbers, other paths are not judged",
          "[templates][registry]") {
  KernelTemplate t;
  t.name = "k";
  t.paths = {{"main", "", {}}, {"other", "", {}}};
  t.traffic_budget = [](const Problem& p, const ParamMap&) { return ideal_traffic_budget(p); };
  Problem p;
  p.ideal_bytes = 1000;
  launch::LaunchStats st;
  st.request_bytes = 1020;
  CHECK(traffic_error(t, "", {}, p, st).empty()); // within 2%
  st.request_bytes = 1100;
  std::string e = traffic_error(t, "", {}, p, st);
  CHECK(e.find("moved 1100 bytes") != std::string::npos);
  CHECK(e.find("than the 1020") != std::string::npos);
  CHECK(e.find("+10.0%") != std::string::npos);
  CHECK(traffic_error(t, "main", {}, p, st) == e);
  CHECK(traffic_error(t, "other", {}, p, st).empty());
  st.request_bytes.reset(); // a backend that does not count requests
  CHECK(traffic_error(t, "", {}, p, st).empty());
}

TEST_CASE("fused paged attention matches its reference on public models' attention shapes (emulator, 3 stages)",
          "[templates][emulator][paged_attention][pipeline]") {
  // (Hq, Hkv, head_dim) of served models: Llama-2 7B, Llama-3 8B / Mistral 7B / Mixtral,
  // Llama-3 70B, Qwen2 7B, Qwen2.5 0.5B, Gemma 2B, Gemma-2 9B, Falcon 7B, StarCoder2 15B, Yi
  // 34B, Grok-1, MPT-7B, and the head dims between powers of two: Phi-2 and StableLM-3B (80),
  // Phi-3-mini and GPT-NeoX-20B (96), MPT-30B (112); at bf16 with the pipeline and at f16
  // with the defaults, and every third model over an fp8 cache (e4m3 and e5m2 in turn, q in
  // bf16); ragged contexts over two sequences.
  struct Model {
    const char* name;
    int64_t hq, hkv, head_dim;
  };
  const Model models[] = {{"llama-2-7b", 32, 32, 128},  {"llama-3-8b", 32, 8, 128}, {"llama-3-70b", 64, 8, 128},
                          {"qwen2-7b", 28, 4, 128},     {"qwen2.5-0.5b", 14, 2, 64}, {"gemma-2b", 8, 1, 256},
                          {"gemma-2-9b", 16, 8, 256},   {"falcon-7b", 71, 1, 64},    {"starcoder2-15b", 48, 4, 128},
                          {"yi-34b", 56, 8, 128},       {"grok-1", 48, 8, 128},      {"mpt-7b", 32, 32, 128},
                          {"phi-2", 32, 32, 80},        {"phi-3-mini", 32, 32, 96},  {"gpt-neox-20b", 64, 64, 96},
                          {"mpt-30b", 64, 64, 112}};
  const KernelTemplate* t = find_template("paged_attention");
  REQUIRE(t);
  // The short form (the suite's) runs each model in one variant, in turn; TILEC_TEST_FULL=1
  // runs every model in each (test_util.h).
  int index = 0;
  for (const Model& m : models) {
    for (int variant = 0; variant < 3; ++variant) {
      if (tilec::templates::test::full_sweeps() ? variant == 2 && index % 3 : variant != index % 3) continue;
      ParamMap shape = defaults(t->shape), params = defaults(t->params);
      shape["batch"] = 2, shape["hq"] = m.hq, shape["hkv"] = m.hkv, shape["head_dim"] = m.head_dim;
      shape["dtype"] = variant == 1 ? 1 : 2; // f16, bf16
      if (variant == 0) params["block_n"] = 64, params["num_stages"] = 3, params["head_group"] = 0;
      if (variant == 2) shape["kv_dtype"] = 1 + index / 3 % 2, params["num_stages"] = 1;
      INFO(m.name << (variant == 0 ? " bf16 block_n=64 num_stages=3" : variant == 1 ? " f16 defaults" : " fp8 cache"));
      check_emulated(*t, "", params, shape, 5);
    }
    ++index;
  }
}

TEST_CASE("paged attention serves head dims between powers of two with caches of exactly that size",
          "[templates][emulator][paged_attention]") {
  // Tiles stay powers of two with the lanes past head_dim masked: both paths match the
  // reference, and the fused kernel moves no byte past head_dim (within 2% of the ideal bytes
  // of the real head_dim).
  const KernelTemplate* t = find_template("paged_attention");
  REQUIRE(t);
  int variant = 0;
  // The short form (the suite's) runs each head dim in one dtype, the dtypes in turn;
  // TILEC_TEST_FULL=1 runs every head dim in every dtype (test_util.h).
  int64_t dims = 0;
  for (int64_t d : {80, 96, 112, 160, 192, 24})
    for (int64_t dtype : {0, 1, 2}) {
      if (dtype == 0) ++dims;
      if (!tilec::templates::test::full_sweeps() && dtype != dims % 3) continue;
      ParamMap shape = defaults(t->shape), params = defaults(t->params);
      shape["head_dim"] = d, shape["dtype"] = dtype, shape["hq"] = 8, shape["hkv"] = 2;
      params["block_n"] = variant % 2 ? 64 : 16;
      params["num_splits"] = variant % 3 == 0 ? 2 : 1;
      params["num_stages"] = 1 + variant % 3;
      ++variant;
      for (const char* path : {"", "decompose"}) {
        INFO("head_dim " << d << " dtype " << dtype << " path '" << path << "' block_n " << params["block_n"]
                         << " splits " << params["num_splits"]);
        Problem p = check_emulated(*t, path, params, shape, 11).first;
        CHECK(p.expected[0].count() == size_t(2 * 8 * 1 * d)); // out [B, Hq, Sq, head_dim], unpadded
      }
    }
}

TEST_CASE("paged attention with causal query rows and a sliding window matches its reference on both paths",
          "[templates][emulator][paged_attention]") {
  const KernelTemplate* t = find_template("paged_attention");
  REQUIRE(t);
  struct Case {
    int64_t sq, window, causal, dtype, alibi, splits, block_n, stages;
  };
  const Case cases[] = {{1, 20, 0, 2, 0, 1, 32, 2}, {4, 0, 1, 1, 0, 1, 16, 1}, {3, 5, 1, 0, 1, 2, 16, 1},
                        {2, 1, 0, 2, 0, 4, 16, 3}, {5, 40, 1, 1, 1, 1, 64, 3}, {8, 3, 1, 2, 0, 2, 32, 2},
                        {1, 1, 1, 0, 0, 1, 32, 1}};
  for (const Case& c : cases)
    for (const char* path : {"", "decompose"}) {
      ParamMap shape = defaults(t->shape), params = defaults(t->params);
      shape["sq"] = c.sq, shape["window"] = c.window, shape["causal"] = c.causal, shape["dtype"] = c.dtype;
      shape["alibi"] = c.alibi;
      params["num_splits"] = c.splits, params["block_n"] = c.block_n, params["num_stages"] = c.stages;
      INFO("sq " << c.sq << " window " << c.window << " causal " << c.causal << " dtype " << c.dtype << " splits "
                 << c.splits << " path '" << path << "'");
      check_emulated(*t, path, params, shape, 21);
    }
}

TEST_CASE("a sliding window's fused kernel reads bytes in proportion to the window, not the context",
          "[templates][emulator][paged_attention]") {
  const KernelTemplate* t = find_template("paged_attention");
  REQUIRE(t);
  auto moved = [&](int64_t window) {
    ParamMap shape = defaults(t->shape), params = defaults(t->params);
    shape["ctx"] = 2000, shape["window"] = window, shape["dtype"] = 1;
    params["block_n"] = 64;
    auto [p, stats] = check_emulated(*t, "", params, shape, 3);
    return std::pair{*stats.request_bytes, *p.ideal_bytes};
  };
  auto [full, full_ideal] = moved(0);
  auto [w64, w64_ideal] = moved(64);
  auto [w256, w256_ideal] = moved(256);
  // K and V: 2 sequences x 2 KV heads x 64 halves x 2 bytes x 2 = 1 KiB per token of the window.
  CHECK(w64_ideal < full_ideal / 20);
  CHECK(w64 <= w64_ideal * 102 / 100);
  CHECK(w256 <= w256_ideal * 102 / 100);
  CHECK(double(w256 - w64) == Approx(double(256 - 64) * 2 * 2 * 64 * 2 * 2).epsilon(0.05));
  CHECK(full > w256 * 5);
}

TEST_CASE("paged attention over an fp8 KV cache matches a reference that dequantizes the same bytes",
          "[templates][emulator][paged_attention][fp8]") {
  // Both formats under every q dtype, with the other parameters mixed in, on both paths; the
  // fused kernel on both lowerings (the IR conversion and PTX's cvt).
  const KernelTemplate* t = find_template("paged_attention");
  REQUIRE(t);
  struct Case {
    int64_t kv, dtype, head_dim, sq, window, causal, splits, block_n, hq;
  };
  const Case cases[] = {{1, 2, 64, 1, 0, 0, 1, 32, 8},  {2, 1, 128, 1, 0, 0, 2, 64, 8}, {1, 0, 96, 2, 0, 1, 1, 16, 4},
                        {2, 2, 80, 1, 24, 0, 1, 32, 8}, {1, 1, 64, 4, 9, 1, 4, 16, 8},  {2, 0, 32, 1, 0, 0, 1, 16, 2}};
  for (const Case& c : cases)
    for (const char* path : {"", "decompose"})
      for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
        if (*path && lowering == backends::EmuLowering::nvptx) continue;
        ParamMap shape = defaults(t->shape), params = defaults(t->params);
        shape["kv_dtype"] = c.kv, shape["dtype"] = c.dtype, shape["head_dim"] = c.head_dim, shape["sq"] = c.sq;
        shape["window"] = c.window, shape["causal"] = c.causal, shape["hq"] = c.hq;
        params["num_splits"] = c.splits, params["block_n"] = c.block_n;
        INFO("kv_dtype " << c.kv << " dtype " << c.dtype << " head_dim " << c.head_dim << " path '" << path
                         << "' lowering " << int(lowering));
        Problem p = check_emulated(*t, path, params, shape, 17, lowering).first;
        const auto& in = std::any_cast<const templates::PagedAttentionInputs&>(p.context);
        CHECK(in.k_cache.dtype == (c.kv == 1 ? ir::DType::f8e4m3 : ir::DType::f8e5m2));
        CHECK(in.k_cache.bytes.size() == in.k_cache.count()); // one byte per element
      }
  // And on the interpreter.
  auto interpreter = interp::make_interpret_launcher();
  for (int64_t kv : {1, 2})
    for (const char* path : {"", "decompose"}) {
      ParamMap shape = defaults(t->shape), params = defaults(t->params);
      shape["kv_dtype"] = kv, shape["dtype"] = 2, shape["head_dim"] = 48, shape["causal"] = 1, shape["sq"] = 2;
      INFO("interpreter kv_dtype " << kv << " path '" << path << "'");
      Problem p = make_problem(*t, {shape, 23, {}, {}});
      run_problem(*t, path, params, p, *interpreter);
      Comparison c = compare_outputs(p);
      INFO(c.first_mismatch);
      CHECK(c.ok);
    }
}

TEST_CASE("an fp8 KV cache halves the K/V bytes the fused kernel moves", "[templates][emulator][paged_attention][fp8]") {
  const KernelTemplate* t = find_template("paged_attention");
  REQUIRE(t);
  auto moved = [&](int64_t kv) {
    ParamMap shape = defaults(t->shape), params = defaults(t->params);
    shape["ctx"] = 1024, shape["dtype"] = 1, shape["kv_dtype"] = kv, shape["head_dim"] = 128;
    params["block_n"] = 64;
    auto [p, stats] = check_emulated(*t, "", params, shape, 4);
    return std::pair{*stats.request_bytes, *p.ideal_bytes};
  };
  auto [f16, f16_ideal] = moved(0);
  auto [e4m3, e4m3_ideal] = moved(1);
  // K and V dominate: 2 sequences x 1024 tokens x 2 KV heads x 128 x 2 (K, V).
  const double kv_elems = 2.0 * 1024 * 2 * 128 * 2;
  CHECK(double(f16_ideal - e4m3_ideal) == Approx(kv_elems)); // 2 bytes per element -> 1
  CHECK(double(e4m3) / double(f16) == Approx(0.5).epsilon(0.03));
  CHECK(e4m3 <= e4m3_ideal * 102 / 100);
}
