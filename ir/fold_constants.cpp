#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>

#include "abi/float16.h"
#include "ir/float_ops.h"
#include "ir/int_ops.h"
#include "ir/op_rules.h"
#include "ir/passes.h"

namespace tilec::ir {

namespace {

// Integers wrap at their width (two's complement); i1 is 0 or 1.
int64_t wrap_int(int64_t v, DType t) {
  if (t == DType::i1) return v & 1;
  int drop = 64 - dtype_bits(t);
  return static_cast<int64_t>(static_cast<uint64_t>(v) << drop) >> drop;
}

int64_t min_int(DType t) {
  return wrap_int(int64_t{1} << (dtype_bits(t) - 1), t);
}

float round_to(float v, DType t) { return round_to_dtype(v, t); }

// A constant's element as every backend sees it: floats rounded to the dtype,
// integers wrapped to the width, whatever the attribute holds.
float read_float(const ConstValue& c, DType t) {
  double v = c.is_float ? c.f : static_cast<double>(c.i);
  return round_to(static_cast<float>(v), t);
}
int64_t read_int(const ConstValue& c, DType t) {
  return wrap_int(c.i, t);
}

// Floats made by folding carry no integer payload; NaN and infinities have
// none to give.
ConstValue float_value(float v) {
  ConstValue c;
  c.is_float = true;
  c.f = v;
  return c;
}
ConstValue int_value(int64_t v, DType t) {
  return ConstValue::of_int(wrap_int(v, t));
}

// int -> float rounds once, to nearest even at the dtype's precision; going
// through f32 first would round twice for bf16 (and for i64 beyond 2^24).
float int_to_float(int64_t v, DType t) {
  int precision = t == DType::f16 ? 11 : t == DType::bf16 ? 8 : t == DType::f8e4m3 ? 4 : t == DType::f8e5m2 ? 3 : 24;
  uint64_t mag = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  int drop = std::max(0, static_cast<int>(std::bit_width(mag)) - precision);
  if (drop > 0) {
    uint64_t rest = mag & ((uint64_t{1} << drop) - 1);
    uint64_t half = uint64_t{1} << (drop - 1);
    mag >>= drop;
    if (rest > half || (rest == half && (mag & 1))) ++mag;
  }
  // mag has at most precision+1 bits, so both steps below are exact (f16
  // overflow to infinity happens in round_to, as it should).
  float r = std::ldexp(static_cast<float>(mag), drop);
  return round_to(v < 0 ? -r : r, t);
}

std::optional<ConstValue> eval_unary(OpKind k, DType t, const ConstValue& a) {
  if (is_float(t)) {
    // sin, cos and erf stay for the backend (the GPU's are libdevice's, not the host's).
    FloatUnary f = k == OpKind::Sin || k == OpKind::Cos || k == OpKind::Erf ? nullptr : float_unary(k);
    if (!f) return std::nullopt;
    float r = f(read_float(a, t));
    return float_value(round_to(r, t));
  }
  uint64_t x = static_cast<uint64_t>(read_int(a, t));
  switch (k) {
  case OpKind::Abs:
    return int_value(static_cast<int64_t>(x) < 0 ? 0 - x : x, t);
  case OpKind::Neg:
    return int_value(static_cast<int64_t>(0 - x), t);
  default:
    return std::nullopt;
  }
}

std::optional<ConstValue> eval_binary(OpKind k, DType t, const ConstValue& a, const ConstValue& b) {
  if (is_float(t)) {
    // Float rem is not pinned down by SEMANTICS.md, and pow is libdevice's on the GPU: both
    // stay for the backend.
    FloatBinary f = k == OpKind::Rem || k == OpKind::Pow ? nullptr : float_binary(k);
    if (!f) return std::nullopt;
    float r = f(read_float(a, t), read_float(b, t));
    return float_value(round_to(r, t));
  }
  int64_t x = read_int(a, t), y = read_int(b, t);
  uint64_t ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
  switch (k) {
  case OpKind::Add:
    return int_value(static_cast<int64_t>(ux + uy), t);
  case OpKind::Sub:
    return int_value(static_cast<int64_t>(ux - uy), t);
  case OpKind::Mul:
    return int_value(static_cast<int64_t>(ux * uy), t);
  case OpKind::Div:
  case OpKind::Rem:
    // By zero it is a run-time error; min / -1 overflows (undefined in LLVM).
    if (y == 0 || (x == min_int(t) && y == -1)) return std::nullopt;
    return int_value(k == OpKind::Div ? x / y : x % y, t);
  case OpKind::Min:
    return int_value(std::min(x, y), t);
  case OpKind::Max:
    return int_value(std::max(x, y), t);
  case OpKind::Shl:
    return int_value(shift_left(x, y, dtype_bits(t)), t);
  case OpKind::AShr:
    return int_value(shift_right_arithmetic(x, y, dtype_bits(t)), t);
  case OpKind::LShr:
    return int_value(shift_right_logical(x, y, dtype_bits(t)), t);
  case OpKind::UMulHi:
    return int_value(umulhi(x, y, dtype_bits(t)), t);
  case OpKind::And:
    return int_value(x & y, t);
  case OpKind::Or:
    return int_value(x | y, t);
  case OpKind::Xor:
    return int_value(x ^ y, t);
  default:
    return std::nullopt;
  }
}

template <class T> std::optional<bool> compare(OpKind k, T x, T y) {
  switch (k) {
  case OpKind::Eq:
    return x == y;
  case OpKind::Ne:
    return x != y; // true when either is NaN
  case OpKind::Lt:
    return x < y;
  case OpKind::Le:
    return x <= y;
  case OpKind::Gt:
    return x > y;
  case OpKind::Ge:
    return x >= y;
  default:
    return std::nullopt;
  }
}

std::optional<ConstValue> eval_compare(OpKind k, DType t, const ConstValue& a,
                                       const ConstValue& b) {
  std::optional<bool> r;
  if (is_float(t)) {
    r = compare(k, read_float(a, t), read_float(b, t));
  } else {
    // Signed order on i1 would make true (-1) less than false; backends may
    // disagree on that, so only equality is folded there.
    if (t == DType::i1 && k != OpKind::Eq && k != OpKind::Ne) return std::nullopt;
    r = compare(k, read_int(a, t), read_int(b, t));
  }
  if (!r) return std::nullopt;
  return ConstValue::of_int(*r ? 1 : 0);
}

std::optional<ConstValue> eval_cast(DType from, DType to, const ConstValue& a) {
  if (is_int(from)) {
    int64_t x = read_int(a, from);
    if (to == DType::i1) return ConstValue::of_int(x != 0 ? 1 : 0);
    if (is_int(to)) return int_value(x, to);
    return float_value(int_to_float(x, to));
  }
  float x = read_float(a, from);
  if (is_float(to)) return float_value(round_to(x, to));
  // float -> int is undefined out of range (and for NaN), and SEMANTICS.md
  // does not say whether float -> i1 truncates or tests != 0: leave them.
  if (to == DType::i1 || std::isnan(x)) return std::nullopt;
  double whole = std::trunc(static_cast<double>(x));
  double limit = std::ldexp(1.0, dtype_bits(to) - 1);
  if (whole < -limit || whole >= limit) return std::nullopt;
  return int_value(static_cast<int64_t>(whole), to);
}

const ConstValue* constant_of(const Value* v) {
  return v && v->def && v->def->kind == OpKind::Constant ? &v->def->attrs.value : nullptr;
}

// What an op folds to: a constant that takes its place, or an existing value
// that replaces its result.
struct Folded {
  std::optional<ConstValue> constant;
  Value* value = nullptr;
};

Folded constant(std::optional<ConstValue> c) {
  return {c, nullptr};
}
Folded existing(Value* v) {
  return {std::nullopt, v};
}

// Identities that hold for every integer x; for floats each one fails for
// some x (x*0 for NaN and infinities, x+0 for -0.0), so floats get none.
Folded fold_int_identity(const Op& op) {
  Value* a = op.operands[0];
  Value* b = op.operands[1];
  DType t = a->type.dtype();
  if (a->type.is_ptr() || is_float(t)) return {};
  if (a == b) {
    switch (op.kind) {
    case OpKind::Sub:
    case OpKind::Xor:
    case OpKind::Ne:
    case OpKind::Lt:
    case OpKind::Gt:
      return constant(ConstValue::of_int(0));
    case OpKind::Eq:
    case OpKind::Le:
    case OpKind::Ge:
      return constant(ConstValue::of_int(1));
    case OpKind::And:
    case OpKind::Or:
    case OpKind::Min:
    case OpKind::Max:
      return existing(a);
    default:
      return {};
    }
  }
  const ConstValue* ca = constant_of(a);
  const ConstValue* cb = constant_of(b);
  if (!ca && !cb) return {};
  const bool commutes = op.kind == OpKind::Add || op.kind == OpKind::Mul ||
                        op.kind == OpKind::And || op.kind == OpKind::Or || op.kind == OpKind::Xor;
  if (!cb && !commutes) return {};
  // x is the operand that is not the (right-hand, when both are) constant.
  Value* x = cb ? a : b;
  int64_t k = read_int(cb ? *cb : *ca, t);
  int64_t all_ones = wrap_int(-1, t);
  switch (op.kind) {
  case OpKind::Add:
  case OpKind::Sub:
  case OpKind::Or:
  case OpKind::Xor:
    if (k == 0) return existing(x);
    if (op.kind == OpKind::Or && k == all_ones) return constant(ConstValue::of_int(all_ones));
    return {};
  case OpKind::Mul:
    if (k == 1) return existing(x);
    if (k == 0) return constant(ConstValue::of_int(0));
    return {};
  case OpKind::Div:
    return k == 1 ? existing(x) : Folded{};
  case OpKind::Rem:
    return k == 1 ? constant(ConstValue::of_int(0)) : Folded{};
  case OpKind::And:
    if (k == all_ones) return existing(x);
    if (k == 0) return constant(ConstValue::of_int(0));
    return {};
  default:
    return {};
  }
}

Folded fold(const Op& op) {
  if (op.results.size() != 1) return {};
  const auto& in = op.operands;
  auto c = [&](size_t i) { return i < in.size() ? constant_of(in[i]) : nullptr; };

  // Unsigned dtypes are left to the backends but for the identities, which hold for them too.
  const bool unsigned_in = !in.empty() && !in[0]->type.is_ptr() && is_unsigned(in[0]->type.dtype());
  if (is_unary(op.kind)) {
    if (c(0) && !unsigned_in) return constant(eval_unary(op.kind, in[0]->type.dtype(), *c(0)));
    return {};
  }
  if (is_binary(op.kind) || is_compare(op.kind)) {
    if (c(0) && c(1) && !unsigned_in) {
      DType t = in[0]->type.dtype();
      return constant(is_binary(op.kind) ? eval_binary(op.kind, t, *c(0), *c(1))
                                         : eval_compare(op.kind, t, *c(0), *c(1)));
    }
    return fold_int_identity(op);
  }
  switch (op.kind) {
  // A constant is one value filling its tile, so moving elements changes nothing.
  case OpKind::Splat:
  case OpKind::Broadcast:
  case OpKind::ExpandDims:
  case OpKind::Reshape:
  case OpKind::Permute:
    if (c(0)) return constant(*c(0));
    return {};
  case OpKind::Cast:
    if (c(0) && !unsigned_in && !is_unsigned(op.result()->type.dtype()))
      return constant(eval_cast(in[0]->type.dtype(), op.result()->type.dtype(), *c(0)));
    return {};
  case OpKind::Select:
    if (in[1] == in[2]) return existing(in[1]);
    if (c(0)) return existing(read_int(*c(0), DType::i1) ? in[1] : in[2]);
    return {};
  default:
    return {};
  }
}

// Turning the op itself into the constant keeps its place (so it still
// dominates its uses), its result value and its source location.
void become_constant(Op& op, const ConstValue& value) {
  op.kind = OpKind::Constant;
  op.operands.clear();
  op.attrs = Attrs{};
  op.attrs.value = value;
  internal_assert(check_op_types(op).empty(), "a folded constant obeys the constant rule");
}

bool fold_block(Function& f, Block& b) {
  bool changed = false;
  for (size_t i = 0; i < b.ops.size();) {
    Op& op = *b.ops[i];
    for (auto& r : op.regions)
      changed |= fold_block(f, *r);
    Folded folded = fold(op);
    if (folded.constant) {
      become_constant(op, *folded.constant);
      changed = true;
    } else if (folded.value) {
      replace_all_uses(f.body, op.result(), folded.value);
      b.ops.erase(b.ops.begin() + static_cast<std::ptrdiff_t>(i));
      changed = true;
      continue;
    }
    ++i;
  }
  return changed;
}

} // namespace

bool fold_constants(Function& f) {
  return fold_block(f, f.body);
}

} // namespace tilec::ir
