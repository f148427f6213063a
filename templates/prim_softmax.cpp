// SoftmaxLastDim: one program per row of any length. A first pass over the
// row keeps a running max and sum per lane (online softmax), a second writes
// exp(x - max) / sum. A row that is all -inf has no max to subtract and gives
// all zeros (docs/ARCHITECTURE.md "Paged attention": context_len 0 gives a zero output row).
#include <fmt/format.h>

#include <cmath>

#include "dsl/dsl.h"
#include "templates/prim_detail.h"
#include "templates/registry.h"

namespace tilec::templates::prim {

using ir::DType;
using ir::Shape;

namespace {

constexpr int kNumWarps = 4;
constexpr int kMaxLeadRank = kMaxRank - 1;

struct SoftmaxSpec {
  DType in, out;
  int lead_rank; // dims before the last, after coalescing
  int64_t block;

  std::string key() const {
    return fmt::format("prim_softmax_last_dim_r{}_{}_to_{}_b{}", lead_rank + 1, detail::dname(in),
                       detail::dname(out), block);
  }
};

ir::Kernel softmax_kernel(const SoftmaxSpec& s) {
  using namespace dsl;
  KernelBuilder k(s.key());
  Tile x = k.arg(ptr_to(s.in), "x"), out = k.arg(ptr_to(s.out), "out");
  Tile n_cols = k.arg(i32, "n_cols");
  std::vector<Tile> lead;
  lead.reserve(s.lead_rank);
  for (int d = 0; d < s.lead_rank; ++d)
    lead.push_back(k.arg(i32, fmt::format("dim{}", d)));
  struct RowView {
    Tile offset;
    std::vector<Tile> lead_strides;
    Tile col_stride;
  };
  auto row_view = [&](const std::string& name) {
    RowView v{k.arg(i32, name + "_offset"), {}, Tile()};
    v.lead_strides.reserve(s.lead_rank);
    for (int d = 0; d < s.lead_rank; ++d)
      v.lead_strides.push_back(k.arg(i32, fmt::format("{}_stride{}", name, d)));
    v.col_stride = k.arg(i32, name + "_col_stride");
    return v;
  };
  RowView xv = row_view("x"), ov = row_view("out");

  // The row's coordinates in the leading dims give each tensor's row start.
  Tile x_row = xv.offset, o_row = ov.offset;
  Tile rest = program_id(0);
  for (int d = s.lead_rank - 1; d >= 0; --d) {
    Tile c = d > 0 ? rest % lead[d] : rest;
    if (d > 0) rest = rest / lead[d];
    x_row = x_row + c * xv.lead_strides[d];
    o_row = o_row + c * ov.lead_strides[d];
  }
  Tile x_col = xv.col_stride, o_col = ov.col_stride;

  Tile cols = arange(0, s.block);
  Var m = full({s.block}, -INFINITY), l = zeros({s.block});
  for_range(0, n_cols, s.block, [&](Scalar c0) {
    Tile c = c0 + cols;
    Tile v = load(x + (x_row + c * x_col), c < n_cols, -INFINITY).to(DType::f32);
    Tile m_new = max(m, v);
    Tile shift = where(m_new == -INFINITY, 0.0f, m_new); // keeps -inf - -inf out
    l = l * exp(m - shift) + exp(v - shift);
    m = m_new;
  });
  Tile row_max = reduce_max(m, 0);
  Tile shift = where(row_max == -INFINITY, 0.0f, row_max);
  Tile sum = reduce_sum(l * exp(m - shift), 0);
  Tile inv = where(sum > 0.0f, 1.0f / sum, 0.0f);
  for_range(0, n_cols, s.block, [&](Scalar c0) {
    Tile c = c0 + cols;
    Tile live = c < n_cols;
    Tile v = load(x + (x_row + c * x_col), live, -INFINITY).to(DType::f32);
    store(out + (o_row + c * o_col), exp(v - shift) * inv, live);
  });
  return k.finish();
}

} // namespace

Tensor softmax_last_dim(launch::Launcher& l, const Tensor& x, std::optional<DType> out_dtype,
                        int64_t block) {
  if (x.rank() < 1 || x.rank() > kMaxRank || !ir::is_float(x.dtype()))
    throw UserError(
        fmt::format("SoftmaxLastDim: needs a float tensor of rank 1 to {}, got {} of {}", kMaxRank,
                    ir::shape_str(x.shape), ir::dtype_name(x.dtype())));
  DType dt = out_dtype ? *out_dtype : x.dtype();
  Tensor out = empty(dt, x.shape, "softmax");
  if (out.numel() == 0) return out;
  detail::require_i32_indexing(x, "SoftmaxLastDim");
  detail::require_i32_indexing(out, "SoftmaxLastDim");
  const int64_t n_cols = x.shape.back();
  if (block == 0) block = detail::pow2_block(n_cols, 16, 256);
  if (!ir::is_pow2(block))
    throw UserError(fmt::format("SoftmaxLastDim: block {} is not a power of two", block));

  Shape lead(x.shape.begin(), x.shape.end() - 1);
  std::vector<int64_t> xs(x.strides.begin(), x.strides.end() - 1),
      os(out.strides.begin(), out.strides.end() - 1);
  detail::coalesce(lead, {&xs, &os});
  if (static_cast<int>(lead.size()) > kMaxLeadRank)
    internal_fail("softmax rows need more dims than x has");
  SoftmaxSpec spec{x.dtype(), dt, static_cast<int>(lead.size()), block};
  ir::Kernel kernel = detail::cached_kernel(spec.key(), [&] { return softmax_kernel(spec); });

  std::vector<launch::Arg> args = {detail::buffer_arg(x), detail::buffer_arg(out),
                                   launch::Arg::of_int(n_cols)};
  for (int64_t d : lead)
    args.push_back(launch::Arg::of_int(d));
  auto push = [&](const Tensor& t, const std::vector<int64_t>& strides) {
    args.push_back(launch::Arg::of_int(t.offset));
    for (int64_t s : strides)
      args.push_back(launch::Arg::of_int(s));
    args.push_back(launch::Arg::of_int(t.strides.back()));
  };
  push(x, xs);
  push(out, os);
  l.launch(kernel, kNumWarps, {ir::num_elements(lead), 1, 1}, args);
  return out;
}

} // namespace tilec::templates::prim
