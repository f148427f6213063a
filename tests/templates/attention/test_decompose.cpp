// The seed's PagedAttn decomposition: its structure as data, and its result
// against the C++ reference over a grid of small configs on the interpreter.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "interp/launcher.h"
#include "templates/attention/paged_attention.h"
#include "templates/prim_recipe.h"
#include "tests/tilec_process.h"

using namespace tilec;
using namespace tilec::templates;
using ir::DType;
using prim::PrimOp;

namespace {

PagedAttentionShape small_shape(DType dtype, int64_t group, int64_t sq, bool alibi,
                                std::optional<double> softcap) {
  PagedAttentionShape s;
  s.batch = 2;
  s.hkv = 2;
  s.hq = 2 * group;
  s.sq = sq;
  s.head_dim = 16;
  s.block_size = 4;
  s.max_blocks = 3;
  s.dtype = dtype;
  s.alibi = alibi;
  s.softcap = softcap;
  return s;
}

struct Tolerance {
  double atol, rtol;
};
Tolerance tolerance(DType t) {
  switch (t) {
  case DType::f16:
    return {1e-3, 2e-3};
  case DType::bf16:
    return {8e-3, 1.6e-2};
  default:
    return {2e-5, 1e-4};
  }
}

// Runs the decomposition and checks it against the reference; returns the output.
launch::Buffer check_against_reference(const PagedAttentionInputs& in) {
  auto launcher = interp::make_interpret_launcher();
  launch::Buffer got = run_paged_attention_decomposed(in, *launcher);
  launch::Buffer want = paged_attention_reference(in);
  REQUIRE(got.dtype == in.shape.dtype);
  REQUIRE(got.count() == want.count());
  Tolerance tol = tolerance(in.shape.dtype);
  int bad = 0;
  double max_err = 0;
  for (size_t i = 0; i < want.count(); ++i) {
    double g = got.get(i), w = want.get(i), err = std::abs(g - w);
    max_err = std::max(max_err, std::isnan(err) ? INFINITY : err);
    if (!(err <= tol.atol + tol.rtol * std::abs(w)) && bad++ < 5)
      FAIL_CHECK(fmt::format("out[{}]: got {}, want {}", i, g, w));
  }
  INFO("max abs error " << max_err);
  CHECK(bad == 0);
  return got;
}

std::vector<std::string> op_names(const prim::Recipe& r) {
  std::vector<std::string> out;
  for (const auto& n : r.nodes)
    out.emplace_back(prim::prim_op_name(n.op));
  return out;
}

} // namespace

TEST_CASE("the recipe is the seed's, node for node (softcap + alibi + GQA)",
          "[templates][decompose]") {
  PagedAttentionShape s = small_shape(DType::f32, 2, 3, /*alibi=*/true, /*softcap=*/30.0);
  prim::Recipe r = prim::paged_attention_recipe(s);
  // clang-format off
  std::vector<std::string> want = {
      "Input", "Input", "Input", "Input", "Input", "Input",
      "Iota", "Cast", "Reshape", "Reshape", "Ge",                                // dead slots: pos >= ctx
      "Reshape",                                                                 // block table -> [B * max_blk]
      "IndexSelect", "Reshape", "MaskedFill",                                    // K, dead slots 0
      "Permute", "Reshape", "BroadcastTo", "Reshape",                            //   + GQA repeat
      "IndexSelect", "Reshape", "MaskedFill",                                    // V, dead slots 0
      "Permute", "Reshape", "BroadcastTo", "Reshape",                            //   + GQA repeat
      "Permute", "MatMul", "MulScalar",                                          // scale · q·kᵀ
      "MulScalar", "Tanh", "MulScalar",                                          // softcap
      "Iota", "Reshape", "Iota", "Reshape", "BroadcastTo", "BroadcastTo", "Sub", // alibi: j - i
      "Reshape", "BroadcastTo", "Reshape", "BroadcastTo", "Mul", "Add",          //   · slope[h]
      "Reshape", "BroadcastTo", "BroadcastTo", "Ge",                             // mask (iota, ctx above)
      "MaskedFill", "SoftmaxLastDim", "MatMul"};
  // clang-format on
  CHECK(op_names(r) == want);
  CHECK(r.count(PrimOp::IndexSelect) == 2);
  CHECK(r.count(PrimOp::MatMul) == 2);
  CHECK(r.count(PrimOp::Reshape) == 14);
  CHECK(r.count(PrimOp::BroadcastTo) == 8);
  CHECK(r.count(PrimOp::Permute) == 3);
  CHECK(r.count(PrimOp::MulScalar) == 3);
  CHECK(r.count(PrimOp::Iota) == 3);
  CHECK(r.count(PrimOp::Cast) == 1); // context_lens only: f32 needs no others
  CHECK(r.count(PrimOp::MaskedFill) == 3);
  CHECK(r.output == static_cast<int>(r.nodes.size()) - 1);

  const int64_t kv_len = s.max_blocks * s.block_size;
  // The dead slots (key position >= context_len) of both gathered caches are set to 0 before
  // any arithmetic sees them: NaN or Inf bytes there never reach the output.
  CHECK(r.node(10).op == PrimOp::Ge);
  CHECK(r.node(10).shape == ir::Shape{s.batch, kv_len, 1, 1});
  CHECK(r.node(10).dtype == DType::i1);
  CHECK(r.node(14).inputs == std::vector<int>{13, 10});
  CHECK(r.node(14).scalar == 0.0);
  CHECK(r.node(21).inputs == std::vector<int>{20, 10});
  const auto& sel = r.node(12);
  CHECK(sel.shape == ir::Shape{s.batch * s.max_blocks, s.block_size, s.hkv, s.head_dim});
  CHECK(sel.inputs == std::vector<int>{1, 11});
  CHECK(r.node(19).inputs == std::vector<int>{2, 11}); // the flattened block table is shared
  CHECK(r.node(17).shape == ir::Shape{s.batch, s.hkv, s.group(), kv_len, s.head_dim});
  CHECK(r.node(27).shape == ir::Shape{s.batch, s.hq, s.sq, kv_len}); // scores: the padded capacity
  CHECK(r.node(28).scalar == Approx(s.scale()));
  CHECK(r.node(29).scalar == Approx(1.0 / 30.0));
  CHECK(r.node(31).scalar == Approx(30.0));
  CHECK(r.node(48).dtype == DType::i1);
  CHECK(r.node(49).scalar == -INFINITY);
  CHECK(r.node(r.output).shape == ir::Shape{s.batch, s.hq, s.sq, s.head_dim});
  CHECK_THAT(r.str(), Catch::Contains("IndexSelect(%1, %11) dim=0 [6, 4, 2, 16] f32"));
}

TEST_CASE("the recipe drops what the config does not use and computes in f32",
          "[templates][decompose]") {
  PagedAttentionShape s = small_shape(DType::f32, 1, 1, false, std::nullopt);
  prim::Recipe r = prim::paged_attention_recipe(s);
  CHECK(r.count(PrimOp::Input) == 5);
  CHECK(r.count(PrimOp::BroadcastTo) == 2); // the scores mask's only
  CHECK(r.count(PrimOp::Tanh) == 0);
  CHECK(r.count(PrimOp::MulScalar) == 1);
  CHECK(r.count(PrimOp::Iota) == 1);
  CHECK(r.count(PrimOp::Reshape) == 6);

  s.dtype = DType::bf16;
  prim::Recipe h = prim::paged_attention_recipe(s);
  // q, both gathers and the output are cast; the seed keeps bf16 throughout.
  CHECK(h.count(PrimOp::Cast) == 5);
  CHECK(h.node(h.output).op == PrimOp::Cast);
  CHECK(h.node(h.output).dtype == DType::bf16);
  for (const auto& n : h.nodes)
    if (n.op == PrimOp::MatMul || n.op == PrimOp::SoftmaxLastDim) CHECK(n.dtype == DType::f32);
}

TEST_CASE("views launch nothing: launches per config", "[templates][decompose]") {
  auto launcher = interp::make_interpret_launcher();
  PagedAttentionInputs in =
      make_paged_attention_inputs(small_shape(DType::f32, 2, 3, true, 30.0), /*seed=*/1);
  run_paged_attention_decomposed(in, *launcher);
  // IndexSelect 2, dead-slot MaskedFill 2, GQA Reshape copies 2, MatMul 2, MulScalar 3, Tanh,
  // Iota 3, Sub, Mul, Add, Cast, Ge 2, MaskedFill, SoftmaxLastDim.
  CHECK(launcher->stats().launches == 23);

  launcher->reset_stats();
  in = make_paged_attention_inputs(small_shape(DType::f16, 1, 1, false, std::nullopt), 2);
  run_paged_attention_decomposed(in, *launcher);
  // IndexSelect 2, dead-slot MaskedFill 2, Cast 5, MatMul 2, MulScalar, Iota, Ge 2, MaskedFill,
  // SoftmaxLastDim.
  CHECK(launcher->stats().launches == 17);
}

TEST_CASE("decomposition matches the reference over the config grid", "[templates][decompose]") {
  uint64_t seed = 100;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (int64_t group : {1, 2, 4})
      for (int64_t sq : {1, 3})
        for (bool alibi : {false, true})
          for (std::optional<double> softcap :
               {std::optional<double>(), std::optional<double>(5.0)}) {
            PagedAttentionShape s = small_shape(dtype, group, sq, alibi, softcap);
            INFO(fmt::format("{} group {} sq {} alibi {} softcap {}", ir::dtype_name(dtype), group,
                             sq, alibi, softcap ? *softcap : 0.0));
            check_against_reference(make_paged_attention_inputs(s, ++seed));
          }
}

TEST_CASE("ragged context lengths: empty, one token, page boundary, full capacity",
          "[templates][decompose]") {
  for (DType dtype : {DType::f32, DType::f16}) {
    PagedAttentionShape s = small_shape(dtype, 2, 3, true, 5.0);
    s.batch = 6;
    s.max_blocks = 4;
    s.num_blocks = 29; // more pages than the sequences use
    s.softmax_scale = 0.3;
    PagedAttentionInputs in = make_paged_attention_inputs(s, 7);
    const std::vector<int64_t> lens = {0, 1, 8, 16, 5, 12}; // 8 and 12 end exactly on a page
    for (size_t b = 0; b < lens.size(); ++b)
      in.context_lens.set_int(b, lens[b]);
    launch::Buffer out = check_against_reference(in);
    // context_len 0: every output row of that sequence is exactly zero.
    const size_t row = size_t(s.hq * s.sq * s.head_dim);
    for (size_t i = 0; i < row; ++i)
      REQUIRE(out.get(i) == 0.0);
  }
}

TEST_CASE("the decomposition validates first: it reads every block-table entry",
          "[templates][decompose]") {
  auto launcher = interp::make_interpret_launcher();
  PagedAttentionInputs in =
      make_paged_attention_inputs(small_shape(DType::f32, 1, 1, false, std::nullopt), 3);
  in.context_lens.set_int(0, 1);
  in.block_table.set_int(2, 1000); // an unused slot of sequence 0
  CHECK_THROWS_WITH(run_paged_attention_decomposed(in, *launcher),
                    Catch::Contains("block_table[0, 2] = 1000"));
  CHECK(launcher->stats().launches == 0);
}

// Issue 29: the decomposition materializes [B, Hq, Sq, max_blocks x block_size] f32 scores; one
// intermediate past 4 GiB is refused with its bytes before anything is allocated, and the CLI
// exits 2. 1 x 1 x 16384 x 131072 x 4 bytes = 8 GiB; the live context stays 16 keys, so the
// reference and the inputs are small.
TEST_CASE("the decomposition refuses an intermediate past its cap, naming the bytes", "[decompose][kernels]") {
  PagedAttentionShape s;
  s.batch = 1;
  s.hq = s.hkv = 1;
  s.sq = 16384;
  s.head_dim = 16;
  s.block_size = 16;
  s.max_blocks = 8192;
  PagedAttentionInputs in = make_paged_attention_inputs(s, 1, /*ctx=*/16);
  auto launcher = interp::make_interpret_launcher();
  CHECK_THROWS_WITH(run_paged_attention_decomposed(in, *launcher),
                    Catch::Contains("MatMul [1, 1, 16384, 131072] f32 (8589934592 bytes") &&
                        Catch::Contains("cap of 4294967296 bytes"));
  test::Process p = test::run_tilec("run paged_attention --path decompose --backend emulate --shape batch=1 hq=1 hkv=1 "
                                    "sq=16384 head_dim=16 block_size=16 max_blocks=8192 ctx=16");
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("8589934592 bytes") != std::string::npos);
}
