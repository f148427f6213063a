#include <bit>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "ir/passes.h"

namespace tilec::ir {

namespace {

// Ops whose result depends only on their operands and attributes. Loads may
// see a store in between, atomics and stores are effects, and for/if carry
// regions that are not compared.
bool can_merge(const Op& op) {
  if (is_atomic(op.kind)) return false;
  switch (op.kind) {
  case OpKind::Load:
  case OpKind::Store:
  case OpKind::DescLoad:
  case OpKind::DescStore:
  case OpKind::For:
  case OpKind::If:
  case OpKind::Yield:
  case OpKind::Return:
    return false;
  default:
    return op.regions.empty() && !op.results.empty();
  }
}

// ConstValue's == calls 0.0 and -0.0 equal; as constants they differ (1/x),
// so floats compare by bit pattern here.
bool same_constant(const ConstValue& a, const ConstValue& b) {
  if (a.is_float != b.is_float) return false;
  if (a.is_float) return std::bit_cast<uint64_t>(a.f) == std::bit_cast<uint64_t>(b.f);
  return a.i == b.i;
}

bool same_attrs(const Attrs& a, const Attrs& b) {
  return a.axis == b.axis && a.start == b.start && a.perm == b.perm && a.reduce == b.reduce &&
         same_constant(a.value, b.value);
}

bool equivalent(const Op& a, const Op& b) {
  if (a.kind != b.kind || a.operands != b.operands || a.results.size() != b.results.size())
    return false;
  for (size_t i = 0; i < a.results.size(); ++i)
    if (a.results[i]->type != b.results[i]->type) return false;
  return same_attrs(a.attrs, b.attrs);
}

size_t hash_op(const Op& op) {
  size_t h = static_cast<size_t>(op.kind);
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  for (const Value* v : op.operands)
    mix(std::hash<const Value*>{}(v));
  for (const Value* r : op.results) {
    mix(static_cast<size_t>(r->type.dtype()) * 2 + r->type.is_ptr());
    for (int64_t d : r->type.shape)
      mix(static_cast<size_t>(d));
  }
  mix(static_cast<size_t>(op.attrs.axis));
  mix(static_cast<size_t>(op.attrs.start));
  mix(op.attrs.value.is_float ? std::bit_cast<uint64_t>(op.attrs.value.f)
                              : static_cast<uint64_t>(op.attrs.value.i));
  return h;
}

// The ops seen so far in the current block and the blocks enclosing it, which
// are exactly the ones that dominate the next op. A region gets its own scope,
// dropped when the region ends, so nothing leaks out of it or into a sibling.
class ScopedOps {
public:
  void push() { scopes_.emplace_back(); }
  void pop() { scopes_.pop_back(); }
  Op* find(const Op& op, size_t h) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      auto it = s->find(h);
      if (it == s->end()) continue;
      for (Op* seen : it->second)
        if (equivalent(*seen, op)) return seen;
    }
    return nullptr;
  }
  void add(Op& op, size_t h) { scopes_.back()[h].push_back(&op); }

private:
  std::vector<std::unordered_map<size_t, std::vector<Op*>>> scopes_;
};

bool cse_block(Function& f, Block& b, ScopedOps& seen) {
  bool changed = false;
  seen.push();
  for (size_t i = 0; i < b.ops.size();) {
    Op& op = *b.ops[i];
    for (auto& r : op.regions)
      changed |= cse_block(f, *r, seen);
    if (can_merge(op)) {
      size_t h = hash_op(op);
      if (Op* earlier = seen.find(op, h)) {
        for (size_t r = 0; r < op.results.size(); ++r)
          replace_all_uses(f.body, op.results[r], earlier->results[r]);
        b.ops.erase(b.ops.begin() + static_cast<std::ptrdiff_t>(i));
        changed = true;
        continue;
      }
      seen.add(op, h);
    }
    ++i;
  }
  seen.pop();
  return changed;
}

} // namespace

bool cse(Function& f) {
  ScopedOps seen;
  return cse_block(f, f.body, seen);
}

} // namespace tilec::ir
