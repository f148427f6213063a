// Every config of every shipped search space (configs/*.toml and the tutorial example's),
// at three shapes or more (ragged ones among them), run on the emulator against the
// reference and within the kernel's traffic budget. A config is run the way autotune, --tuned,
// bench and tilec-measure run it (measure_problem: its own grid, outputs restored after), so
// a path that launched configs on the default config's grid, or a budget that fails a correct
// run, shows here. Spaces too large to run whole declare a sample: every k-th candidate.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/ranges.h>

#include "autotune/space.h"
#include "autotune/tuner.h"
#include "backends/launchers.h"
#include "templates/registry.h"
#include "measure/measure.h"

using namespace tilec;
using namespace tilec::templates;

namespace {

struct SpaceUnderTest {
  std::string kernel;
  std::string file; // relative to the source tree
  std::vector<std::vector<std::string>> shapes;
  size_t sample = 0; // 0: every candidate; else about this many, evenly spaced
};

const std::vector<SpaceUnderTest>& spaces() {
  static const std::vector<SpaceUnderTest> all = {
      {"vector_add", "configs/vector_add.toml", {{"n=100003"}, {"n=1"}, {"n=1000"}, {"n=4097"}}},
      {"softmax", "configs/softmax.toml", {{"rows=37", "cols=1000"}, {"rows=1", "cols=1"}, {"rows=5", "cols=257"}}},
      {"matmul", "configs/matmul.toml", {{"m=100", "n=75", "k=50"}, {"m=1", "n=1", "k=1"}, {"m=33", "n=65", "k=17"}}, 24},
      {"matmul", "configs/matmul_sm90.toml",
       {{"m=100", "n=75", "k=50", "dtype=bf16"}, {"m=1", "n=1", "k=1", "dtype=f16"}, {"m=130", "n=96", "k=64", "dtype=bf16"}},
       8},
      {"rmsnorm", "examples/rmsnorm/rmsnorm.toml", {{"rows=64", "cols=1000"}, {"rows=3", "cols=1"}, {"rows=7", "cols=300"}}},
      {"paged_attention", "configs/paged_attention.toml",
       {{"batch=2", "hq=8", "hkv=2", "head_dim=64", "block_size=16", "ctx=40", "dtype=f16"},
        {"batch=3", "hq=4", "hkv=1", "head_dim=32", "block_size=8", "ctx=-1", "dtype=bf16", "window=9"},
        {"batch=1", "hq=2", "hkv=2", "head_dim=64", "block_size=1", "ctx=37", "dtype=f16", "causal=1", "sq=2"},
        // A prefill chunk: 4 x 40 packed rows, so every block_m the space lists is a tile of its own.
        {"batch=1", "hq=4", "hkv=1", "head_dim=32", "block_size=16", "ctx=72", "dtype=bf16", "causal=1", "sq=40"}},
       10},
      {"reshape_and_cache", "configs/reshape_and_cache.toml",
       {{"num_tokens=37", "hkv=8", "head_dim=128", "num_blocks=4", "block_size=16", "dtype=bf16"},
        {"num_tokens=5", "hkv=1", "head_dim=576", "latent=1", "kv_dtype=f8e4m3", "slot_dtype=i32", "num_blocks=2",
         "block_size=4", "dtype=f16"},
        {"num_tokens=1", "hkv=3", "head_dim=40", "num_blocks=1", "block_size=3"}},
       12},
      {"paged_attention", "configs/gpu_check.toml",
       {{"batch=2", "hq=8", "hkv=2", "head_dim=64", "block_size=16", "ctx=70", "dtype=bf16"},
        {"batch=1", "hq=4", "hkv=1", "head_dim=128", "block_size=16", "ctx=-1", "dtype=bf16"},
        {"batch=2", "hq=8", "hkv=1", "head_dim=64", "block_size=32", "ctx=200", "dtype=f16"}},
       8},
  };
  return all;
}

} // namespace

TEST_CASE("every config of every shipped search space runs right on its own grid (emulator)", "[kernels][sweep]") {
  namespace fs = std::filesystem;
  // Every space in configs/ is listed above: a new one cannot be shipped untested.
  for (const auto& entry : fs::directory_iterator(fs::path(TILEC_SOURCE_DIR) / "configs")) {
    std::string rel = "configs/" + entry.path().filename().string();
    INFO(rel);
    CHECK(std::any_of(spaces().begin(), spaces().end(), [&](const SpaceUnderTest& s) { return s.file == rel; }));
  }
  auto launcher = backends::make_emulate_launcher();
  size_t total = 0;
  for (const SpaceUnderTest& sut : spaces()) {
    const KernelTemplate* t = find_template(sut.kernel);
    INFO(sut.file);
    REQUIRE(t);
    autotune::SearchSpace space =
        autotune::load_space((fs::path(TILEC_SOURCE_DIR) / sut.file).string(), autotune::space_names(*t));
    REQUIRE(sut.shapes.size() >= 3);
    for (const std::vector<std::string>& given : sut.shapes) {
      ParamMap shape = resolve_params(t->shape, given, "--shape");
      autotune::Enumeration en = autotune::enumerate_for(*t, space, autotune::Values(shape.begin(), shape.end()));
      INFO(fmt::format("{} {}", t->name, fmt::join(given, " ")));
      REQUIRE(!en.candidates.empty());
      Problem p = make_problem(*t, {shape, 5, {}, {}});
      const size_t step = sut.sample == 0 ? 1 : std::max<size_t>(1, en.candidates.size() / sut.sample);
      // An odd step, so a sample walks through the values of every parameter (the last listed
      // varies fastest: an even step over it would only ever pick every other value).
      std::set<int64_t> block_ms;
      for (size_t i = 0; i < en.candidates.size(); i += step | 1) {
        ParamMap config = resolve_params(t->params, {}, "--set");
        for (const auto& [name, v] : en.candidates[i]) config[name] = v;
        INFO(autotune::format_values(config));
        measure::Measurement m = measure::measure_problem(*t, "", config, p, *launcher, 0, 0);
        CHECK(m.rejected == "");
        CHECK(m.cmp.ok);
        CHECK(m.traffic_error == ""); // the check run moved no more than a correct run of this config may
        if (config.count("block_m")) block_ms.insert(config.at("block_m"));
        ++total;
      }
      // Where the space keeps several query tiles, the sample runs them (paged attention at sq=40).
      std::set<int64_t> listed;
      for (const autotune::Values& c : en.candidates)
        if (c.count("block_m")) listed.insert(c.at("block_m"));
      if (listed.size() > 2) CHECK(block_ms.size() >= 3);
    }
  }
  // vector_add alone has 3 blocks x 3 warp counts less what the constraint drops, per shape.
  CHECK(total >= 60);
}
