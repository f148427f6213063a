#include "codegen/axis_info.h"

#include <algorithm>
#include <bit>
#include <optional>

namespace tilec::codegen {

using ir::Op;
using ir::OpKind;
using ir::Value;

namespace {

constexpr int64_t kMaxDiv = int64_t(1) << 30;

int64_t pow2_divisor(int64_t v) {
  if (v == 0) return kMaxDiv;
  return std::min<int64_t>(kMaxDiv, int64_t(1) << std::countr_zero(static_cast<uint64_t>(v)));
}

size_t info_rank(const Value* v) { return std::max<size_t>(1, v->type.shape.size()); }

AxisInfo unknown(const Value* v) {
  size_t r = info_rank(v);
  return {std::vector<int64_t>(r, 1), std::vector<int64_t>(r, 1), std::vector<int64_t>(r, 1)};
}

AxisInfo uniform(const Value* v, int64_t div) {
  AxisInfo a = unknown(v);
  a.divisibility.assign(a.divisibility.size(), div);
  if (!v->type.shape.empty()) a.constancy = v->type.shape;
  return a;
}

// The divisibility every element has (runs of more than one element are only
// known at their first).
int64_t elem_div(const AxisInfo& a) {
  int64_t d = kMaxDiv;
  for (size_t i = 0; i < a.divisibility.size(); ++i)
    d = std::min(d, a.contiguity[i] > 1 ? 1 : a.divisibility[i]);
  return d;
}


AxisInfo meet(const AxisInfo& a, const AxisInfo& b) {
  AxisInfo r = a;
  for (size_t i = 0; i < r.contiguity.size(); ++i) {
    r.contiguity[i] = std::min(a.contiguity[i], b.contiguity[i]);
    r.divisibility[i] = std::min(a.divisibility[i], b.divisibility[i]);
    r.constancy[i] = std::min(a.constancy[i], b.constancy[i]);
  }
  return r;
}

// Integer and pointer values (not i1): the ones whose facts are tracked.
bool ptr_or_int(const Value* v) {
  return v->type.is_ptr() || (ir::is_int(v->type.dtype()) && v->type.dtype() != ir::DType::i1);
}

AxisInfo arange_info(const Op& op, const Value* res) {
  AxisInfo a = unknown(res);
  a.contiguity[0] = res->type.shape[0];
  a.divisibility[0] = pow2_divisor(op.attrs.start);
  return a;
}

// Broadcast dims lose their runs and become constant along the new size.
AxisInfo broadcast_info(const Op& op, const AxisInfo& src) {
  const Value* res = op.results[0];
  AxisInfo a = src;
  for (size_t d = 0; d < res->type.shape.size(); ++d)
    if (op.operands[0]->type.shape[d] != res->type.shape[d]) {
      a.contiguity[d] = 1;
      a.constancy[d] = res->type.shape[d];
    }
  return a;
}

AxisInfo expand_dims_info(const Op& op, const AxisInfo& s) {
  AxisInfo a;
  if (op.operands[0]->type.shape.empty()) {
    a = unknown(op.results[0]);
    a.divisibility[0] = s.divisibility[0];
  } else {
    a = s;
    int64_t div = *std::min_element(s.divisibility.begin(), s.divisibility.end());
    a.contiguity.insert(a.contiguity.begin() + op.attrs.axis, 1);
    a.divisibility.insert(a.divisibility.begin() + op.attrs.axis, div);
    a.constancy.insert(a.constancy.begin() + op.attrs.axis, 1);
  }
  return a;
}

AxisInfo permute_info(const Op& op, const AxisInfo& s) {
  AxisInfo a = s;
  for (size_t i = 0; i < op.attrs.perm.size(); ++i) {
    a.contiguity[i] = s.contiguity[op.attrs.perm[i]];
    a.divisibility[i] = s.divisibility[op.attrs.perm[i]];
    a.constancy[i] = s.constancy[op.attrs.perm[i]];
  }
  return a;
}

// Only dropping or adding size-1 dims keeps the per-dim facts.
AxisInfo reshape_info(const Op& op, const AxisInfo& src) {
  const Value* res = op.results[0];
  const ir::Shape &from = op.operands[0]->type.shape, &to = res->type.shape;
  std::vector<size_t> keep_from, keep_to;
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1) keep_from.push_back(i);
  for (size_t i = 0; i < to.size(); ++i)
    if (to[i] != 1) keep_to.push_back(i);
  AxisInfo a = unknown(res);
  bool same = keep_from.size() == keep_to.size();
  for (size_t i = 0; same && i < keep_from.size(); ++i) same = from[keep_from[i]] == to[keep_to[i]];
  if (same)
    for (size_t i = 0; i < keep_to.size(); ++i) {
      a.contiguity[keep_to[i]] = src.contiguity[keep_from[i]];
      a.divisibility[keep_to[i]] = src.divisibility[keep_from[i]];
      a.constancy[keep_to[i]] = src.constancy[keep_from[i]];
    }
  return a;
}

// addptr, add, sub: a run plus a constant is a run (for add, either way round).
AxisInfo add_info(const Op& op, const AxisInfo& a, const AxisInfo& b) {
  AxisInfo r = unknown(op.results[0]);
  for (size_t d = 0; d < r.contiguity.size(); ++d) {
    int64_t c = std::min(a.contiguity[d], b.constancy[d]);
    if (op.kind != OpKind::Sub) c = std::max(c, std::min(a.constancy[d], b.contiguity[d]));
    r.contiguity[d] = c;
    r.divisibility[d] = std::min(a.divisibility[d], b.divisibility[d]);
    r.constancy[d] = std::min(a.constancy[d], b.constancy[d]);
  }
  return r;
}

// `c0` and `c1`: the operands' values where known at compile time.
AxisInfo mul_info(const Op& op, const AxisInfo& a, const AxisInfo& b, std::optional<int64_t> c0,
                  std::optional<int64_t> c1) {
  const Value* res = op.results[0];
  // x * 1 is x (a stride compiled in as 1, say): its runs stay runs.
  if (c1 == 1 && op.operands[0]->type == res->type) return a;
  if (c0 == 1 && op.operands[1]->type == res->type) return b;
  AxisInfo r = unknown(res);
  int64_t div = std::min(kMaxDiv, elem_div(a) * elem_div(b));
  for (size_t d = 0; d < r.contiguity.size(); ++d) {
    r.divisibility[d] = div;
    r.constancy[d] = std::min(a.constancy[d], b.constancy[d]);
  }
  return r;
}

// div, rem by `c`, the divisor's value where known at compile time (a power of two helps).
AxisInfo div_rem_info(const Op& op, const AxisInfo& a, const AxisInfo& b, std::optional<int64_t> c) {
  AxisInfo r = unknown(op.results[0]);
  for (size_t d = 0; d < r.contiguity.size(); ++d) {
    r.constancy[d] = std::min(a.constancy[d], b.constancy[d]);
    if (!c || *c <= 0 || !ir::is_pow2(*c)) continue;
    // Runs of x start at multiples of div_x; splitting them at multiples of c.
    int64_t piece = std::min({a.contiguity[d], a.divisibility[d], *c});
    if (op.kind == OpKind::Rem) {
      r.contiguity[d] = piece;
      r.divisibility[d] = std::min(a.divisibility[d], *c);
    } else {
      r.constancy[d] = std::max(r.constancy[d], piece);
    }
  }
  return r;
}

AxisInfo select_info(const Value* res, const AxisInfo& c, const AxisInfo& a, const AxisInfo& b) {
  AxisInfo r = unknown(res);
  for (size_t d = 0; d < r.contiguity.size(); ++d)
    r.constancy[d] = std::min({c.constancy[d], a.constancy[d], b.constancy[d]});
  return r;
}

} // namespace

AxisAnalysis::AxisAnalysis(const ir::Function& fn, const std::map<std::string, int64_t>& int_arg_divisibility,
                           const std::map<std::string, int64_t>& int_arg_values) {
  for (const Value* p : fn.params) {
    int64_t div = 1;
    if (p->type.is_ptr()) div = 16 / ir::dtype_bytes(p->type.dtype());
    else if (auto it = int_arg_divisibility.find(p->name); it != int_arg_divisibility.end()) div = it->second;
    if (!p->type.is_ptr()) div = std::max(div, p->multiple_of); // the kernel's own promise
    if (auto it = int_arg_values.find(p->name); it != int_arg_values.end() && !p->type.is_ptr()) {
      fixed_[p] = it->second;
      div = pow2_divisor(it->second);
    }
    info_[p] = uniform(p, std::max<int64_t>(1, div));
  }
  visit_block(fn.body);
}

std::optional<int64_t> AxisAnalysis::constant_int(const Value* v) const {
  const Op* d = v->def;
  while (d && d->kind == OpKind::Splat) {
    v = d->operands[0];
    d = v->def;
  }
  if (d && d->kind == OpKind::Constant && !d->attrs.value.is_float) return d->attrs.value.i;
  if (auto it = fixed_.find(v); it != fixed_.end()) return it->second;
  return std::nullopt;
}

const AxisInfo& AxisAnalysis::at(const Value* v) const { return info_.at(v); }

void AxisAnalysis::visit_block(const ir::Block& b) {
  for (const auto& op : b.ops) visit(*op);
}

void AxisAnalysis::visit(const Op& op) {
  if (op.kind == OpKind::For) return visit_for(op);
  if (op.kind == OpKind::If) return visit_if(op);
  if (op.results.size() != 1) return;
  if (std::optional<AxisInfo> a = transfer(op)) {
    info_[op.results[0]] = std::move(*a);
    return;
  }
  info_[op.results[0]] = unknown(op.results[0]);
  if (ir::is_elementwise(op.kind) || op.kind == OpKind::Cast) visit_elementwise(op);
}

// The facts of the one result of an op this analysis knows, else nullopt (nothing known).
std::optional<AxisInfo> AxisAnalysis::transfer(const Op& op) const {
  auto in = [&](size_t i) -> const AxisInfo& { return info_.at(op.operands[i]); };
  const Value* res = op.results[0];
  switch (op.kind) {
  case OpKind::Constant:
    return op.attrs.value.is_float ? uniform(res, 1) : uniform(res, pow2_divisor(op.attrs.value.i));
  case OpKind::Arange: return arange_info(op, res);
  case OpKind::Splat: return uniform(res, in(0).divisibility[0]);
  case OpKind::Broadcast: return broadcast_info(op, in(0));
  case OpKind::ExpandDims: return expand_dims_info(op, in(0));
  case OpKind::Permute: return permute_info(op, in(0));
  case OpKind::Reshape: return reshape_info(op, in(0));
  case OpKind::AddPtr:
  case OpKind::Add:
  case OpKind::Sub:
    if (!ptr_or_int(res)) return std::nullopt;
    return add_info(op, in(0), in(1));
  case OpKind::Mul:
    if (!ptr_or_int(res)) return std::nullopt;
    return mul_info(op, in(0), in(1), constant_int(op.operands[0]), constant_int(op.operands[1]));
  case OpKind::Div:
  case OpKind::Rem:
    if (!ptr_or_int(res)) return std::nullopt;
    return div_rem_info(op, in(0), in(1), constant_int(op.operands[1]));
  case OpKind::Cast:
    if (ptr_or_int(res) && ptr_or_int(op.operands[0])) return in(0);
    return std::nullopt;
  case OpKind::Select: return select_info(res, in(0), in(1), in(2));
  default: return std::nullopt;
  }
}

// The induction variable and the carried values, iterated until the carried facts hold
// for every trip; the results are the carried values'.
void AxisAnalysis::visit_for(const Op& op) {
  auto in = [&](size_t i) -> const AxisInfo& { return info_.at(op.operands[i]); };
  const ir::Block& body = op.region(0);
  AxisInfo iv = unknown(body.args[0]);
  iv.divisibility[0] = std::min(in(0).divisibility[0], in(2).divisibility[0]);
  info_[body.args[0]] = iv;
  for (size_t i = 1; i < body.args.size(); ++i) info_[body.args[i]] = in(i + 2);
  // Iterate until the carried facts hold for every trip (they only shrink).
  for (int round = 0; round < 8; ++round) {
    visit_block(body);
    const Op* y = body.terminator();
    bool changed = false;
    for (size_t i = 1; i < body.args.size(); ++i) {
      AxisInfo m = meet(info_.at(body.args[i]), info_.at(y->operands[i - 1]));
      if (m.contiguity != info_[body.args[i]].contiguity ||
          m.divisibility != info_[body.args[i]].divisibility ||
          m.constancy != info_[body.args[i]].constancy) {
        info_[body.args[i]] = m;
        changed = true;
      }
    }
    if (!changed) break;
    if (round == 7) {
      for (size_t i = 1; i < body.args.size(); ++i) info_[body.args[i]] = unknown(body.args[i]);
      visit_block(body);
    }
  }
  for (size_t i = 0; i < op.results.size(); ++i) info_[op.results[i]] = info_.at(body.args[i + 1]);
}

// Both branches; each result holds what both yields have.
void AxisAnalysis::visit_if(const Op& op) {
  visit_block(op.region(0));
  visit_block(op.region(1));
  const Op* t = op.region(0).terminator();
  const Op* e = op.region(1).terminator();
  for (size_t i = 0; i < op.results.size(); ++i)
    info_[op.results[i]] = meet(info_.at(t->operands[i]), info_.at(e->operands[i]));
}

// An elementwise op or cast the transfer functions know nothing more of: its result is
// constant wherever all its operands are, and a compare of aligned runs against a multiple
// of p over aligned blocks of p.
void AxisAnalysis::visit_elementwise(const Op& op) {
  const Value* res = op.results[0];
  AxisInfo& r = info_[res];
  for (size_t d = 0; d < r.constancy.size(); ++d) {
    int64_t k = res->type.shape.empty() ? 1 : res->type.shape[d];
    for (const Value* v : op.operands) k = std::min(k, info_.at(v).constancy[d]);
    r.constancy[d] = k;
  }
  // x < y and x >= y (y > x, y <= x) with x in aligned runs and y constant along the dim and
  // a multiple of p: the result only changes at y, a multiple of p, so it is constant over
  // aligned blocks of p (a mask `d < head_dim` stays uniform over each 16-byte chunk).
  const Value* x = nullptr;
  const Value* y = nullptr;
  if (op.kind == OpKind::Lt || op.kind == OpKind::Ge) x = op.operands[0], y = op.operands[1];
  if (op.kind == OpKind::Gt || op.kind == OpKind::Le) x = op.operands[1], y = op.operands[0];
  if (x && ptr_or_int(x) && !x->type.is_ptr() && !res->type.shape.empty()) {
    const AxisInfo &xi = info_.at(x), &yi = info_.at(y);
    for (size_t d = 0; d < r.constancy.size(); ++d) {
      int64_t p = std::min({xi.contiguity[d], xi.divisibility[d], yi.divisibility[d], yi.constancy[d]});
      if (xi.contiguity[d] > 1 && yi.constancy[d] >= xi.contiguity[d]) r.constancy[d] = std::max(r.constancy[d], p);
    }
  }
}

} // namespace tilec::codegen
