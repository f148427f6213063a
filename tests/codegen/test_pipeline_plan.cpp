// The pipeline plan (codegen/pipeline_plan.h) as `tilec ir --stage layouts` prints it after
// the layouts (print_pipelines): which dot operands are copied by cp.async, which loops copy
// them ahead, their rotating buffers in shared memory, and why a loop or an operand is not
// pipelined; and the lowering emits what it says.
#include <catch2/catch.hpp>

#include <regex>

#include "codegen/compile.h"
#include "codegen/layout_print.h"
#include "dsl/dsl.h"
#include "templates/registry.h"
#include "tests/tilec_process.h"

using namespace tilec;
using namespace tilec::dsl;

namespace {

ir::Kernel paged_attention(const std::vector<std::string>& sets, const std::vector<std::string>& shapes) {
  const templates::KernelTemplate* t = templates::find_template("paged_attention");
  REQUIRE(t);
  templates::ParamMap params = templates::resolve_params(t->params, sets, "--set");
  templates::ParamMap shape = templates::resolve_params(t->shape, shapes, "--shape");
  return t->build(params, shape);
}

codegen::CompileOptions options(int num_warps = 4) {
  codegen::CompileOptions o;
  o.num_warps = num_warps;
  return o;
}

bool has(const std::string& text, const std::string& re) { return std::regex_search(text, std::regex(re)); }

// The plan of paged attention's K/V loop (bf16, head_dim=128, block_n=64, num_stages=2, 4
// warps), printed by the code and pasted here: K (through its transpose) and V, the B operands
// of the two dots, are copied one iteration ahead into two rotating buffers of 2 x 17408 bytes
// (64 rows of 136 bf16: 128 and 16 bytes of padding), K k-major (a row per token, n), V a row
// per token (k); the slice issued ahead is the token, block-table and slot arithmetic, all but
// its first five ops (the token indices and their mask, which the scores use too) no longer
// emitted in the body; Q (loaded once, outside the loop) and P (a cast) are staged from
// registers. Regenerate with (one line)
//   build/tools/tilec ir paged_attention --stage layouts --shape dtype=bf16 head_dim=128
//     --set block_n=64 num_stages=2 | sed -n '/^\/\/ pipelines/,$p'
// A change to templates/attention/fused.cpp that adds or removes ops renumbers the values: check
// that only the numbers moved.
const char* const kPagedAttentionPlan =
    R"(// pipelines of @paged_attention for num_warps=4: 2 of 2 loops with stages pipelined, 4 operands copied by cp.async
// for %64 (2 stages): pipelined: each iteration's copies issued 1 iteration ahead, into 2 rotating buffers of 17408 bytes and one late buffer of 17408 bytes: shared memory [0, 52224)
//   slot 0 at +0: A of %98 = dot, copied from %97 = load: 64 rows of 272 bytes, one per m (17408 bytes)
//   late slot 1 at +34816: A of %120 = dot, copied from %117 = load through %119 = permute: 64 rows of 272 bytes, one per k (17408 bytes)
//   late slots: copied at the end of the trip before, after its last barrier; their dot waits for them
//   issued ahead, in body order: %68 %69 %70 %71 %72 %73 %74 %75 %76 %77 %78 %79 %80 %81 %82 %83 %84 %85 %86 %87 %88 %89 %90 %91 %92 %93 %94 %95 %96 %113 %114 %115 %116; of these, emitted in the body too: none
//   not copied ahead: B of %98 = dot: %42 has other users than the dot
//   not copied ahead: B of %120 = dot: %118 is a cast, not a load
// for %127 (2 stages): pipelined: each iteration's copies issued 1 iteration ahead, into 2 rotating buffers of 17408 bytes and one late buffer of 17408 bytes: shared memory [0, 52224)
//   slot 0 at +0: A of %166 = dot, copied from %165 = load: 64 rows of 272 bytes, one per m (17408 bytes)
//   late slot 1 at +34816: A of %191 = dot, copied from %188 = load through %190 = permute: 64 rows of 272 bytes, one per k (17408 bytes)
//   late slots: copied at the end of the trip before, after its last barrier; their dot waits for them
//   issued ahead, in body order: %131 %132 %133 %134 %135 %136 %137 %138 %139 %140 %141 %142 %143 %144 %145 %146 %147 %148 %149 %150 %151 %152 %153 %154 %155 %156 %157 %158 %159 %160 %161 %162 %163 %164 %184 %185 %186 %187; of these, emitted in the body too: %131 %132 %133 %134 %135 %162
//   not copied ahead: B of %166 = dot: %42 has other users than the dot
//   not copied ahead: B of %191 = dot: %189 is a cast, not a load
)";

constexpr int64_t M = 32, N = 64, BK = 32, KT = 8 * BK;

// One staged loop, two dots: A of the first is copied ahead; B of the first reads a buffer
// the kernel writes; A of the second is not a load; B of the second needs a carried offset.
ir::Kernel reasons_kernel() {
  KernelBuilder kb("reasons");
  auto a = kb.arg<Ptr<f16>>("a");
  auto b = kb.arg<Ptr<f16>>("b");
  auto w = kb.arg<Ptr<f16>>("w");
  auto count = kb.arg<i32>("count");
  auto out = kb.arg<Ptr<f32>>("out");
  auto mi = arange(0, M), ni = arange(0, N), ki = arange(0, BK);
  Var acc = zeros({M, N});
  Var acc2 = zeros({M, N});
  Var row = ki + 0;
  for_range(0, count * BK, BK, RangeOptions{2}, [&](Scalar k0) {
    auto kk = k0 + ki;
    acc = dot(load(a + mi.col() * KT + kk.row()), load(w + kk.col() * N + ni.row()), acc);
    Tile a2 = load(a + mi.col() * KT + kk.row()) * 2;
    acc2 = dot(a2, load(b + row.col() * N + ni.row()), acc2);
    row = row + BK;
  });
  store(out + mi.col() * N + ni.row(), acc + acc2);
  store(w + mi.col() * N + ni.row(), (acc * 0).to(ElemType{ir::DType::f16, false}));
  return kb.finish();
}

// Two pipelined loops, then a staged loop of f32 dots (CUDA cores) and one whose step is an
// argument (so A's rows, k0 + ki, are not known aligned either).
ir::Kernel loops_kernel() {
  KernelBuilder kb("loops");
  auto a = kb.arg<Ptr<f16>>("a");
  auto b = kb.arg<Ptr<f16>>("b");
  auto c = kb.arg<Ptr<f32>>("c");
  auto count = kb.arg<i32>("count");
  auto step = kb.arg<i32>("step");
  auto out = kb.arg<Ptr<f32>>("out");
  auto mi = arange(0, M), ni = arange(0, N), ki = arange(0, BK);
  Var acc = zeros({M, N});
  for (int64_t stages : {3, 2})
    for_range(0, count * BK, BK, RangeOptions{stages}, [&](Scalar k0) {
      auto kk = k0 + ki;
      acc = dot(load(a + mi.col() * KT + kk.row()), load(b + kk.col() * N + ni.row()), acc);
    });
  for_range(0, count * BK, BK, RangeOptions{2}, [&](Scalar k0) {
    auto kk = k0 + ki;
    acc = dot(load(c + mi.col() * KT + kk.row()), load(c + kk.col() * N + ni.row()), acc);
  });
  for_range(0, count * BK, step, RangeOptions{2}, [&](Scalar k0) {
    auto kk = k0 + ki;
    acc = dot(load(a + mi.col() * KT + kk.row()), load(b + kk.col() * N + ni.row()), acc);
  });
  store(out + mi.col() * N + ni.row(), acc);
  return kb.finish();
}

} // namespace

TEST_CASE("the pipeline plan of paged attention, as tilec ir --stage layouts prints it", "[codegen][pipeline][layouts]") {
  ir::Kernel k = paged_attention({"block_n=64", "num_stages=2"}, {"dtype=bf16", "head_dim=128"});
  std::string plan = codegen::print_pipelines(*k, options());
  CHECK(plan == kPagedAttentionPlan);

  // The CLI prints it after the layouts, a blank line between.
  auto o = tilec::test::run_tilec({"ir", "paged_attention", "--stage", "layouts", "--shape", "dtype=bf16",
                                   "head_dim=128", "--set", "block_n=64", "num_stages=2"});
  INFO(o.text());
  REQUIRE(o.exit_code == 0);
  CHECK(o.out == codegen::print_layouts(*k, 4).text + "\n" + plan);

  // What the lowering does is what the plan says.
  codegen::LoweringStats st = codegen::lower_to_llvm(*k, options()).stats;
  CHECK(st.pipelined_loops == 2); // whole steps, then the masked last one, on the same buffers
  CHECK(st.pipeline_stages == 2);
  CHECK(st.pipeline_stage_bytes == 17408); // K; V in one late buffer of its own after them
  CHECK(st.shared_bytes >= 3 * 17408);
}

TEST_CASE("the pipeline plan says why an operand is not copied ahead", "[codegen][pipeline][layouts]") {
  ir::Kernel k = reasons_kernel();
  std::string plan = codegen::print_pipelines(*k, options());
  INFO(plan);
  CHECK(has(plan, R"(^// pipelines of @reasons for num_warps=4: 1 of 1 loop with stages pipelined, 3 operands copied )"
                  R"(by cp.async\n)"));
  CHECK(has(plan, R"(\n// for %\d+ \(2 stages\): pipelined: each iteration's copies issued 1 iteration ahead, into 2 )"
                  R"(rotating buffers of 2560 bytes: shared memory \[0, 5120\)\n)"));
  CHECK(has(plan, R"(\n//   slot 0 at \+0: A of (%\d+) = dot, copied from %\d+ = load: 32 rows of 80 bytes, one per m )"
                  R"(\(2560 bytes\)\n)"));
  CHECK(has(plan, R"(\n//   not copied ahead: B of %\d+ = dot: %w is written by the kernel: it cannot be copied )"
                  R"(before the iteration that reads it\n)"));
  CHECK(has(plan, R"(\n//   not copied ahead: A of %\d+ = dot: %\d+ is a mul, not a load\n)"));
  CHECK(has(plan, R"(\n//   not copied ahead: B of %\d+ = dot: %\d+ is loop-carried: the address or mask cannot be )"
                  R"(computed for a later iteration\n)"));
  // Copied by cp.async, but by their dots, one group each: the two B.
  CHECK(has(plan, R"(\n// copied by its dot, one cp.async group: B of %\d+ = dot, copied from %\d+ = load: 32 rows )"
                  R"(of 144 bytes, one per k \(4608 bytes\)\n// copied by its dot, one cp.async group: B of )"));
  codegen::LoweringStats st = codegen::lower_to_llvm(*k, options()).stats;
  CHECK(st.staged_loops == 1);
  CHECK(st.pipelined_loops == 1);
  CHECK(st.pipeline_stage_bytes == 2560);
}

TEST_CASE("the pipeline plan places loops one after another on the same buffers and says why a loop is not pipelined",
          "[codegen][pipeline][layouts]") {
  ir::Kernel k = loops_kernel();
  std::string plan = codegen::print_pipelines(*k, options());
  INFO(plan);
  // A (32 rows of 80 bytes) and B (32 rows of 144 bytes) per stage: 7168 bytes; the first
  // loop's three buffers from 0, and the second's two from 0 too: it runs after the first.
  CHECK(has(plan, R"(^// pipelines of @loops for num_warps=4: 2 of 4 loops with stages pipelined, 5 operands copied by )"
                  R"(cp.async\n)"));
  CHECK(has(plan, R"(\n// for %\d+ \(3 stages\): pipelined: each iteration's copies issued 2 iterations ahead, into 3 )"
                  R"(rotating buffers of 7168 bytes: shared memory \[0, 21504\)\n//   slot 0 at \+0: A of )"));
  CHECK(has(plan, R"(\n//   slot 1 at \+2560: B of %\d+ = dot, copied from %\d+ = load: 32 rows of 144 bytes, one per )"
                  R"(k \(4608 bytes\)\n)"));
  CHECK(has(plan, R"(\n// for %\d+ \(2 stages\): pipelined: each iteration's copies issued 1 iteration ahead, into 2 )"
                  R"(rotating buffers of 7168 bytes: shared memory \[0, 14336\)\n)"));
  CHECK(has(plan, R"(\n// for %\d+ \(2 stages\): not pipelined: it has no tensor-core dot directly in its body\n)"));
  CHECK(has(plan, R"(\n// for %\d+ \(2 stages\): not pipelined: it can copy no operand of the tensor-core dots )"
                  R"(directly in its body ahead\n//   not copied ahead: A of %\d+ = dot: %\d+ is not known to be )"
                  R"(16-byte aligned\n//   not copied ahead: B of %\d+ = dot: %step is the loop's step, not a )"
                  R"(positive constant\n)"));
  codegen::LoweringStats st = codegen::lower_to_llvm(*k, options()).stats;
  CHECK(st.staged_loops == 4);
  CHECK(st.pipelined_loops == 2);
  CHECK(st.pipeline_stages == 3);
  CHECK(st.pipeline_stage_bytes == 7168);
  CHECK(st.shared_bytes >= 21504);
  CHECK(st.shared_bytes < 21504 + 14336);

  // Without tensor cores nothing is copied asynchronously.
  codegen::CompileOptions off = options();
  off.tensor_cores = false;
  std::string none = codegen::print_pipelines(*k, off);
  INFO(none);
  CHECK(has(none, R"(^// pipelines of @loops for num_warps=4: 0 of 4 loops with stages pipelined, 0 operands )"));
  CHECK(has(none, R"(\n// for %\d+ \(3 stages\): not pipelined: it has no tensor-core dot: the tensor cores are off\n)"));
  CHECK(codegen::lower_to_llvm(*k, off).stats.pipelined_loops == 0);
}

TEST_CASE("the pipeline plan prints nothing for a kernel without stages or cp.async", "[codegen][pipeline][layouts]") {
  const templates::KernelTemplate* t = templates::find_template("softmax");
  REQUIRE(t);
  templates::ParamMap params = templates::resolve_params(t->params, {}, "--set");
  templates::ParamMap shape = templates::resolve_params(t->shape, {}, "--shape");
  CHECK(codegen::print_pipelines(*t->build(params, shape), options()).empty());
  // Copied by cp.async, one group per dot, with no loop asking for stages.
  std::string one = codegen::print_pipelines(*paged_attention({"num_stages=1"}, {"dtype=f16"}), options());
  INFO(one);
  CHECK(has(one, R"(^// pipelines of @paged_attention for num_warps=4: 0 of 0 loops with stages pipelined, 4 operands )"
                 R"(copied by cp.async\n// copied by its dot, one cp.async group: B of %\d+ = dot)"));
}
