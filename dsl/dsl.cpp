#include "dsl/dsl.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "dsl/internal.h"
#include "ir/op_rules.h"
#include "ir/passes.h"
#include "ir/verifier.h"

namespace tilec::dsl {

namespace detail {

// A live tile variable at the start of a loop or if, and its value then.
struct Snapshot {
  Tile* tile;
  uint64_t serial;
  ir::Value* before;
};

namespace {
thread_local Tracker* g_current = nullptr;
}

Tracker& current(const Loc& loc) {
  if (!g_current)
    throw UserError(SourceLoc::from(loc), "DSL call outside a kernel: create a KernelBuilder first");
  return *g_current;
}

} // namespace detail

using namespace detail;

// --- Tile

Tile::Tile() { attach(); }
Tile::Tile(ir::Value* v) : v_(v) { attach(); }
Tile::Tile(const Tile& o) : v_(o.v_) { attach(); }
Tile& Tile::operator=(const Tile& o) {
  v_ = o.v_;
  return *this;
}
Tile::~Tile() { detach(); }

void Tile::attach() {
  tracker_ = detail::g_current;
  if (tracker_) tracker_->link(this);
}
void Tile::detach() {
  if (tracker_) tracker_->unlink(this);
  tracker_ = nullptr;
}

const ir::Type& Tile::type() const {
  if (!v_) throw UserError("a default-constructed Tile has no type");
  return v_->type;
}

Tile Tile::to(ElemType t, Loc loc) const {
  ir::Value* v = need(*this, loc, "to");
  if (t.is_ptr || v->type.is_ptr()) fail(loc, fmt::format("cannot cast {} to {}", v->type.str(), t.str()));
  return cast_to(v, t.dtype, loc);
}
Tile Tile::col(Loc loc) const { return expand_dims(*this, 1, loc); }
Tile Tile::row(Loc loc) const { return expand_dims(*this, 0, loc); }

// --- KernelBuilder

KernelBuilder::KernelBuilder(std::string name, Loc loc) : fn_(std::make_shared<ir::Function>(name)) {
  if (name.empty()) fail(loc, "a kernel needs a name");
  tracker_ = std::make_unique<detail::Tracker>(*fn_, std::move(name));
  tracker_->builder.loc = SourceLoc::from(loc);
  outer_ = nullptr;
  if (detail::g_current) fail(loc, "KernelBuilder: another kernel is being built on this thread");
  detail::g_current = tracker_.get();
}

KernelBuilder::~KernelBuilder() {
  // Tiles that outlive the kernel stop tracking.
  for (Tile* t = tracker_->head; t;) {
    Tile* next = t->next_;
    t->tracker_ = nullptr;
    t->prev_ = t->next_ = nullptr;
    t = next;
  }
  if (detail::g_current == tracker_.get()) detail::g_current = nullptr;
}

Tile KernelBuilder::arg(ElemType type, std::string name, Loc loc) {
  if (!fn_) fail(loc, "arg: the kernel is already finished");
  for (ir::Value* p : fn_->params)
    if (p->name == name) fail(loc, fmt::format("arg: a parameter named '{}' already exists", name));
  if (!fn_->body.ops.empty()) fail(loc, fmt::format("arg '{}': declare parameters before any op", name));
  return fn_->add_param(std::move(name), ir::Type{type, {}});
}

void KernelBuilder::min_blocks_per_sm(int n, Loc loc) {
  if (!fn_) fail(loc, "min_blocks_per_sm: the kernel is already finished");
  if (n < 1 || n > 32) fail(loc, fmt::format("min_blocks_per_sm {} must be from 1 to 32", n));
  fn_->min_blocks_per_sm = n;
}

void KernelBuilder::max_registers(int n, Loc loc) {
  if (!fn_) fail(loc, "max_registers: the kernel is already finished");
  if (std::string why = ir::Function::max_registers_error(n); !why.empty()) fail(loc, why);
  fn_->max_registers = n;
}

Kernel KernelBuilder::finish(Loc loc) {
  if (!fn_) fail(loc, "finish: the kernel is already finished");
  ir::Builder& b = tracker_->builder;
  if (b.block() != &fn_->body) fail(loc, "finish: called inside a loop or if body");
  b.loc = SourceLoc::from(loc);
  b.ret();
  ir::verify(*fn_);
  ir::run_default_passes(*fn_);
  fn_->renumber();
  Kernel k = std::move(fn_);
  fn_ = nullptr;
  return k;
}

// --- elementwise

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

// --- reductions and dot

namespace {
// A reduction or scan of `t` along `axis` (i1 counted as i32).
Tile along_axis(bool is_scan, ir::ReduceKind k, const Tile& t, int axis, const Loc& loc) {
  std::string what = fmt::format("{}{}", is_scan ? "cum" : "reduce_", ir::reduce_kind_name(k));
  ir::Value* v = need(t, loc, what.c_str());
  if (is_scan && (v->type.is_scalar() || v->type.is_ptr()))
    fail(loc, fmt::format("{}: needs a tile of numbers, got {}", what, v->type.str()));
  axis = checked_axis(v, axis, loc, what);
  if (v->type.dtype() == DType::i1) v = cast_to(v, DType::i32, loc);
  return is_scan ? at(loc).scan(k, v, axis) : at(loc).reduce(k, v, axis);
}
Tile reduce(ir::ReduceKind k, const Tile& t, int axis, const Loc& loc) { return along_axis(false, k, t, axis, loc); }
Tile scan(ir::ReduceKind k, const Tile& t, int axis, const Loc& loc) { return along_axis(true, k, t, axis, loc); }
} // namespace

Tile reduce_sum(const Tile& t, int axis, Loc loc) { return reduce(ir::ReduceKind::sum, t, axis, loc); }
Tile reduce_max(const Tile& t, int axis, Loc loc) { return reduce(ir::ReduceKind::max, t, axis, loc); }
Tile reduce_min(const Tile& t, int axis, Loc loc) { return reduce(ir::ReduceKind::min, t, axis, loc); }
Tile reduce_prod(const Tile& t, int axis, Loc loc) { return reduce(ir::ReduceKind::prod, t, axis, loc); }

Tile cumsum(const Tile& t, int axis, Loc loc) { return scan(ir::ReduceKind::sum, t, axis, loc); }
Tile cumprod(const Tile& t, int axis, Loc loc) { return scan(ir::ReduceKind::prod, t, axis, loc); }
Tile cummax(const Tile& t, int axis, Loc loc) { return scan(ir::ReduceKind::max, t, axis, loc); }
Tile cummin(const Tile& t, int axis, Loc loc) { return scan(ir::ReduceKind::min, t, axis, loc); }

namespace {
Tile arg_reduce(bool max_, const Tile& t, int axis, const Loc& loc) {
  ir::Value* v = need(t, loc, max_ ? "argmax" : "argmin");
  const int rank = v->type.rank();
  axis = checked_axis(v, axis, loc, max_ ? "argmax" : "argmin");
  const Shape& s = v->type.shape;
  Tile best = expand_dims(max_ ? reduce_max(t, axis, loc) : reduce_min(t, axis, loc), axis, loc);
  Shape along(size_t(rank), 1);
  along[size_t(axis)] = s[size_t(axis)];
  Tile index = broadcast_to(reshape(arange(0, s[size_t(axis)], loc), along, loc), s, loc);
  Tile hit = t == broadcast_to(best, s, loc);
  if (ir::is_float(v->type.dtype())) hit = hit | broadcast_to(isnan(best, loc), s, loc);
  return reduce_min(where(hit, index, Operand(s[size_t(axis)], loc), loc), axis, loc);
}
} // namespace

Tile argmax(const Tile& t, int axis, Loc loc) { return arg_reduce(true, t, axis, loc); }
Tile argmin(const Tile& t, int axis, Loc loc) { return arg_reduce(false, t, axis, loc); }

Tile dot(const Tile& a, const Tile& b, Loc loc) {
  need(a, loc, "dot");
  need(b, loc, "dot");
  if (a.rank() != 2 || b.rank() != 2)
    fail(loc, fmt::format("dot: needs 2-d tiles, got {} and {}", a.type().str(), b.type().str()));
  return dot(a, b, zeros({a.shape()[0], b.shape()[1]}, f32, loc), loc);
}

Tile dot(const Tile& a, const Tile& b, const Tile& acc, Loc loc) {
  ir::Value* va = need(a, loc, "dot");
  ir::Value* vb = need(b, loc, "dot");
  ir::Value* vc = need(acc, loc, "dot");
  if (va->type.rank() != 2 || vb->type.rank() != 2 || va->type.shape[1] != vb->type.shape[0])
    fail(loc, fmt::format("dot: shapes {} and {} are not [M, K] and [K, N]", ir::shape_str(va->type.shape),
                          ir::shape_str(vb->type.shape)));
  if (va->type.is_ptr() || vb->type.is_ptr()) fail(loc, "dot: operands cannot be pointers");
  DType dt = promote(va->type.dtype(), vb->type.dtype());
  if (!ir::is_float(dt)) dt = DType::f32;
  return at(loc).dot(cast_to(va, dt, loc), cast_to(vb, dt, loc), cast_to(vc, DType::f32, loc));
}

// --- control flow

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