#include "ir/builder.h"

#include <fmt/format.h>

#include "ir/op_rules.h"

namespace tilec::ir {

Op* Builder::create(OpKind kind, std::vector<Value*> operands, std::vector<Type> result_types,
                    Attrs attrs, int num_regions) {
  auto op = std::make_unique<Op>();
  op->kind = kind;
  op->operands = std::move(operands);
  op->attrs = std::move(attrs);
  op->loc = loc;
  op->parent = block_;
  for (auto& t : result_types) op->results.push_back(fn_.new_value(std::move(t), op.get()));
  for (int i = 0; i < num_regions; ++i) {
    op->regions.push_back(std::make_unique<Block>());
    op->regions.back()->parent = op.get();
  }
  Op* raw = op.get();
  if (num_regions == 0) check(*raw);
  block_->ops.push_back(std::move(op));
  return raw;
}

void Builder::check(const Op& op) const {
  std::string err = check_op_types(op);
  if (!err.empty()) throw UserError(op.loc, fmt::format("{}: {}", op_name(op.kind), err));
}

Value* Builder::program_id(int axis) {
  Attrs a;
  a.axis = axis;
  return create(OpKind::ProgramId, {}, {scalar_type(DType::i32)}, a)->result();
}

Value* Builder::num_programs(int axis) {
  Attrs a;
  a.axis = axis;
  return create(OpKind::NumPrograms, {}, {scalar_type(DType::i32)}, a)->result();
}

Value* Builder::arange(int64_t start, int64_t end) {
  if (end <= start)
    throw UserError(loc, fmt::format("arange: end {} must exceed start {}", end, start));
  Attrs a;
  a.start = start;
  return create(OpKind::Arange, {}, {tile_type(DType::i32, {end - start})}, a)->result();
}

Value* Builder::constant(Type type, ConstValue value) {
  Attrs a;
  a.value = value;
  if (!type.is_ptr() && is_float(type.dtype()) && !value.is_float)
    a.value = ConstValue::of_float(static_cast<double>(value.i));
  if (!type.is_ptr() && is_int(type.dtype()) && value.is_float) {
    int64_t exact = ConstValue::of_float(value.f).i; // 0 when out of int64's range
    if (value.f != static_cast<double>(exact))
      throw UserError(loc, fmt::format("constant: {} is not an integer for {}", value.f, type.str()));
    a.value = ConstValue::of_int(exact);
  }
  return create(OpKind::Constant, {}, {type}, a)->result();
}

Value* Builder::splat(Value* scalar, Shape shape) {
  if (shape.empty()) return scalar;
  return create(OpKind::Splat, {scalar}, {scalar->type.with_shape(std::move(shape))})->result();
}

Value* Builder::broadcast(Value* v, Shape shape) {
  if (v->type.shape == shape) return v;
  return create(OpKind::Broadcast, {v}, {v->type.with_shape(std::move(shape))})->result();
}

Value* Builder::expand_dims(Value* v, int axis) {
  Attrs a;
  a.axis = axis;
  Shape s = v->type.shape;
  if (axis < 0 || axis > static_cast<int>(s.size()))
    throw UserError(loc, fmt::format("expand_dims: axis {} out of range for {}", axis, v->type.str()));
  s.insert(s.begin() + axis, 1);
  return create(OpKind::ExpandDims, {v}, {v->type.with_shape(s)}, a)->result();
}

Value* Builder::reshape(Value* v, Shape shape) {
  if (v->type.shape == shape) return v;
  return create(OpKind::Reshape, {v}, {v->type.with_shape(std::move(shape))})->result();
}

Value* Builder::permute(Value* v, std::vector<int64_t> perm) {
  Shape s;
  for (int64_t d : perm) {
    if (d < 0 || d >= v->type.rank())
      throw UserError(loc, fmt::format("permute: [{}] is not a permutation of {} dims",
                                       fmt::join(perm, ", "), v->type.rank()));
    s.push_back(v->type.shape[d]);
  }
  Attrs a;
  a.perm = std::move(perm);
  return create(OpKind::Permute, {v}, {v->type.with_shape(s)}, a)->result();
}

Value* Builder::addptr(Value* ptr, Value* offset) {
  return create(OpKind::AddPtr, {ptr, offset}, {ptr->type})->result();
}

Value* Builder::load(Value* ptr, Value* mask, Value* other) {
  std::vector<Value*> ops{ptr};
  if (mask) ops.push_back(mask);
  if (other) {
    if (!mask) throw UserError(loc, "load: `other` needs a mask");
    ops.push_back(other);
  }
  return create(OpKind::Load, ops, {tile_type(ptr->type.dtype(), ptr->type.shape)})->result();
}

void Builder::store(Value* ptr, Value* value, Value* mask) {
  std::vector<Value*> ops{ptr, value};
  if (mask) ops.push_back(mask);
  create(OpKind::Store, ops, {});
}

Value* Builder::atomic_add(Value* ptr, Value* value, Value* mask) {
  return atomic_rmw(OpKind::AtomicAdd, ptr, value, mask);
}

Value* Builder::atomic_rmw(OpKind kind, Value* ptr, Value* value, Value* mask) {
  internal_assert(is_atomic_rmw(kind), "atomic_rmw takes an atomic read-modify-write kind");
  std::vector<Value*> ops{ptr, value};
  if (mask) ops.push_back(mask);
  return create(kind, ops, {value->type})->result();
}

Value* Builder::atomic_cas(Value* ptr, Value* cmp, Value* value, Value* mask) {
  std::vector<Value*> ops{ptr, cmp, value};
  if (mask) ops.push_back(mask);
  return create(OpKind::AtomicCas, ops, {value->type})->result();
}

Value* Builder::unary(OpKind kind, Value* v) { return create(kind, {v}, {v->type})->result(); }

Value* Builder::binary(OpKind kind, Value* a, Value* b) {
  Type t = is_compare(kind) ? tile_type(DType::i1, a->type.shape) : a->type;
  return create(kind, {a, b}, {t})->result();
}

Value* Builder::select(Value* cond, Value* a, Value* b) {
  return create(OpKind::Select, {cond, a, b}, {a->type})->result();
}

Value* Builder::fma(Value* a, Value* b, Value* c) {
  return create(OpKind::Fma, {a, b, c}, {a->type})->result();
}

Value* Builder::cast(Value* v, DType to) {
  if (!v->type.is_ptr() && v->type.dtype() == to) return v;
  return create(OpKind::Cast, {v}, {tile_type(to, v->type.shape)})->result();
}

void Builder::assert_true(Value* cond, std::string message) {
  Attrs a;
  a.message = std::move(message);
  create(OpKind::Assert, {cond}, {}, a);
}

void Builder::print(Value* v, std::string prefix) {
  Attrs a;
  a.message = std::move(prefix);
  create(OpKind::Print, {v}, {}, a);
}

Value* Builder::bitcast(Value* v, DType to) {
  return create(OpKind::Bitcast, {v}, {tile_type(to, v->type.shape)})->result();
}

Value* Builder::dot(Value* a, Value* b, Value* acc) {
  return create(OpKind::Dot, {a, b, acc}, {acc->type})->result();
}

Value* Builder::reduce(ReduceKind kind, Value* v, int axis) {
  Shape s = v->type.shape;
  if (axis < 0 || axis >= static_cast<int>(s.size()))
    throw UserError(loc, fmt::format("reduce: axis {} out of range for {}", axis, v->type.str()));
  s.erase(s.begin() + axis);
  Attrs a;
  a.reduce = kind;
  a.axis = axis;
  return create(OpKind::Reduce, {v}, {v->type.with_shape(s)}, a)->result();
}

Value* Builder::scan(ReduceKind kind, Value* v, int axis) {
  if (axis < 0 || axis >= v->type.rank())
    throw UserError(loc, fmt::format("scan: axis {} out of range for {}", axis, v->type.str()));
  Attrs a;
  a.reduce = kind;
  a.axis = axis;
  return create(OpKind::Scan, {v}, {v->type}, a)->result();
}

Op* Builder::combine_op(OpKind kind, Value* v, int axis) {
  internal_assert(kind == OpKind::Reduce || kind == OpKind::Scan, "combine_op: reduce or scan");
  const char* what = kind == OpKind::Reduce ? "reduce" : "scan";
  if (axis < 0 || axis >= v->type.rank())
    throw UserError(loc, fmt::format("{}: axis {} out of range for {}", what, axis, v->type.str()));
  if (v->type.is_ptr())
    throw UserError(loc, fmt::format("{}: cannot combine pointers ({})", what, v->type.str()));
  Shape s = v->type.shape;
  if (kind == OpKind::Reduce) s.erase(s.begin() + axis);
  Attrs a;
  a.reduce = ReduceKind::combine;
  a.axis = axis;
  Op* op = create(kind, {v}, {v->type.with_shape(s)}, a, 1);
  Block& body = op->region(0);
  for (int i = 0; i < 2; ++i) body.args.push_back(fn_.new_value(scalar_type(v->type.dtype()), nullptr, &body));
  return op;
}

Op* Builder::for_op(Value* lb, Value* ub, Value* step, const std::vector<Value*>& inits) {
  std::vector<Value*> ops{lb, ub, step};
  std::vector<Type> types;
  for (Value* v : inits) {
    ops.push_back(v);
    types.push_back(v->type);
  }
  for (Value* b : {lb, ub, step})
    if (!b->type.is_scalar() || b->type.is_ptr() || !is_int(b->type.dtype()) ||
        b->type.dtype() == DType::i1 || b->type != lb->type)
      throw UserError(loc, fmt::format("for: bounds must be integer scalars of one type, got {}, {}, {}",
                                       lb->type.str(), ub->type.str(), step->type.str()));
  Op* op = create(OpKind::For, ops, types, {}, 1);
  Block& body = op->region(0);
  body.args.push_back(fn_.new_value(lb->type, nullptr, &body));
  for (Value* v : inits) body.args.push_back(fn_.new_value(v->type, nullptr, &body));
  return op;
}

Op* Builder::if_op(Value* cond, const std::vector<Type>& result_types) {
  if (cond->type != scalar_type(DType::i1))
    throw UserError(loc, fmt::format("if: condition must be an i1 scalar, got {}", cond->type.str()));
  return create(OpKind::If, {cond}, result_types, {}, 2);
}

void Builder::yield(const std::vector<Value*>& values) { create(OpKind::Yield, values, {}); }

void Builder::ret() { create(OpKind::Return, {}, {}); }

} // namespace tilec::ir
