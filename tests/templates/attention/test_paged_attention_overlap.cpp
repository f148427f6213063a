// The rotated walk (docs/PAGED_ATTENTION.md "Overlap"): with overlap=1 each trip of the fused
// kernel computes its scores, then the previous step's P.V, then its softmax, and the walk's last
// P.V follows it. Every feature against the reference and against overlap=0, on the interpreter
// and on the emulator compiled for sm_80 (mma.sync) and sm_90 (wgmma where a product fits a
// warpgroup), in both lowerings; the order of a trip, read from the kernel's IR; K and V still
// copied ahead. (The causal boundary sweep with overlap=1 is in
// test_paged_attention_boundaries.cpp, beside the others.)
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backends/launchers.h"
#include "backends/module_cache.h"
#include "codegen/compile.h"
#include "codegen/layout_print.h"
#include "codegen/ptx_loops.h"
#include "interp/launcher.h"
#include "launch/module_launcher.h"
#include "templates/attention/paged_attention.h"
#include "tests/templates/test_util.h"

using namespace tilec;
using namespace tilec::templates;
using backends::EmuLowering;

namespace {


struct Case {
  const char* what;
  PagedAttentionShape s;
  PagedAttentionConfig cfg;
  int64_t ctx = -1; // every context's length (-1: random)
};

PagedAttentionShape shape(int64_t hq, int64_t hkv, int64_t sq, int64_t head_dim, int64_t block_size, ir::DType dtype) {
  PagedAttentionShape s;
  s.batch = 2, s.hq = hq, s.hkv = hkv, s.sq = sq, s.head_dim = head_dim, s.block_size = block_size, s.dtype = dtype;
  s.max_blocks = 6;
  return s;
}

PagedAttentionConfig config(int64_t block_n, int64_t block_m, int64_t num_warps) {
  PagedAttentionConfig c;
  c.block_n = block_n, c.block_m = block_m, c.num_warps = num_warps;
  return c;
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

// The case with overlap=1 on the interpreter and on the emulator for sm_80 and sm_90 (the
// lowerings alternating between the archs from case to case), against the reference and
// against overlap=0 on the emulator (sm_90, the other lowering), all within the tolerance.
void check_case(const Case& c, int index) {
  // Block-table entries past the live pages name no page (a kernel that follows one fails the
  // emulator's bounds check).
  PagedAttentionInputs in = make_paged_attention_inputs(c.s, uint64_t(400 + index), c.ctx, /*poison_unused=*/true);
  // The slots past each context in its last page hold NaN: a masked key that reached a product
  // (0 * NaN) shows in the output.
  const PagedAttentionShape& s = in.shape;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t len = in.context_lens.get_int(size_t(b));
    for (int64_t j = len; j < cdiv(len, s.block_size) * s.block_size; ++j) {
      const int64_t page = in.block_table.get_int(size_t(b * s.max_blocks + j / s.block_size));
      const int64_t slot = page * s.block_size + j % s.block_size;
      for (int64_t h = 0; h < s.hkv; ++h) {
        for (int64_t d = 0; d < s.head_dim; ++d) in.k_cache.set(size_t((slot * s.hkv + h) * s.head_dim + d), NAN);
        if (!s.latent)
          for (int64_t d = 0; d < s.dv(); ++d) in.v_cache.set(size_t((slot * s.hkv + h) * s.dv() + d), NAN);
        if (!s.latent) REQUIRE(std::isnan(in.v_cache.get(size_t((slot * s.hkv + h) * s.dv()))));
      }
    }
  }
  if (c.s.varlen) {
    // Sequence 0 empty: its decode row goes to sequence 1.
    in.query_start_loc.set_int(1, 0);
    REQUIRE(in.query_len(1) <= c.s.sq);
  }
  validate_paged_attention(in, false);
  PagedAttentionMagnitudes mag;
  const launch::Buffer want = paged_attention_reference(in, &mag);
  const PagedAttentionTolerance tol = paged_attention_tolerance(in.shape, mag);
  PagedAttentionConfig on = c.cfg, off = c.cfg;
  on.overlap = 1, off.overlap = 0;
  const EmuLowering first = index % 2 ? EmuLowering::emu : EmuLowering::nvptx;
  const EmuLowering second = index % 2 ? EmuLowering::nvptx : EmuLowering::emu;
  auto name = [](EmuLowering l) { return l == EmuLowering::emu ? "emu" : "nvptx"; };
  struct Where {
    std::string what;
    std::unique_ptr<launch::Launcher> launcher;
  };
  std::vector<Where> runs;
  runs.push_back({"interpreter", interp::make_interpret_launcher()});
  runs.push_back({fmt::format("emulator, sm_90, {} lowering", name(first)), templates::test::emulator("sm_90", first)});
  runs.push_back({fmt::format("emulator, sm_80, {} lowering", name(second)), templates::test::emulator("sm_80", second)});
  const launch::Buffer base = run_paged_attention_fused(in, off, *templates::test::emulator("sm_90", second));
  {
    INFO(c.what << ", overlap=0");
    const std::string why = mismatch(base, want, tol);
    INFO(why);
    CHECK(why.empty());
  }
  for (Where& w : runs) {
    INFO(c.what << ", overlap=1 on the " << w.what);
    const launch::Buffer got = run_paged_attention_fused(in, on, *w.launcher);
    const std::string vs_reference = mismatch(got, want, tol), vs_off = mismatch(got, base, tol);
    INFO("against the reference: " << vs_reference);
    INFO("against overlap=0: " << vs_off);
    CHECK(vs_reference.empty());
    CHECK(vs_off.empty());
  }
}

// The pinned prefill tile (tests/codegen/test_prefill.cpp): 128 packed rows (4 heads x 32
// positions) x 64 keys a step, head_dim 128, bf16, 8 warps.
ir::Kernel prefill_tile(int64_t overlap, bool causal) {
  PagedAttentionShape s = shape(32, 8, 512, 128, 16, ir::DType::bf16);
  s.batch = 1, s.max_blocks = 64, s.causal = causal;
  PagedAttentionConfig cfg = config(64, 128, 8);
  cfg.head_group = 4, cfg.overlap = overlap;
  return paged_attention_fused_kernel(s, cfg);
}

// The positions, in a loop body, of its dots and of its first max reduction.
struct Trip {
  std::vector<size_t> dots;
  size_t reduce_max = SIZE_MAX;
};
Trip trip_of(const ir::Block& body) {
  Trip t;
  for (size_t i = 0; i < body.ops.size(); ++i) {
    const ir::Op& op = *body.ops[i];
    if (op.kind == ir::OpKind::Dot) t.dots.push_back(i);
    if (op.kind == ir::OpKind::Reduce && op.attrs.reduce == ir::ReduceKind::max && t.reduce_max == SIZE_MAX)
      t.reduce_max = i;
  }
  return t;
}

bool carried(const ir::Block& body, const ir::Value* v) {
  return std::find(body.args.begin() + 1, body.args.end(), v) != body.args.end();
}

} // namespace

TEST_CASE("overlap=1 matches the reference and overlap=0 with every feature, on the interpreter and the emulator "
          "for sm_80 and sm_90",
          "[templates][emulator][paged_attention][overlap]") {
  using ir::DType;
  std::vector<Case> cases;
  // Prefill in tiles of 64 packed rows (16 positions x 4 heads), a warpgroup's MMA on sm_90,
  // causal: the unmasked loop, then the diagonal's, sharing the carried P.
  Case causal = {"prefill, causal", shape(4, 1, 32, 32, 8, DType::f16), config(16, 64, 4)};
  causal.s.causal = true;
  cases.push_back(causal);
  Case window = {"prefill, causal window of 11", shape(4, 1, 16, 32, 8, DType::bf16), config(16, 64, 4)};
  window.s.causal = true, window.s.window = 11;
  cases.push_back(window);
  Case chunk = {"prefill, chunks of 12", shape(4, 2, 16, 32, 4, DType::f16), config(16, 32, 4)};
  chunk.s.causal = true, chunk.s.chunk = 12;
  cases.push_back(chunk);
  Case sinks = {"prefill, sinks, ALiBi, softcap", shape(4, 1, 16, 32, 8, DType::f16), config(16, 64, 4)};
  sinks.s.sinks = true, sinks.s.alibi = true, sinks.s.softcap = 20.0, sinks.s.causal = true;
  cases.push_back(sinks);
  Case fp8 = {"prefill, fp8 cache", shape(4, 1, 16, 32, 8, DType::f16), config(16, 64, 4)};
  fp8.s.kv_fp8 = DType::f8e4m3, fp8.s.causal = true, fp8.cfg.num_stages = 1;
  cases.push_back(fp8);
  // MLA's latent form at a small size: q and K of 48 columns (32 + 16), V K's first 32.
  Case mla = {"latent (MLA)", shape(8, 1, 4, 48, 8, DType::bf16), config(16, 0, 4)};
  mla.s.latent = true, mla.s.causal = true;
  cases.push_back(mla);
  Case varlen = {"mixed batch, an empty sequence", shape(4, 2, 8, 32, 4, DType::bf16), config(16, 16, 2)};
  varlen.s.varlen = true, varlen.s.batch = 3, varlen.ctx = 24;
  cases.push_back(varlen);
  Case splits = {"num_splits 2, window", shape(4, 1, 16, 32, 8, DType::f16), config(16, 64, 4)};
  splits.s.window = 20, splits.cfg.num_splits = 2;
  cases.push_back(splits);
  Case planned = {"planned pieces of 16 keys", shape(4, 1, 16, 32, 8, DType::bf16), config(16, 64, 4)};
  planned.s.causal = true, planned.cfg.split_tokens = 16, planned.cfg.plan_programs = 3;
  cases.push_back(planned);
  // Decode: 4 heads of one position, the transposed tile (S^T = K q^T) in f16; and in f32.
  Case decode = {"decode, transposed tile", shape(8, 2, 1, 32, 8, DType::f16), config(16, 0, 1)};
  cases.push_back(decode);
  Case f32 = {"decode f32, ALiBi", shape(8, 2, 1, 32, 8, DType::f32), config(8, 0, 2)};
  f32.s.alibi = true;
  cases.push_back(f32);
  REQUIRE(paged_attention_transposed(decode.s, decode.cfg));
  for (size_t i = 0; i < cases.size(); ++i) check_case(cases[i], int(i));
}

TEST_CASE("overlap=1: each trip of the walk computes Q.K^T, then the previous step's P.V, both before its softmax",
          "[templates][paged_attention][overlap]") {
  for (bool causal : {false, true}) {
    INFO((causal ? "causal" : "not causal"));
    const ir::Kernel on = prefill_tile(1, causal), off = prefill_tile(0, causal);
    int loops = 0;
    for (const auto& op : on->body.ops) {
      if (op->kind != ir::OpKind::For) continue;
      ++loops;
      const ir::Block& body = op->region(0);
      const Trip t = trip_of(body);
      REQUIRE(t.dots.size() == 2);
      REQUIRE(t.reduce_max != SIZE_MAX);
      const ir::Op& qk = *body.ops[t.dots[0]];
      const ir::Op& pv = *body.ops[t.dots[1]];
      // Q.K^T: q from before the walk, K^T a transposed tile of this trip, a zero accumulator.
      CHECK(qk.operands[0]->def->parent != &body);
      CHECK(qk.operands[1]->def->kind == ir::OpKind::Permute);
      CHECK(qk.results[0]->type.shape == ir::Shape{128, 64});
      // P.V: the carried P (bf16, as the product takes it) into the carried O (folded, not an add).
      CHECK(carried(body, pv.operands[0]));
      CHECK(pv.operands[0]->type.dtype() == ir::DType::bf16);
      CHECK(carried(body, pv.operands[2]));
      CHECK(pv.results[0]->type.shape == ir::Shape{128, 128});
      // Both before the softmax's max.
      CHECK(t.dots[0] < t.dots[1]);
      CHECK(t.dots[1] < t.reduce_max);
    }
    CHECK(loops == 2); // the unmasked steps and the last (or the diagonal)
    // The walk's last P.V after the loops.
    int after = 0;
    bool seen_loop = false;
    for (const auto& op : on->body.ops) {
      seen_loop = seen_loop || op->kind == ir::OpKind::For;
      after += seen_loop && op->kind == ir::OpKind::Dot;
    }
    CHECK(after == 1);
    // overlap=0 keeps its P.V after the softmax: the order above is the switch's.
    for (const auto& op : off->body.ops)
      if (op->kind == ir::OpKind::For) {
        const Trip t = trip_of(op->region(0));
        REQUIRE(t.dots.size() == 2);
        CHECK(t.reduce_max < t.dots[1]);
      }
  }
}

TEST_CASE("overlap=1 on sm_90: the trip commits Q.K^T's wgmma group, then P.V's, and runs its softmax between "
          "waiting for the first and for the second",
          "[templates][paged_attention][overlap][nvptx][wgmma]") {
  // The main loop's wgmma commits and waits and its exponentials (a run of them as one), in order.
  auto events = [](int64_t overlap) {
    codegen::CompileOptions o; // sm_90
    o.num_warps = 8;
    o.run_ptxas = false;
    const codegen::CompiledKernel ck = codegen::compile(*prefill_tile(overlap, false), o);
    const std::vector<codegen::PtxLoop> loops = codegen::ptx_loops(ck.ptx);
    const codegen::PtxLoop* l = codegen::main_loop(loops);
    REQUIRE(l);
    std::istringstream in(ck.ptx);
    std::string line, order, last;
    for (int n = 1; std::getline(in, line); ++n) {
      if (n < l->first_line || n > l->last_line) continue;
      const std::string event = line.find("wgmma.commit_group") != std::string::npos                ? "commit "
                                : line.find("wgmma.wait_group.sync.aligned 1;") != std::string::npos ? "wait1 "
                                : line.find("wgmma.wait_group.sync.aligned 0;") != std::string::npos ? "wait0 "
                                : line.find("ex2.approx") != std::string::npos                       ? "ex2 "
                                                                                                     : "";
      if (event.empty() || (event == "ex2 " && last == event)) continue;
      order += event;
      last = event;
    }
    return order;
  };
  // Q.K^T's group and P.V's, then (S read) the wait that leaves P.V's in flight, the softmax's
  // exponentials behind it, and its wait before the rescale. overlap=0 waits for Q.K^T, runs
  // the softmax, then issues P.V.
  CHECK(events(1) == "commit commit wait1 ex2 wait0 ");
  CHECK(events(0) == "commit wait0 ex2 commit wait0 ");
}

TEST_CASE("overlap=1 still copies K and V ahead in both loops of the prefill tile, on sm_80 and sm_90",
          "[templates][paged_attention][overlap][pipeline]") {
  for (const char* arch : {"sm_80", "sm_90"}) {
    INFO(arch);
    codegen::CompileOptions o;
    o.arch = arch;
    o.num_warps = 8;
    for (int64_t overlap : {0, 1}) {
      INFO("overlap=" << overlap);
      const std::string plan = codegen::print_pipelines(*prefill_tile(overlap, true), o);
      INFO(plan);
      CHECK(plan.find("2 of 2 loops with stages pipelined") != std::string::npos);
      // K (through its transpose) and V, copied ahead in each loop.
      int64_t k = 0, v = 0;
      for (size_t at = plan.find("slot "); at != std::string::npos; at = plan.find("slot ", at + 1)) {
        const std::string line = plan.substr(at, plan.find('\n', at) - at);
        if (line.find("through") != std::string::npos) ++k;
        else ++v;
      }
      CHECK(k == 2);
      CHECK(v == 2);
    }
  }
}

TEST_CASE("overlap must be 0 or 1", "[templates][paged_attention][overlap]") {
  PagedAttentionShape s;
  PagedAttentionConfig cfg;
  cfg.overlap = 2;
  CHECK_THROWS_WITH(paged_attention_fused_kernel(s, cfg), Catch::Contains("overlap 2 must be 0 or 1"));
}
