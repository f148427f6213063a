#include "fuzz/shrink.h"

#include <algorithm>
#include <set>

#include "ir/builder.h"
#include "ir/passes.h"
#include "ir/verifier.h"

namespace tilec::fuzz {

namespace {

using ir::Op;
using ir::OpKind;
using ir::Value;

Program clone(const Program& p) { return from_text(to_text(p)); }

std::vector<Op*> ops_of(const Program& p) {
  std::vector<Op*> ops;
  ir::walk(p.kernel->body, [&](Op& op) {
    if (!ir::is_terminator(op.kind)) ops.push_back(&op);
  });
  return ops;
}

size_t index_of(const Op* op) {
  auto& ops = op->parent->ops;
  return static_cast<size_t>(std::find_if(ops.begin(), ops.end(), [&](const auto& o) { return o.get() == op; }) -
                             ops.begin());
}

void erase(Op* op) {
  auto& ops = op->parent->ops;
  ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(index_of(op)));
}

// A zero of type `t`, defined just before `at`.
Value* zero_before(ir::Function& fn, Op* at, const ir::Type& t) {
  ir::Builder b(fn);
  b.set_block(at->parent);
  Value* z = b.constant(t, ir::is_float(t.dtype()) ? ir::ConstValue::of_float(0) : ir::ConstValue::of_int(0));
  auto& ops = at->parent->ops;
  std::unique_ptr<Op> made = std::move(ops.back());
  ops.pop_back();
  ops.insert(ops.begin() + static_cast<std::ptrdiff_t>(index_of(at)), std::move(made));
  return z;
}

void replace_results(ir::Function& fn, Op* op, const std::vector<Value*>& with) {
  for (size_t k = 0; k < op->results.size(); ++k) ir::replace_all_uses(fn.body, op->results[k], with[k]);
  erase(op);
}

// Puts region `r` of `op` in its place, its arguments bound to `args`: the op's results
// become what the region yields.
void inline_region(ir::Function& fn, Op* op, int r, const std::vector<Value*>& args) {
  ir::Block& blk = op->region(r);
  for (size_t k = 0; k < args.size(); ++k) ir::replace_all_uses(blk, blk.args[k], args[k]);
  std::vector<Value*> yielded = blk.terminator()->operands;
  ir::Block* outer = op->parent;
  auto at = outer->ops.begin() + static_cast<std::ptrdiff_t>(index_of(op));
  std::vector<std::unique_ptr<Op>> moved;
  for (size_t k = 0; k + 1 < blk.ops.size(); ++k) {
    blk.ops[k]->parent = outer;
    moved.push_back(std::move(blk.ops[k]));
  }
  blk.ops.erase(blk.ops.begin(), blk.ops.end() - 1); // only the yield is left
  outer->ops.insert(at, std::make_move_iterator(moved.begin()), std::make_move_iterator(moved.end()));
  replace_results(fn, op, yielded);
}

// The values addresses are computed from: shrinking them could make lanes collide (a race) or
// leave their buffer, so they stay as generated.
std::set<const Value*> address_slice(const ir::Function& fn) {
  std::set<const Value*> in;
  auto add = [&](const Value* v) { return !v->type.is_ptr() && in.insert(v).second; };
  for (bool changed = true; changed;) {
    changed = false;
    ir::walk(const_cast<ir::Block&>(fn.body), [&](Op& op) {
      if (op.kind == OpKind::AddPtr) changed |= add(op.operands[1]);
      bool used = false;
      for (const Value* r : op.results) used = used || in.count(r);
      if (used)
        for (const Value* o : op.operands) changed |= add(o);
      for (size_t k = 0; op.kind == OpKind::Yield && k < op.operands.size(); ++k)
        if (in.count(op.parent->parent->results[k])) changed |= add(op.operands[k]);
      if (op.kind == OpKind::For)
        for (size_t k = 1; k < op.region(0).args.size(); ++k)
          if (in.count(op.region(0).args[k])) {
            changed |= add(op.operands[k + 2]);
            changed |= add(op.region(0).terminator()->operands[k - 1]);
          }
    });
  }
  return in;
}

bool is_nonzero_constant(const Value* v) {
  return v->def && v->def->kind == OpKind::Constant && !(v->def->attrs.value == ir::ConstValue::of_int(0));
}

// The generator's guards against undefined behaviour are still there: integer divisors are
// selected away from zero (or nonzero constants), floats are clamped before becoming integers.
bool guards_intact(const ir::Function& fn) {
  bool ok = true;
  ir::walk(const_cast<ir::Block&>(fn.body), [&](Op& op) {
    if (op.kind != OpKind::Div && op.kind != OpKind::Rem && op.kind != OpKind::Cast) return;
    const ir::Type& t = op.operands[0]->type;
    if ((op.kind == OpKind::Div || op.kind == OpKind::Rem) && ir::is_int(t.dtype())) {
      const Value* d = op.operands[1];
      ok = ok && ((d->def && d->def->kind == OpKind::Select) || is_nonzero_constant(d));
    }
    if (op.kind == OpKind::Cast && ir::is_float(t.dtype()) && ir::is_int(op.result()->type.dtype()) &&
        op.result()->type.dtype() != ir::DType::i1) {
      const Op* lo = op.operands[0]->def;
      const Op* hi = lo && lo->kind == OpKind::Min ? lo->operands[0]->def : nullptr;
      ok = ok && hi && hi->kind == OpKind::Max && is_nonzero_constant(lo->operands[1]) &&
           is_nonzero_constant(hi->operands[1]);
    }
  });
  return ok;
}

bool unused(const ir::Function& fn, const Op* op) {
  bool used = false;
  ir::walk(const_cast<ir::Block&>(fn.body), [&](Op& o) {
    for (const Value* x : o.operands) used = used || std::find(op->results.begin(), op->results.end(), x) != op->results.end();
  });
  return !used;
}

// Applies variant `v` of the simplifications of `op`; false when there is no such variant.
bool simplify(ir::Function& fn, Op* op, int v) {
  // An op nothing uses and that writes nothing goes (address arithmetic too: when dead code
  // is kept because the failure needs some of it, this removes the rest one op at a time).
  if (!op->results.empty() && op->regions.empty() && !ir::has_side_effects(op->kind) && unused(fn, op)) {
    if (v) return false;
    erase(op);
    return true;
  }
  for (const Value* r : op->results)
    if (r->type.is_ptr() || address_slice(fn).count(r)) return false;
  switch (op->kind) {
  case OpKind::Store:
    if (v) return false;
    erase(op);
    return true;
  case OpKind::For: {
    std::vector<Value*> inits(op->operands.begin() + 3, op->operands.end());
    if (v == 0) {
      replace_results(fn, op, inits);
      return true;
    }
    if (v != 1) return false;
    std::vector<Value*> args{op->operands[0]};
    args.insert(args.end(), inits.begin(), inits.end());
    inline_region(fn, op, 0, args);
    return true;
  }
  case OpKind::If:
    if (v > 1) return false;
    inline_region(fn, op, v, {});
    return true;
  default: break;
  }
  if (op->results.size() != 1) return false;
  Value* res = op->result();
  std::vector<Value*> same;
  for (Value* o : op->operands)
    if (o->type == res->type && std::find(same.begin(), same.end(), o) == same.end()) same.push_back(o);
  if (v < static_cast<int>(same.size())) {
    replace_results(fn, op, {same[v]});
    return true;
  }
  if (v == static_cast<int>(same.size()) && !res->type.is_ptr() && op->kind != OpKind::Constant) {
    replace_results(fn, op, {zero_before(fn, op, res->type)});
    return true;
  }
  return false;
}

} // namespace

int count_ops(const Program& p) { return static_cast<int>(ops_of(p).size()); }

Program shrink(const Program& failing, const StillFails& still_fails, int max_checks, ShrinkStats* stats) {
  ShrinkStats st;
  Program cur = clone(failing);
  auto attempt = [&](Program cand) {
    if (st.checks >= max_checks) return false;
    ++st.checks;
    if (!still_fails(cand)) return false;
    cur = clone(cand);
    ++st.accepted;
    return true;
  };
  // Fewer programs and warps first: every later check runs faster.
  for (int axis = 0; axis < 3; ++axis)
    while (cur.grid[axis] > 1) {
      Program c = clone(cur);
      c.grid[axis] = cur.grid[axis] == 2 ? 1 : cur.grid[axis] / 2;
      if (!attempt(c)) break;
    }
  for (int w : {1, 2}) {
    if (w >= cur.num_warps) break;
    Program c = clone(cur);
    c.num_warps = w;
    if (attempt(c)) break;
  }
  // Dead code goes after each step, unless the failure needs it (a backend may trip over an
  // op whose result nobody uses): then it stays, and the steps below remove it op by op.
  bool drop_dead = false;
  {
    Program c = clone(cur);
    drop_dead = !ir::dce(*c.kernel) || attempt(clone(c)); // nothing dead, or the failure does without it
  }
  for (bool changed = true; changed && st.checks < max_checks;) {
    changed = false;
    for (int i = count_ops(cur) - 1; i >= 0 && st.checks < max_checks; --i) {
      if (i >= count_ops(cur)) continue;
      for (int v = 0;; ++v) {
        Program c = clone(cur);
        ir::Function& fn = *c.kernel;
        if (!simplify(fn, ops_of(c)[static_cast<size_t>(i)], v)) break;
        try {
          if (drop_dead) ir::dce(fn);
          ir::verify(fn);
          if (!guards_intact(fn)) continue;
          c = clone(c); // renumbered; also proves the text round-trips
        } catch (const UserError&) {
          continue;
        }
        if (attempt(c)) {
          changed = true;
          break;
        }
      }
    }
  }
  if (stats) *stats = st;
  return cur;
}

} // namespace tilec::fuzz
