#include "ir/verifier.h"

#include <fmt/format.h>

#include <unordered_map>
#include <unordered_set>

#include "ir/op_rules.h"

namespace tilec::ir {

namespace {

// Where each value and op really lives, by ownership rather than by the parent
// links under test, so that a broken link or a misplaced use can be explained.
struct Definitions {
  std::unordered_map<const Value*, const Op*> result_of;
  std::unordered_map<const Value*, const Block*> arg_of;
  std::unordered_map<const Op*, const Block*> block_of;
  std::unordered_map<const Block*, const Op*> owner_of;

  void index(const Block& b) {
    for (Value* a : b.args)
      if (a) arg_of.emplace(a, &b);
    for (const auto& op : b.ops) {
      if (!op) continue;
      block_of.emplace(op.get(), &b);
      for (Value* r : op->results)
        if (r) result_of.emplace(r, op.get());
      for (const auto& r : op->regions) {
        if (!r) continue;
        owner_of.emplace(r.get(), op.get());
        index(*r);
      }
    }
  }
};

std::string located(const SourceLoc& loc, const std::string& msg) {
  return loc.known() ? loc.str() + ": " + msg : msg;
}

std::string op_at(const Op& op) {
  return fmt::format("{} at {}", op_name(op.kind), op.loc.str());
}

// " defining %3 (f32)" for an op with results, so a report names its values.
std::string defining(const Op& op) {
  return op.results.empty() ? "" : " defining " + describe_all(op.results);
}

std::string region_name(const Op& owner, size_t index) {
  if (owner.kind == OpKind::If) return index == 0 ? "then" : "else";
  if (owner.kind == OpKind::Reduce || owner.kind == OpKind::Scan) return "combine";
  return "body";
}

class Verifier {
public:
  explicit Verifier(const Function& f) : fn_(f) { defs_.index(f.body); }

  std::vector<std::string> run() {
    check_params();
    check_block(fn_.body, nullptr);
    return std::move(errors_);
  }

private:
  void report(const Op& op, const std::string& msg) {
    errors_.push_back(located(op.loc, fmt::format("{}: {}", op_name(op.kind), msg)));
  }
  void report_kernel(const std::string& msg) {
    errors_.push_back(fmt::format("kernel '{}': {}", fn_.name, msg));
  }
  // Problems of a block belong to the op owning it, or to the kernel.
  void report_block(const Op* owner, const std::string& msg) {
    if (owner)
      report(*owner, msg);
    else
      report_kernel(msg);
  }

  void check_params() {
    std::unordered_map<std::string, const Value*> by_name;
    for (size_t i = 0; i < fn_.params.size(); ++i) {
      const Value* p = fn_.params[i];
      if (!p) {
        report_kernel(fmt::format("parameter {} is null", i));
        continue;
      }
      if (p->def)
        report_kernel(fmt::format("parameter {} is also the result of an op", describe(p)));
      if (p->multiple_of != 0 &&
          (p->multiple_of < 2 || (p->multiple_of & (p->multiple_of - 1)) != 0 || !p->type.is_scalar() ||
           p->type.is_ptr() || !is_int(p->type.dtype()) || p->type.dtype() == DType::i1))
        report_kernel(fmt::format("parameter {}: multiple_of {} needs an integer scalar and a power of two from 2",
                                  describe(p), p->multiple_of));
      if (p->name.empty()) {
        report_kernel(fmt::format("parameter {} {} has no name", i, describe(p)));
      } else if (auto [it, fresh] = by_name.emplace(p->name, p); !fresh) {
        report_kernel(fmt::format("parameters {} and {} are both named '{}'", describe(it->second),
                                  describe(p), p->name));
      }
      define(p);
    }
  }

  // Makes `v` visible to the ops that follow in the current block and its
  // regions; a second definition of one value breaks SSA.
  bool define(const Value* v) {
    if (!defined_.insert(v).second) return false;
    visible_.insert(v);
    scope_.push_back(v);
    return true;
  }

  void check_block(const Block& b, const Op* owner) {
    open_blocks_.push_back(&b);
    size_t mark = scope_.size();
    for (size_t i = 0; i < b.args.size(); ++i) {
      const Value* a = b.args[i];
      if (!a) {
        report_block(owner, fmt::format("argument {} of the {} is null", i, region_of(b)));
        continue;
      }
      if (a->owner != &b || a->def)
        report_block(owner, fmt::format("argument {} of the {} does not record that block as owner",
                                        describe(a), region_of(b)));
      if (!define(a))
        report_block(owner, fmt::format("argument {} of the {} is defined twice", describe(a),
                                        region_of(b)));
    }
    check_terminators(b, owner);
    for (const auto& op : b.ops) {
      if (op)
        check_op(*op, b);
      else
        report_block(owner, fmt::format("the {} holds a null op", region_of(b)));
    }
    for (size_t i = mark; i < scope_.size(); ++i)
      visible_.erase(scope_[i]);
    scope_.resize(mark);
    open_blocks_.pop_back();
  }

  std::string region_of(const Block& b) const {
    auto it = defs_.owner_of.find(&b);
    if (it == defs_.owner_of.end()) return "kernel body";
    const Op& owner = *it->second;
    for (size_t i = 0; i < owner.regions.size(); ++i)
      if (owner.regions[i].get() == &b)
        return fmt::format("{} region of {}", region_name(owner, i), op_at(owner));
    return fmt::format("region of {}", op_at(owner));
  }

  // The kernel body ends in `return`, for/if regions in `yield`, and a
  // terminator anywhere else would leave the ops after it unreachable.
  void check_terminators(const Block& b, const Op* owner) {
    for (size_t i = 0; i + 1 < b.ops.size(); ++i) {
      const Op* op = b.ops[i].get();
      const Op* next = b.ops[i + 1].get();
      if (op && next && is_terminator(op->kind)) {
        report(*op, fmt::format("is not the last op of the {}; {} more op(s) follow it, first {}{}",
                                region_of(b), b.ops.size() - i - 1, op_at(*next), defining(*next)));
        misplaced_.insert(op);
      }
    }
    OpKind want = owner ? OpKind::Yield : OpKind::Return;
    const Op* last = b.ops.empty() ? nullptr : b.ops.back().get();
    if (last && last->kind == want) return;
    std::string where = "the " + region_of(b);
    std::string ends;
    if (!last) {
      ends = "is empty";
    } else {
      ends = fmt::format("ends in {}{}", op_at(*last), defining(*last));
    }
    std::string msg = fmt::format("{} {}; it must end in {}", where, ends, op_name(want));
    if (owner && !owner->results.empty())
      msg += fmt::format(" giving {}", describe_all(owner->results));
    if (last && is_terminator(last->kind)) {
      report(*last, msg);
      misplaced_.insert(last);
    } else {
      report_block(owner, msg);
    }
  }

  void check_op(const Op& op, const Block& b) {
    bool linked = op.parent == &b;
    if (!linked)
      report(op, fmt::format("its parent link does not point to the {} that holds it{}",
                             region_of(b), defining(op)));

    bool complete = true; // no null pieces, so the typing rule can look at everything
    for (size_t i = 0; i < op.operands.size(); ++i) {
      const Value* v = op.operands[i];
      if (!v) {
        report(op, fmt::format("operand {} is null", i));
        complete = false;
      } else if (!visible_.count(v)) {
        report(op, fmt::format("operand {} {}", describe(v), why_not_visible(v)));
      }
    }
    for (size_t i = 0; i < op.results.size(); ++i)
      if (!op.results[i]) {
        report(op, fmt::format("result {} is null", i));
        complete = false;
      }
    if (!op.regions.empty() && !has_yield_regions(op.kind))
      report(op, fmt::format("has {} region(s); only for, if, reduce and scan have regions{}", op.regions.size(),
                             defining(op)));
    bool regions_end_in_yield = true;
    for (size_t i = 0; i < op.regions.size(); ++i) {
      const Block* r = op.regions[i].get();
      if (!r) {
        report(op, fmt::format("region {} is null", i));
        complete = false;
        continue;
      }
      if (r->parent != &op)
        report(op, fmt::format("its {} region's parent link does not point back to the op{}",
                               region_name(op, i), defining(op)));
      for (const Value* a : r->args)
        complete = complete && a;
      const Op* term = r->terminator();
      if (!term || term->kind != OpKind::Yield) {
        regions_end_in_yield = false;
      } else {
        for (const Value* v : term->operands)
          complete = complete && v;
      }
    }

    // Terminator placement and missing yields are reported once, above, in
    // words that say where; the typing rule would only repeat them.
    bool typed = complete && linked && !misplaced_.count(&op) &&
                 (op.regions.empty() || regions_end_in_yield);
    if (typed) {
      std::string err = check_op_types(op);
      if (!err.empty()) report(op, err);
    }

    for (const auto& r : op.regions)
      if (r) check_block(*r, &op);

    for (const Value* r : op.results) {
      if (!r) continue;
      if (r->def != &op)
        report(op, fmt::format("result {} does not record it as its definition", describe(r)));
      if (!define(r)) report(op, fmt::format("result {} is defined twice", describe(r)));
    }
  }

  bool is_open(const Block* b) const {
    for (const Block* open : open_blocks_)
      if (open == b) return true;
    return false;
  }

  std::string why_not_visible(const Value* v) const {
    if (auto it = defs_.result_of.find(v); it != defs_.result_of.end()) {
      const Op& def = *it->second;
      if (is_open(defs_.block_of.at(&def)))
        return fmt::format("is used before its definition by {}", op_at(def));
      return fmt::format("is defined by {} inside a region that does not enclose this use",
                         op_at(def));
    }
    if (auto it = defs_.arg_of.find(v); it != defs_.arg_of.end()) {
      return fmt::format("is an argument of the {}, which does not enclose this use",
                         region_of(*it->second));
    }
    return fmt::format("is not defined in kernel '{}'", fn_.name);
  }

  const Function& fn_;
  Definitions defs_;
  std::unordered_set<const Value*> defined_;
  std::unordered_set<const Value*> visible_;
  std::vector<const Value*> scope_; // visible values, innermost block last
  std::vector<const Block*> open_blocks_;
  std::unordered_set<const Op*> misplaced_;
  std::vector<std::string> errors_;
};

} // namespace

std::vector<std::string> verify_all(const Function& f) {
  return Verifier(f).run();
}

void verify(const Function& f) {
  std::vector<std::string> errors = verify_all(f);
  if (errors.empty()) return;
  std::string msg = errors.front();
  if (errors.size() > 1) msg += fmt::format(" (and {} more problem(s))", errors.size() - 1);
  throw UserError(msg);
}

} // namespace tilec::ir
