#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/passes.h"

namespace tilec::ir {

namespace {

// Stores and atomics anywhere inside the op. The yields ending its regions
// only hand values back and do not count.
bool writes_memory(const Op& op) {
  if (has_side_effects(op.kind) && !is_terminator(op.kind)) return true;
  for (const auto& r : op.regions)
    for (const auto& inner : r->ops)
      if (writes_memory(*inner)) return true;
  return false;
}

// Loads count as removable: an unused load changes nothing a kernel can see.
bool is_dead(const Op& op, const std::vector<int>& uses) {
  if (is_terminator(op.kind) || writes_memory(op)) return false;
  return std::all_of(op.results.begin(), op.results.end(),
                     [&](const Value* r) { return uses.at(r->id) == 0; });
}

// Forgets the uses made by `op` and everything inside it, before it goes.
void release(const Op& op, std::vector<int>& uses) {
  for (const Value* v : op.operands)
    uses.at(v->id)--;
  for (const auto& r : op.regions)
    for (const auto& inner : r->ops)
      release(*inner, uses);
}

void erase_op(Op& op) {
  auto& ops = op.parent->ops;
  auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& p) { return p.get() == &op; });
  internal_assert(it != ops.end(), "an op is held by its parent block");
  ops.erase(it);
}

// Walking each block backwards sees the users of a value before its
// definition, so one sweep removes whole dead chains.
bool sweep(Block& b, std::vector<int>& uses) {
  bool changed = false;
  for (size_t i = b.ops.size(); i-- > 0;) {
    Op& op = *b.ops[i];
    for (auto& r : op.regions)
      changed |= sweep(*r, uses);
    if (is_dead(op, uses)) {
      release(op, uses);
      b.ops.erase(b.ops.begin() + static_cast<std::ptrdiff_t>(i));
      changed = true;
    }
  }
  return changed;
}

using Users = std::unordered_map<const Value*, std::vector<Op*>>;

// The ops computing nothing but the next value of carried slot `slot` of a
// for op: everything reached from the slot's body argument, provided each is
// a pure op without regions and the only way out is the slot's own yield
// operand. Empty optional when the slot's value escapes anywhere else.
std::optional<std::vector<Op*>> private_chain(const Op& loop, size_t slot, const Users& users) {
  const Block& body = loop.region(0);
  const Op* yield = body.terminator();
  std::vector<Op*> chain;
  std::unordered_set<const Op*> in_chain;
  std::vector<const Value*> work{body.args[slot + 1]};
  while (!work.empty()) {
    const Value* v = work.back();
    work.pop_back();
    auto it = users.find(v);
    if (it == users.end()) continue;
    for (Op* user : it->second) {
      if (user == yield) {
        for (size_t p = 0; p < yield->operands.size(); ++p)
          if (yield->operands[p] == v && p != slot) return std::nullopt;
        continue;
      }
      if (!user->regions.empty() || is_terminator(user->kind) || has_side_effects(user->kind))
        return std::nullopt;
      if (!in_chain.insert(user).second) continue;
      chain.push_back(user);
      for (const Value* r : user->results)
        work.push_back(r);
    }
  }
  return chain;
}

// Drops one carried slot whose result is unused and whose value only feeds
// itself around the loop (e.g. a counter nobody reads).
bool drop_one_carried_value(Op& loop, std::vector<int>& uses) {
  Block& body = loop.region(0);
  Op* yield = body.terminator();
  if (!yield || yield->kind != OpKind::Yield) return false;
  Users users;
  walk(body, [&](Op& op) {
    for (const Value* v : op.operands)
      users[v].push_back(&op);
  });
  for (size_t slot = loop.results.size(); slot-- > 0;) {
    if (uses.at(loop.results[slot]->id) != 0) continue;
    auto chain = private_chain(loop, slot, users);
    if (!chain) continue;
    uses.at(yield->operands[slot]->id)--;
    yield->operands.erase(yield->operands.begin() + static_cast<std::ptrdiff_t>(slot));
    uses.at(loop.operands[3 + slot]->id)--;
    loop.operands.erase(loop.operands.begin() + static_cast<std::ptrdiff_t>(3 + slot));
    loop.results.erase(loop.results.begin() + static_cast<std::ptrdiff_t>(slot));
    body.args.erase(body.args.begin() + static_cast<std::ptrdiff_t>(slot + 1));
    // The chain reads the argument just removed, so it must go with it.
    for (Op* op : *chain)
      release(*op, uses);
    for (Op* op : *chain)
      erase_op(*op);
    return true;
  }
  return false;
}

bool drop_dead_carried_values(Function& f, std::vector<int>& uses) {
  std::vector<Op*> loops;
  walk(f.body, [&](Op& op) {
    if (op.kind == OpKind::For && op.regions.size() == 1) loops.push_back(&op);
  });
  bool changed = false;
  for (Op* loop : loops)
    while (drop_one_carried_value(*loop, uses))
      changed = true;
  return changed;
}

} // namespace

bool dce(Function& f) {
  bool changed = false;
  for (;;) {
    std::vector<int> uses = count_uses(f);
    bool round = sweep(f.body, uses);
    round |= drop_dead_carried_values(f, uses);
    if (!round) return changed;
    changed = true;
  }
}

} // namespace tilec::ir
