// MatMul: batched, strided operands (a permuted view feeds it without a
// copy), products and sums in f32. The batch runs on program_id(2).
#include <fmt/format.h>

#include "dsl/dsl.h"
#include "templates/prim_detail.h"
#include "templates/registry.h"

namespace tilec::templates::prim {

using ir::DType;
using ir::Shape;

namespace {

constexpr int kNumWarps = 4;
constexpr int kMaxBatchRank = kMaxRank - 2;

struct MatmulSpec {
  DType a, b, out;
  int batch_rank;
  int64_t block_m, block_n, block_k;

  std::string key() const {
    return fmt::format("prim_matmul_br{}_{}_{}_to_{}_m{}n{}k{}", batch_rank, detail::dname(a),
                       detail::dname(b), detail::dname(out), block_m, block_n, block_k);
  }
};

// One [block_m, block_n] tile of C[batch] per program, walking K by block_k.
ir::Kernel matmul_kernel(const MatmulSpec& s) {
  using namespace dsl;
  KernelBuilder k(s.key());
  Tile a = k.arg(ptr_to(s.a), "a"), b = k.arg(ptr_to(s.b), "b"), c = k.arg(ptr_to(s.out), "c");
  Tile m = k.arg(i32, "m"), n = k.arg(i32, "n"), kk = k.arg(i32, "k");
  std::vector<Tile> batch_dims;
  batch_dims.reserve(s.batch_rank);
  for (int d = 0; d < s.batch_rank; ++d)
    batch_dims.push_back(k.arg(i32, fmt::format("batch{}", d)));
  struct Operand2d {
    Tile offset;
    std::vector<Tile> batch_strides;
    Tile rows, cols; // strides of the matrix dims
  };
  auto operand = [&](const std::string& name) {
    Operand2d o{k.arg(i32, name + "_offset"), {}, Tile(), Tile()};
    o.batch_strides.reserve(s.batch_rank);
    for (int d = 0; d < s.batch_rank; ++d)
      o.batch_strides.push_back(k.arg(i32, fmt::format("{}_batch_stride{}", name, d)));
    o.rows = k.arg(i32, name + "_row_stride");
    o.cols = k.arg(i32, name + "_col_stride");
    return o;
  };
  Operand2d sa = operand("a"), sb = operand("b"), sc = operand("c");

  // Each operand's start for this program's batch entry.
  std::vector<Tile> bc(s.batch_rank);
  Tile rest = program_id(2);
  for (int d = s.batch_rank - 1; d >= 0; --d) {
    bc[d] = d > 0 ? rest % batch_dims[d] : rest;
    if (d > 0) rest = rest / batch_dims[d];
  }
  auto base = [&](const Operand2d& o) {
    Tile at = o.offset;
    for (int d = 0; d < s.batch_rank; ++d)
      at = at + bc[d] * o.batch_strides[d];
    return at;
  };
  Tile a0 = base(sa), b0 = base(sb), c0 = base(sc);

  Tile rm = program_id(0) * s.block_m + arange(0, s.block_m);
  Tile rn = program_id(1) * s.block_n + arange(0, s.block_n);
  Var acc = zeros({s.block_m, s.block_n});
  for_range(0, kk, s.block_k, [&](Scalar k0) {
    Tile rk = k0 + arange(0, s.block_k);
    Tile at = load(a + (a0 + rm.col() * sa.rows + rk.row() * sa.cols),
                   (rm.col() < m) & (rk.row() < kk), 0.0);
    Tile bt = load(b + (b0 + rk.col() * sb.rows + rn.row() * sb.cols),
                   (rk.col() < kk) & (rn.row() < n), 0.0);
    acc = dot(at, bt, acc);
  });
  store(c + (c0 + rm.col() * sc.rows + rn.row() * sc.cols), acc, (rm.col() < m) & (rn.row() < n));
  return k.finish();
}

} // namespace

Tensor matmul(launch::Launcher& l, const Tensor& a, const Tensor& b, std::optional<DType> out_dtype) {
  if (a.rank() < 2 || b.rank() < 2 || a.shape[a.rank() - 1] != b.shape[b.rank() - 2])
    throw UserError(fmt::format("MatMul: shapes {} and {} are not [..., M, K] and [..., K, N]",
                                ir::shape_str(a.shape), ir::shape_str(b.shape)));
  if (!ir::is_float(a.dtype()) || !ir::is_float(b.dtype()))
    throw UserError(fmt::format("MatMul: needs float operands, got {} and {}",
                                ir::dtype_name(a.dtype()), ir::dtype_name(b.dtype())));
  const int64_t m = a.shape[a.rank() - 2], kk = a.shape[a.rank() - 1], n = b.shape[b.rank() - 1];

  // Broadcast the batch dims (numpy rules) as views of rank batch + 2.
  Shape a_batch(a.shape.begin(), a.shape.end() - 2), b_batch(b.shape.begin(), b.shape.end() - 2);
  Shape batch = broadcast_shapes(a_batch, b_batch, "MatMul: batch dims");
  Shape a_full = batch, b_full = batch, c_shape = batch;
  a_full.insert(a_full.end(), {m, kk});
  b_full.insert(b_full.end(), {kk, n});
  c_shape.insert(c_shape.end(), {m, n});
  Tensor av = broadcast_to(a, a_full), bv = broadcast_to(b, b_full);

  DType dt = out_dtype ? *out_dtype : (a.dtype() == b.dtype() ? a.dtype() : DType::f32);
  Tensor c = empty(dt, c_shape, "matmul");
  if (c.numel() == 0) return c;
  for (const Tensor* t : {&av, &bv, &c})
    detail::require_i32_indexing(*t, "MatMul");

  std::vector<int64_t> sa(av.strides.begin(), av.strides.end() - 2),
      sb(bv.strides.begin(), bv.strides.end() - 2), sc(c.strides.begin(), c.strides.end() - 2);
  Shape bshape = batch;
  detail::coalesce(bshape, {&sa, &sb, &sc});
  if (static_cast<int>(bshape.size()) > kMaxBatchRank)
    throw UserError(
        fmt::format("MatMul: {} batch dims (of {}) are more than the {} the kernel takes",
                    bshape.size(), ir::shape_str(c_shape), kMaxBatchRank));
  int64_t batch_count = ir::num_elements(bshape);
  if (batch_count > 65535)
    throw UserError(fmt::format(
        "MatMul: a batch of {} is above the 65535 programs grid axis 2 allows", batch_count));

  MatmulSpec spec{a.dtype(),
                  b.dtype(),
                  dt,
                  static_cast<int>(bshape.size()),
                  detail::pow2_block(m, 16, 64),
                  detail::pow2_block(n, 16, 64),
                  detail::pow2_block(kk, 16, 32)};
  if (m == 0 || n == 0) return c;
  ir::Kernel kernel = detail::cached_kernel(spec.key(), [&] { return matmul_kernel(spec); });

  std::vector<launch::Arg> args = {detail::buffer_arg(av), detail::buffer_arg(bv),
                                   detail::buffer_arg(c)};
  for (int64_t v : {m, n, kk})
    args.push_back(launch::Arg::of_int(v));
  for (int64_t d : bshape)
    args.push_back(launch::Arg::of_int(d));
  auto push = [&](const Tensor& t, const std::vector<int64_t>& batch_strides) {
    args.push_back(launch::Arg::of_int(t.offset));
    for (int64_t s : batch_strides)
      args.push_back(launch::Arg::of_int(s));
    args.push_back(launch::Arg::of_int(t.strides[t.rank() - 2]));
    args.push_back(launch::Arg::of_int(t.strides[t.rank() - 1]));
  };
  push(av, sa);
  push(bv, sb);
  push(c, sc);
  l.launch(kernel, kNumWarps, {cdiv(m, spec.block_m), cdiv(n, spec.block_n), batch_count}, args);
  return c;
}

} // namespace tilec::templates::prim
