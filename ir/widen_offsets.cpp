// 64-bit offsets into large buffers (ir/SEMANTICS.md, "Offsets into large buffers").
//
// An offset into a buffer of at most 2^31 elements lies in i32 whenever the access is in
// bounds, and i32 arithmetic keeps the low 32 bits of add, sub and mul exactly, so an
// offset computed in i32 is right even when a partial product wraps. Past 2^31 elements
// the true offset needs more bits: this pass recomputes the add/sub/mul chain feeding each
// addptr on such a buffer in i64, from the same leaves sign-extended. The low 32 bits of
// every widened value equal the i32 value it replaces, so a program whose offsets fit in
// i32 computes the same addresses as before.
#include <algorithm>
#include <climits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ir/passes.h"

namespace tilec::ir {

namespace {

bool is_int_value(const Value* v) {
  return !v->type.is_ptr() && is_int(v->type.dtype()) && v->type.dtype() != DType::i1;
}

Type with_dtype(const Type& t, DType d) {
  Type r = t;
  r.elem.dtype = d;
  return r;
}

class Widener {
public:
  explicit Widener(Function& f) : f_(f) {}

  // The pointer values that address a buffer of one of the parameters in `roots`.
  void mark(const std::set<std::string>& roots) {
    for (Value* p : f_.params)
      if (p->type.is_ptr() && roots.count(p->name)) large_.insert(p);
    // Forward to a fixed point: loop-carried pointers may be marked by their yields.
    for (bool changed = true; changed;) {
      changed = false;
      walk(f_.body, [&](Op& op) { changed |= mark_op(op); });
    }
  }

  int rewrite() {
    int widened = 0;
    std::vector<Op*> addptrs;
    walk(f_.body, [&](Op& op) {
      if (op.kind == OpKind::AddPtr && large_.count(op.operands[0]) && op.operands[1]->type.dtype() != DType::i64)
        addptrs.push_back(&op);
    });
    for (Op* op : addptrs) {
      // An offset bounded to i32 by its own ops (arange, constants) needs nothing: the
      // pointer it is added to carries the rest in 64 bits.
      if (auto r = range(op->operands[1]); r && r->first >= INT32_MIN && r->second <= INT32_MAX) continue;
      op->operands[1] = widen(op->operands[1]);
      ++widened;
    }
    return widened;
  }

private:
  // [lo, hi] of every element of `v` when its ops bound it (arange, constants, views and
  // add/sub/mul/neg of bounded values); nullopt otherwise. Bounds beyond 2^62 count as none.
  static std::optional<std::pair<int64_t, int64_t>> range(const Value* v) {
    const Op* d = v->def;
    if (!d || v->type.is_ptr()) return std::nullopt;
    constexpr int64_t kLimit = int64_t(1) << 62;
    auto ok = [&](__int128 lo, __int128 hi) -> std::optional<std::pair<int64_t, int64_t>> {
      if (lo < -kLimit || hi > kLimit) return std::nullopt;
      return std::pair{int64_t(lo), int64_t(hi)};
    };
    switch (d->kind) {
    case OpKind::Constant:
      if (d->attrs.value.is_float) return std::nullopt;
      return ok(d->attrs.value.i, d->attrs.value.i);
    case OpKind::Arange: {
      int64_t n = v->type.shape.empty() ? 1 : v->type.shape[0];
      return ok(d->attrs.start, __int128(d->attrs.start) + n - 1);
    }
    case OpKind::Splat:
    case OpKind::Broadcast:
    case OpKind::ExpandDims:
    case OpKind::Reshape:
    case OpKind::Permute: return range(d->operands[0]);
    case OpKind::Neg: {
      auto a = range(d->operands[0]);
      if (!a) return std::nullopt;
      return ok(-__int128(a->second), -__int128(a->first));
    }
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul: {
      auto a = range(d->operands[0]), b = range(d->operands[1]);
      if (!a || !b) return std::nullopt;
      if (d->kind == OpKind::Add) return ok(__int128(a->first) + b->first, __int128(a->second) + b->second);
      if (d->kind == OpKind::Sub) return ok(__int128(a->first) - b->second, __int128(a->second) - b->first);
      __int128 c[] = {__int128(a->first) * b->first, __int128(a->first) * b->second, __int128(a->second) * b->first,
                      __int128(a->second) * b->second};
      return ok(*std::min_element(std::begin(c), std::end(c)), *std::max_element(std::begin(c), std::end(c)));
    }
    default: return std::nullopt;
    }
  }

  bool mark_op(Op& op) {
    bool changed = false;
    auto set = [&](Value* v) { changed |= large_.insert(v).second; };
    switch (op.kind) {
    case OpKind::AddPtr:
    case OpKind::Splat:
    case OpKind::Broadcast:
    case OpKind::ExpandDims:
    case OpKind::Reshape:
    case OpKind::Permute:
      if (large_.count(op.operands[0])) set(op.result());
      break;
    case OpKind::Select:
      if (large_.count(op.operands[1]) || large_.count(op.operands[2])) set(op.result());
      break;
    case OpKind::For: {
      Block& body = op.region(0);
      const Op* y = body.terminator();
      for (size_t k = 0; k < op.results.size(); ++k)
        if (large_.count(op.operands[3 + k]) || (y && large_.count(y->operands[k]))) {
          set(body.args[k + 1]);
          set(op.results[k]);
        }
      break;
    }
    case OpKind::If: {
      const Op* t = op.region(0).terminator();
      const Op* e = op.region(1).terminator();
      for (size_t k = 0; k < op.results.size(); ++k)
        if ((t && large_.count(t->operands[k])) || (e && large_.count(e->operands[k]))) set(op.results[k]);
      break;
    }
    default: break;
    }
    return changed;
  }

  // Inserts `op` into `block` before position `at` and returns its result.
  Value* insert(Block& block, size_t at, OpKind kind, std::vector<Value*> operands, Type type, const SourceLoc& loc,
                Attrs attrs = {}) {
    auto op = std::make_unique<Op>();
    op->kind = kind;
    op->operands = std::move(operands);
    op->attrs = std::move(attrs);
    op->loc = loc;
    op->parent = &block;
    Value* r = f_.new_value(std::move(type), op.get());
    op->results.push_back(r);
    block.ops.insert(block.ops.begin() + std::ptrdiff_t(at), std::move(op));
    return r;
  }

  static size_t index_of(const Block& b, const Op* op) {
    for (size_t i = 0; i < b.ops.size(); ++i)
      if (b.ops[i].get() == op) return i;
    internal_fail("op not in its parent block");
  }

  // `v` sign-extended to i64 right after its definition.
  Value* extend(Value* v) {
    Type t = with_dtype(v->type, DType::i64);
    if (v->def) {
      Block& b = *v->def->parent;
      return insert(b, index_of(b, v->def) + 1, OpKind::Cast, {v}, t, v->def->loc);
    }
    Block& b = *v->owner; // a parameter or block argument: at the start of its block
    SourceLoc loc = b.ops.empty() ? SourceLoc{} : b.ops.front()->loc;
    return insert(b, 0, OpKind::Cast, {v}, t, loc);
  }

  // The i64 value whose low 32 bits are `v`'s, with the add/sub/mul chain recomputed.
  Value* widen(Value* v) {
    if (v->type.dtype() == DType::i64) return v;
    if (auto it = wide_.find(v); it != wide_.end()) return it->second;
    Value* w = compute(v);
    wide_[v] = w;
    return w;
  }

  Value* compute(Value* v) {
    internal_assert(is_int_value(v), "widen_offsets: an offset is an integer");
    const Type t = with_dtype(v->type, DType::i64);
    Op* d = v->def;
    if (!d) {
      // A loop-carried integer: carried again as an i64 next to it, so an offset advanced
      // each trip is not truncated between trips.
      Block& b = *v->owner;
      if (b.parent && b.parent->kind == OpKind::For && v != b.args[0]) {
        size_t k = size_t(std::find(b.args.begin(), b.args.end(), v) - b.args.begin()) - 1;
        return carry(*b.parent, k).first;
      }
      return extend(v);
    }
    if (d->kind == OpKind::For) {
      size_t k = size_t(std::find(d->results.begin(), d->results.end(), v) - d->results.begin());
      return carry(*d, k).second;
    }
    Block& b = *d->parent;
    switch (d->kind) {
    case OpKind::Constant: {
      Attrs a = d->attrs;
      return insert(b, index_of(b, d) + 1, OpKind::Constant, {}, t, d->loc, a);
    }
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul: {
      Value* x = widen(d->operands[0]);
      Value* y = widen(d->operands[1]);
      return insert(b, index_of(b, d) + 1, d->kind, {x, y}, t, d->loc);
    }
    case OpKind::Neg: {
      Value* x = widen(d->operands[0]);
      return insert(b, index_of(b, d) + 1, d->kind, {x}, t, d->loc);
    }
    case OpKind::Splat:
    case OpKind::Broadcast:
    case OpKind::ExpandDims:
    case OpKind::Reshape:
    case OpKind::Permute: {
      Value* x = widen(d->operands[0]);
      return insert(b, index_of(b, d) + 1, d->kind, {x}, t, d->loc, d->attrs);
    }
    case OpKind::Select: {
      Value* x = widen(d->operands[1]);
      Value* y = widen(d->operands[2]);
      return insert(b, index_of(b, d) + 1, d->kind, {d->operands[0], x, y}, t, d->loc);
    }
    default:
      // Any other op (a load, program_id, arange, a division, a cast, ...) yields values it
      // computes in its own dtype: the chain starts from them.
      return extend(v);
    }
  }

  // For op `op`'s carried value k, also carried as an i64: (its body argument, its result).
  std::pair<Value*, Value*> carry(Op& op, size_t k) {
    auto key = std::pair{&op, k};
    if (auto it = carried_.find(key); it != carried_.end()) return it->second;
    Block& body = op.region(0);
    Value* old_arg = body.args[k + 1];
    Value* old_res = op.results[k];
    const Type t = with_dtype(old_arg->type, DType::i64);
    Value* arg = f_.new_value(t, nullptr, &body);
    body.args.push_back(arg);
    Value* res = f_.new_value(t, &op);
    op.results.push_back(res);
    carried_[key] = {arg, res};
    wide_[old_arg] = arg;
    wide_[old_res] = res;
    // The initial value before the loop, the next value at the end of the body.
    Value* init = widen(op.operands[3 + k]);
    op.operands.push_back(init);
    Op* y = body.terminator();
    Value* next = widen(y->operands[k]);
    y->operands.push_back(next);
    return {arg, res};
  }

  Function& f_;
  std::unordered_set<const Value*> large_;
  std::unordered_map<const Value*, Value*> wide_;
  std::map<std::pair<const Op*, size_t>, std::pair<Value*, Value*>> carried_;
};

} // namespace

int widen_offsets(Function& f, const std::set<std::string>& large_params) {
  if (large_params.empty()) return 0;
  Widener w(f);
  w.mark(large_params);
  int n = w.rewrite();
  if (n) {
    run_default_passes(f);
    f.renumber();
  }
  return n;
}

} // namespace tilec::ir
