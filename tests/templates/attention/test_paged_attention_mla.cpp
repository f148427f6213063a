// MLA and a V head dim of its own (docs/PAGED_ATTENTION.md "MLA"): q and K of head_dim, V and
// out of head_dim_v, either from a V cache of their own (the 192/128 prefill form) or, in the
// latent form, the first head_dim_v columns of the one K cache (DeepSeek-V3 and Kimi-K2's
// 576/512). Both paths against the reference, alone and combined with causal query tiles, fp8,
// splits, sinks and mixed batches; the latent cache read once; bad inputs refused; MLA's
// default configs compiled without spills.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "abi/limits.h"
#include "codegen/compile.h"
#include "runtime/npy.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"
#include "tests/codegen/codegen_test_util.h"
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

} // namespace

TEST_CASE("MLA and separate V head dims match the reference on both paths, with every feature they combine with",
          "[templates][emulator][paged_attention][mla]") {
  std::mt19937_64 rng(47);
  auto pick = [&](std::vector<int64_t> v) { return v[size_t(rng() % v.size())]; };
  struct Case {
    int64_t hq, head_dim, head_dim_v, latent, sq, causal, splits, sinks, varlen, kv_fp8;
  };
  // Latent caches split into two column tiles (48 = 32 + 16; 576 = 512 + 64, MLA's own with 16
  // heads of one KV head) and a power-of-two one (K is V); separate V caches narrower than K
  // (the prefill form's 192/128, scaled down), one past 256 columns (320 = 256 + 64) and one
  // wider than K (the reference once sized its row buffer by K's head dim).
  const Case cases[] = {{8, 48, 32, 1, 1, 0, 1, 0, 0, 0},   {8, 48, 32, 1, 1, 0, 2, 1, 0, 0},
                        {8, 48, 32, 1, 4, 1, 1, 0, 0, 1},   {8, 32, 0, 1, 2, 1, 2, 0, 0, 0},
                        {16, 576, 512, 1, 1, 0, 1, 0, 0, 0}, {16, 576, 512, 1, 2, 1, 2, 1, 0, 1},
                        {8, 48, 32, 0, 1, 0, 1, 0, 0, 0},   {8, 64, 32, 0, 4, 1, 2, 0, 0, 1},
                        {8, 48, 32, 1, 4, 1, 1, 1, 1, 0},   {4, 320, 64, 0, 1, 0, 1, 0, 0, 0},
                        {8, 32, 64, 0, 2, 1, 1, 0, 0, 0}}; // and one wider than K
  for (const Case& c : cases) {
    ParamMap shape = resolve_params(paged_attention().shape, {}, "--shape");
    shape["batch"] = 2, shape["hq"] = c.hq, shape["hkv"] = c.hq == 16 ? 1 : 2, shape["block_size"] = 8;
    shape["head_dim"] = c.head_dim, shape["head_dim_v"] = c.head_dim_v, shape["latent"] = c.latent;
    shape["sq"] = c.sq, shape["causal"] = c.causal, shape["sinks"] = c.sinks, shape["varlen"] = c.varlen;
    shape["dtype"] = c.kv_fp8 ? pick({1, 2}) : pick({0, 1, 2});
    shape["kv_dtype"] = c.kv_fp8 ? pick({1, 2}) : 0;
    shape["ctx"] = c.causal ? c.sq + pick({0, 11, 30}) : pick({-1, 0, 37});
    if (c.head_dim > 256) shape["ctx"] = 23, shape["batch"] = 1; // the emulator's time
    ParamMap params = resolve_params(paged_attention().params, {}, "--set");
    params["block_n"] = pick({8, 16});
    params["num_splits"] = c.splits;
    std::vector<const char*> paths = {"fused"};
    if (!c.varlen) paths.push_back("decompose");
    for (const char* path : paths) {
      INFO(path << " hq " << c.hq << " head_dim " << c.head_dim << " head_dim_v " << c.head_dim_v << " latent "
                << c.latent << " sq " << c.sq << " causal " << c.causal << " splits " << c.splits << " sinks " << c.sinks
                << " varlen " << c.varlen << " dtype " << shape["dtype"] << " kv_dtype " << shape["kv_dtype"] << " ctx "
                << shape["ctx"]);
      Run r = tilec::templates::test::run_emulated(path, params, {shape, 13, {}, {}});
      Comparison cmp = compare_outputs(r.p);
      INFO(cmp.first_mismatch);
      CHECK(cmp.ok);
      const auto& in = std::any_cast<const PagedAttentionInputs&>(r.p.context);
      const int64_t dv = c.head_dim_v ? c.head_dim_v : c.head_dim;
      CHECK(output(r.p).count() == size_t(in.q_rows() * dv)); // out [.., head_dim_v]
      if (std::string(path) == "fused") {
        std::string why = traffic_error(paged_attention(), "fused", params, r.p, r.stats);
        INFO(why);
        CHECK(why.empty());
        const PagedAttentionTraffic model = paged_attention_traffic(in, paged_attention_config(params));
        REQUIRE(r.stats.request_bytes);
        CHECK(std::abs(double(model.total() - *r.stats.request_bytes)) <= 0.02 * double(*r.stats.request_bytes));
        // The latent form reads one cache: every V byte came with K's.
        if (c.latent) CHECK_FALSE(r.stats.buffer_request_bytes.count("v_cache"));
        CHECK(model.k_cache == r.stats.buffer_request_bytes.at("k_cache"));
      }
    }
  }
}

TEST_CASE("the latent cache is read once: half the bytes of the same keys in two caches", "[templates][emulator][paged_attention][mla]") {
  ParamMap shape = resolve_params(paged_attention().shape, {}, "--shape");
  shape["batch"] = 1, shape["hq"] = 8, shape["hkv"] = 1, shape["head_dim"] = 32, shape["ctx"] = 64, shape["dtype"] = 2;
  ParamMap params = resolve_params(paged_attention().params, {}, "--set");
  Run two = tilec::templates::test::run_emulated("fused", params, {shape, 5, {}, {}});
  shape["latent"] = 1;
  Run one = tilec::templates::test::run_emulated("fused", params, {shape, 5, {}, {}});
  CHECK(compare_outputs(one.p).ok);
  const auto kv = [](const Run& r) {
    int64_t n = 0;
    for (const char* b : {"k_cache", "v_cache"})
      if (r.stats.buffer_request_bytes.count(b)) n += r.stats.buffer_request_bytes.at(b);
    return n;
  };
  CHECK(2 * kv(one) == kv(two));
  CHECK(*two.p.ideal_bytes - *one.p.ideal_bytes == 64 * 32 * 2); // one cache's live keys fewer
}

TEST_CASE("MLA's inputs: files of both forms, and bad head dims, caches and scales refused with exit 2",
          "[templates][paged_attention][mla]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("tilec_mla_{}", ::getpid());
  fs::remove_all(dir);
  PagedAttentionShape s;
  s.batch = 2, s.hq = 4, s.hkv = 1, s.head_dim = 48, s.head_dim_v = 32, s.latent = true, s.block_size = 4, s.max_blocks = 3;
  write_paged_attention_inputs(dir.string(), make_paged_attention_inputs(s, 2));
  CHECK_FALSE(fs::exists(dir / "v_cache.npy"));
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", "paged_attention", "--backend", "emulate", "--inputs", dir.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_tilec(args);
  };
  {
    Process p = run({"--shape", "head_dim_v=32"});
    INFO(p.text());
    CHECK(p.exit_code == 0);
    Process implied = run({}); // no head_dim_v: the latent form's, K's first 32 columns
    INFO(implied.text());
    CHECK(implied.exit_code == 0);
    Process other = run({"--shape", "head_dim_v=16"}); // V is not K's first tile
    INFO(other.text());
    CHECK(other.exit_code == 2);
    CHECK_THAT(other.text(), Catch::Contains("latent=1") && Catch::Contains("first 32 columns"));
  }
  // The separate form: a V cache whose last dim is head_dim_v.
  s.latent = false;
  const fs::path sep = dir / "separate";
  write_paged_attention_inputs(sep.string(), make_paged_attention_inputs(s, 2));
  REQUIRE(rt::read_npy((sep / "v_cache.npy").string()).shape.back() == 32);
  auto back = read_paged_attention_inputs(sep.string(), 0.0, std::nullopt);
  CHECK(back.shape.dv() == 32);
  CHECK_FALSE(back.shape.latent);
  {
    Process p = run_tilec({"run", "paged_attention", "--backend", "emulate", "--inputs", sep.string()});
    INFO(p.text());
    CHECK(p.exit_code == 0);
  }
  rt::NpyArray v = rt::read_npy((sep / "v_cache.npy").string());
  v.shape[2] = 2; // Hkv differs from K's
  v.data.resize(v.data.size() * 2);
  rt::write_npy((sep / "v_cache.npy").string(), v);
  {
    Process p = run_tilec({"run", "paged_attention", "--backend", "emulate", "--inputs", sep.string()});
    INFO(p.text());
    CHECK(p.exit_code == 2);
    CHECK_THAT(p.text(), Catch::Contains("v_cache.npy") && Catch::Contains("more than the last dim"));
  }
  // Generated problems: sizes out of range, a latent V that is not K's first tile, one scale
  // for the latent fp8 cache.
  for (const auto& [args, words] : std::vector<std::pair<std::string, std::string>>{
           {"--shape head_dim=584", "from 16 to 576"},
           {"--shape head_dim_v=520", "from 16 to 512"},
           {"--shape head_dim=576 head_dim_v=256 latent=1", "first 512 columns"},
           {"--shape head_dim=48 latent=1 dtype=f16 kv_dtype=f8e4m3 head_dim_v=32 --k-scale 0.01 --v-scale 0.02",
            "one scale"}}) {
    Process p = run_tilec("run paged_attention --backend emulate " + args);
    INFO(args << ": " << p.text());
    CHECK(p.exit_code == 2);
    CHECK_THAT(p.text(), Catch::Contains(words));
  }
  fs::remove_all(dir);
}

TEST_CASE("MLA's default config compiles without spills within shared memory for 16 to 128 heads at Sq 1 to 4",
          "[codegen][paged_attention][mla][nvptx]") {
  if (!codegen::test::have_ptxas()) return;
  const KernelTemplate& t = paged_attention();
  const ParamMap params = resolve_params(t.params, {}, "--set");
  for (const char* arch : {"sm_80", "sm_90"})
    for (int64_t hq : {16, 64, 128})
      for (int64_t sq : {1, 2, 4}) {
        ParamMap shape = resolve_params(t.shape, {}, "--shape");
        shape["hq"] = hq, shape["hkv"] = 1, shape["head_dim"] = 576, shape["head_dim_v"] = 512, shape["latent"] = 1;
        shape["sq"] = sq, shape["causal"] = sq > 1, shape["dtype"] = 2, shape["block_size"] = 64;
        INFO(arch << " hq " << hq << " sq " << sq);
        codegen::CompileOptions o;
        o.arch = arch;
        o.num_warps = int(params.at("num_warps"));
        codegen::CompiledKernel ck = codegen::compile(*t.build(params, shape), o);
        REQUIRE(ck.ptxas);
        CHECK(ck.ptxas->spill_stores + ck.ptxas->spill_loads == 0);
        CHECK(ck.shared_bytes <= max_shared_bytes(arch));
      }
}
