// Reductions and scans of one axis (reduce_*, cum*, argmax/argmin) and dot. reduce and
// associative_scan with the user's combine function trace a region: control_flow.cpp.
#include <fmt/format.h>

#include "dsl/internal.h"

namespace tilec::dsl {

using namespace detail;

namespace {
// A reduction or scan of `t` along `axis` (i1 counted as i32).
Tile along_axis(bool is_scan, ir::ReduceKind k, const Tile& t, int axis, const Loc& loc) {
  std::string what = fmt::format("{}{}", is_scan ? "cum" : "reduce_", ir::reduce_kind_name(k));
  ir::Value* v = need(t, loc, what.c_str());
  if (is_scan && (v->type.is_scalar() || v->type.is_ptr()))
    fail(loc, fmt::format("{}: needs a tile of numbers, got {}", what, v->type.str()));
  axis = checked_axis(v, axis, loc, what);
  if (v->type.dtype() == DType::i1) v = cast_to(v, DType::i32, loc);
  return is_scan ? at(loc).scan(k, v, axis) : at(loc).reduce(k, v, axis);
}
Tile reduce(ir::ReduceKind k, const Tile& t, int axis, const Loc& loc) { return along_axis(false, k, t, axis, loc); }
Tile scan(ir::ReduceKind k, const Tile& t, int axis, const Loc& loc) { return along_axis(true, k, t, axis, loc); }
} // namespace

Tile reduce_sum(const Tile& t, int axis, Loc loc) { return reduce(ir::ReduceKind::sum, t, axis, loc); }
Tile reduce_max(const Tile& t, int axis, Loc loc) { return reduce(ir::ReduceKind::max, t, axis, loc); }
Tile reduce_min(const Tile& t, int axis, Loc loc) { return reduce(ir::ReduceKind::min, t, axis, loc); }
Tile reduce_prod(const Tile& t, int axis, Loc loc) { return reduce(ir::ReduceKind::prod, t, axis, loc); }

Tile cumsum(const Tile& t, int axis, Loc loc) { return scan(ir::ReduceKind::sum, t, axis, loc); }
Tile cumprod(const Tile& t, int axis, Loc loc) { return scan(ir::ReduceKind::prod, t, axis, loc); }
Tile cummax(const Tile& t, int axis, Loc loc) { return scan(ir::ReduceKind::max, t, axis, loc); }
Tile cummin(const Tile& t, int axis, Loc loc) { return scan(ir::ReduceKind::min, t, axis, loc); }

namespace {
Tile arg_reduce(bool max_, const Tile& t, int axis, const Loc& loc) {
  ir::Value* v = need(t, loc, max_ ? "argmax" : "argmin");
  const int rank = v->type.rank();
  axis = checked_axis(v, axis, loc, max_ ? "argmax" : "argmin");
  const Shape& s = v->type.shape;
  Tile best = expand_dims(max_ ? reduce_max(t, axis, loc) : reduce_min(t, axis, loc), axis, loc);
  Shape along(size_t(rank), 1);
  along[size_t(axis)] = s[size_t(axis)];
  Tile index = broadcast_to(reshape(arange(0, s[size_t(axis)], loc), along, loc), s, loc);
  Tile hit = t == broadcast_to(best, s, loc);
  if (ir::is_float(v->type.dtype())) hit = hit | broadcast_to(isnan(best, loc), s, loc);
  return reduce_min(where(hit, index, Operand(s[size_t(axis)], loc), loc), axis, loc);
}
} // namespace

Tile argmax(const Tile& t, int axis, Loc loc) { return arg_reduce(true, t, axis, loc); }
Tile argmin(const Tile& t, int axis, Loc loc) { return arg_reduce(false, t, axis, loc); }

Tile dot(const Tile& a, const Tile& b, Loc loc) {
  need(a, loc, "dot");
  need(b, loc, "dot");
  if (a.rank() != 2 || b.rank() != 2)
    fail(loc, fmt::format("dot: needs 2-d tiles, got {} and {}", a.type().str(), b.type().str()));
  return dot(a, b, zeros({a.shape()[0], b.shape()[1]}, f32, loc), loc);
}

Tile dot(const Tile& a, const Tile& b, const Tile& acc, Loc loc) {
  ir::Value* va = need(a, loc, "dot");
  ir::Value* vb = need(b, loc, "dot");
  ir::Value* vc = need(acc, loc, "dot");
  if (va->type.rank() != 2 || vb->type.rank() != 2 || va->type.shape[1] != vb->type.shape[0])
    fail(loc, fmt::format("dot: shapes {} and {} are not [M, K] and [K, N]", ir::shape_str(va->type.shape),
                          ir::shape_str(vb->type.shape)));
  if (va->type.is_ptr() || vb->type.is_ptr()) fail(loc, "dot: operands cannot be pointers");
  DType dt = promote(va->type.dtype(), vb->type.dtype());
  if (!ir::is_float(dt)) dt = DType::f32;
  return at(loc).dot(cast_to(va, dt, loc), cast_to(vb, dt, loc), cast_to(vc, DType::f32, loc));
}

} // namespace tilec::dsl
