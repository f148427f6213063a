// reshape_and_cache (templates/attention/reshape_and_cache.cpp) on the interpreter and the
// emulator: every dtype and slot dtype, the latent form, -1 padding, untouched slots kept byte for
// byte, fp8 rounding and saturation at exact boundary values; the CLI's bad inputs (exit 2, the
// input and the numbers named, nothing written) and --out as a folder. The C ABI's in-place path
// is in test_reshape_and_cache_host.cpp.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "backends/launchers.h"
#include "interp/launcher.h"
#include "runtime/npy.h"
#include "templates/attention/reshape_and_cache.h"
#include "tests/runtime/helpers.h"
#include "tests/tilec_process.h"

using namespace tilec;
using namespace tilec::templates;
namespace fs = std::filesystem;

namespace {

const KernelTemplate& rac() {
  const KernelTemplate* t = find_template("reshape_and_cache");
  REQUIRE(t);
  return *t;
}

const launch::Buffer& buffer(const Problem& p, const std::string& name) {
  for (const launch::Buffer& b : p.buffers)
    if (b.name == name) return b;
  FAIL("no buffer " << name);
  return p.buffers.front();
}

std::unique_ptr<launch::Launcher> launcher(const std::string& backend) {
  return backend == "interpret" ? interp::make_interpret_launcher() : backends::make_emulate_launcher();
}

// Runs the problem of `request` with config `set` on `backend`; checks every byte of the caches
// against the definition (not the template's reference) where it is a copy: a named slot holds
// its token's row, every other slot its old bytes. fp8 slots are held to the reference.
Problem run_checked(const std::string& backend, const ProblemRequest& request, const std::vector<std::string>& set) {
  const KernelTemplate& t = rac();
  Problem p = make_problem(t, request);
  const ReshapeAndCacheShape& s = std::any_cast<const ReshapeAndCacheShape&>(p.context);
  std::vector<launch::Buffer> before;
  for (int o : p.outputs) before.push_back(p.buffers[size_t(o)]);
  run_problem(t, "", resolve_params(t.params, set, "--set"), p, *launcher(backend));
  Comparison c = compare_outputs(p);
  INFO(c.first_mismatch);
  CHECK(c.ok);
  const launch::Buffer& slots = buffer(p, "slot_mapping");
  const size_t row = size_t(s.row()), cb = size_t(ir::dtype_bytes(s.cache_dtype())), kb = size_t(ir::dtype_bytes(s.dtype));
  std::vector<int64_t> token_of(size_t(s.slots()), -1);
  for (int64_t t = 0; t < s.num_tokens; ++t)
    if (int64_t x = slots.get_int(size_t(t)); x >= 0) token_of[size_t(x)] = t;
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const launch::Buffer& got = p.buffers[size_t(p.outputs[k])];
    const launch::Buffer& from = buffer(p, k == 0 ? "key" : "value");
    REQUIRE(got.bytes.size() == before[k].bytes.size());
    int64_t kept = 0, copied = 0;
    for (int64_t slot = 0; slot < s.slots(); ++slot) {
      const std::byte* g = got.bytes.data() + size_t(slot) * row * cb;
      const int64_t t = token_of[size_t(slot)];
      if (t < 0) {
        kept += std::memcmp(g, before[k].bytes.data() + size_t(slot) * row * cb, row * cb) == 0;
      } else if (!s.kv_fp8) {
        copied += std::memcmp(g, from.bytes.data() + size_t(t) * row * kb, row * kb) == 0;
      }
    }
    int64_t named = 0;
    for (int64_t x : token_of) named += x >= 0;
    CHECK(kept == s.slots() - named);
    if (!s.kv_fp8) CHECK(copied == named);
  }
  return p;
}

ProblemRequest request(std::vector<std::string> shape, std::map<std::string, double> options = {},
                       std::string inputs = "") {
  return {resolve_params(rac().shape, shape, "--shape"), 7, std::move(options), std::move(inputs)};
}

template <class T> void put(const fs::path& dir, const std::string& name, const std::string& descr,
                            std::vector<int64_t> shape, const std::vector<T>& v) {
  rt::NpyArray a{descr, std::move(shape), std::vector<std::byte>(v.size() * sizeof(T))};
  std::memcpy(a.data.data(), v.data(), a.data.size());
  rt::write_npy((dir / (name + ".npy")).string(), a);
}

} // namespace

TEST_CASE("reshape_and_cache: every dtype, slot dtype and the latent form on both CPU backends",
          "[templates][reshape_and_cache]") {
  int runs = 0;
  for (const char* dtype : {"f32", "f16", "bf16"})
    for (const char* kv : {"same", "f8e4m3", "f8e5m2"})
      for (int latent : {0, 1})
        for (const char* slot : {"i64", "i32"}) {
          // The emulator compiles each kernel: it takes every other one (both latent forms and
          // slot dtypes over the dtypes), the interpreter all of them.
          const bool emulate = (latent + (slot[1] == '3') + runs / 4) % 2 == 0;
          for (const char* backend : {"interpret", "emulate"}) {
            if (backend[0] == 'e' && !emulate) continue;
            INFO(fmt::format("{} dtype={} kv_dtype={} latent={} slot_dtype={}", backend, dtype, kv, latent, slot));
            // hkv x head_dim = 3 x 24 = 72: block_hd=32 leaves a ragged last column program.
            run_checked(backend,
                        request({fmt::format("dtype={}", dtype), fmt::format("kv_dtype={}", kv),
                                 fmt::format("latent={}", latent), fmt::format("slot_dtype={}", slot), "num_tokens=11",
                                 "hkv=3", "head_dim=24", "num_blocks=3", "block_size=5"}),
                        {"block_t=4", "block_hd=32", "num_warps=2"});
          }
          ++runs;
        }
  CHECK(runs == 36);
}

TEST_CASE("reshape_and_cache: padding, no tokens, a full cache and the default config", "[templates][reshape_and_cache]") {
  for (const char* backend : {"interpret", "emulate"}) {
    INFO(backend);
    // Every slot written (generated inputs pad one token in about eight; 17 tokens, 16 slots).
    Problem p = run_checked(backend, request({"num_tokens=17", "hkv=1", "head_dim=8", "num_blocks=4", "block_size=4"}), {});
    int64_t pad = 0;
    for (size_t t = 0; t < 17; ++t) pad += buffer(p, "slot_mapping").get_int(t) == -1;
    CHECK(pad >= 1);
    run_checked(backend, request({"num_tokens=0", "hkv=2", "head_dim=8", "num_blocks=2", "block_size=4"}), {});
  }
}

TEST_CASE("reshape_and_cache: untouched slots keep any bytes, NaN patterns included", "[templates][reshape_and_cache]") {
  rt::test::TempDir dir;
  const int64_t T = 5, H = 2, D = 8, NB = 3, BS = 4;
  std::mt19937 rng(3);
  std::vector<uint16_t> key(size_t(T * H * D)), value(key.size()), kc(size_t(NB * BS * H * D)), vc(kc.size());
  for (auto* v : {&key, &value}) for (auto& x : *v) x = uint16_t(rng() & 0x3fff); // finite halves
  for (auto* v : {&kc, &vc}) for (auto& x : *v) x = uint16_t(rng());             // any bits: NaNs too
  kc[0] = 0x7e01;                                                                   // a NaN with a payload
  put(dir.path, "key", "<f2", {T, H, D}, key);
  put(dir.path, "value", "<f2", {T, H, D}, value);
  put(dir.path, "slot_mapping", "<i4", {T}, std::vector<int32_t>{11, -1, 2, 7, -1});
  put(dir.path, "k_cache", "<f2", {NB, BS, H, D}, kc);
  put(dir.path, "v_cache", "<f2", {NB, BS, H, D}, vc);
  for (const char* backend : {"interpret", "emulate"}) {
    INFO(backend);
    Problem p = run_checked(backend, request({}, {}, dir.path.string()), {"block_t=2", "num_warps=1"});
    CHECK(p.shape.at("num_tokens") == T);
    uint16_t first;
    std::memcpy(&first, p.buffers[size_t(p.outputs[0])].bytes.data(), 2);
    CHECK(first == 0x7e01);
  }
}

// x / scale rounded to nearest even and saturated to the largest finite value, at the exact
// boundaries: the expected bytes are written out by hand from the formats' definitions.
TEST_CASE("reshape_and_cache: fp8 rounding and saturation at exact boundaries", "[templates][reshape_and_cache]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    float x;
    uint8_t e4m3, e5m2;
  };
  const std::vector<Case> cases = {
      {1.0f, 0x38, 0x3c},          {-1.0f, 0xb8, 0xbc},          {-0.0f, 0x80, 0x80},
      {1.0625f, 0x38, 0x3c},       // e4m3: halfway 1 | 1.125, ties to even 1.0
      {1.1875f, 0x3a, 0x3d},       // e4m3: halfway 1.125 | 1.25, ties to even 1.25
      {1.125f, 0x39, 0x3c},        // e5m2: halfway 1 | 1.25, to 1.0
      {1.375f, 0x3b, 0x3e},        // e5m2: halfway 1.25 | 1.5, to 1.5
      {1.8125f, 0x3e, 0x3f},       // e4m3: halfway 1.75 | 1.875, to 1.75 (value: 7x / 7, not 7x * (1/7))
      {1.625f, 0x3d, 0x3e},        // e5m2: halfway 1.5 | 1.75, to 1.5 (likewise)
      {448.0f, 0x7e, 0x5f},        {464.0f, 0x7e, 0x5f},          // e4m3: past 448 saturates
      {-1e30f, 0xfe, 0xfb},        {57344.0f, 0x7e, 0x7b},        {61440.0f, 0x7e, 0x7b},
      {inf, 0x7e, 0x7b},           {-inf, 0xfe, 0xfb},            {nan, 0x7f, 0x7f},
      {0x1p-9f, 0x01, 0x18},       {0x1p-10f, 0x00, 0x14},        {0x3p-10f, 0x02, 0x1a}, // e4m3's subnormals
      {0x1p-16f, 0x00, 0x01},      {0x1p-17f, 0x00, 0x00},        {0x3p-17f, 0x00, 0x02}, // e5m2's
  };
  const int64_t D = 8, T = int64_t(cdiv(int64_t(cases.size()), D)), NB = 2, BS = 2; // one head, 3 tokens
  REQUIRE(T <= NB * BS);
  // value = 7 x key (exact) with v_scale 7: the same bytes, through a division by the scale that
  // a multiplication by f32's 1/7 (above 1/7 by 4.5e-8 of it) would round up past the halfway points.
  std::vector<float> key(size_t(T * D), 0.0f), value(key.size(), 0.0f);
  for (size_t i = 0; i < cases.size(); ++i) key[i] = cases[i].x, value[i] = 7 * cases[i].x;
  for (const char* fmt_name : {"f8e4m3", "f8e5m2"})
    for (const char* backend : {"interpret", "emulate"}) {
      INFO(fmt::format("{} {}", fmt_name, backend));
      rt::test::TempDir dir;
      put(dir.path, "key", "<f4", {T, 1, D}, key);
      put(dir.path, "value", "<f4", {T, 1, D}, value);
      put(dir.path, "slot_mapping", "<i8", {T}, std::vector<int64_t>{3, 0, 1});
      put(dir.path, "k_cache", "|u1", {NB, BS, 1, D}, std::vector<uint8_t>(size_t(NB * BS * D), 0x55));
      put(dir.path, "v_cache", "|u1", {NB, BS, 1, D}, std::vector<uint8_t>(size_t(NB * BS * D), 0x55));
      Problem p = run_checked(backend, request({fmt::format("kv_dtype={}", fmt_name)}, {{"k-scale", 1.0}, {"v-scale", 7.0}},
                                               dir.path.string()),
                              {"block_t=1"});
      const int64_t slot_of[3] = {3, 0, 1};
      for (size_t k = 0; k < 2; ++k) {
        const launch::Buffer& c = p.buffers[size_t(p.outputs[k])];
        for (size_t i = 0; i < cases.size(); ++i) {
          INFO(fmt::format("cache {} x = {}", k, cases[i].x));
          const uint8_t want = fmt_name[3] == '4' ? cases[i].e4m3 : cases[i].e5m2;
          CHECK(uint8_t(c.bytes[size_t(slot_of[i / size_t(D)] * D) + i % size_t(D)]) == want);
        }
        CHECK(uint8_t(c.bytes[size_t(2 * D)]) == 0x55); // slot 2: not named
      }
    }
}

TEST_CASE("reshape_and_cache --out writes the caches into a folder", "[templates][reshape_and_cache][cli]") {
  rt::test::TempDir dir;
  const fs::path out = dir.path / "new";
  test::Process r = test::run_tilec({"run", "reshape_and_cache", "--backend", "interpret", "--shape", "num_tokens=5", "hkv=1",
                                     "head_dim=8", "num_blocks=2", "block_size=4", "dtype=bf16", "--out", out.string()});
  INFO(r.text());
  REQUIRE(r.exit_code == 0);
  rt::NpyArray k = rt::read_npy((out / "k_cache.npy").string()), v = rt::read_npy((out / "v_cache.npy").string());
  CHECK(k.descr == "<u2");
  CHECK(k.shape == std::vector<int64_t>{2, 4, 1, 8});
  CHECK(v.shape == k.shape);
  // The latent form writes k_cache alone; a file where the folder goes is refused.
  const fs::path latent = dir.path / "latent";
  r = test::run_tilec({"run", "reshape_and_cache", "--backend", "interpret", "--shape", "latent=1", "num_blocks=4",
                       "--out", latent.string()});
  REQUIRE(r.exit_code == 0);
  CHECK(fs::exists(latent / "k_cache.npy"));
  CHECK_FALSE(fs::exists(latent / "v_cache.npy"));
  r = test::run_tilec({"run", "reshape_and_cache", "--backend", "interpret", "--out", (out / "k_cache.npy").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("is not a folder"));
}

TEST_CASE("reshape_and_cache refuses bad inputs with exit 2, naming them, and writes nothing",
          "[templates][reshape_and_cache][cli]") {
  const int64_t T = 4, H = 2, D = 8, NB = 2, BS = 4;
  struct Bad {
    std::string what, message;
    std::function<void(const fs::path&)> edit;
    std::vector<std::string> extra = {};
  };
  auto slots = [](std::vector<int64_t> s) { return [s](const fs::path& d) { put(d, "slot_mapping", "<i8", {int64_t(s.size())}, s); }; };
  const std::vector<Bad> bad = {
      {"a slot past the cache", "slot_mapping[2] = 8 is not a slot: slots are 0 to num_blocks * block_size - 1 = 2 * 4 - 1 = 7",
       slots({0, 1, 8, -1})},
      {"a slot below -1", "slot_mapping[1] = -2 is not a slot", slots({0, -2, 3, 4})},
      {"two tokens on one slot", "slot_mapping[0] and slot_mapping[3] both name slot 5 (page 1, offset 1)",
       slots({5, 1, -1, 5})},
      {"a slot_mapping of another length", "slot_mapping.npy: 3 entries, but key.npy [4, 2, 8] has num_tokens = 4",
       slots({0, 1, 2})},
      {"float slots", "dtype '<f4' is not <i8 (int64) or <i4 (int32)",
       [](const fs::path& d) { put(d, "slot_mapping", "<f4", {T}, std::vector<float>(size_t(T), 0.0f)); }},
      {"value of another shape", "value.npy: shape [4, 2, 4] differs from key.npy's [4, 2, 8]",
       [](const fs::path& d) { put(d, "value", "<f4", {T, H, 4}, std::vector<float>(size_t(T * H * 4))); }},
      {"value of another dtype", "value.npy: dtype '<f2' differs from key.npy's '<f4'",
       [](const fs::path& d) { put(d, "value", "<f2", {T, H, D}, std::vector<uint16_t>(size_t(T * H * D))); }},
      {"a cache of another dtype", "k_cache.npy: dtype '<f2' differs from key.npy's '<f4'",
       [](const fs::path& d) { put(d, "k_cache", "<f2", {NB, BS, H, D}, std::vector<uint16_t>(size_t(NB * BS * H * D))); }},
      {"a cache of other heads", "k_cache.npy: shape [2, 4, 1, 16] has [hkv, head_dim] = [1, 16], key.npy [4, 2, 8] has [2, 8]",
       [](const fs::path& d) { put(d, "k_cache", "<f4", {NB, BS, 1, 16}, std::vector<float>(size_t(NB * BS * 16))); }},
      {"v_cache unlike k_cache", "v_cache.npy: shape [3, 4, 2, 8] differs from k_cache.npy's [2, 4, 2, 8]",
       [](const fs::path& d) { put(d, "v_cache", "<f4", {3, BS, H, D}, std::vector<float>(size_t(3 * BS * H * D))); }},
      {"value without v_cache", "value.npy is there but v_cache.npy is not",
       [](const fs::path& d) { fs::remove(d / "v_cache.npy"); }},
      {"fp8 caches without their scale", "--k-scale is required",
       [](const fs::path& d) {
         for (const char* c : {"k_cache", "v_cache"}) put(d, c, "|u1", {NB, BS, H, D}, std::vector<uint8_t>(size_t(NB * BS * H * D)));
       },
       {"--shape", "kv_dtype=f8e4m3", "--v-scale", "0.5"}},
      {"a cache of floats for fp8", "--shape kv_dtype=f8e5m2 wants fp8 bytes (|u1), the file holds '<f4'", [](const fs::path&) {},
       {"--shape", "kv_dtype=f8e5m2", "--k-scale", "1", "--v-scale", "1"}},
  };
  for (const Bad& b : bad) {
    INFO(b.what);
    rt::test::TempDir dir;
    put(dir.path, "key", "<f4", {T, H, D}, std::vector<float>(size_t(T * H * D), 1.0f));
    put(dir.path, "value", "<f4", {T, H, D}, std::vector<float>(size_t(T * H * D), 2.0f));
    put(dir.path, "slot_mapping", "<i8", {T}, std::vector<int64_t>{0, 1, 2, -1});
    put(dir.path, "k_cache", "<f4", {NB, BS, H, D}, std::vector<float>(size_t(NB * BS * H * D)));
    put(dir.path, "v_cache", "<f4", {NB, BS, H, D}, std::vector<float>(size_t(NB * BS * H * D)));
    b.edit(dir.path);
    const fs::path out = dir.path / "out";
    std::vector<std::string> args = {"run", "reshape_and_cache", "--backend", "interpret", "--inputs", dir.path.string(),
                                     "--out", out.string()};
    args.insert(args.end(), b.extra.begin(), b.extra.end());
    test::Process r = test::run_tilec(args);
    INFO(r.text());
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(b.message));
    CHECK_FALSE(fs::exists(out));
  }
  // The untouched inputs run (the cases above fail for their one defect).
  rt::test::TempDir dir;
  put(dir.path, "key", "<f4", {T, H, D}, std::vector<float>(size_t(T * H * D), 1.0f));
  put(dir.path, "slot_mapping", "<i4", {T}, std::vector<int32_t>{7, -1, 0, 3});
  put(dir.path, "k_cache", "<f4", {NB, BS, H, D}, std::vector<float>(size_t(NB * BS * H * D)));
  test::Process r = test::run_tilec({"run", "reshape_and_cache", "--backend", "interpret", "--inputs", dir.path.string()});
  INFO(r.text());
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("latent"));
}
