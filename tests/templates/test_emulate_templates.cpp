// The emulate backend against the interpreter on every template, with random shapes and
// ragged tails; its byte counters; and a planted out-of-bounds load.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <random>

#include "backends/launchers.h"
#include "tests/templates/test_util.h"
#include "dsl/dsl.h"
#include "interp/launcher.h"
#include "ir/printer.h"
#include "runtime/emulator/emulator.h"
#include "templates/kernels.h"
#include "templates/attention/paged_attention.h"

using namespace tilec;
using namespace tilec::templates;
using test::max_err;

namespace {

int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// Runs one template problem on the interpreter and on the emulator; every output must
// agree with the interpreter's and pass the template's own check.
void check_template(const std::string& name, const ParamMap& params, const ParamMap& shape, uint64_t seed) {
  const KernelTemplate* t = find_template(name);
  REQUIRE(t);
  ir::Kernel k = t->build(params, shape);
  Problem ref = make_problem(*t, {shape, seed, {}, {}});
  Problem emu = ref;
  int warps = int(params.at("num_warps"));
  interp::make_interpret_launcher()->launch(k, warps, launch_grid(*t, params, ref.shape), ref.launch_args());
  backends::make_emulate_launcher()->launch(k, warps, launch_grid(*t, params, emu.shape), emu.launch_args());
  std::string desc = name;
  for (auto& [n, v] : params) desc += " " + n + "=" + std::to_string(v);
  for (auto& [n, v] : shape) desc += " " + n + "=" + std::to_string(v);
  INFO(desc);
  Comparison c = compare_outputs(emu);
  INFO(c.first_mismatch);
  CHECK(c.ok);
  for (int o : emu.outputs) {
    const launch::Buffer& a = ref.buffers[size_t(o)];
    const launch::Buffer& b = emu.buffers[size_t(o)];
    double worst = 0;
    for (size_t i = 0; i < a.count(); ++i) worst = std::max(worst, std::abs(a.get(i) - b.get(i)));
    CHECK(worst <= 1e-5);
  }
}


} // namespace

TEST_CASE("emulate matches the interpreter on vector_add, softmax and matmul", "[emulator][templates]") {
  std::mt19937 rng(7);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int round = 0; round < 3; ++round) {
    int64_t warps = int64_t(1) << pick(0, 2);
    check_template("vector_add", {{"block", int64_t(128) << pick(0, 3)}, {"num_warps", warps}},
                   {{"n", pick(1, 5000)}}, 1 + round);
    int64_t cols = pick(1, 700);
    check_template("softmax", {{"block", next_pow2(cols) << pick(0, 1)}, {"num_warps", warps}},
                   {{"rows", pick(1, 9)}, {"cols", cols}}, 11 + round);
    check_template("matmul",
                   {{"block_m", int64_t(16) << pick(0, 1)},
                    {"block_n", int64_t(16) << pick(0, 2)},
                    {"block_k", int64_t(8) << pick(0, 1)},
                    {"num_warps", warps}},
                   {{"m", pick(1, 70)}, {"n", pick(1, 70)}, {"k", pick(1, 40)}}, 21 + round);
    // f16 / bf16 on the tensor cores, pipelined: a warpgroup MMA tile (sm_90's wgmma in the
    // emulator) whose n and k are multiples of 16 or not (then its copies are not asynchronous).
    check_template("matmul",
                   {{"block_m", 64 << pick(0, 1)}, {"block_n", int64_t(16) << pick(0, 3)}, {"block_k", int64_t(16) << pick(0, 2)},
                    {"num_warps", 4}, {"num_stages", pick(1, 3)}},
                   {{"m", pick(1, 150)}, {"n", 16 * pick(1, 9) - (round == 2 ? 3 : 0)}, {"k", 16 * pick(1, 9)},
                    {"dtype", 1 + round % 2}}, 31 + round);
  }
}

TEST_CASE("emulate matches the interpreter on fused paged attention", "[emulator][templates]") {
  struct Case {
    ir::DType dtype;
    int64_t hq, hkv, sq, head_dim, block_size, max_blocks, block_n, splits;
  };
  uint64_t seed = 100;
  for (Case c : {Case{ir::DType::f32, 4, 2, 1, 16, 5, 4, 8, 1}, Case{ir::DType::f32, 8, 2, 1, 32, 16, 3, 16, 2},
                 Case{ir::DType::f16, 4, 1, 1, 16, 8, 5, 16, 4}, Case{ir::DType::f16, 6, 2, 3, 16, 5, 4, 8, 1}}) {
    PagedAttentionShape s;
    s.batch = 3;
    s.hq = c.hq;
    s.hkv = c.hkv;
    s.sq = c.sq;
    s.head_dim = c.head_dim;
    s.block_size = c.block_size;
    s.max_blocks = c.max_blocks;
    s.dtype = c.dtype;
    auto in = make_paged_attention_inputs(s, seed++);
    in.context_lens.set_int(0, 0); // an empty sequence
    PagedAttentionConfig cfg;
    cfg.block_n = c.block_n;
    cfg.num_splits = c.splits;
    INFO("dtype " << ir::dtype_name(c.dtype) << " hq " << c.hq << " hkv " << c.hkv << " sq " << c.sq << " splits "
                  << c.splits);
    auto interp = interp::make_interpret_launcher(), emu = backends::make_emulate_launcher();
    auto want = run_paged_attention_fused(in, cfg, *interp);
    auto got = run_paged_attention_fused(in, cfg, *emu);
    CHECK(max_err(got, want) <= (c.dtype == ir::DType::f32 ? 1e-5 : 2e-3));
    CHECK(max_err(got, paged_attention_reference(in)) <= (c.dtype == ir::DType::f32 ? 2e-5 : 4e-3));
    CHECK(emu->stats().launches == (c.splits > 1 ? 2 : 1));
    CHECK(emu->stats().unique_bytes.value_or(0) > 0);
  }
}

namespace {

void check_vector_add_bytes(int64_t block, int64_t warps) {
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(4099)}) {
    const KernelTemplate* t = find_template("vector_add");
    ParamMap params{{"block", block}, {"num_warps", warps}}, shape{{"n", n}};
    Problem p = make_problem(*t, {shape, 3, {}, {}});
    auto emu = backends::make_emulate_launcher();
    emu->launch(t->build(params, shape), int(warps), launch_grid(*t, params, p.shape), p.launch_args());
    INFO("n = " << n << ", block " << block << ", num_warps " << warps);
    CHECK(compare_outputs(p).ok);
    CHECK(emu->stats().bytes_loaded.value_or(-1) == 8 * n);
    CHECK(emu->stats().bytes_stored.value_or(-1) == 4 * n);
    CHECK(emu->stats().unique_bytes.value_or(-1) == 3 * 32 * cdiv(4 * n, 32));
    CHECK(emu->stats().time_ms > 0);
  }
}

} // namespace

TEST_CASE("emulate counts the bytes vector_add moves", "[emulator][templates]") { check_vector_add_bytes(1024, 4); }

// A 256-element tile over 4 warps (128 threads) is smaller than one pass of a 4-wide layout
// (512 elements): the lowering narrows the vector to 2 so every element is loaded once
// (the bytes are exactly 8n loaded, 4n stored), rather than by two threads each.
TEST_CASE("emulate: vector_add with a tile smaller than the layout loads each element once",
          "[emulator][templates]") {
  check_vector_add_bytes(256, 4);
}

TEST_CASE("emulate: an unmasked load past the end names the kernel and buffer", "[emulator][templates]") {
  using namespace dsl;
  KernelBuilder kb("oob_load");
  auto x = kb.arg<Ptr<f32>>("x"), out = kb.arg<Ptr<f32>>("out");
  auto offs = program_id(0) * 128 + arange(0, 128);
  store(out + offs, load(x + offs));
  ir::Kernel k = kb.finish();
  launch::Buffer xs("inputs", ir::DType::f32, 100), outs("outputs", ir::DType::f32, 128);
  auto emu = backends::make_emulate_launcher();
  std::string e;
  try {
    emu->launch(k, 4, {1, 1, 1}, {launch::Arg::of(xs), launch::Arg::of(outs)});
  } catch (const rt::EmulationError& err) {
    e = err.what();
  }
  INFO(e);
  CHECK(e.find("kernel 'oob_load'") != std::string::npos);
  CHECK(e.find("load of") != std::string::npos);
  CHECK(e.find("'inputs'") != std::string::npos);
  // Element 100 or past it (up to 127), whatever the vector width and whichever thread the
  // schedule runs first.
  CHECK((e.find("element 10") != std::string::npos || e.find("element 11") != std::string::npos ||
         e.find("element 12") != std::string::npos));
}

TEST_CASE("emulate: paged attention moves about the ideal bytes", "[emulator][templates]") {
  PagedAttentionShape s;
  s.batch = 2;
  s.hq = 8;
  s.hkv = 2;
  s.head_dim = 64;
  s.block_size = 16;
  s.max_blocks = 16;
  s.dtype = ir::DType::f16;
  auto in = make_paged_attention_inputs(s, 5, 256);
  PagedAttentionConfig cfg;
  auto emu = backends::make_emulate_launcher();
  auto t0 = std::chrono::steady_clock::now();
  auto got = run_paged_attention_fused(in, cfg, *emu);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(max_err(got, paged_attention_reference(in)) <= 4e-3);
  int64_t ideal = paged_attention_ideal_bytes(in);
  const launch::LaunchStats& st = emu->stats();
  WARN("paged attention f16 batch=2 hq=8 hkv=2 d=64 page=16 ctx=256: ideal " << ideal << " bytes, unique "
       << st.unique_bytes.value_or(-1) << ", loaded " << st.bytes_loaded.value_or(-1) << ", stored "
       << st.bytes_stored.value_or(-1) << "; emulated in " << st.time_ms << " ms (" << ms << " ms with compile)");
  REQUIRE(st.unique_bytes);
  CHECK(double(*st.unique_bytes) <= 1.05 * double(ideal));
  CHECK(double(*st.unique_bytes) >= 0.95 * double(ideal));
}

namespace {

// Keeps the IR of every kernel it is asked to launch, and runs none.
class RecordingLauncher : public launch::Launcher {
public:
  std::string backend() const override { return "record"; }
  void launch(const ir::Kernel& kernel, int, launch::Grid, const std::vector<launch::Arg>&) override {
    printed.push_back(ir::print(*kernel));
  }
  std::vector<std::string> printed;
};

} // namespace

TEST_CASE("the fused kernel's cache tells configurations apart by their warps", "[templates][paged_attention]") {
  // The same problem at 4 and then 8 warps, in one process: 4 warps take the transposed tile
  // with its register ceiling, 8 cannot (64 keys a step are not 16 rows for each of 8 warps).
  PagedAttentionShape s;
  s.batch = 1, s.hq = 32, s.hkv = 8, s.head_dim = 128, s.dtype = ir::DType::bf16;
  auto in = make_paged_attention_inputs(s, 5);
  RecordingLauncher rec;
  for (int64_t warps : {4, 8, 4}) {
    PagedAttentionConfig cfg;
    cfg.block_n = 64;
    cfg.head_group = 4;
    cfg.num_warps = warps;
    run_paged_attention_fused(in, cfg, rec);
  }
  REQUIRE(rec.printed.size() == 3);
  CHECK_THAT(rec.printed[0], Catch::Contains("max_registers 96"));
  CHECK_THAT(rec.printed[1], !Catch::Contains("max_registers"));
  CHECK(rec.printed[2] == rec.printed[0]);
}
