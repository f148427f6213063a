// The rules every DSL op applies before it builds IR (as Triton's semantic.py): dtype
// promotion, NumPy broadcasting, C++ numbers as constants of the dtype they meet, operand checks.
#include <fmt/format.h>

#include <algorithm>

#include "dsl/internal.h"
#include "ir/op_rules.h"

namespace tilec::dsl::detail {

// The builder, with `loc` stamped on the ops it is about to create.
ir::Builder& at(const Loc& loc) {
  ir::Builder& b = current(loc).builder;
  b.loc = SourceLoc::from(loc);
  return b;
}

[[noreturn]] void fail(const Loc& loc, const std::string& msg) {
  throw UserError(SourceLoc::from(loc), msg);
}

ir::Value* need(const Tile& t, const Loc& loc, const char* what) {
  if (!t.value()) fail(loc, fmt::format("{}: the tile has no value (default-constructed)", what));
  return t.value();
}

namespace {

int dtype_rank(DType t) {
  switch (t) {
  case DType::i1: return 0;
  case DType::i8: return 1;
  case DType::u8: return 2;
  case DType::i16: return 3;
  case DType::u16: return 4;
  case DType::i32: return 5;
  case DType::u32: return 6;
  case DType::i64: return 7;
  case DType::u64: return 8;
  case DType::f8e4m3:
  case DType::f8e5m2: return 9;
  case DType::f16:
  case DType::bf16: return 10;
  case DType::f32: return 11;
  }
  return 0;
}

} // namespace

// The dtype two operands meet at: floats beat ints, wider beats narrower, unsigned beats
// signed of its width (as in C and Triton: u32 with i32 is u32),
// f16 with bf16 meet at f32, the two fp8 formats at f16 (which holds both exactly).
DType promote(DType a, DType b) {
  if (a == b) return a;
  if (ir::is_fp8(a) && ir::is_fp8(b)) return DType::f16;
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16))
    return DType::f32;
  return dtype_rank(a) >= dtype_rank(b) ? a : b;
}

Shape broadcast_shape(const Shape& a, const Shape& b, const Loc& loc, const char* what) {
  size_t i = 0;
  std::optional<Shape> s = ir::broadcast_shapes(a, b, &i);
  if (!s) {
    size_t r = std::max(a.size(), b.size());
    fail(loc, fmt::format("{}: shapes {} and {} do not broadcast (dimension {}: {} vs {})", what, ir::shape_str(a),
                          ir::shape_str(b), i, a[i - (r - a.size())], b[i - (r - b.size())]));
  }
  return *s;
}

// Numpy-style: scalars splat, missing leading dims are added, size-1 dims grow.
ir::Value* broadcast_value(ir::Value* v, const Shape& to, const Loc& loc) {
  ir::Builder& b = at(loc);
  if (v->type.shape == to) return v;
  if (v->type.is_scalar()) return b.splat(v, to);
  if (v->type.rank() > static_cast<int>(to.size()))
    fail(loc, fmt::format("cannot broadcast {} to {}", v->type.str(), ir::shape_str(to)));
  while (v->type.rank() < static_cast<int>(to.size())) v = b.expand_dims(v, 0);
  for (size_t i = 0; i < to.size(); ++i)
    if (v->type.shape[i] != to[i] && v->type.shape[i] != 1)
      fail(loc, fmt::format("cannot broadcast {} to {}", v->type.str(), ir::shape_str(to)));
  return b.broadcast(v, to);
}

ir::Value* literal(const Operand& o, ElemType t, const Shape& shape) {
  ir::Builder& b = at(o.loc);
  if (o.lit.is_float && !ir::is_float(t.dtype))
    fail(o.loc, fmt::format("the literal {} needs a float operand, got {}", o.lit.f, t.str()));
  return b.constant(ir::Type{t, shape}, o.lit);
}

ir::Value* cast_to(ir::Value* v, DType t, const Loc& loc) {
  if (v->type.dtype() == t) return v;
  return at(loc).cast(v, t);
}

// Brings operands to one dtype (unless `keep_dtypes`) and one shape.
std::vector<ir::Value*> unify(std::vector<Operand> ops, const char* what, bool keep_dtypes) {
  const Loc& loc = ops[0].loc;
  bool any_tile = false;
  DType dt = DType::i1;
  bool lit_float = false;
  Shape shape;
  for (auto& o : ops) {
    if (o.is_literal) {
      lit_float |= o.lit.is_float;
      continue;
    }
    if (!o.v) fail(loc, fmt::format("{}: an operand tile has no value", what));
    if (o.v->type.is_ptr()) fail(loc, fmt::format("{}: operand {} is a pointer", what, o.v->type.str()));
    dt = any_tile ? promote(dt, o.v->type.dtype()) : o.v->type.dtype();
    shape = any_tile ? broadcast_shape(shape, o.v->type.shape, loc, what) : o.v->type.shape;
    any_tile = true;
  }
  if (!any_tile) fail(loc, fmt::format("{}: needs at least one tile operand", what));
  if (lit_float && !ir::is_float(dt)) dt = DType::f32;
  std::vector<ir::Value*> out;
  for (auto& o : ops) {
    ir::Value* v;
    if (o.is_literal) {
      v = literal(o, {dt, false}, shape);
    } else {
      v = keep_dtypes ? o.v : cast_to(o.v, dt, loc);
      v = broadcast_value(v, shape, loc);
    }
    out.push_back(v);
  }
  return out;
}

Tile binary(ir::OpKind k, const Operand& a, const Operand& b) {
  auto v = unify({a, b}, ir::op_name(k).data());
  return at(a.loc).binary(k, v[0], v[1]);
}

Tile unary(ir::OpKind k, const Tile& a, const Loc& loc) {
  ir::Value* v = need(a, loc, ir::op_name(k).data());
  if (!ir::is_float(v->type.dtype()) && k != ir::OpKind::Abs && k != ir::OpKind::Neg)
    v = cast_to(v, DType::f32, loc);
  return at(loc).unary(k, v);
}

ir::Value* as_mask(const Operand& m, const Shape& shape, const Loc& loc, const char* what) {
  if (m.is_literal) return literal(m, i1, shape);
  if (!m.v) fail(loc, fmt::format("{}: the mask has no value", what));
  if (m.v->type.is_ptr() || m.v->type.dtype() != DType::i1)
    fail(loc, fmt::format("{}: the mask must be i1 (a comparison), got {}", what, m.v->type.str()));
  return broadcast_value(m.v, shape, loc);
}

ir::Value* as_value(const Operand& o, ElemType elem, const Shape& shape, const Loc& loc) {
  if (o.is_literal) return literal(o, elem, shape);
  if (!o.v) fail(loc, "the value tile has no value");
  if (o.v->type.is_ptr()) fail(loc, fmt::format("a pointer {} cannot be stored", o.v->type.str()));
  return broadcast_value(cast_to(o.v, elem.dtype, loc), shape, loc);
}

ir::Value* as_scalar(const Operand& o, DType dt, const Loc& loc, const char* what) {
  if (o.is_literal) return at(loc).constant(ir::scalar_type(dt), o.lit);
  if (!o.v) fail(loc, fmt::format("{}: the operand has no value", what));
  if (!o.v->type.is_scalar())
    fail(loc, fmt::format("{}: needs a scalar, got {} (control flow is uniform per program)", what,
                          o.v->type.str()));
  return cast_to(o.v, dt, loc);
}

// The shape a memory op works on: the address tile's, grown by its operands'.
Shape memory_shape(const Tile& ptr, std::initializer_list<const Operand*> ops, const Loc& loc,
                   const char* what) {
  Shape s = need(ptr, loc, what)->type.shape;
  if (!ptr.type().is_ptr()) fail(loc, fmt::format("{}: address {} is not a pointer", what, ptr.type().str()));
  for (const Operand* o : ops)
    if (!o->is_literal && o->v) s = broadcast_shape(s, o->v->type.shape, loc, what);
  return s;
}

// `axis` of `v` (negative: from the end), checked; `what` names the call in the error.
int checked_axis(const ir::Value* v, int axis, const Loc& loc, const std::string& what) {
  if (axis < 0) axis += v->type.rank();
  if (axis < 0 || axis >= v->type.rank())
    fail(loc, fmt::format("{}: axis {} out of range for {}", what, axis, v->type.str()));
  return axis;
}

} // namespace tilec::dsl::detail
