// Elementwise ops: the operators (pointer arithmetic among them), max/min/where, math functions,
// integer-only ops, device_assert/device_print, Philox random numbers, bitcast and cdiv.
#include <fmt/format.h>

#include <array>
#include <cmath>

#include "dsl/internal.h"

namespace tilec::dsl {

using namespace detail;

namespace {
// pointer ± integer: pointer arithmetic in elements.
Tile pointer_offset(const Operand& p, const Operand& off, bool negate) {
  const Loc& loc = p.loc;
  ir::Value* offset;
  Shape shape = p.v->type.shape;
  if (off.is_literal) {
    if (off.lit.is_float) fail(loc, fmt::format("pointer offset {} is not an integer", off.lit.f));
    offset = at(loc).constant(ir::scalar_type(DType::i32), off.lit);
  } else {
    if (!off.v || off.v->type.is_ptr() || ir::is_float(off.v->type.dtype()) ||
        off.v->type.dtype() == DType::i1)
      fail(loc, fmt::format("pointer offset must be an integer tile, got {}",
                            off.v ? off.v->type.str() : "nothing"));
    offset = off.v;
    shape = broadcast_shape(shape, offset->type.shape, loc, "pointer offset");
  }
  if (negate) offset = at(loc).unary(ir::OpKind::Neg, offset);
  return at(loc).addptr(broadcast_value(p.v, shape, loc), broadcast_value(offset, shape, loc));
}
bool is_ptr(const Operand& o) { return !o.is_literal && o.v && o.v->type.is_ptr(); }
} // namespace

Tile operator+(Operand a, Operand b) {
  if (is_ptr(a)) return pointer_offset(a, b, false);
  if (is_ptr(b)) {
    b.loc = a.loc;
    return pointer_offset(b, a, false);
  }
  return binary(ir::OpKind::Add, a, b);
}
Tile operator-(Operand a, Operand b) {
  if (is_ptr(a)) return pointer_offset(a, b, true);
  return binary(ir::OpKind::Sub, a, b);
}
Tile operator*(Operand a, Operand b) { return binary(ir::OpKind::Mul, a, b); }
Tile operator/(Operand a, Operand b) { return binary(ir::OpKind::Div, a, b); }
Tile operator%(Operand a, Operand b) { return binary(ir::OpKind::Rem, a, b); }
Tile operator&(Operand a, Operand b) { return binary(ir::OpKind::And, a, b); }
Tile operator|(Operand a, Operand b) { return binary(ir::OpKind::Or, a, b); }
Tile operator^(Operand a, Operand b) { return binary(ir::OpKind::Xor, a, b); }
Tile operator==(Operand a, Operand b) { return binary(ir::OpKind::Eq, a, b); }
Tile operator!=(Operand a, Operand b) { return binary(ir::OpKind::Ne, a, b); }
Tile operator<(Operand a, Operand b) { return binary(ir::OpKind::Lt, a, b); }
Tile operator<=(Operand a, Operand b) { return binary(ir::OpKind::Le, a, b); }
Tile operator>(Operand a, Operand b) { return binary(ir::OpKind::Gt, a, b); }
Tile operator>=(Operand a, Operand b) { return binary(ir::OpKind::Ge, a, b); }
Tile operator-(Operand a) {
  if (a.is_literal) fail(a.loc, "negating a literal needs no DSL call");
  return at(a.loc).unary(ir::OpKind::Neg, a.v);
}
Tile operator!(Operand a) {
  if (a.is_literal || !a.v || a.v->type.is_ptr() || a.v->type.dtype() != DType::i1)
    fail(a.loc, "operator!: needs an i1 tile");
  return binary(ir::OpKind::Xor, a, Operand(1, a.loc));
}
Tile max(Operand a, Operand b, Loc loc) {
  a.loc = loc;
  return binary(ir::OpKind::Max, a, b);
}
Tile min(Operand a, Operand b, Loc loc) {
  a.loc = loc;
  return binary(ir::OpKind::Min, a, b);
}
Tile where(Operand cond, Operand a, Operand b, Loc loc) {
  a.loc = loc;
  if (a.is_literal && b.is_literal) { // two numbers: the condition's shape, f32 or i32
    if (cond.is_literal || !cond.v) fail(loc, "where: needs at least one tile operand");
    Shape s = cond.v->type.shape;
    ElemType e = a.lit.is_float || b.lit.is_float ? f32 : i32;
    return at(loc).select(as_mask(cond, s, loc, "where"), literal(a, e, s), literal(b, e, s));
  }
  auto v = unify({a, b}, "where");
  Shape s = v[0]->type.shape;
  if (!cond.is_literal && cond.v) s = broadcast_shape(s, cond.v->type.shape, loc, "where");
  ir::Value* c = as_mask(cond, s, loc, "where");
  return at(loc).select(c, broadcast_value(v[0], s, loc), broadcast_value(v[1], s, loc));
}
Tile exp(const Tile& a, Loc loc) { return unary(ir::OpKind::Exp, a, loc); }
Tile exp2(const Tile& a, Loc loc) { return unary(ir::OpKind::Exp2, a, loc); }
Tile log(const Tile& a, Loc loc) { return unary(ir::OpKind::Log, a, loc); }
Tile tanh(const Tile& a, Loc loc) { return unary(ir::OpKind::Tanh, a, loc); }
Tile sqrt(const Tile& a, Loc loc) { return unary(ir::OpKind::Sqrt, a, loc); }
Tile rsqrt(const Tile& a, Loc loc) { return unary(ir::OpKind::Rsqrt, a, loc); }
Tile abs(const Tile& a, Loc loc) { return unary(ir::OpKind::Abs, a, loc); }
Tile log2(const Tile& a, Loc loc) { return unary(ir::OpKind::Log2, a, loc); }
Tile sigmoid(const Tile& a, Loc loc) { return unary(ir::OpKind::Sigmoid, a, loc); }
Tile floor(const Tile& a, Loc loc) { return unary(ir::OpKind::Floor, a, loc); }
Tile ceil(const Tile& a, Loc loc) { return unary(ir::OpKind::Ceil, a, loc); }
Tile round(const Tile& a, Loc loc) { return unary(ir::OpKind::Round, a, loc); }
Tile sin(const Tile& a, Loc loc) { return unary(ir::OpKind::Sin, a, loc); }
Tile cos(const Tile& a, Loc loc) { return unary(ir::OpKind::Cos, a, loc); }
Tile erf(const Tile& a, Loc loc) { return unary(ir::OpKind::Erf, a, loc); }

Tile pow(Operand a, Operand b, Loc loc) {
  a.loc = loc;
  auto v = unify({a, b}, "pow");
  if (!ir::is_float(v[0]->type.dtype())) v = {cast_to(v[0], DType::f32, loc), cast_to(v[1], DType::f32, loc)};
  return at(loc).binary(ir::OpKind::Pow, v[0], v[1]);
}
Tile fma(Operand a, Operand b, Operand c, Loc loc) {
  a.loc = loc;
  auto v = unify({a, b, c}, "fma");
  if (!ir::is_float(v[0]->type.dtype()))
    for (auto& x : v) x = cast_to(x, DType::f32, loc);
  return at(loc).fma(v[0], v[1], v[2]);
}
Tile clamp(Operand x, Operand lo, Operand hi, Loc loc) { return min(max(x, lo, loc), hi, loc); }
Tile isnan(const Tile& a, Loc loc) {
  ir::Value* v = need(a, loc, "isnan");
  if (!ir::is_float(v->type.dtype())) return full(v->type.shape, 0, i1, loc);
  return a != a;
}
Tile isinf(const Tile& a, Loc loc) {
  ir::Value* v = need(a, loc, "isinf");
  if (!ir::is_float(v->type.dtype())) return full(v->type.shape, 0, i1, loc);
  return abs(a, loc) == Operand(INFINITY, loc);
}

namespace {
// Integer-only binary ops: both operands brought to one integer dtype (not i1).
Tile int_binary(ir::OpKind k, Operand a, const Operand& b, const Loc& loc, const char* what) {
  a.loc = loc;
  auto v = unify({a, b}, what);
  DType t = v[0]->type.dtype();
  if (ir::is_float(t) || t == DType::i1)
    fail(loc, fmt::format("{}: needs integer operands (i8..i64, u8..u64), got {}", what, v[0]->type.str()));
  if (k == ir::OpKind::AShr && ir::is_unsigned(t)) k = ir::OpKind::LShr; // >> of unsigned shifts in zeros
  return at(loc).binary(k, v[0], v[1]);
}
} // namespace

Tile operator<<(Operand a, Operand b) { return int_binary(ir::OpKind::Shl, a, b, a.loc, "<<"); }
Tile operator>>(Operand a, Operand b) { return int_binary(ir::OpKind::AShr, a, b, a.loc, ">>"); }
Tile lshr(Operand a, Operand b, Loc loc) { return int_binary(ir::OpKind::LShr, a, b, loc, "lshr"); }
Tile umulhi(Operand a, Operand b, Loc loc) { return int_binary(ir::OpKind::UMulHi, a, b, loc, "umulhi"); }
void device_assert(Operand cond, std::string message, Loc loc) {
  if (cond.is_literal || !cond.v || cond.v->type.is_ptr() || cond.v->type.dtype() != DType::i1)
    fail(loc, "device_assert: the condition must be an i1 tile or scalar (a comparison)");
  at(loc).assert_true(cond.v, std::move(message));
}

void device_print(std::string prefix, Operand value, Loc loc) {
  if (value.is_literal || !value.v || value.v->type.is_ptr())
    fail(loc, "device_print: prints a tile or scalar value (not a pointer or a literal)");
  at(loc).print(value.v, std::move(prefix));
}

std::array<Tile, 4> randint4x(Operand seed, const Tile& offsets, Loc loc) {
  ir::Value* off = need(offsets, loc, "randint4x");
  if (off->type.is_ptr() || !ir::is_int(off->type.dtype()) || off->type.dtype() == DType::i1)
    fail(loc, fmt::format("randint4x: offsets must be an integer tile, got {}", off->type.str()));
  Tile c0 = Tile(cast_to(off, DType::i32, loc));
  const Shape& s = off->type.shape;
  // The key from the seed: two 32-bit words.
  Tile k0, k1;
  if (seed.is_literal) {
    if (seed.lit.is_float) fail(loc, "randint4x: the seed must be an integer");
    uint64_t v = static_cast<uint64_t>(seed.lit.i);
    k0 = full({}, int64_t(int32_t(uint32_t(v))), i32, loc);
    k1 = full({}, int64_t(int32_t(uint32_t(v >> 32))), i32, loc);
  } else {
    ir::Value* sv = need(Tile(seed.v), loc, "randint4x");
    if (!sv->type.is_scalar() || sv->type.is_ptr() || !ir::is_int(sv->type.dtype()) || sv->type.dtype() == DType::i1)
      fail(loc, fmt::format("randint4x: the seed must be an integer scalar, got {}", sv->type.str()));
    Tile sd(cast_to(sv, DType::i64, loc));
    k0 = sd.to(i32, loc);
    k1 = lshr(sd, 32, loc).to(i32, loc);
  }
  auto word = [&](uint32_t w) { return Operand(int64_t(int32_t(w)), loc); };
  Tile c1 = full(s, 0, i32, loc), c2 = full(s, 0, i32, loc), c3 = full(s, 0, i32, loc);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 = k0 + word(0x9E3779B9u);
      k1 = k1 + word(0xBB67AE85u);
    }
    Tile hi0 = umulhi(word(0xD2511F53u), c0, loc), lo0 = c0 * word(0xD2511F53u);
    Tile hi1 = umulhi(word(0xCD9E8D57u), c2, loc), lo1 = c2 * word(0xCD9E8D57u);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return {c0, c1, c2, c3};
}
Tile randint(Operand seed, const Tile& offsets, Loc loc) { return randint4x(seed, offsets, loc)[0]; }
namespace {
Tile uniform_from_bits(const Tile& w, const Loc& loc) {
  Tile pos = where(w < Operand(0, loc), Operand(-1, loc) - w, w, loc); // in [0, 2^31)
  // The f32 just below 2^-31 keeps the largest word (which rounds up to 2^31) below 1.
  return pos.to(f32, loc) * Operand(double(std::nextafter(0x1p-31f, 0.0f)), loc);
}
} // namespace
Tile rand(Operand seed, const Tile& offsets, Loc loc) { return uniform_from_bits(randint(seed, offsets, loc), loc); }
Tile randn(Operand seed, const Tile& offsets, Loc loc) {
  auto w = randint4x(seed, offsets, loc);
  Tile u1 = max(uniform_from_bits(w[0], loc), Operand(1e-7, loc), loc), u2 = uniform_from_bits(w[1], loc);
  return sqrt(Operand(-2.0, loc) * log(u1, loc), loc) * cos(Operand(6.283185307179586, loc) * u2, loc);
}

Tile bitcast(const Tile& a, ElemType to, Loc loc) {
  ir::Value* v = need(a, loc, "bitcast");
  if (v->type.is_ptr() || to.is_ptr) fail(loc, "bitcast: pointers have no bitcast");
  if (v->type.dtype() == DType::i1 || to.dtype == DType::i1 || ir::dtype_bits(v->type.dtype()) != ir::dtype_bits(to.dtype))
    fail(loc, fmt::format("bitcast: {} to {}: the widths must be equal (and not i1)", v->type.str(), to.str()));
  if (v->type.dtype() == to.dtype) return a;
  return at(loc).bitcast(v, to.dtype);
}

Tile cdiv(Operand a, Operand b, Loc loc) {
  a.loc = loc;
  auto v = unify({a, b}, "cdiv");
  if (ir::is_float(v[0]->type.dtype())) fail(loc, fmt::format("cdiv: needs integer operands, got {}", v[0]->type.str()));
  Tile x(v[0]), y(v[1]);
  return (x + y - 1) / y;
}

} // namespace tilec::dsl
