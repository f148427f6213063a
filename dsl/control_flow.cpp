// Ops that trace a body into a region: for_range, if_then_else (whose reassigned tiles become
// loop-carried values and if results), and reduce / associative_scan with a combine function.
#include <fmt/format.h>

#include <unordered_map>

#include "dsl/internal.h"

namespace tilec::dsl {

namespace detail {

// A live tile variable at the start of a loop or if, and its value then.
struct Snapshot {
  Tile* tile;
  uint64_t serial;
  ir::Value* before;
};

} // namespace detail

using namespace detail;

struct ControlFlow {
  using Snapshot = detail::Snapshot;

  static std::vector<Snapshot> live_tiles(detail::Tracker& tr) {
    std::vector<Snapshot> out;
    tr.for_each_live([&](Tile& t) { out.push_back({&t, t.serial_, t.value()}); });
    return out;
  }

  // For each snapshot entry, the tile if it is still alive (the same object,
  // not a new one at the same address), else null.
  static std::vector<Tile*> surviving(detail::Tracker& tr, const std::vector<Snapshot>& snap) {
    std::unordered_map<uint64_t, Tile*> alive;
    tr.for_each_live([&](Tile& t) { alive[t.serial_] = &t; });
    std::vector<Tile*> out(snap.size(), nullptr);
    for (size_t i = 0; i < snap.size(); ++i)
      if (auto it = alive.find(snap[i].serial); it != alive.end()) out[i] = it->second;
    return out;
  }

  static void for_range(Operand start, Operand end, Operand step, const RangeOptions& opts,
                        const std::function<void(Scalar)>& body, Loc loc) {
    detail::Tracker& tr = current(loc);
    if (opts.num_stages < 1 || opts.num_stages > ir::kMaxPipelineStages)
      fail(loc, fmt::format("for_range: num_stages {} must be from 1 to {}", opts.num_stages,
                            ir::kMaxPipelineStages));
    ir::Builder& b = at(loc);
    DType it = DType::i32;
    for (const Operand* o : {&start, &end, &step})
      if (!o->is_literal && o->v && !o->v->type.is_ptr() && ir::is_int(o->v->type.dtype()))
        it = promote(it, o->v->type.dtype());
    if (step.is_literal && (step.lit.is_float || step.lit.i <= 0))
      fail(loc, fmt::format("for_range: step must be a positive integer, got {}",
                            step.lit.is_float ? step.lit.f : static_cast<double>(step.lit.i)));
    ir::Value* lb = as_scalar(start, it, loc, "for_range start");
    ir::Value* ub = as_scalar(end, it, loc, "for_range end");
    ir::Value* st = as_scalar(step, it, loc, "for_range step");

    // Every live tile is a candidate carried value; the untouched ones are
    // pruned once the body is built.
    std::vector<Snapshot> snap = live_tiles(tr);
    std::vector<ir::Value*> inits;
    for (auto& s : snap) inits.push_back(s.before);
    ir::Op* op = b.for_op(lb, ub, st, inits);
    op->attrs.num_stages = opts.num_stages;
    op->attrs.warp_specialize = opts.warp_specialize;
    ir::Block& blk = op->region(0);
    for (size_t i = 0; i < snap.size(); ++i) snap[i].tile->v_ = blk.args[i + 1];

    ir::Block* outer = b.block();
    b.set_block(&blk);
    body(Scalar(blk.args[0]));
    at(loc).set_block(outer);

    std::vector<Tile*> alive = surviving(tr, snap);
    std::vector<ir::Value*> after(snap.size(), nullptr);
    for (size_t i = 0; i < snap.size(); ++i)
      if (alive[i]) after[i] = alive[i]->value();

    std::unordered_map<ir::Value*, ir::Value*> unused_args;
    std::vector<ir::Value*> yields, kept_inits{lb, ub, st}, kept_results;
    std::vector<ir::Value*> kept_args{blk.args[0]};
    std::vector<size_t> carried;
    for (size_t i = 0; i < snap.size(); ++i) {
      ir::Value* arg = blk.args[i + 1];
      if (!after[i] || after[i] == arg) {
        unused_args[arg] = snap[i].before;
        continue;
      }
      if (after[i]->type != arg->type) {
        SourceLoc where = after[i]->def ? after[i]->def->loc : SourceLoc::from(loc);
        throw UserError(where, fmt::format("a variable carried by the for_range at {} changes type "
                                           "from {} to {} inside the loop",
                                           SourceLoc::from(loc).str(), arg->type.str(),
                                           after[i]->type.str()));
      }
      carried.push_back(i);
      yields.push_back(after[i]);
      kept_inits.push_back(snap[i].before);
      kept_args.push_back(arg);
      kept_results.push_back(op->results[i]);
    }
    ir::walk(blk, [&](ir::Op& o) {
      for (auto& v : o.operands)
        if (auto it = unused_args.find(v); it != unused_args.end()) v = it->second;
    });
    op->operands = kept_inits;
    op->results = kept_results;
    blk.args = kept_args;
    b.set_block(&blk);
    b.yield(yields);
    b.set_block(outer);
    b.check(*op);

    // Carried tiles take the loop's final values; the rest their outer ones.
    for (size_t i = 0; i < snap.size(); ++i)
      if (alive[i]) alive[i]->v_ = snap[i].before;
    for (size_t k = 0; k < carried.size(); ++k) alive[carried[k]]->v_ = op->results[k];
  }

  static void if_then_else(Operand cond, const std::function<void()>& then_body,
                           const std::function<void()>& else_body, Loc loc) {
    detail::Tracker& tr = current(loc);
    ir::Builder& b = at(loc);
    ir::Value* c = as_scalar(cond, DType::i1, loc, "if");
    if (!cond.is_literal && cond.v->type.dtype() != DType::i1)
      fail(loc, fmt::format("if: the condition must be i1 (a comparison), got {}", cond.v->type.str()));
    std::vector<Snapshot> snap = live_tiles(tr);
    ir::Op* op = b.if_op(c, {});
    ir::Block* outer = b.block();

    auto run = [&](ir::Block& blk, const std::function<void()>& fn) {
      b.set_block(&blk);
      if (fn) fn();
      b.set_block(outer);
      std::vector<ir::Value*> vals(snap.size(), nullptr);
      std::vector<Tile*> alive = surviving(tr, snap);
      for (size_t i = 0; i < snap.size(); ++i)
        if (alive[i]) {
          vals[i] = alive[i]->value();
          alive[i]->v_ = snap[i].before;
        }
      return vals;
    };
    std::vector<ir::Value*> then_vals = run(op->region(0), then_body);
    std::vector<ir::Value*> else_vals = run(op->region(1), else_body);

    std::vector<ir::Value*> then_yield, else_yield;
    std::vector<size_t> changed;
    for (size_t i = 0; i < snap.size(); ++i) {
      ir::Value *t = then_vals[i], *e = else_vals[i];
      if (!t || !e || (t == snap[i].before && e == snap[i].before)) continue;
      if (t->type != e->type)
        fail(loc, fmt::format("if: a variable is {} after the then branch but {} after the else branch",
                              t->type.str(), e->type.str()));
      if (t->type != snap[i].before->type)
        fail(loc, fmt::format("if: a variable changes type from {} to {} inside the branches",
                              snap[i].before->type.str(), t->type.str()));
      changed.push_back(i);
      then_yield.push_back(t);
      else_yield.push_back(e);
    }
    for (size_t k = 0; k < changed.size(); ++k)
      op->results.push_back(b.function().new_value(then_yield[k]->type, op));
    b.set_block(&op->region(0));
    b.yield(then_yield);
    b.set_block(&op->region(1));
    b.yield(else_yield);
    b.set_block(outer);
    b.check(*op);
    std::vector<Tile*> alive = surviving(tr, snap);
    for (size_t k = 0; k < changed.size(); ++k) alive[changed[k]]->v_ = op->results[k];
  }

  // reduce / associative_scan with the user's combine function: `fn` runs once, on two
  // scalars of t's dtype, to build the op's region; what it returns is yielded.
  static Tile combine_along(bool is_scan, const Tile& t, int axis, const CombineFn& fn, Loc loc) {
    const char* what = is_scan ? "associative_scan" : "reduce";
    ir::Value* v = need(t, loc, what);
    if (v->type.is_ptr() || (is_scan && v->type.is_scalar()))
      fail(loc, fmt::format("{}: needs a tile of numbers, got {}", what, v->type.str()));
    if (!fn) fail(loc, fmt::format("{}: the combine function is empty", what));
    axis = checked_axis(v, axis, loc, what);
    if (v->type.dtype() == DType::i1) v = cast_to(v, DType::i32, loc);
    detail::Tracker& tr = current(loc);
    ir::Builder& b = at(loc);
    std::vector<Snapshot> snap = live_tiles(tr);
    ir::Op* op = b.combine_op(is_scan ? ir::OpKind::Scan : ir::OpKind::Reduce, v, axis);
    ir::Block& blk = op->region(0);
    ir::Block* outer = b.block();
    b.set_block(&blk);
    Tile r;
    try {
      r = fn(Tile(blk.args[0]), Tile(blk.args[1]));
    } catch (...) {
      at(loc).set_block(outer);
      throw;
    }
    at(loc).set_block(outer);
    std::vector<Tile*> alive = surviving(tr, snap);
    for (size_t i = 0; i < snap.size(); ++i)
      if (alive[i] && alive[i]->value() != snap[i].before)
        fail(loc, fmt::format("{}: the combine function assigns to a tile from outside it; it may only "
                              "compute a value from its two arguments",
                              what));
    for (const auto& o : blk.ops)
      for (const ir::Value* in : o->operands)
        if (!in->type.is_scalar())
          fail(loc, fmt::format("{}: the combine function uses a {} from outside it; it may only compute with its "
                                "two scalar arguments, scalars and constants",
                                what, in->type.str()));
    ir::Value* y = need(r, loc, what);
    const ir::Type want = ir::scalar_type(v->type.dtype());
    if (y->type != want)
      fail(loc, fmt::format("{}: the combine function returns {}; it must return {}, its arguments' type "
                            "(cast the result)",
                            what, y->type.str(), want.str()));
    b.set_block(&blk);
    b.yield({y});
    b.set_block(outer);
    b.check(*op);
    return Tile(op->result());
  }
};

Tile reduce(const Tile& t, int axis, const CombineFn& combine, Loc loc) {
  return ControlFlow::combine_along(false, t, axis, combine, loc);
}
Tile associative_scan(const Tile& t, int axis, const CombineFn& combine, Loc loc) {
  return ControlFlow::combine_along(true, t, axis, combine, loc);
}

void for_range(Operand start, Operand end, Operand step, const std::function<void(Scalar)>& body, Loc loc) {
  ControlFlow::for_range(start, end, step, RangeOptions{}, body, loc);
}

void for_range(Operand start, Operand end, Operand step, const RangeOptions& opts,
               const std::function<void(Scalar)>& body, Loc loc) {
  ControlFlow::for_range(start, end, step, opts, body, loc);
}
void if_then_else(Operand cond, const std::function<void()>& then_body,
                  const std::function<void()>& else_body, Loc loc) {
  ControlFlow::if_then_else(cond, then_body, else_body, loc);
}
void if_then(Operand cond, const std::function<void()>& then_body, Loc loc) {
  ControlFlow::if_then_else(cond, then_body, nullptr, loc);
}

} // namespace tilec::dsl
