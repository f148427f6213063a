// Paged K/V through tensor descriptors: the gathered desc_load (dsl::load_gather, `boxes G`),
// whose block's rows come in G boxes each from its own row (a page), on the interpreter and
// the emulator in both lowerings against a reference, its expansion, its text form and its
// checks; paged attention's kv_tma=1 (K and V tiles as such gathers, TMA copies of a box per
// page on sm_90) against the reference on the emulator, its PTX and tensor maps, and where it
// falls back to masked loads.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>

#include "backends/launchers.h"
#include "backends/module_cache.h"
#include "codegen/compile.h"
#include "codegen/ptx_loops.h"
#include "codegen/tma.h"
#include "dsl/dsl.h"
#include "interp/launcher.h"
#include "ir/parser.h"
#include "ir/passes.h"
#include "ir/printer.h"
#include "launch/launcher.h"
#include "launch/module_launcher.h"
#include "templates/attention/paged_attention.h"
#include "tests/codegen/codegen_test_util.h"
#include "tests/templates/test_util.h"

using namespace tilec;
using namespace tilec::templates;
using backends::EmuLowering;
using ir::DType;

namespace {

// y [R, 32] = 2 x's gathered block + 1: x a [rows, cols] row-major f32 tensor, the block's R
// rows in `boxes` boxes from the rows r_i (parameters), its columns from c0.
ir::Kernel gather_copy(int64_t R, int64_t boxes) {
  using namespace dsl;
  KernelBuilder k("gather_copy");
  auto x = k.arg<Ptr<f32>>("x"), y = k.arg<Ptr<f32>>("y");
  auto rows = k.arg<i32>("rows"), cols = k.arg<i32>("cols"), c0 = k.arg<i32>("c0");
  std::vector<Operand> starts;
  for (int64_t i = 0; i < boxes; ++i) starts.push_back(k.arg<i32>(fmt::format("r{}", i)));
  TensorDesc dx = make_tensor_desc(x, {rows, cols}, {cols, 1}, {R, 32});
  Tile g = load_gather(dx, starts, {c0});
  store(y + arange(0, R).col() * 32 + arange(0, 32).row(), g * 2.0f + 1.0f);
  return k.finish();
}

} // namespace

TEST_CASE("gathered descriptor loads: each box from its own row, zeros outside the tensor, on every backend",
          "[codegen][tma][paged]") {
  const int rows = 40, cols = 48, R = 32, boxes = 4, h = R / boxes;
  ir::Kernel k = gather_copy(R, boxes);
  REQUIRE(codegen::test::count_kind(*k, ir::OpKind::DescLoad) == 1);
  // Boxes in any order, one partly past the end, one before the start, one column range partly
  // past the right edge.
  for (auto [starts, c0] : {std::pair{std::vector<int>{16, 0, 32, 8}, 0}, {std::vector<int>{36, -4, 5, 5}, 20},
                            {std::vector<int>{-8, 39, 24, 1}, -3}}) {
    INFO("starts " << starts[0] << " " << starts[1] << " " << starts[2] << " " << starts[3] << ", c0 " << c0);
    launch::Buffer x("x", DType::f32, size_t(rows * cols));
    for (size_t i = 0; i < x.count(); ++i) x.set(i, double(i % 89) - 30.0);
    std::vector<double> want(size_t(R * 32));
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 32; ++c) {
        const int xr = starts[size_t(r / h)] + r % h, xc = c0 + c;
        const bool in = xr >= 0 && xr < rows && xc >= 0 && xc < cols;
        want[size_t(r * 32 + c)] = 2.0 * (in ? x.get(size_t(xr * cols + xc)) : 0.0) + 1.0;
      }
    auto run = [&](launch::Launcher& l) {
      launch::Buffer y("y", DType::f32, size_t(R * 32));
      std::vector<launch::Arg> args{launch::Arg::of(x), launch::Arg::of(y), launch::Arg::of_int(rows),
                                    launch::Arg::of_int(cols), launch::Arg::of_int(c0)};
      for (int s : starts) args.push_back(launch::Arg::of_int(s));
      l.launch(k, 4, {1, 1, 1}, args);
      int bad = 0;
      for (size_t i = 0; i < y.count(); ++i)
        if (y.get(i) != want[i] && ++bad <= 3) FAIL_CHECK("y[" << i << "]: " << y.get(i) << ", want " << want[i]);
      CHECK(bad == 0);
    };
    run(*interp::make_interpret_launcher());
    for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
      INFO((lowering == backends::EmuLowering::emu ? "emu lowering" : "nvptx lowering"));
      run(*backends::make_emulate_launcher(lowering));
    }
  }
}

TEST_CASE("gathered descriptor loads: expanded into one masked load, printed and parsed with their boxes",
          "[codegen][tma][paged]") {
  ir::Kernel k = gather_copy(32, 4);
  const std::string text = ir::print(*k);
  CHECK_THAT(text, Catch::Contains(" boxes 4 : tile<32x32xf32>"));
  ir::Kernel back = ir::parse(text, "gather.tir");
  CHECK(ir::print(*back) == text);
  // One box is the plain form: no `boxes` printed.
  CHECK_THAT(ir::print(*gather_copy(32, 1)), !Catch::Contains("boxes"));
  ir::Kernel e = ir::clone(*k);
  CHECK(ir::expand_descriptors(*e) == 1);
  CHECK(codegen::test::count_kind(*e, ir::OpKind::DescLoad) == 0);
  CHECK(codegen::test::count_kind(*e, ir::OpKind::Load) == 1);
  CHECK(codegen::test::count_kind(*e, ir::OpKind::Select) == 3); // the boxes' starts chosen by row, last box first
  // A parsed op whose box count does not match its offsets is refused.
  std::string bad = text;
  bad.replace(bad.find("boxes 4"), 7, "boxes 3");
  CHECK_THROWS_WITH(ir::parse(bad, "bad.tir"), Catch::Contains("(3 offsets for dim 0); got 10 operands"));
}

TEST_CASE("load_gather: the DSL refuses row offsets that do not split the block", "[codegen][tma][paged]") {
  using namespace dsl;
  KernelBuilder k("bad_gather");
  auto x = k.arg<Ptr<f32>>("x");
  TensorDesc d = make_tensor_desc(x, {64, 32}, {32, 1}, {16, 32});
  CHECK_THROWS_WITH(load_gather(d, {0, 8, 16}, {0}), Catch::Contains("a power of two of them that divides"));
  CHECK_THROWS_WITH(load_gather(d, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                    23, 24, 25, 26, 27, 28, 29, 30, 31},
                                {0}),
                    Catch::Contains("divides the block's 16 rows"));
  CHECK_THROWS_WITH(load_gather(d, {0, 8}, {}), Catch::Contains("offsets for a rank-2 descriptor"));
}

namespace {


// A prefill tile on a warpgroup's MMA: 64 packed rows (16 positions x 4 heads of one KV head),
// 4 warps, head_dim 64.
PagedAttentionShape prefill(int64_t block_size, int64_t max_blocks, DType dtype = DType::bf16) {
  PagedAttentionShape s;
  s.batch = 2, s.hq = 4, s.hkv = 1, s.sq = 16, s.head_dim = 64, s.block_size = block_size, s.dtype = dtype;
  s.max_blocks = max_blocks;
  return s;
}
PagedAttentionConfig tile(int64_t block_n, int64_t kv_tma) {
  PagedAttentionConfig c;
  c.block_n = block_n, c.block_m = 64, c.num_warps = 4, c.head_group = 4, c.kv_tma = kv_tma;
  return c;
}

// The TMA copies (cp.async.bulk.tensor) and the 16-byte cp.async of the kernel's main loop, with
// its tensor maps, compiled for sm_90.
struct Copies {
  int tma = 0, cp_async = 0;
  std::vector<rt::ModuleTensorMap> maps;
  int tma_loads = 0; // descriptor loads copied by TMA, anywhere in the kernel
};
Copies copies(const PagedAttentionShape& s, const PagedAttentionConfig& cfg) {
  codegen::CompileOptions o; // sm_90
  o.num_warps = int(cfg.num_warps);
  o.run_ptxas = false;
  ir::Kernel k = paged_attention_fused_kernel(s, cfg);
  const codegen::CompiledKernel ck = codegen::compile(*k, o);
  std::optional<codegen::PtxLoop> loop = codegen::kernel_main_loop(*k, ck.ptx);
  REQUIRE(loop);
  return {loop->count("cp.async.bulk"), loop->count("cp.async.cg") + loop->count("cp.async.ca"),
          ck.stats.tensor_maps, ck.stats.tma_loads};
}

// How far `got` is from `want` past the tolerance: "" when every element is within it.
std::string mismatch(const launch::Buffer& got, const launch::Buffer& want, const PagedAttentionTolerance& tol) {
  int64_t bad = 0;
  std::string why;
  for (size_t i = 0; i < want.count(); ++i) {
    const double g = got.get(i), w = want.get(i);
    if (std::abs(g - w) <= tol.atol + tol.rtol * std::abs(w)) continue;
    if (bad++ < 3) why += fmt::format("element {}: {} want {}\n", i, g, w);
  }
  if (bad) why += fmt::format("{} of {} elements off (atol {:g}, rtol {:g})", bad, want.count(), tol.atol, tol.rtol);
  return why;
}

struct Case {
  const char* what;
  PagedAttentionShape s;
  PagedAttentionConfig cfg;
  int tma_per_trip; // the main loop's TMA copies on sm_90 (0: the gathers are expanded; -1: the
                    // main loop is another, the K/V loops nested in a plan's, with TMA loads)
};

// kv_tma=1 on the emulator (sm_90) in both lowerings against the reference, with NaN in every
// slot past each context in its last page (a tail key that reached a product shows) and
// unused table entries naming no page; and the main loop's copies.
void check_case(const Case& c, uint64_t seed) {
  INFO(c.what);
  const Copies cp = copies(c.s, c.cfg);
  if (c.tma_per_trip >= 0) CHECK(cp.tma == c.tma_per_trip);
  CHECK(cp.tma_loads == (c.tma_per_trip ? 2 : 0)); // K and V of the whole steps
  if (c.tma_per_trip > 0) {
    CHECK(cp.cp_async == 0);
    for (const rt::ModuleTensorMap& m : cp.maps) {
      CHECK(m.sizes == std::vector<rt::SpecValue>{std::string("cache_rows"), c.s.hkv * c.s.head_dim});
      CHECK(m.box == std::vector<int64_t>{std::min(c.s.block_size, c.cfg.block_n), 64});
    }
  }
  PagedAttentionInputs in = make_paged_attention_inputs(c.s, seed, -1, /*poison_unused=*/true);
  const PagedAttentionShape& s = in.shape;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t len = in.context_lens.get_int(size_t(b));
    for (int64_t j = len; j < cdiv(len, s.block_size) * s.block_size; ++j) {
      const int64_t page = in.block_table.get_int(size_t(b * s.max_blocks + j / s.block_size));
      const int64_t slot = page * s.block_size + j % s.block_size;
      for (int64_t h = 0; h < s.hkv; ++h)
        for (int64_t d = 0; d < s.head_dim; ++d) {
          in.k_cache.set(size_t((slot * s.hkv + h) * s.head_dim + d), NAN);
          in.v_cache.set(size_t((slot * s.hkv + h) * s.head_dim + d), NAN);
        }
    }
  }
  validate_paged_attention(in, false);
  PagedAttentionMagnitudes mag;
  const launch::Buffer want = paged_attention_reference(in, &mag);
  const PagedAttentionTolerance tol = paged_attention_tolerance(in.shape, mag);
  for (EmuLowering lowering : {EmuLowering::emu, EmuLowering::nvptx}) {
    INFO((lowering == EmuLowering::emu ? "emu lowering" : "nvptx lowering"));
    const std::string why = mismatch(run_paged_attention_fused(in, c.cfg, *templates::test::emulator("sm_90", lowering)), want, tol);
    INFO(why);
    CHECK(why.empty());
  }
}

} // namespace

TEST_CASE("kv_tma=1: the sm_90 prefill tile's K and V come by TMA, a box per page, and match the reference on the "
          "emulator in both lowerings",
          "[templates][emulator][paged_attention][prefill][tma]") {
  // block_size 16 under block_n 64: 4 boxes of 16 rows of one 128-byte panel (64 bf16) for K
  // and for V: 8 copies a trip.
  check_case({"block_size 16, block_n 64", prefill(16, 10), tile(64, 1), 8}, 11);
  // A page holds the step: one box of 64 rows from within the page (at row 0 or 64 of a page of
  // 128), copied ahead by the pipeline or, with one stage, by each product itself.
  check_case({"block_size 64, block_n 64", prefill(64, 3), tile(64, 1), 2}, 12);
  check_case({"block_size 128, block_n 64", prefill(128, 2), tile(64, 1), 2}, 14);
  Case unpipelined = {"block_size 16, block_n 64, one stage", prefill(16, 10), tile(64, 1), 8};
  unpipelined.cfg.num_stages = 1;
  check_case(unpipelined, 15);
  Case causal = {"causal, sinks, block_size 16, block_n 32", prefill(16, 8), tile(32, 1), 4};
  causal.s.causal = true, causal.s.sinks = true;
  check_case(causal, 13);
  // The rotated walk (overlap=1): the previous step's V gathered whole too (the first step's
  // own, times P_prev's zeros).
  Case rotated = {"overlap=1, causal, block_size 16, block_n 64", prefill(16, 10), tile(64, 1), 8};
  rotated.s.causal = true, rotated.cfg.overlap = 1;
  check_case(rotated, 16);
  Case rotated_splits = {"overlap=1, 2 splits, block_size 32, block_n 32", prefill(32, 6), tile(32, 1), 2};
  rotated_splits.cfg.overlap = 1, rotated_splits.cfg.num_splits = 2;
  check_case(rotated_splits, 17);
}

TEST_CASE("kv_tma=1 keeps every feature: varlen, plans, windows and chunks, and fp8 caches and small pages fall back",
          "[templates][emulator][paged_attention][prefill][tma]") {
  Case varlen = {"mixed batch", prefill(16, 6), tile(32, 1), 4};
  varlen.s.varlen = true;
  check_case(varlen, 21);
  // Planned pieces of 64 keys: the walks nested in the loop over a program's pieces, each
  // starting its pipeline (and its mbarrier phases) again.
  Case planned = {"planned pieces of 64 keys, causal", prefill(16, 10), tile(32, 1), -1};
  planned.s.causal = true, planned.cfg.split_tokens = 64, planned.cfg.plan_programs = 3;
  check_case(planned, 25);
  // fp8: the tiles are widened after their loads, so the gathers are masked loads.
  Case fp8 = {"fp8 cache (expanded)", prefill(16, 6, DType::f16), tile(32, 1), 0};
  fp8.s.kv_fp8 = DType::f8e4m3, fp8.cfg.num_stages = 1;
  check_case(fp8, 22);
  // A page of 4 rows is no box (a gathered box takes a multiple of 8 rows): expanded, the masked
  // load copied by cp.async.
  check_case({"block_size 4 (expanded)", prefill(4, 12), tile(32, 1), 0}, 23);
  CHECK(copies(prefill(4, 12), tile(32, 1)).cp_async == 4);
  // A window or a chunk starts the walk mid-page: the tile's walk starts at the page before (each
  // row masks the keys before its own first), so the steps still gather whole pages.
  Case window = {"causal window of 21", prefill(16, 6), tile(32, 1), 4};
  window.s.causal = true, window.s.window = 21;
  check_case(window, 24);
  Case chunk = {"chunks of 24, split in 2", prefill(16, 8), tile(32, 1), 4};
  chunk.s.chunk = 24, chunk.cfg.num_splits = 2;
  check_case(chunk, 26);
  Case big_page = {"window of 40, causal, a page of 64 holding two steps", prefill(64, 3), tile(32, 1), 2};
  big_page.s.window = 40, big_page.s.causal = true;
  check_case(big_page, 27);
  Case planned_window = {"planned pieces of 32 keys, window of 37", prefill(16, 10), tile(32, 1), -1};
  planned_window.s.window = 37, planned_window.cfg.split_tokens = 32, planned_window.cfg.plan_programs = 4;
  check_case(planned_window, 29);
  // Decode (one position a tile): no row masks its own first key, so a window's walk keeps its
  // first key and the masked slots.
  Case decode = {"decode, window of 20", prefill(16, 6), tile(32, 1), 0};
  decode.s.sq = 1, decode.s.window = 20, decode.cfg.block_m = 0;
  check_case(decode, 28);
}

TEST_CASE("kv_tma=0 is the kernel of before, and kv_tma must be 0 or 1", "[templates][paged_attention][tma]") {
  PagedAttentionShape s = prefill(16, 10);
  PagedAttentionConfig off = tile(64, 0);
  const std::string text = ir::print(*paged_attention_fused_kernel(s, off));
  CHECK_THAT(text, !Catch::Contains("desc_load"));
  CHECK_THAT(text, !Catch::Contains("cache_rows"));
  CHECK_THAT(ir::print(*paged_attention_fused_kernel(s, tile(64, 1))), Catch::Contains("boxes 4"));
  const Copies cp = copies(s, off);
  CHECK(cp.tma == 0);
  CHECK(cp.cp_async > 0);
  PagedAttentionConfig bad = off;
  bad.kv_tma = 2;
  CHECK_THROWS_WITH(paged_attention_fused_kernel(s, bad), Catch::Contains("kv_tma 2 must be 0 or 1"));
}

TEST_CASE("kv_tma=1: a launch whose cache_rows reaches past a cache is refused, naming its tensor map",
          "[templates][emulator][paged_attention][tma]") {
  PagedAttentionShape s = prefill(16, 4);
  s.batch = 1;
  PagedAttentionInputs in = make_paged_attention_inputs(s, 31);
  ir::Kernel k = paged_attention_fused_kernel(in.shape, tile(64, 1));
  launch::Buffer out("out", s.dtype, size_t(in.q_rows() * s.head_dim));
  const int64_t rows = int64_t(in.k_cache.count()) / (s.hkv * s.head_dim);
  auto launch_with = [&](int64_t cache_rows) {
    std::vector<launch::Arg> args{launch::Arg::of(in.q),           launch::Arg::of(in.k_cache),
                                  launch::Arg::of(in.v_cache),     launch::Arg::of(in.block_table),
                                  launch::Arg::of(in.context_lens), launch::Arg::of(out),
                                  launch::Arg::of_float(in.shape.scale()), launch::Arg::of_int(s.max_blocks),
                                  launch::Arg::of_int(cache_rows)};
    templates::test::emulator("sm_90", EmuLowering::emu)->launch(k, 4, {1, 1, 1}, args);
  };
  CHECK_NOTHROW(launch_with(rows));
  // One row more than the cache holds: the copy engine would read past the buffer unfaulted.
  CHECK_THROWS_WITH(launch_with(rows + 1), Catch::Contains("the tensor map of 'k_cache'") &&
                                               Catch::Contains("past the buffer's"));
}

TEST_CASE("kv_tma=1: the pinned sm_90 prefill tile copies K and V by 16 TMA boxes a trip on one mbarrier, no cp.async",
          "[templates][paged_attention][tma][nvptx]") {
  // tilec compile paged_attention --arch sm_90 --set block_n=64 num_warps=8 block_m=128
  // head_group=4 kv_tma=1 --shape batch=1 hq=32 hkv=8 sq=512 head_dim=128 block_size=16
  // max_blocks=64 dtype=bf16 causal=0 (docs/PAGED_ATTENTION.md, "K/V by TMA").
  PagedAttentionShape s;
  s.batch = 1, s.hq = 32, s.hkv = 8, s.sq = 512, s.head_dim = 128, s.block_size = 16, s.dtype = DType::bf16;
  s.max_blocks = 64;
  PagedAttentionConfig cfg;
  cfg.block_n = 64, cfg.num_warps = 8, cfg.block_m = 128, cfg.head_group = 4;
  for (int64_t kv_tma : {0, 1}) {
    INFO("kv_tma=" << kv_tma);
    cfg.kv_tma = kv_tma;
    codegen::CompileOptions o; // sm_90
    o.num_warps = 8;
    o.run_ptxas = false;
    ir::Kernel k = paged_attention_fused_kernel(s, cfg);
    const codegen::CompiledKernel ck = codegen::compile(*k, o);
    std::optional<codegen::PtxLoop> loop = codegen::kernel_main_loop(*k, ck.ptx);
    REQUIRE(loop);
    // K and V: 4 pages x 2 panels of 64 columns each, armed once for the stage's 32 KiB.
    CHECK(loop->count("cp.async.bulk") == (kv_tma ? 16 : 0));
    CHECK(loop->count("cp.async.cg") == (kv_tma ? 0 : 8));
    CHECK(loop->count("mbarrier.arrive.expect_tx") == (kv_tma ? 1 : 0));
    CHECK(ck.stats.tma_loads == (kv_tma ? 2 : 0));
    if (kv_tma) CHECK_THAT(ck.ptx, Catch::Contains("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r") &&
                                       Catch::Contains("32768;"));
  }
}

TEST_CASE("kv_tma=1: a page of fewer than 8 rows is no TMA box, and says so", "[templates][paged_attention][tma]") {
  codegen::CompileOptions o; // sm_90
  o.num_warps = 4;
  ir::Kernel k = paged_attention_fused_kernel(prefill(4, 12), tile(32, 1));
  int gathers = 0;
  ir::walk(k->body, [&](ir::Op& op) {
    if (op.kind != ir::OpKind::DescLoad) return;
    ++gathers;
    CHECK(op.attrs.boxes == 8);
    CHECK_THAT(codegen::tma_unfit(*k, op, o), Catch::Contains("a gathered box takes a multiple of 8 rows"));
  });
  CHECK(gathers == 2); // K and V of the whole steps
}
