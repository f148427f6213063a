#include "fuzz/generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <functional>
#include <unordered_map>

#include "ir/builder.h"
#include "ir/verifier.h"

namespace tilec::fuzz {

constexpr int64_t kMat = 64; // act_pipe_dot's matrix is kMat x kMat

namespace {

using ir::DType;
using ir::OpKind;
using ir::Shape;
using ir::Type;
using ir::Value;

// What the generator knows of a float value: whether it is inexact (fuzz/compare.h), whether
// it is never negative (so sums of it cannot cancel) and whether it may be a zero of either
// sign (float min and max leave the sign open: it must not become the sign of an infinity).
struct Info {
  bool inexact = false;
  bool nonneg = false;
  bool zsign = false;
};

constexpr OpKind kCompares[] = {OpKind::Eq, OpKind::Ne, OpKind::Lt, OpKind::Le, OpKind::Gt, OpKind::Ge};

class Generator {
public:
  Generator(uint64_t seed, const GenOptions& o) : r_(seed), o_(o) { prog_.seed = seed; }
  Program run();

private:
  // --- values and scopes
  Type main(DType t) const { return ir::tile_type(t, shape_); }
  Value* note(Value* v, Info i) {
    info_[v] = i;
    return v;
  }
  // Makes `v` available to later actions, with what is known of it (`note`d before, or `i`).
  Value* add(Value* v) {
    (v->type.is_scalar() ? scalars_ : tiles_).back().push_back(v);
    return v;
  }
  Value* add(Value* v, Info i) { return add(note(v, i)); }
  Info info(const Value* v) const {
    auto it = info_.find(v);
    return it == info_.end() ? Info{} : it->second;
  }
  std::vector<Value*> visible_tiles() const {
    std::vector<Value*> all;
    for (const auto& s : tiles_) all.insert(all.end(), s.begin(), s.end());
    return all;
  }
  Value* pick_tile(const std::function<bool(Value*)>& ok) {
    std::vector<Value*> c;
    for (Value* v : visible_tiles())
      if (ok(v)) c.push_back(v);
    return c.empty() ? nullptr : r_.pick(c);
  }
  Value* pick_scalar_int() {
    std::vector<Value*> c;
    for (const auto& s : scalars_)
      for (Value* v : s)
        if (ir::is_int(v->type.dtype()) && !info(v).inexact) c.push_back(v);
    return r_.pick(c);
  }
  DType any_dtype() { return ir::kAllDTypes[r_.range(0, std::size(ir::kAllDTypes) - 1)]; }
  DType float_dtype() { return r_.pick(std::vector<DType>{DType::f16, DType::bf16, DType::f32}); }

  Value* cst(const Type& t, double v) {
    return b_->constant(t, ir::is_float(t.dtype()) ? ir::ConstValue::of_float(v)
                                                   : ir::ConstValue::of_int(static_cast<int64_t>(v)));
  }
  Value* cst(DType t, double v) { return cst(main(t), v); }
  Value* nonzero_const(DType t) {
    if (t == DType::i1) return cst(t, 1);
    return cst(t, r_.pick(std::vector<double>{1, 2, 3, -3, 7, -1}));
  }

  // --- conversions that keep programs well defined
  Value* convert(Value* v, DType to);
  Value* unary(OpKind k, Value* v, Info i) { return note(b_->unary(k, v), i); }

  // --- actions
  void body(int actions);
  void action();
  void act_load();
  void act_unary();
  void act_binary();
  void act_select();
  void act_cast();
  void act_reduce();
  Value* combine_along(bool scan, Value* v, int axis, bool nonneg);
  void act_shape();
  void act_dot();
  void act_pipe_dot();
  void act_splat();
  void act_for();
  void act_if();
  void act_store(bool forced);
  void act_atomic();
  Value* address(int64_t count, Value*& mask);
  Value* data_mask();
  Value* scalar_condition();

  Rng r_;
  GenOptions o_;
  Program prog_;
  std::shared_ptr<ir::Function> fn_;
  std::unique_ptr<ir::Builder> b_;
  Shape shape_;
  int64_t elems_ = 1, total_ = 1;
  std::vector<std::vector<Value*>> tiles_, scalars_; // tiles of the main shape / scalars, by scope
  std::unordered_map<const Value*, Info> info_;
  Value* offs_ = nullptr;  // this program's element offsets, [shape_] i32
  Value* n_ = nullptr;     // the ragged bound (i32 scalar)
  Value* in_n_ = nullptr;  // offs_ < n
  Value* iv_ = nullptr;    // the innermost loop's induction variable (i32), if any
  struct Buf {
    Value* param;
    int64_t count;
    bool used = false;
  };
  std::vector<Buf> inputs_, outputs_, atomics_;
  Value* mat_ = nullptr;   // an f16/bf16 [64, 64] matrix that act_pipe_dot reads, if any
  int depth_ = 0;
};

Value* Generator::convert(Value* v, DType to) {
  DType from = v->type.dtype();
  if (from == to) return v;
  Info i = info(v);
  if (ir::is_float(from) && ir::is_int(to)) {
    if (i.inexact) return nullptr; // a few ulps could move it across an integer
    if (to != DType::i1) {
      // Out-of-range float-to-int casts are undefined: clamp first (NaN clamps to lo).
      // Unsigned: from 0.5, which truncates to 0 (a negative float has no unsigned value).
      const int bits = ir::dtype_bits(to);
      double lim = bits == 8 ? 100 : bits == 16 ? 30000 : bits == 32 ? 2e9 : 9e18;
      if (ir::is_unsigned(to)) lim *= 2;
      if (from == DType::f16) lim = std::min(lim, 60000.0);
      Type t = v->type;
      v = b_->binary(OpKind::Max, v, cst(t, ir::is_unsigned(to) ? 0.5 : -lim)); // (nonzero: the shrinker keeps it)
      v = b_->binary(OpKind::Min, v, cst(t, lim));
    }
  }
  Value* c = b_->cast(v, to);
  bool nonneg = ir::is_float(from) && ir::is_float(to) ? i.nonneg : from == DType::i1 || to == DType::i1;
  bool fl = ir::is_float(to);
  return note(c, {i.inexact && fl, nonneg, i.zsign && fl});
}

Program Generator::run() {
  fn_ = std::make_shared<ir::Function>(fmt::format("fuzz_{}", prog_.seed));
  b_ = std::make_unique<ir::Builder>(*fn_);
  tiles_.emplace_back();
  scalars_.emplace_back();

  // The main tile shape: rank 1 to 3, power-of-two dims, at most max_elems elements.
  int rank = static_cast<int>(r_.pick(std::vector<int64_t>{1, 1, 2, 2, 2, 3}));
  int max_log = 0;
  while ((int64_t(2) << max_log) <= o_.max_elems) ++max_log;
  int log_elems = static_cast<int>(r_.range(0, max_log));
  shape_.assign(rank, 1);
  for (int k = 0; k < log_elems; ++k) shape_[r_.range(0, rank - 1)] *= 2;
  elems_ = ir::num_elements(shape_);
  prog_.grid = {r_.range(1, 3), r_.range(1, 2), 1};
  total_ = elems_ * prog_.grid[0] * prog_.grid[1];
  prog_.num_warps = static_cast<int>(r_.pick(std::vector<int64_t>{1, 2, 4, 4}));
  int64_t n = r_.chance(0.2) ? total_ : r_.range(1, total_);

  auto buffer = [&](const std::string& name, DType t, bool ragged) {
    Value* p = fn_->add_param(name, ir::Type{{t, true}, {}});
    prog_.params.push_back({ragged ? n : total_, 0});
    return Buf{p, ragged ? n : total_};
  };
  int n_in = static_cast<int>(r_.range(1, 3)), n_out = static_cast<int>(r_.range(1, 3));
  for (int k = 0; k < n_in; ++k) inputs_.push_back(buffer(fmt::format("in{}", k), any_dtype(), r_.chance(0.3)));
  for (int k = 0; k < n_out; ++k) outputs_.push_back(buffer(fmt::format("out{}", k), any_dtype(), r_.chance(0.3)));
  if (r_.chance(0.15))
    atomics_.push_back(buffer("acc", r_.pick(std::vector<DType>{DType::i32, DType::u32, DType::f32, DType::f32}),
                              r_.chance(0.3)));
  if (r_.chance(0.5)) {
    mat_ = fn_->add_param("mat", ir::Type{{r_.chance(0.5) ? DType::f16 : DType::bf16, true}, {}});
    prog_.params.push_back({kMat * kMat, 0});
  }
  n_ = fn_->add_param("n", ir::scalar_type(DType::i32));
  prog_.params.push_back({0, static_cast<double>(n)});
  add(n_);
  int n_scalars = static_cast<int>(r_.range(0, 2));
  for (int k = 0; k < n_scalars; ++k) {
    DType t = any_dtype();
    Value* s = fn_->add_param(fmt::format("s{}", k), ir::scalar_type(t));
    double v = t == DType::i1 ? double(r_.range(0, 1))
               : ir::is_int(t) ? double(r_.range(ir::is_unsigned(t) ? 0 : -5, 40))
                               : static_cast<double>(r_.range(-24, 24)) / 8.0;
    prog_.params.push_back({0, v});
    add(s);
  }

  // offs = pid * elems + the row-major index of each element, pid = pid0 + pid1 * num_programs(0).
  Value* pid = b_->binary(OpKind::Add, b_->program_id(0),
                          b_->binary(OpKind::Mul, b_->program_id(1), b_->num_programs(0)));
  add(pid);
  add(b_->program_id(1));
  Value* offs = b_->splat(b_->binary(OpKind::Mul, pid, b_->constant(ir::scalar_type(DType::i32), ir::ConstValue::of_int(elems_))), shape_);
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    Shape along(rank, 1);
    along[d] = shape_[d];
    Value* a = b_->arange(0, shape_[d]);
    if (rank > 1) a = b_->reshape(a, along);
    if (a->type.shape != shape_) a = b_->broadcast(a, shape_);
    if (stride != 1) a = b_->binary(OpKind::Mul, a, cst(DType::i32, double(stride)));
    offs = b_->binary(OpKind::Add, offs, a);
    stride *= shape_[d];
  }
  offs_ = add(offs);
  in_n_ = add(b_->binary(OpKind::Lt, offs_, b_->splat(n_, shape_)));

  act_load();
  body(static_cast<int>(r_.range(3, o_.max_actions)));
  for (Buf& out : outputs_)
    if (!out.used) act_store(true);
  for (Buf& a : atomics_)
    if (!a.used) act_atomic();
  b_->ret();
  ir::verify(*fn_);
  prog_.kernel = fn_;
  return prog_;
}

void Generator::body(int actions) {
  for (int k = 0; k < actions; ++k) action();
}

void Generator::action() {
  int w = static_cast<int>(r_.range(0, 99));
  if (w < 12) return act_load();
  if (w < 27) return act_binary();
  if (w < 36) return act_unary();
  if (w < 44) return act_select();
  if (w < 51) return act_cast();
  if (w < 59) return act_reduce();
  if (w < 65) return act_shape();
  if (w < 70) return iv_ && mat_ && r_.chance(0.8) ? act_pipe_dot() : act_dot();
  if (w < 75) return act_splat();
  if (w < 81 && depth_ < o_.max_depth) return act_for();
  if (w < 87 && depth_ < o_.max_depth) return act_if();
  if (w < 93) return act_store(false);
  if (w < 95) return act_atomic();
  act_binary();
}

// Addresses for a buffer of `count` elements: a permutation of this program's slice (the
// identity, or rotated by a constant or the loop's induction variable) or a gather through
// an integer tile. Sets `mask` to the lanes that must be guarded (null: all in bounds).
Value* Generator::address(int64_t count, Value*& mask) {
  Value* a = offs_;
  int kind = static_cast<int>(r_.range(0, 5));
  if (kind == 3 || kind == 4) {
    Value* shift = cst(DType::i32, double(r_.range(1, 2 * total_)));
    if (iv_ && kind == 4) // the induction variable may be negative: keep the sum positive
      shift = b_->binary(OpKind::Add, b_->splat(iv_, shape_), cst(DType::i32, double(4 * total_)));
    a = b_->binary(OpKind::Rem, b_->binary(OpKind::Add, a, shift), cst(DType::i32, double(total_)));
  } else if (kind == 5) {
    Value* idx = pick_tile([&](Value* v) { return ir::is_int(v->type.dtype()) && !info(v).inexact; });
    if (idx) {
      idx = convert(idx, DType::i32);
      Value* t = cst(DType::i32, double(total_));
      a = b_->binary(OpKind::Rem, b_->binary(OpKind::Add, b_->binary(OpKind::Rem, idx, t), t), t);
    }
  }
  mask = count < total_ || kind >= 3 ? b_->binary(OpKind::Lt, a, b_->splat(n_, shape_)) : nullptr;
  if (count == total_ && kind >= 3 && r_.chance(0.5)) mask = nullptr;
  if (count < total_ && kind < 3) mask = in_n_;
  return a;
}

Value* Generator::data_mask() {
  Value* a = pick_tile([&](Value* v) { return !info(v).inexact; });
  if (a->type.dtype() == DType::i1) return a;
  Value* c = cst(a->type, ir::is_float(a->type.dtype()) ? r_.uniform(-2, 2) : double(r_.range(-5, 5)));
  return b_->binary(r_.pick(std::vector<OpKind>(std::begin(kCompares), std::end(kCompares))), a, c);
}

void Generator::act_load() {
  Buf& in = inputs_[r_.range(0, static_cast<int64_t>(inputs_.size()) - 1)];
  Value* mask = nullptr;
  Value* a = address(in.count, mask);
  if (r_.chance(0.3)) mask = mask ? b_->binary(OpKind::And, mask, data_mask()) : data_mask();
  Value* ptr = b_->addptr(b_->splat(in.param, shape_), a);
  DType t = in.param->type.dtype();
  Value* other = nullptr;
  if (mask && r_.chance(0.5)) {
    Value* o = pick_tile([&](Value* v) { return !info(v).inexact; });
    other = o ? convert(o, t) : nullptr;
    if (!other) other = cst(t, 1);
  }
  add(b_->load(ptr, mask, other), {false, t == DType::i1});
}

void Generator::act_unary() {
  bool want_float = r_.chance(0.75);
  Value* v = pick_tile([&](Value* v) { return ir::is_float(v->type.dtype()) == want_float && v->type.dtype() != DType::i1; });
  if (!v) v = pick_tile([](Value* v) { return v->type.dtype() != DType::i1; });
  if (!v) return act_load();
  Info i = info(v);
  if (ir::is_int(v->type.dtype())) {
    add(b_->unary(r_.chance(0.5) ? OpKind::Abs : OpKind::Neg, v));
    return;
  }
  std::vector<OpKind> kinds{OpKind::Tanh, OpKind::Sqrt, OpKind::Abs, OpKind::Neg, OpKind::Sigmoid};
  if (!i.zsign) kinds.push_back(OpKind::Rsqrt); // rsqrt(-0) is -inf
  // Exact inputs only: log's error grows near 1, and a few ulps move floor/ceil/round across an integer.
  // sin and erf too: near a zero of sin, an input a few ulps off is far off in ulps.
  if (!i.inexact)
    kinds.insert(kinds.end(), {OpKind::Exp, OpKind::Exp2, OpKind::Log, OpKind::Log2, OpKind::Floor, OpKind::Ceil,
                               OpKind::Round, OpKind::Sin, OpKind::Cos, OpKind::Erf});
  OpKind k = r_.pick(kinds);
  Info out = i;
  switch (k) {
  case OpKind::Exp:
  case OpKind::Exp2: out = {true, true, false}; break;
  case OpKind::Log:
  case OpKind::Log2: out = {true, false, false}; break;
  case OpKind::Sigmoid: out = {true, true, false}; break; // in (0, 1)
  case OpKind::Sin: out = {true, false, i.zsign}; break;  // sin(-0) is -0
  case OpKind::Cos: out = {true, false, false}; break;    // never exactly 0 for a float
  case OpKind::Erf: out = {true, i.nonneg, i.zsign}; break;
  case OpKind::Floor:
  case OpKind::Ceil:
  case OpKind::Round: break; // exact; the sign of x (and of a zero) is kept
  case OpKind::Tanh: out.inexact = true; break; // approximate on the GPU (ir/SEMANTICS.md)
  case OpKind::Rsqrt: out = {true, true, false}; break;
  case OpKind::Sqrt:
  case OpKind::Abs: out.nonneg = true; break;
  case OpKind::Neg: out.nonneg = false; break;
  default: break;
  }
  add(unary(k, v, out));
}

void Generator::act_binary() {
  Value* a = pick_tile([](Value*) { return true; });
  DType t = a->type.dtype();
  Info ia = info(a);
  Value* b = nullptr;
  if (r_.chance(0.25)) {
    b = t == DType::i1 ? cst(t, double(r_.range(0, 1)))
        : ir::is_float(t) ? cst(t, r_.pick(std::vector<double>{0.5, 2, -1.5, 3, 0.0, -0.0}))
                          : cst(t, double(r_.range(-9, 9)));
    note(b, {false, ir::is_float(t) && b->def->attrs.value.f >= 0 && !std::signbit(b->def->attrs.value.f), false});
  } else {
    Value* c = pick_tile([&](Value* v) { return ir::is_float(t) || !info(v).inexact; });
    b = c ? convert(c, t) : nullptr;
    if (!b) b = a;
  }
  Info ib = info(b);
  if (ir::is_float(t) && !ia.inexact && !ib.inexact && r_.chance(0.12)) {
    // fma of exact values (rounded once, the same everywhere), or pow (a libm call, inexact).
    Value* c = pick_tile([&](Value* v) { return !info(v).inexact; });
    if (c && (c = convert(c, t)) && r_.chance(0.5)) {
      Info ic = info(c);
      add(b_->fma(a, b, c), {false, false, ia.zsign || ib.zsign || ic.zsign});
    } else {
      add(b_->binary(OpKind::Pow, a, b), {true, ia.nonneg, ia.zsign});
    }
    return;
  }
  std::vector<OpKind> kinds;
  if (t == DType::i1) kinds = {OpKind::And, OpKind::Or, OpKind::Xor};
  else if (ir::is_int(t))
    kinds = {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Rem, OpKind::Min, OpKind::Max,
             OpKind::And, OpKind::Or,  OpKind::Xor, OpKind::Shl, OpKind::AShr, OpKind::LShr, OpKind::UMulHi};
  else if (ia.inexact || ib.inexact) {
    kinds = {OpKind::Mul, OpKind::Min, OpKind::Max};
    if (!ib.zsign) kinds.push_back(OpKind::Div);
    if (ia.nonneg && ib.nonneg) kinds.push_back(OpKind::Add);
  } else {
    kinds = {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Rem, OpKind::Min, OpKind::Max};
    if (!ib.zsign) kinds.push_back(OpKind::Div); // x / -0 is -inf
  }
  OpKind k = r_.pick(kinds);
  if (ir::is_int(t) && (k == OpKind::Div || k == OpKind::Rem)) // a zero divisor is undefined
    b = b_->select(b_->binary(OpKind::Eq, b, cst(t, 0)), nonzero_const(t), b);
  bool fl = ir::is_float(t);
  Info out{ia.inexact || ib.inexact, false, fl && (ia.zsign || ib.zsign || k == OpKind::Min || k == OpKind::Max)};
  switch (k) {
  case OpKind::Add:
  case OpKind::Div:
  case OpKind::Min: out.nonneg = ia.nonneg && ib.nonneg; break;
  case OpKind::Mul: out.nonneg = (ia.nonneg && ib.nonneg) || a == b; break;
  case OpKind::Max: out.nonneg = ia.nonneg || ib.nonneg; break;
  case OpKind::Rem: out.nonneg = ia.nonneg; break;
  default: break;
  }
  add(b_->binary(k, a, b), out);
}

void Generator::act_select() {
  Value* cond = data_mask();
  add(cond, {false, true});
  Value* x = pick_tile([](Value*) { return true; });
  Value* y = pick_tile([&](Value* v) { return v != x; });
  if (!y || !(y = convert(y, x->type.dtype()))) y = cst(x->type, 0);
  Info ix = info(x), iy = info(y);
  add(b_->select(cond, x, y), {ix.inexact || iy.inexact, ix.nonneg && iy.nonneg, ix.zsign || iy.zsign});
}

void Generator::act_cast() {
  if (r_.chance(0.2)) { // the bits of an integer as a float (or the other-signed integer) of its width
    Value* v = pick_tile([](Value* v) { return ir::is_int(v->type.dtype()) && v->type.dtype() != DType::i1; });
    if (v) {
      const DType t = v->type.dtype();
      std::vector<DType> to;
      for (DType d : ir::kAllDTypes)
        if (d != t && d != DType::i1 && ir::dtype_bits(d) == ir::dtype_bits(t)) to.push_back(d);
      // Floats made of arbitrary bits are never read back as bits: a NaN's payload is not
      // specified once arithmetic touches it, so only integer-to-integer goes both ways.
      const DType d = r_.pick(to);
      const Info i = info(v);
      add(b_->bitcast(v, d), {i.inexact && ir::is_int(d), ir::is_unsigned(d), ir::is_float(d)});
      return;
    }
  }
  Value* v = pick_tile([](Value*) { return true; });
  if (Value* c = convert(v, any_dtype()); c && c != v) add(c, info(c));
}

void Generator::act_reduce() {
  Value* v = pick_tile([](Value* v) { return v->type.dtype() != DType::i1; });
  if (!v) return act_load();
  DType t = v->type.dtype();
  Info i = info(v);
  auto kind = r_.pick(std::vector<ir::ReduceKind>{ir::ReduceKind::sum, ir::ReduceKind::max, ir::ReduceKind::min});
  if (ir::is_float(t) && kind == ir::ReduceKind::sum && !i.nonneg) { // float sums of mixed signs may cancel
    v = unary(OpKind::Abs, v, {i.inexact, true, i.zsign});
    i.nonneg = true;
  }
  int axis = static_cast<int>(r_.range(0, static_cast<int64_t>(shape_.size()) - 1));
  bool fl = ir::is_float(t);
  Info out{i.inexact || (fl && kind == ir::ReduceKind::sum), i.nonneg, fl && (i.zsign || kind != ir::ReduceKind::sum)};
  if (r_.chance(0.25)) { // the same through a user's combine function
    bool scan = r_.chance(0.3);
    Value* red = combine_along(scan, v, axis, i.nonneg);
    out = {fl || i.inexact, fl && i.nonneg, fl};
    if (scan || red->type.is_scalar()) {
      add(red, out);
      if (!scan) add(b_->splat(red, shape_), out);
      return;
    }
    Value* e = b_->expand_dims(red, axis);
    add(e->type.shape == shape_ ? note(e, out) : b_->broadcast(e, shape_), out);
    return;
  }
  if (r_.chance(0.3)) { // an inclusive scan instead (integer products too: they wrap, exactly)
    if (!fl && r_.chance(0.3)) kind = ir::ReduceKind::prod, out.nonneg = false;
    add(b_->scan(kind, v, axis), out);
    return;
  }
  Value* red = b_->reduce(kind, v, axis);
  note(red, out);
  if (red->type.is_scalar()) {
    add(red, out);
    add(b_->splat(red, shape_), out);
    return;
  }
  Value* e = b_->expand_dims(red, axis);
  add(e->type.shape == shape_ ? note(e, out) : b_->broadcast(e, shape_), out);
}

// A reduce or scan of `v` with a combine function drawn from a few that are associative and
// commutative on every input (floats: max, whose NaN and zero rules are the ops'; the sum of
// non-negative values), plus, for scans, one that is associative but not commutative (the
// last nonzero element so far). Its values stay inside the region, out of the pool.
Value* Generator::combine_along(bool scan, Value* v, int axis, bool nonneg) {
  const DType t = v->type.dtype();
  ir::Op* op = b_->combine_op(scan ? OpKind::Scan : OpKind::Reduce, v, axis);
  ir::Block* outer = b_->block();
  b_->set_block(&op->region(0));
  Value *a = op->region(0).args[0], *b = op->region(0).args[1], *y = nullptr;
  const Type st = ir::scalar_type(t);
  if (ir::is_float(t)) {
    y = nonneg && r_.chance(0.5) ? b_->binary(OpKind::Add, a, b) : b_->binary(OpKind::Max, a, b);
  } else {
    switch (r_.range(0, scan ? 6 : 5)) {
    case 0: y = b_->binary(OpKind::Add, b_->binary(OpKind::Add, a, b), cst(st, 1)); break;
    case 1: y = b_->binary(OpKind::Xor, a, b); break;
    case 2: y = b_->binary(OpKind::Or, a, b); break;
    case 3: y = b_->binary(OpKind::Mul, a, b); break;
    case 4: y = b_->select(b_->binary(OpKind::Gt, a, b), a, b); break;
    case 5: y = b_->select(b_->binary(OpKind::Lt, a, b), a, b); break;
    default: y = b_->select(b_->binary(OpKind::Ne, b, cst(st, 0)), b, a); break;
    }
  }
  b_->yield({y});
  b_->set_block(outer);
  b_->check(*op);
  return op->result();
}

// Moves elements around and back to the main shape: transposes, permutations, reshapes.
void Generator::act_shape() {
  Value* v = pick_tile([](Value*) { return true; });
  Info i = info(v);
  int rank = static_cast<int>(shape_.size());
  Value* r = nullptr;
  if (rank == 1) {
    int64_t a = int64_t(1) << r_.range(0, std::countr_zero(static_cast<uint64_t>(elems_)));
    Value* m = b_->reshape(v, {a, elems_ / a});
    r = b_->reshape(b_->permute(m, {1, 0}), shape_);
  } else {
    std::vector<int64_t> perm(rank);
    for (int k = 0; k < rank; ++k) perm[k] = k;
    for (int k = rank - 1; k > 0; --k) std::swap(perm[k], perm[r_.range(0, k)]);
    Value* p = b_->permute(v, perm);
    if (r_.chance(0.5)) {
      std::vector<int64_t> inv(rank);
      for (int k = 0; k < rank; ++k) inv[perm[k]] = k;
      r = b_->permute(p, inv);
    } else {
      r = b_->reshape(p, shape_);
    }
  }
  if (r_.chance(0.3)) {
    int axis = static_cast<int>(r_.range(0, rank));
    r = b_->reshape(b_->expand_dims(r, axis), shape_);
  }
  add(r, i);
}

// dot(a, b^T) and back to the main shape through a second dot, on a 2-d view [P, Q].
void Generator::act_dot() {
  DType fd = float_dtype();
  auto operand = [&]() -> Value* {
    Value* v = pick_tile([](Value*) { return true; });
    Value* c = convert(v, fd);
    if (!c) return nullptr;
    return c;
  };
  Value* a = operand();
  Value* b = operand();
  if (!a || !b) return act_binary();
  Info ia = info(a), ib = info(b);
  if (ia.inexact || ib.inexact) { // inexact products must not cancel in the sums
    if (!ia.nonneg) a = unary(OpKind::Abs, a, ia = {ia.inexact, true, ia.zsign});
    if (!ib.nonneg) b = unary(OpKind::Abs, b, ib = {ib.inexact, true, ib.zsign});
  }
  int64_t p = shape_.size() >= 2 ? elems_ / shape_.back() : int64_t(1) << (std::countr_zero(uint64_t(elems_)) / 2);
  int64_t q = elems_ / p;
  Shape s2{p, q};
  a = b_->reshape(a, s2);
  b = b_->reshape(b, s2);
  bool inexact = ia.inexact || ib.inexact;
  bool nonneg = ia.nonneg && ib.nonneg;
  auto acc = [&](Shape s) {
    std::vector<double> vs = inexact ? std::vector<double>{0.0, 1.0, 0.25} : std::vector<double>{0.0, -1.0, 0.5};
    return cst(ir::tile_type(DType::f32, s), r_.pick(vs));
  };
  Value* af = convert(note(a, ia), DType::f32);
  Value* d;
  if (p <= q) {
    Value* d1 = b_->dot(a, b_->permute(b, {1, 0}), acc({p, p}));         // [P, P]
    d = b_->dot(d1, convert(note(b, ib), DType::f32), acc({p, q}));        // [P, Q]
  } else {
    Value* d1 = b_->dot(b_->permute(a, {1, 0}), b, acc({q, q}));         // [Q, Q]
    d = b_->dot(af, d1, acc({p, q}));                                      // [P, Q]
  }
  add(b_->reshape(d, shape_), {inexact, nonneg, ia.zsign || ib.zsign});
}

// Inside a loop: dot(A, B) with A [M, K] and B [K, N] (or B^T loaded as [N, K]) loaded
// straight from `mat`, at rows and columns the induction variable picks, and reshaped to the
// main shape (M N = its element count): the 16-byte loads that a loop with stages copies
// ahead (cp.async), including their addresses. Exact, as every dot is between backends.
void Generator::act_pipe_dot() {
  // A warpgroup MMA's tile at 4 warps (sm_90's wgmma in the emulator): 64 rows and N of 16 to
  // 64 (32 to 128-byte rows of an N-major B), its [64, N] result folded to the main shape by a
  // max over groups of elements (exact in any order).
  const bool wide = prog_.num_warps == 4 && r_.chance(0.3);
  const int64_t M = wide ? 64 : std::min<int64_t>(elems_, r_.pick(std::vector<int64_t>{1, 2, 4, 8, 16}));
  const int64_t N = wide ? r_.pick(std::vector<int64_t>{16, 32, 64}) : elems_ / M;
  const int64_t K = r_.pick(std::vector<int64_t>{16, 32, 64, 64});
  if (N > kMat) return act_dot();
  Type it = ir::scalar_type(DType::i32);
  auto k32 = [&](int64_t v) { return b_->constant(it, ir::ConstValue::of_int(v)); };
  auto col = [&](Value* v) { return b_->expand_dims(v, 1); };
  auto row = [&](Value* v) { return b_->expand_dims(v, 0); };
  // blk in [0, 4) from the induction variable (which may be negative).
  Value* four = k32(4);
  Value* blk = b_->binary(OpKind::Rem, b_->binary(OpKind::Add, b_->binary(OpKind::Rem, iv_, four), four), four);
  Value* r0 = b_->binary(OpKind::Mul, blk, k32((kMat - M) / 4 / 8 * 8));     // A's first row
  Value* c0 = b_->binary(OpKind::Mul, blk, k32((kMat - N) / 4 / 8 * 8));     // B's first column
  auto at = [&](Value* rows, Value* cols) { // mat + rows (col) * kMat + cols (row), broadcast to 2-d
    Value* r = b_->binary(OpKind::Mul, col(rows), b_->splat(k32(kMat), {rows->type.shape[0], 1}));
    Shape s{rows->type.shape[0], cols->type.shape[0]};
    Value* off = b_->binary(OpKind::Add, b_->broadcast(r, s), b_->broadcast(row(cols), s));
    return b_->addptr(b_->splat(mat_, s), off);
  };
  auto range_from = [&](Value* start, int64_t n) {
    return b_->binary(OpKind::Add, b_->splat(start, {n}), b_->arange(0, n));
  };
  // Or through a tensor descriptor of the matrix (TMA copies on sm_90 when the dot runs on
  // wgmma), its rows sometimes cut short so the blocks read zeros past them.
  const bool desc = r_.chance(0.5);
  Value* rows = k32(r_.chance(0.5) ? kMat : kMat - 5);
  auto block = [&](Value* o0, Value* o1, Shape s) {
    ir::Type t = ir::tile_type(mat_->type.dtype(), std::move(s));
    return b_->create(OpKind::DescLoad, {mat_, rows, k32(kMat), k32(kMat), k32(1), o0, o1}, {t})->result();
  };
  Value* a = desc ? block(r0, k32(0), {M, K}) : b_->load(at(range_from(r0, M), b_->arange(0, K)), nullptr, nullptr); // [M, K]
  Value* b;
  if (r_.chance(0.5))
    b = desc ? block(k32(0), c0, {K, N}) : b_->load(at(b_->arange(0, K), range_from(c0, N)), nullptr, nullptr); // [K, N]
  else
    b = b_->permute(desc ? block(c0, k32(0), {N, K}) : b_->load(at(range_from(c0, N), b_->arange(0, K)), nullptr, nullptr),
                    {1, 0});
  Value* acc = cst(ir::tile_type(DType::f32, {M, N}), r_.pick(std::vector<double>{0.0, -1.0, 0.5}));
  Value* d = b_->dot(a, b, acc);
  if (M * N != elems_) // elems_ (at most max_elems) divides M N: the max of each group of M N / elems_
    d = b_->reduce(ir::ReduceKind::max, b_->reshape(d, {elems_, M * N / elems_}), 1);
  add(b_->reshape(d, shape_), {false, false, true});
}

void Generator::act_splat() {
  std::vector<Value*> c;
  for (const auto& s : scalars_) c.insert(c.end(), s.begin(), s.end());
  Value* s = r_.pick(c);
  Info i = info(s);
  if (r_.chance(0.4)) {
    DType t = any_dtype();
    if (t != s->type.dtype() && !(i.inexact && ir::is_int(t)) &&
        !(ir::is_float(s->type.dtype()) && ir::is_int(t))) { // scalar float->int: skip the clamp
      s = b_->cast(s, t);
      i.nonneg = i.nonneg && ir::is_float(t);
    }
  }
  add(b_->splat(s, shape_), i);
}

void Generator::act_for() {
  bool wide = r_.chance(0.25);
  DType it = wide ? DType::i64 : DType::i32;
  auto scalar = [&](int64_t v) { return b_->constant(ir::scalar_type(it), ir::ConstValue::of_int(v)); };
  int64_t lb = r_.range(-2, 2), step = r_.range(1, 3);
  Value* ub = scalar(lb + step * r_.range(0, 3) - r_.range(0, 1));
  if (r_.chance(0.3)) { // trip counts that differ between programs
    Value* s = pick_scalar_int();
    if (s->type.dtype() != DType::i1) {
      Value* m = b_->binary(OpKind::Rem, s, b_->constant(s->type, ir::ConstValue::of_int(4)));
      ub = b_->binary(OpKind::Add, b_->cast(m, it), scalar(lb));
    }
  }
  std::vector<Value*> inits;
  int carried = static_cast<int>(r_.range(0, 2));
  for (int k = 0; k < carried; ++k) inits.push_back(pick_tile([](Value*) { return true; }));
  ir::Op* op = b_->for_op(scalar(lb), ub, scalar(step), inits);
  // Stages pipeline the loop's tensor-core operand loads (when any qualify); the interpreter
  // ignores them, so any count must give the same results.
  op->attrs.num_stages = r_.pick(std::vector<int64_t>{1, 1, 2, 3});
  ir::Block& blk = op->region(0);
  ir::Block* outer = b_->block();
  Value* outer_iv = iv_;
  b_->set_block(&blk);
  tiles_.emplace_back();
  scalars_.emplace_back();
  ++depth_;
  iv_ = add(wide ? b_->cast(blk.args[0], DType::i32) : blk.args[0]);
  for (size_t k = 0; k < inits.size(); ++k) add(blk.args[k + 1], info(inits[k]));
  body(static_cast<int>(r_.range(1, 5)));
  std::vector<Value*> yields;
  for (size_t k = 0; k < inits.size(); ++k) {
    Value* arg = blk.args[k + 1];
    Info ia = info(arg);
    // The body was built assuming what the carried value's info says: keep it true.
    auto fits = [&](Value* v) {
      Info i = info(v);
      return v->type == arg->type && (!i.inexact || ia.inexact) && (!ia.nonneg || i.nonneg) &&
             (!i.zsign || ia.zsign);
    };
    Value* y = r_.chance(0.8) ? pick_tile(fits) : nullptr;
    yields.push_back(y ? y : arg);
  }
  b_->yield(yields);
  b_->check(*op);
  --depth_;
  tiles_.pop_back();
  scalars_.pop_back();
  iv_ = outer_iv;
  b_->set_block(outer);
  for (size_t k = 0; k < inits.size(); ++k) add(op->results[k], info(inits[k]));
}

Value* Generator::scalar_condition() {
  std::vector<Value*> c;
  for (const auto& s : scalars_)
    for (Value* v : s)
      if (v->type.dtype() == DType::i1 && !info(v).inexact) c.push_back(v);
  if (!c.empty() && r_.chance(0.3)) return r_.pick(c);
  Value* s = pick_scalar_int();
  if (s->type.dtype() == DType::i1) return s;
  Value* k = b_->constant(s->type, ir::ConstValue::of_int(r_.range(-1, 8)));
  return b_->binary(r_.pick(std::vector<OpKind>(std::begin(kCompares), std::end(kCompares))), s, k);
}

void Generator::act_if() {
  Value* cond = scalar_condition();
  std::vector<Value*> like;
  int results = static_cast<int>(r_.range(0, 2));
  for (int k = 0; k < results; ++k) like.push_back(pick_tile([](Value*) { return true; }));
  std::vector<Type> types;
  for (Value* v : like) types.push_back(v->type);
  ir::Op* op = b_->if_op(cond, types);
  ir::Block* outer = b_->block();
  std::vector<Info> out(like.size(), Info{false, true});
  ++depth_;
  for (int region = 0; region < 2; ++region) {
    b_->set_block(&op->region(region));
    tiles_.emplace_back();
    scalars_.emplace_back();
    body(static_cast<int>(r_.range(0, 4)));
    std::vector<Value*> yields;
    for (size_t k = 0; k < like.size(); ++k) {
      Value* y = pick_tile([&](Value* v) { return v->type == like[k]->type; });
      Info i = info(y);
      out[k].inexact = out[k].inexact || i.inexact;
      out[k].nonneg = out[k].nonneg && i.nonneg;
      out[k].zsign = out[k].zsign || i.zsign;
      yields.push_back(y);
    }
    b_->yield(yields);
    tiles_.pop_back();
    scalars_.pop_back();
  }
  --depth_;
  b_->set_block(outer);
  b_->check(*op);
  for (size_t k = 0; k < like.size(); ++k) add(op->results[k], out[k]);
}

// Stores a tile to an output nothing has stored to yet: each output is written by one
// store per program, so no two lanes (or stores) race for an address.
void Generator::act_store(bool forced) {
  std::vector<Buf*> free;
  for (Buf& b : outputs_)
    if (!b.used) free.push_back(&b);
  if (free.empty()) return forced ? void() : act_binary();
  Buf& out = *free.front();
  DType t = out.param->type.dtype();
  Value* v = nullptr;
  for (int tries = 0; tries < 4 && !v; ++tries) v = convert(pick_tile([](Value*) { return true; }), t);
  if (!v) v = convert(offs_, t);
  Value* mask = nullptr;
  Value* a = offs_;
  int64_t last = shape_.back();
  if (shape_.size() == 2 && r_.chance(0.3)) { // transposed: a different permutation of the slice
    a = b_->permute(b_->reshape(a, {shape_[1], shape_[0]}), {1, 0});
  } else if (last > 1 && t != DType::i1 && r_.chance(0.25)) {
    // Every lane of a row stores the row's maximum to the row's first element: lanes share
    // addresses, with equal values, so whichever wins the result is one.
    int axis = static_cast<int>(shape_.size()) - 1;
    Value* row = b_->reduce(ir::ReduceKind::max, v, axis);
    Info iv = info(v);
    note(row, {iv.inexact, iv.nonneg, iv.zsign || ir::is_float(t)});
    v = b_->broadcast(b_->expand_dims(row, axis), shape_);
    a = b_->binary(OpKind::Sub, a, b_->binary(OpKind::Rem, a, cst(DType::i32, double(last))));
  }
  if (out.count < total_) mask = b_->binary(OpKind::Lt, a, b_->splat(n_, shape_));
  else if (r_.chance(0.3)) mask = data_mask();
  b_->store(b_->addptr(b_->splat(out.param, shape_), a), v, mask);
  out.used = true;
}

void Generator::act_atomic() {
  std::vector<Buf*> free;
  for (Buf& b : atomics_)
    if (!b.used) free.push_back(&b);
  if (free.empty()) return act_binary();
  Buf& acc = *free.front();
  DType t = acc.param->type.dtype();
  Value* v = nullptr;
  for (int tries = 0; tries < 4 && !v; ++tries) v = convert(pick_tile([](Value*) { return true; }), t);
  if (!v) v = convert(offs_, t);
  Value* mask = acc.count < total_ ? in_n_ : r_.chance(0.3) ? data_mask() : nullptr;
  // Any atomic the dtype takes; each lane owns its element, so the result is one order's.
  const OpKind kind =
      ir::is_float(t) ? r_.pick(std::vector<OpKind>{OpKind::AtomicAdd, OpKind::AtomicMax, OpKind::AtomicMin,
                                                    OpKind::AtomicXchg, OpKind::AtomicCas})
                      : r_.pick(std::vector<OpKind>{OpKind::AtomicAdd, OpKind::AtomicMax, OpKind::AtomicMin,
                                                    OpKind::AtomicAnd, OpKind::AtomicOr, OpKind::AtomicXor,
                                                    OpKind::AtomicXchg, OpKind::AtomicCas});
  Value* ptr = b_->addptr(b_->splat(acc.param, shape_), offs_);
  Value* old = nullptr;
  if (kind == OpKind::AtomicCas) {
    // Compare with what the buffer holds about half the time, so both outcomes happen.
    Value* cmp = r_.chance(0.5) ? b_->load(ptr, mask) : v;
    old = b_->atomic_cas(ptr, cmp, v, mask);
  } else {
    old = b_->atomic_rmw(kind, ptr, v, mask);
  }
  add(old, {info(v).inexact, false, info(v).zsign});
  acc.used = true;
}

} // namespace

Program generate(uint64_t seed, const GenOptions& opts) { return Generator(seed, opts).run(); }

} // namespace tilec::fuzz
