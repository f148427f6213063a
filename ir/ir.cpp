#include "ir/ir.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <unordered_map>

namespace tilec::ir {

std::string_view op_name(OpKind k) {
  switch (k) {
#define TILEC_X(E, N)                                                                              \
  case OpKind::E: return N;
    TILEC_OPS(TILEC_X)
#undef TILEC_X
  }
  internal_fail("bad op kind");
}

bool parse_op_name(std::string_view name, OpKind& out) {
#define TILEC_X(E, N)                                                                              \
  if (name == N) {                                                                                 \
    out = OpKind::E;                                                                               \
    return true;                                                                                   \
  }
  TILEC_OPS(TILEC_X)
#undef TILEC_X
  return false;
}

bool is_unary(OpKind k) {
  switch (k) {
#define TILEC_X(E, N) case OpKind::E:
    TILEC_UNARY_OPS(TILEC_X)
#undef TILEC_X
    return true;
  default: return false;
  }
}

bool is_binary(OpKind k) {
  switch (k) {
#define TILEC_X(E, N) case OpKind::E:
    TILEC_BINARY_OPS(TILEC_X)
#undef TILEC_X
    return true;
  default: return false;
  }
}

bool is_compare(OpKind k) {
  switch (k) {
#define TILEC_X(E, N) case OpKind::E:
    TILEC_COMPARE_OPS(TILEC_X)
#undef TILEC_X
    return true;
  default: return false;
  }
}

bool is_atomic_rmw(OpKind k) {
  switch (k) {
#define TILEC_X(E, N) case OpKind::E:
    TILEC_ATOMIC_RMW_OPS(TILEC_X)
#undef TILEC_X
    return true;
  default: return false;
  }
}

AtomicOp atomic_op(OpKind k) {
  switch (k) {
  case OpKind::AtomicAdd: return AtomicOp::add;
  case OpKind::AtomicMax: return AtomicOp::max;
  case OpKind::AtomicMin: return AtomicOp::min;
  case OpKind::AtomicAnd: return AtomicOp::and_;
  case OpKind::AtomicOr: return AtomicOp::or_;
  case OpKind::AtomicXor: return AtomicOp::xor_;
  case OpKind::AtomicXchg: return AtomicOp::xchg;
  case OpKind::AtomicCas: return AtomicOp::cas;
  default: internal_fail(fmt::format("{} is not an atomic op", op_name(k)));
  }
}

AtomicOp atomic_op(const Op& op) {
  AtomicOp a = atomic_op(op.kind);
  if (is_unsigned(op.operands[0]->type.dtype())) {
    if (a == AtomicOp::max) return AtomicOp::umax;
    if (a == AtomicOp::min) return AtomicOp::umin;
  }
  return a;
}

size_t desc_rank(const Op& op) {
  const size_t fixed = op.kind == OpKind::DescStore ? 2 : 1;
  return (op.operands.size() - fixed - size_t(op.attrs.boxes - 1)) / 3;
}

size_t desc_offset_index(const Op& op, size_t d, int64_t box) {
  const size_t rank = desc_rank(op);
  return d == 0 ? 1 + 2 * rank + size_t(box) : 1 + 2 * rank + size_t(op.attrs.boxes - 1) + d;
}

bool is_terminator(OpKind k) { return k == OpKind::Yield || k == OpKind::Return; }

bool has_side_effects(OpKind k) {
  return k == OpKind::Store || k == OpKind::DescStore || is_atomic(k) || k == OpKind::Assert || k == OpKind::Print || is_terminator(k);
}

std::string_view reduce_kind_name(ReduceKind k) {
  switch (k) {
  case ReduceKind::sum: return "sum";
  case ReduceKind::max: return "max";
  case ReduceKind::min: return "min";
  case ReduceKind::prod: return "prod";
  case ReduceKind::combine: return "combine";
  }
  internal_fail("bad reduce kind");
}

bool parse_reduce_kind(std::string_view name, ReduceKind& out) {
  for (ReduceKind k : {ReduceKind::sum, ReduceKind::max, ReduceKind::min, ReduceKind::prod, ReduceKind::combine})
    if (reduce_kind_name(k) == name) {
      out = k;
      return true;
    }
  return false;
}

bool ConstValue::operator==(const ConstValue& o) const {
  if (is_float != o.is_float) return false;
  // Bitwise for floats: -0.0 and 0.0 are different constants, and a NaN
  // equals the same NaN.
  if (is_float) return std::bit_cast<uint64_t>(f) == std::bit_cast<uint64_t>(o.f);
  return i == o.i;
}

Value* Op::mask() const {
  switch (kind) {
  case OpKind::Load: return operands.size() >= 2 ? operands[1] : nullptr;
  case OpKind::AtomicCas: return operands.size() >= 4 ? operands[3] : nullptr;
  default: return kind == OpKind::Store || is_atomic_rmw(kind) ? (operands.size() >= 3 ? operands[2] : nullptr) : nullptr;
  }
}

Value* Op::other() const {
  return kind == OpKind::Load && operands.size() >= 3 ? operands[2] : nullptr;
}

std::vector<Value*> Op::for_inits() const {
  internal_assert(kind == OpKind::For, "for_inits on a for op");
  return {operands.begin() + 3, operands.end()};
}

Value* Function::new_value(Type t, Op* def, Block* owner) {
  auto v = std::make_unique<Value>();
  v->id = static_cast<int>(values_.size());
  v->type = std::move(t);
  v->def = def;
  v->owner = owner;
  values_.push_back(std::move(v));
  return values_.back().get();
}

Value* Function::add_param(std::string pname, Type t) {
  Value* v = new_value(std::move(t), nullptr, &body);
  v->name = std::move(pname);
  params.push_back(v);
  return v;
}

void Function::renumber() {
  // Values no longer reachable (erased ops) keep storage but get no number.
  for (auto& v : values_) v->id = -1;
  int next = 0;
  for (Value* p : params) p->id = next++;
  walk(body, [&](Op& op) {
    for (Value* r : op.results) r->id = next++;
    for (auto& region : op.regions)
      for (Value* a : region->args) a->id = next++;
  });
  // Keep ids unique for orphans too, so debugging output never shows duplicates.
  for (auto& v : values_)
    if (v->id < 0) v->id = next++;
}

bool is_positive_zero(const Value* v) {
  const Op* d = v->def;
  while (d && (d->kind == OpKind::Splat || d->kind == OpKind::Broadcast || d->kind == OpKind::ExpandDims ||
               d->kind == OpKind::Cast))
    d = d->operands[0]->def;
  if (!d || d->kind != OpKind::Constant) return false;
  const ConstValue& c = d->attrs.value;
  return c.is_float ? c.f == 0.0 && !std::signbit(c.f) : c.i == 0;
}

void replace_all_uses(Block& b, Value* from, Value* to) {
  walk(b, [&](Op& op) { std::replace(op.operands.begin(), op.operands.end(), from, to); });
}

std::vector<int> count_uses(const Function& f) {
  std::vector<int> uses(f.num_values(), 0);
  walk(const_cast<Block&>(f.body), [&](Op& op) {
    for (Value* v : op.operands) uses.at(v->id)++;
  });
  return uses;
}

namespace {

void clone_block(const Block& from, Block& to, Function& f, std::unordered_map<const Value*, Value*>& map) {
  for (const Value* a : from.args) {
    Value* n = f.new_value(a->type, nullptr, &to);
    n->name = a->name;
    to.args.push_back(n);
    map[a] = n;
  }
  for (const auto& op : from.ops) {
    auto n = std::make_unique<Op>();
    n->kind = op->kind;
    n->attrs = op->attrs;
    n->loc = op->loc;
    n->parent = &to;
    for (const Value* v : op->operands) n->operands.push_back(map.at(v));
    for (const auto& r : op->regions) {
      n->regions.push_back(std::make_unique<Block>());
      n->regions.back()->parent = n.get();
      clone_block(*r, *n->regions.back(), f, map);
    }
    for (const Value* r : op->results) {
      Value* nr = f.new_value(r->type, n.get());
      nr->name = r->name;
      n->results.push_back(nr);
      map[r] = nr;
    }
    to.ops.push_back(std::move(n));
  }
}

} // namespace

Kernel clone(const Function& f) {
  auto k = std::make_shared<Function>(f.name);
  std::unordered_map<const Value*, Value*> map;
  for (const Value* p : f.params) {
    Value* n = k->add_param(p->name, p->type);
    n->multiple_of = p->multiple_of;
    map[p] = n;
  }
  clone_block(f.body, k->body, *k, map);
  k->min_blocks_per_sm = f.min_blocks_per_sm;
  k->max_registers = f.max_registers;
  k->renumber();
  return k;
}

} // namespace tilec::ir
