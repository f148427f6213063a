#include "interp/interpreter.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <utility>

#include "abi/float16.h"
#include "abi/atomic_ops.h"
#include "abi/device_print.h"
#include "abi/float8.h"
#include "ir/convert.h"
#include "ir/float_ops.h"
#include "ir/int_ops.h"
#include "ir/passes.h"
#include "launch/specialize.h"

namespace tilec::interp {

using ir::Block;
using ir::DType;
using ir::ElemType;
using ir::Op;
using ir::OpKind;
using ir::Value;
using ir::float_to_int;
using ir::round_exact;
using launch::Arg;
using launch::Buffer;
using launch::Grid;
using launch::read_float;
using launch::read_int;
using launch::write_float;
using launch::write_int;

namespace {

template <class Narrow> void narrow_all(std::vector<int64_t>& v) {
  for (int64_t& x : v)
    x = static_cast<Narrow>(x);
}

// The dtype switch sits outside the element loop.
void wrap_all(std::vector<int64_t>& v, DType t) {
  switch (t) {
  case DType::i1:
    for (int64_t& x : v)
      x = x != 0;
    return;
  case DType::i8:
    return narrow_all<int8_t>(v);
  case DType::i16:
    return narrow_all<int16_t>(v);
  case DType::i32:
    return narrow_all<int32_t>(v);
  case DType::u8:
    return narrow_all<uint8_t>(v);
  case DType::u16:
    return narrow_all<uint16_t>(v);
  case DType::u32:
    return narrow_all<uint32_t>(v);
  default:
    return;
  }
}

float round_to(float x, DType t) { return ir::round_to_dtype(x, t); }

void round_all(std::vector<float>& v, DType t) {
  if (t == DType::f32) return;
  for (float& x : v)
    x = round_to(x, t);
}

// The bits of a float element of dtype `t` as the interpreter holds it (an f32 that came from
// `t`; NaN payloads kept), and back.
uint64_t float_bits(float x, DType t) {
  uint32_t u = std::bit_cast<uint32_t>(x), sign = u >> 31;
  switch (t) {
  case DType::f32: return u;
  case DType::bf16: return u >> 16;
  case DType::f16: return std::isnan(x) ? (sign << 15) | 0x7c00 | ((u >> 13) & 0x3ff) : f32_to_f16_bits(x);
  case DType::f8e4m3: return std::isnan(x) ? (sign << 7) | 0x7f : f32_to_f8e4m3_bits(x);
  case DType::f8e5m2: // infinities too (a conversion would saturate them)
    return std::isnan(x) || std::isinf(x) ? (sign << 7) | 0x7c | ((u >> 21) & 3) : f32_to_f8e5m2_bits(x);
  default: internal_fail("float_bits of an integer dtype");
  }
}
float float_from_bits(uint64_t b, DType t) {
  switch (t) {
  case DType::f32: return std::bit_cast<float>(uint32_t(b));
  case DType::bf16: return bf16_bits_to_f32(uint16_t(b));
  case DType::f16: return f16_bits_to_f32(uint16_t(b));
  case DType::f8e4m3: return f8e4m3_bits_to_f32(uint8_t(b));
  case DType::f8e5m2: return f8e5m2_bits_to_f32(uint8_t(b));
  default: internal_fail("float_from_bits of an integer dtype");
  }
}

// Two's complement arithmetic without signed-overflow UB.
int64_t wrapping_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrapping_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t wrapping_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// The storage of one SSA value: flat row-major arrays. Which ones are used
// follows from the value's type: ints and i1 in `i`, floats in `f` (already
// rounded to their dtype), pointers as argument-buffer index in `buf` and
// element offset in `i`.
struct Tile {
  std::vector<int64_t> i;
  std::vector<float> f;
  std::vector<int32_t> buf;
};

// Calls `f(&Tile::member)` for each array a value of element type `e` uses, so
// ops that only move elements are written once for every type.
template <class F> void on_arrays(const ElemType& e, F&& f) {
  if (e.is_ptr) {
    f(&Tile::i);
    f(&Tile::buf);
  } else if (ir::is_float(e.dtype)) {
    f(&Tile::f);
  } else {
    f(&Tile::i);
  }
}

size_t tile_size(const Tile& t, const ElemType& e) {
  return ir::is_float(e.dtype) && !e.is_ptr ? t.f.size() : t.i.size();
}

// The one elementwise loop: out[k] = f(in[k]...).
template <class Out, class F, class First, class... Rest>
void each(std::vector<Out>& out, F f, const std::vector<First>& first,
          const std::vector<Rest>&... rest) {
  size_t n = first.size();
  out.resize(n);
  for (size_t k = 0; k < n; ++k)
    out[k] = f(first[k], rest[k]...);
}

template <class T>
void gather(std::vector<T>& out, const std::vector<T>& in, const std::vector<int64_t>& index) {
  each(
      out, [&](int64_t j) { return in[j]; }, index);
}

// For each element of `shape` in row-major order, the flat index of the
// operand element it reads, given that operand's stride for each result dim.
std::vector<int64_t> strided_index(const ir::Shape& shape, const std::vector<int64_t>& strides) {
  std::vector<int64_t> index(ir::num_elements(shape));
  std::vector<int64_t> coord(shape.size(), 0);
  int64_t src = 0;
  for (int64_t& x : index) {
    x = src;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      src += strides[d];
      if (++coord[d] < shape[d]) break;
      src -= strides[d] * shape[d];
      coord[d] = 0;
    }
  }
  return index;
}

std::vector<int64_t> row_major_strides(const ir::Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

// Reduces the middle dim of `in` viewed as [outer, len, inner].
template <class T, class F>
void reduce_middle(std::vector<T>& out, const std::vector<T>& in, int64_t outer, int64_t len,
                   int64_t inner, F combine) {
  out.resize(outer * inner);
  for (int64_t o = 0; o < outer; ++o) {
    const T* src = in.data() + o * len * inner;
    T* dst = out.data() + o * inner;
    std::copy(src, src + inner, dst);
    for (int64_t k = 1; k < len; ++k)
      for (int64_t j = 0; j < inner; ++j)
        dst[j] = combine(dst[j], src[k * inner + j]);
  }
}

class Machine {
public:
  Machine(const ir::Function& fn, Grid grid) : fn_(fn), grid_(grid), vals_(fn.num_values()) {}

  void bind(const std::vector<Arg>& args);
  void run_program(Grid pid) {
    pid_ = pid;
    run_block(fn_.body);
  }

private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw UserError(fmt::format("{}: {}", fn_.name, msg));
  }
  [[noreturn]] void fail(const Op& op, const std::string& msg) const {
    fail(fmt::format("{}: {}", op.loc.str(), msg));
  }

  const Tile& in(const Value* v) const {
    const Tile& t = vals_[v->id];
    internal_assert(tile_size(t, v->type.elem) ==
                        static_cast<size_t>(ir::num_elements(v->type.shape)),
                    "interpreter reads a value that was not computed");
    return t;
  }
  Tile& out(const Value* v) { return vals_[v->id]; }

  const Op* run_block(const Block& b);
  void exec(const Op& op);
  void exec_unary(const Op& op);
  void exec_binary(const Op& op);
  void exec_compare(const Op& op);
  void exec_cast(const Op& op);
  void exec_memory(const Op& op);
  void exec_desc(const Op& op);
  void exec_dot(const Op& op);
  void exec_reduce(const Op& op);
  void exec_scan(const Op& op);
  void exec_for(const Op& op);
  // The user's combine function of a reduce/scan (kind combine) on one pair of elements,
  // evaluated by running its region on scalars.
  template <class T> T combine(const Op& op, T x, T y) {
    auto elems = [](auto& t) -> auto& {
      if constexpr (std::is_same_v<T, float>) return t.f;
      else return t.i;
    };
    const Block& r = op.region(0);
    elems(out(r.args[0])).assign(1, x);
    elems(out(r.args[1])).assign(1, y);
    return elems(in(run_block(r)->operands[0]))[0];
  }

  template <class Access, class Masked> void each_lane(const Op& op, Access access, Masked masked);

  const ir::Function& fn_;
  Grid grid_;
  Grid pid_{};
  std::vector<Tile> vals_; // by value id
  std::vector<Buffer*> bufs_;
  std::vector<int64_t> counts_; // element count of each of bufs_
};

} // namespace

namespace {

void Machine::bind(const std::vector<Arg>& args) {
  if (std::string why = launch::argument_error(fn_, args); !why.empty()) fail(why);
  for (size_t k = 0; k < args.size(); ++k) {
    const Value* p = fn_.params[k];
    const Arg& a = args[k];
    DType t = p->type.dtype();
    Tile& v = out(p);
    if (p->type.is_ptr()) {
      v.buf = {static_cast<int32_t>(bufs_.size())};
      v.i = {0};
      bufs_.push_back(a.buffer);
      counts_.push_back(static_cast<int64_t>(a.buffer->count()));
    } else if (ir::is_float(t)) {
      v.f = {round_exact(a.f, t)};
    } else {
      v.i = {a.i};
    }
  }
}

const Op* Machine::run_block(const Block& b) {
  for (const auto& op : b.ops) {
    if (ir::is_terminator(op->kind)) return op.get();
    exec(*op);
  }
  internal_fail("block without a terminator");
}

void Machine::exec(const Op& op) {
  const auto& args = op.operands;
  auto res_type = [&]() -> const ir::Type& { return op.result()->type; };
  switch (op.kind) {
#define TILEC_X(E, N) case OpKind::E:
    TILEC_UNARY_OPS(TILEC_X) return exec_unary(op);
    TILEC_BINARY_OPS(TILEC_X) return exec_binary(op);
    TILEC_COMPARE_OPS(TILEC_X) return exec_compare(op);
#undef TILEC_X
  case OpKind::ProgramId:
    out(op.result()).i = {pid_[op.attrs.axis]};
    return;
  case OpKind::NumPrograms:
    out(op.result()).i = {grid_[op.attrs.axis]};
    return;
  case OpKind::Arange: {
    auto& r = out(op.result()).i;
    r.resize(res_type().shape[0]);
    for (size_t k = 0; k < r.size(); ++k)
      r[k] = op.attrs.start + static_cast<int64_t>(k);
    return wrap_all(r, DType::i32);
  }
  case OpKind::Constant: {
    size_t n = ir::num_elements(res_type().shape);
    DType t = res_type().dtype();
    const ir::ConstValue& c = op.attrs.value;
    if (ir::is_float(t))
      out(op.result()).f.assign(n, round_exact(c.f, t));
    else
      out(op.result()).i.assign(n, ir::wrap_int(c.i, t));
    return;
  }
  case OpKind::Splat: {
    const Tile& a = in(args[0]);
    Tile& r = out(op.result());
    size_t n = ir::num_elements(res_type().shape);
    on_arrays(res_type().elem, [&](auto m) { (r.*m).assign(n, (a.*m)[0]); });
    return;
  }
  case OpKind::ExpandDims:
  case OpKind::Reshape:
    out(op.result()) = in(args[0]);
    return;
  case OpKind::Broadcast:
  case OpKind::Permute: {
    const ir::Shape& from = args[0]->type.shape;
    std::vector<int64_t> strides = row_major_strides(from), mapped;
    if (op.kind == OpKind::Broadcast) {
      for (size_t d = 0; d < from.size(); ++d)
        mapped.push_back(from[d] == 1 ? 0 : strides[d]);
    } else {
      for (int64_t d : op.attrs.perm)
        mapped.push_back(strides[d]);
    }
    std::vector<int64_t> index = strided_index(res_type().shape, mapped);
    const Tile& a = in(args[0]);
    Tile& r = out(op.result());
    on_arrays(res_type().elem, [&](auto m) { gather(r.*m, a.*m, index); });
    return;
  }
  case OpKind::AddPtr: {
    const Tile &p = in(args[0]), &o = in(args[1]);
    Tile& r = out(op.result());
    r.buf = p.buf;
    each(r.i, wrapping_add, p.i, o.i);
    return;
  }
  case OpKind::Select: {
    const Tile &c = in(args[0]), &a = in(args[1]), &b = in(args[2]);
    Tile& r = out(op.result());
    on_arrays(res_type().elem, [&](auto m) {
      each(
          r.*m, [](int64_t ck, auto ak, auto bk) { return ck ? ak : bk; }, c.i, a.*m, b.*m);
    });
    return;
  }
  case OpKind::Fma: { // in f32, rounded once to the dtype
    const Tile &a = in(args[0]), &b = in(args[1]), &c = in(args[2]);
    Tile& r = out(op.result());
    each(r.f, [](float x, float y, float z) { return std::fma(x, y, z); }, a.f, b.f, c.f);
    round_all(r.f, res_type().dtype());
    return;
  }
  case OpKind::Load:
  case OpKind::Store:
  TILEC_ATOMIC_RMW_OPS(TILEC_OP_CASE)
  case OpKind::AtomicCas:
    return exec_memory(op);
  case OpKind::DescLoad:
  case OpKind::DescStore:
    return exec_desc(op);
  case OpKind::Cast:
    return exec_cast(op);
  case OpKind::Bitcast: {
    const Tile& a = in(args[0]);
    Tile& r = out(op.result());
    DType from = args[0]->type.dtype(), to = res_type().dtype();
    size_t n = ir::is_float(from) ? a.f.size() : a.i.size();
    if (ir::is_float(to)) r.f.resize(n);
    else r.i.resize(n);
    for (size_t k = 0; k < n; ++k) {
      uint64_t bits = ir::is_float(from) ? float_bits(a.f[k], from) : ir::low_bits(a.i[k], ir::dtype_bits(from));
      if (ir::is_float(to)) r.f[k] = float_from_bits(bits, to);
      else r.i[k] = ir::wrap_int(static_cast<int64_t>(bits), to);
    }
    return;
  }
  case OpKind::Dot:
    return exec_dot(op);
  case OpKind::Scan:
    return exec_scan(op);
  case OpKind::Assert: {
    const Tile& c = in(args[0]);
    for (size_t k = 0; k < c.i.size(); ++k)
      if (!c.i[k])
        fail(op, fmt::format("device_assert failed: {} (program ({}, {}, {}){})", op.attrs.message, pid_[0], pid_[1],
                             pid_[2], c.i.size() > 1 ? fmt::format(", element {}", k) : ""));
    return;
  }
  case OpKind::Print: {
    const Tile& v = in(args[0]);
    const bool fl = ir::is_float(args[0]->type.dtype());
    const uint32_t pid[3] = {uint32_t(pid_[0]), uint32_t(pid_[1]), uint32_t(pid_[2])};
    const size_t n = fl ? v.f.size() : v.i.size();
    for (size_t k = 0; k < n; ++k)
      device_print_emit(device_print_line(pid, args[0]->type.shape, int64_t(k), op.attrs.message,
                                          fl                                       ? PrintedValue::float_
                                          : ir::is_unsigned(args[0]->type.dtype()) ? PrintedValue::unsigned_int
                                                                                   : PrintedValue::signed_int,
                                          fl ? 0 : v.i[k], fl ? v.f[k] : 0.0f));
    return;
  }
  case OpKind::Reduce:
    return exec_reduce(op);
  case OpKind::For:
    return exec_for(op);
  case OpKind::If: {
    const Op* yield = run_block(op.region(in(args[0]).i[0] ? 0 : 1));
    for (size_t k = 0; k < op.results.size(); ++k)
      out(op.results[k]) = in(yield->operands[k]);
    return;
  }
  case OpKind::Yield:
  case OpKind::Return:
    break; // handled by run_block
  }
  internal_fail(fmt::format("interpreter cannot execute {}", ir::op_name(op.kind)));
}

void Machine::exec_unary(const Op& op) {
  const Tile& a = in(op.operands[0]);
  Tile& r = out(op.result());
  DType t = op.result()->type.dtype();
  auto floats = [&](auto f) {
    each(r.f, f, a.f);
    round_all(r.f, t);
  };
  auto ints = [&](auto f) {
    each(r.i, f, a.i);
    wrap_all(r.i, t);
  };
  if (ir::is_float(t)) {
    if (ir::FloatUnary f = ir::float_unary(op.kind)) return floats(f);
  } else {
    switch (op.kind) {
    case OpKind::Abs:
      if (ir::is_unsigned(t)) return ints([](int64_t x) { return x; });
      return ints([](int64_t x) { return x < 0 ? wrapping_sub(0, x) : x; });
    case OpKind::Neg:
      return ints([](int64_t x) { return wrapping_sub(0, x); });
    default:
      break;
    }
  }
  internal_fail(fmt::format("{} on {}", ir::op_name(op.kind), op.result()->type.str()));
}

void Machine::exec_binary(const Op& op) {
  const Tile &a = in(op.operands[0]), &b = in(op.operands[1]);
  Tile& r = out(op.result());
  DType t = op.result()->type.dtype();
  auto floats = [&](auto f) {
    each(r.f, f, a.f, b.f);
    round_all(r.f, t);
  };
  auto ints = [&](auto f) {
    each(r.i, f, a.i, b.i);
    wrap_all(r.i, t);
  };
  if (ir::is_float(t)) {
    if (ir::FloatBinary f = ir::float_binary(op.kind)) return floats(f);
  } else {
    if ((op.kind == OpKind::Div || op.kind == OpKind::Rem) &&
        std::find(b.i.begin(), b.i.end(), 0) != b.i.end())
      fail(op, fmt::format("integer {} by zero", ir::op_name(op.kind)));
    if (ir::is_unsigned(t)) { // the bits as unsigned numbers (u8..u32 are already nonnegative)
      auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
      switch (op.kind) {
      case OpKind::Div:
        return ints([u](int64_t x, int64_t y) { return static_cast<int64_t>(u(x) / u(y)); });
      case OpKind::Rem:
        return ints([u](int64_t x, int64_t y) { return static_cast<int64_t>(u(x) % u(y)); });
      case OpKind::Min:
        return ints([u](int64_t x, int64_t y) { return u(x) < u(y) ? x : y; });
      case OpKind::Max:
        return ints([u](int64_t x, int64_t y) { return u(x) < u(y) ? y : x; });
      default:
        break;
      }
    }
    switch (op.kind) {
    case OpKind::Add:
      return ints(wrapping_add);
    case OpKind::Sub:
      return ints(wrapping_sub);
    case OpKind::Mul:
      return ints(wrapping_mul);
    // x / -1 is spelled as a negation: INT64_MIN / -1 overflows in C++.
    case OpKind::Div:
      return ints([](int64_t x, int64_t y) { return y == -1 ? wrapping_sub(0, x) : x / y; });
    case OpKind::Rem:
      return ints([](int64_t x, int64_t y) { return y == -1 ? 0 : x % y; });
    case OpKind::Min:
      return ints([](int64_t x, int64_t y) { return std::min(x, y); });
    case OpKind::Max:
      return ints([](int64_t x, int64_t y) { return std::max(x, y); });
    case OpKind::And:
      return ints(std::bit_and<int64_t>());
    case OpKind::Or:
      return ints(std::bit_or<int64_t>());
    case OpKind::Xor:
      return ints(std::bit_xor<int64_t>());
    case OpKind::Shl:
      return ints([bits = ir::dtype_bits(t)](int64_t x, int64_t y) { return ir::shift_left(x, y, bits); });
    case OpKind::AShr:
      return ints([bits = ir::dtype_bits(t)](int64_t x, int64_t y) { return ir::shift_right_arithmetic(x, y, bits); });
    case OpKind::LShr:
      return ints([bits = ir::dtype_bits(t)](int64_t x, int64_t y) { return ir::shift_right_logical(x, y, bits); });
    case OpKind::UMulHi:
      return ints([bits = ir::dtype_bits(t)](int64_t x, int64_t y) { return ir::umulhi(x, y, bits); });
    default:
      break;
    }
  }
  internal_fail(fmt::format("{} on {}", ir::op_name(op.kind), op.result()->type.str()));
}

void Machine::exec_compare(const Op& op) {
  const ir::Value *x = op.operands[0], *y = op.operands[1];
  const Tile &a = in(x), &b = in(y);
  std::vector<int64_t>& r = out(op.result()).i;
  auto compare = [&](auto f) {
    auto i1 = [f](auto p, auto q) -> int64_t { return f(p, q); };
    if (x->type.is_ptr()) {
      // Pointers are equal when they address one buffer at one offset.
      each(
          r,
          [&](int64_t p, int32_t pb, int64_t q, int32_t qb) {
            return i1(std::pair(bufs_[pb], p), std::pair(bufs_[qb], q));
          },
          a.i, a.buf, b.i, b.buf);
    } else if (ir::is_float(x->type.dtype())) {
      each(r, i1, a.f, b.f);
    } else if (ir::is_unsigned(x->type.dtype())) {
      each(r, [&](int64_t p, int64_t q) { return i1(static_cast<uint64_t>(p), static_cast<uint64_t>(q)); }, a.i, b.i);
    } else {
      each(r, i1, a.i, b.i);
    }
  };
  switch (op.kind) {
  case OpKind::Eq:
    return compare(std::equal_to<>());
  case OpKind::Ne:
    return compare(std::not_equal_to<>());
  case OpKind::Lt:
    return compare(std::less<>());
  case OpKind::Le:
    return compare(std::less_equal<>());
  case OpKind::Gt:
    return compare(std::greater<>());
  case OpKind::Ge:
    return compare(std::greater_equal<>());
  default:
    internal_fail(fmt::format("{} is not a comparison", ir::op_name(op.kind)));
  }
}

void Machine::exec_cast(const Op& op) {
  const Tile& a = in(op.operands[0]);
  Tile& r = out(op.result());
  DType from = op.operands[0]->type.dtype(), to = op.result()->type.dtype();
  if (ir::is_int(from) && ir::is_int(to)) {
    r.i = a.i;
    wrap_all(r.i, to);
  } else if (ir::is_int(from)) {
    if (from == DType::u64) // past 2^63 its bits read as negative
      each(r.f, [to](int64_t x) { return round_exact(static_cast<long double>(static_cast<uint64_t>(x)), to); }, a.i);
    else
      each(r.f, [to](int64_t x) { return round_exact(x, to); }, a.i);
  } else if (ir::is_int(to)) {
    each(
        r.i, [to](float x) { return float_to_int(x, to); }, a.f);
  } else {
    each(
        r.f, [to](float x) { return round_to(x, to); }, a.f);
  }
}

// The one loop over the lanes of a load, store or atomic_add: `access(k,
// element address)` for each lane whose mask is true, once its address is
// checked to lie inside its buffer, and `masked(k)` for the others.
template <class Access, class Masked>
void Machine::each_lane(const Op& op, Access access, Masked masked) {
  const Tile& p = in(op.operands[0]);
  const Tile* mask = op.mask() ? &in(op.mask()) : nullptr;
  // Every buffer bound to this pointer type holds its dtype (checked in bind).
  const int64_t elem_bytes = ir::dtype_bytes(op.operands[0]->type.dtype());
  for (size_t k = 0; k < p.i.size(); ++k) {
    if (mask && !mask->i[k]) {
      masked(k);
      continue;
    }
    int32_t b = p.buf[k];
    int64_t offset = p.i[k];
    if (offset < 0 || offset >= counts_[b])
      fail(op, fmt::format("{} out of bounds: buffer '{}' has {} elements, offset {}",
                           ir::op_name(op.kind), bufs_[b]->name, counts_[b], offset));
    access(k, bufs_[b]->bytes.data() + offset * elem_bytes);
  }
}

// A tensor descriptor's block (ir/SEMANTICS.md): element (i0, i1, ...) is base[sum (offset_d +
// i_d) * stride_d] where every offset_d + i_d lies in [0, size_d); a load reads 0 elsewhere, a
// store writes nothing there.
void Machine::exec_desc(const Op& op) {
  const bool store = op.kind == OpKind::DescStore;
  const size_t rank = ir::desc_rank(op);
  const Tile& base = in(op.operands[0]);
  auto scalar = [&](size_t i) { return in(op.operands[i]).i[0]; };
  std::vector<int64_t> size(rank), stride(rank), offset(rank);
  for (size_t d = 0; d < rank; ++d)
    size[d] = scalar(1 + d), stride[d] = scalar(1 + rank + d), offset[d] = scalar(ir::desc_offset_index(op, d));
  const ir::Shape& block = store ? op.operands.back()->type.shape : op.result()->type.shape;
  // A gather's rows: box i (block[0] / boxes rows) starts at its own row offset.
  const int64_t box_rows = block[0] / op.attrs.boxes;
  const DType t = op.operands[0]->type.dtype();
  const bool fl = ir::is_float(t);
  const int64_t elem_bytes = ir::dtype_bytes(t), n = ir::num_elements(block);
  const int32_t b = base.buf[0];
  const Tile* v = store ? &in(op.operands.back()) : nullptr;
  Tile* r = store ? nullptr : &out(op.result());
  if (r) (fl ? r->f.resize(size_t(n)) : r->i.resize(size_t(n)));
  std::vector<int64_t> idx(rank, 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t rem = k, at = base.i[0];
    bool inside = true;
    for (size_t d = rank; d-- > 0;) {
      idx[d] = rem % block[d];
      rem /= block[d];
      const int64_t c = d == 0 && op.attrs.boxes > 1
                            ? scalar(ir::desc_offset_index(op, 0, idx[0] / box_rows)) + idx[0] % box_rows
                            : offset[d] + idx[d];
      inside = inside && c >= 0 && c < size[d];
      at += c * stride[d];
    }
    if (!inside) {
      if (r) (fl ? r->f[size_t(k)] = 0.0f : r->i[size_t(k)] = 0);
      continue;
    }
    if (at < 0 || at >= counts_[b])
      fail(op, fmt::format("{} out of bounds: buffer '{}' has {} elements, offset {} (a size or stride does not "
                           "describe the buffer)", ir::op_name(op.kind), bufs_[b]->name, counts_[b], at));
    std::byte* e = bufs_[b]->bytes.data() + at * elem_bytes;
    if (store) (fl ? write_float(e, t, v->f[size_t(k)]) : write_int(e, t, v->i[size_t(k)]));
    else (fl ? void(r->f[size_t(k)] = read_float(e, t)) : void(r->i[size_t(k)] = read_int(e, t)));
  }
}

void Machine::exec_memory(const Op& op) {
  DType t = op.operands[0]->type.dtype();
  size_t n = in(op.operands[0]).i.size();
  bool fl = ir::is_float(t);
  switch (op.kind) {
  case OpKind::Load: {
    Tile& r = out(op.result());
    const Tile* other = op.other() ? &in(op.other()) : nullptr;
    if (fl) {
      r.f.resize(n);
      each_lane(
          op, [&](size_t k, const std::byte* e) { r.f[k] = read_float(e, t); },
          [&](size_t k) { r.f[k] = other ? other->f[k] : 0.0f; });
    } else {
      r.i.resize(n);
      each_lane(
          op, [&](size_t k, const std::byte* e) { r.i[k] = read_int(e, t); },
          [&](size_t k) { r.i[k] = other ? other->i[k] : 0; });
    }
    return;
  }
  case OpKind::Store: {
    const Tile& v = in(op.operands[1]);
    auto nothing = [](size_t) {};
    if (fl)
      each_lane(
          op, [&](size_t k, std::byte* e) { write_float(e, t, v.f[k]); }, nothing);
    else
      each_lane(
          op, [&](size_t k, std::byte* e) { write_int(e, t, v.i[k]); }, nothing);
    return;
  }
  default: {
    internal_assert(ir::is_atomic(op.kind), "exec_memory: a load, store or atomic");
    // Lane by lane in order, each a read-modify-write (abi/atomic_ops.h); masked lanes return
    // 0, as a load without `other` would.
    const bool cas = op.kind == OpKind::AtomicCas;
    const Tile& v = in(op.operands[cas ? 2 : 1]);
    const Tile* c = cas ? &in(op.operands[1]) : nullptr;
    const AtomicOp aop = ir::atomic_op(op);
    Tile& r = out(op.result());
    if (fl) {
      r.f.resize(n);
      each_lane(
          op,
          [&](size_t k, std::byte* e) {
            r.f[k] = read_float(e, t);
            write_float(e, t, atomic_result(aop, r.f[k], v.f[k], c ? c->f[k] : 0.0f));
          },
          [&](size_t k) { r.f[k] = 0.0f; });
    } else {
      r.i.resize(n);
      each_lane(
          op,
          [&](size_t k, std::byte* e) {
            r.i[k] = read_int(e, t);
            write_int(e, t, atomic_result(aop, int32_t(r.i[k]), int32_t(v.i[k]), c ? int32_t(c->i[k]) : 0));
          },
          [&](size_t k) { r.i[k] = 0; });
    }
    return;
  }
  }
}

void Machine::exec_dot(const Op& op) {
  const Tile &a = in(op.operands[0]), &b = in(op.operands[1]), &acc = in(op.operands[2]);
  const ir::Shape& as = op.operands[0]->type.shape;
  int64_t m = as[0], kk = as[1], n = op.operands[1]->type.shape[1];
  std::vector<float>& r = out(op.result()).f;
  r = acc.f;
  // Row by row, k ascending: each result element sums its products in k order.
  for (int64_t i = 0; i < m; ++i)
    for (int64_t k = 0; k < kk; ++k) {
      float aik = a.f[i * kk + k];
      for (int64_t j = 0; j < n; ++j)
        r[i * n + j] += aik * b.f[k * n + j];
    }
}

void Machine::exec_reduce(const Op& op) {
  const Value* v = op.operands[0];
  const ir::Shape& s = v->type.shape;
  int64_t axis = op.attrs.axis, outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  const Tile& a = in(v);
  Tile& r = out(op.result());
  DType t = v->type.dtype();
  if (ir::is_float(t)) {
    auto floats = [&](auto f) {
      reduce_middle(r.f, a.f, outer, s[axis], inner, f);
      round_all(r.f, t);
    };
    switch (op.attrs.reduce) {
    case ir::ReduceKind::combine:
      return floats([&](float x, float y) { return combine(op, x, y); });
    case ir::ReduceKind::sum:
      return floats(std::plus<float>());
    case ir::ReduceKind::max:
      return floats(ir::float_max);
    case ir::ReduceKind::min:
      return floats(ir::float_min);
    case ir::ReduceKind::prod:
      return floats(std::multiplies<float>());
    }
  } else {
    auto ints = [&](auto f) {
      reduce_middle(r.i, a.i, outer, s[axis], inner, f);
      wrap_all(r.i, t);
    };
    switch (op.attrs.reduce) {
    case ir::ReduceKind::combine:
      return ints([&](int64_t x, int64_t y) { return combine(op, x, y); });
    case ir::ReduceKind::sum:
      return ints(wrapping_add);
    case ir::ReduceKind::max:
      if (ir::is_unsigned(t)) return ints([](int64_t x, int64_t y) { return uint64_t(x) < uint64_t(y) ? y : x; });
      return ints([](int64_t x, int64_t y) { return std::max(x, y); });
    case ir::ReduceKind::min:
      if (ir::is_unsigned(t)) return ints([](int64_t x, int64_t y) { return uint64_t(y) < uint64_t(x) ? y : x; });
      return ints([](int64_t x, int64_t y) { return std::min(x, y); });
    case ir::ReduceKind::prod:
      return ints(wrapping_mul);
    }
  }
  internal_fail("bad reduce kind");
}

// Inclusive prefix along the axis, in order: floats in f32, each result rounded to the dtype
// once; integers wrapping.
void Machine::exec_scan(const Op& op) {
  const Value* v = op.operands[0];
  const ir::Shape& s = v->type.shape;
  int64_t axis = op.attrs.axis, outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t len = s[axis];
  const Tile& a = in(v);
  Tile& r = out(op.result());
  DType t = v->type.dtype();
  auto run = [&](auto& dst, const auto& src, auto combine) {
    dst = src;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 1; k < len; ++k)
        for (int64_t j = 0; j < inner; ++j) {
          int64_t at = (o * len + k) * inner + j;
          dst[at] = combine(dst[at - inner], src[at]);
        }
  };
  const ir::ReduceKind k = op.attrs.reduce;
  if (k == ir::ReduceKind::combine) {
    if (ir::is_float(t)) run(r.f, a.f, [&](float x, float y) { return combine(op, x, y); });
    else run(r.i, a.i, [&](int64_t x, int64_t y) { return combine(op, x, y); });
    return;
  }
  if (ir::is_float(t)) {
    auto f = [k](float x, float y) {
      return k == ir::ReduceKind::sum ? x + y : k == ir::ReduceKind::prod ? x * y
                                    : k == ir::ReduceKind::max            ? ir::float_max(x, y)
                                                                          : ir::float_min(x, y);
    };
    run(r.f, a.f, f);
    round_all(r.f, t);
  } else {
    const bool u = ir::is_unsigned(t);
    auto f = [k, u](int64_t x, int64_t y) {
      const bool less = u ? uint64_t(x) < uint64_t(y) : x < y;
      return k == ir::ReduceKind::sum ? wrapping_add(x, y) : k == ir::ReduceKind::prod ? wrapping_mul(x, y)
                                    : k == ir::ReduceKind::max                       ? (less ? y : x)
                                                                                     : (less ? x : y);
    };
    run(r.i, a.i, f);
    wrap_all(r.i, t);
  }
}

void Machine::exec_for(const Op& op) {
  int64_t lb = in(op.operands[0]).i[0], ub = in(op.operands[1]).i[0];
  int64_t step = in(op.operands[2]).i[0];
  if (step <= 0) fail(op, fmt::format("for: step must be positive, got {}", step));
  const Block& body = op.region(0);
  size_t carried = op.results.size();
  for (size_t k = 0; k < carried; ++k)
    out(body.args[k + 1]) = in(op.operands[k + 3]);
  std::vector<Tile> next(carried); // reused, so its storage survives iterations
  // The induction variable lives in int64 and stops before passing ub, so it
  // never wraps at the bounds' width.
  for (int64_t iv = lb; iv < ub;) {
    out(body.args[0]).i = {iv};
    const Op* yield = run_block(body);
    for (size_t k = 0; k < carried; ++k)
      next[k] = in(yield->operands[k]);
    for (size_t k = 0; k < carried; ++k)
      std::swap(next[k], out(body.args[k + 1]));
    if (static_cast<uint64_t>(ub) - static_cast<uint64_t>(iv) <= static_cast<uint64_t>(step)) break;
    iv += step;
  }
  for (size_t k = 0; k < carried; ++k)
    out(op.results[k]) = in(body.args[k + 1]);
}

} // namespace

void interpret(const ir::Function& fn, Grid grid, const std::vector<Arg>& args) {
  for (int a = 0; a < 3; ++a)
    if (grid[a] < 0 || grid[a] > std::numeric_limits<int32_t>::max())
      throw UserError(
          fmt::format("{}: grid dimension {} is {}, outside [0, 2^31)", fn.name, a, grid[a]));
  // Offsets into buffers past 2^31 elements are computed in 64 bits, as every backend
  // compiles them (ir::widen_offsets; ir/SEMANTICS.md).
  std::set<std::string> large = launch::specialize(fn, args).large_buffers;
  ir::Kernel widened;
  if (!large.empty()) {
    widened = ir::clone(fn);
    ir::widen_offsets(*widened, large);
  }
  Machine m(widened ? *widened : fn, grid);
  m.bind(args);
  for (int64_t z = 0; z < grid[2]; ++z)
    for (int64_t y = 0; y < grid[1]; ++y)
      for (int64_t x = 0; x < grid[0]; ++x)
        m.run_program({x, y, z});
}

} // namespace tilec::interp
