// Every elementwise op, cast, reduction and data movement op, lane by lane,
// against a C++ reference written independently of the interpreter.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <limits>

#include "tests/interp/helpers.h"

using namespace tilec;
using namespace tilec::interp;
using namespace tilec::launch;
using namespace tilec::interp::test;

namespace {

constexpr int64_t kLanes = 128;

// Runs `out = make(loaded inputs)` over the flat inputs, shaped `shape`, in one
// program; the result is stored flat.
Buffer run_tile(DType out_t, std::vector<Buffer*> inputs, const Shape& shape,
                const std::function<Value*(KernelDef&, std::vector<Value*>)>& make) {
  KernelDef k("ops");
  std::vector<Value*> ptrs;
  for (Buffer* in : inputs)
    ptrs.push_back(k.ptr(in->name, in->dtype));
  Value* out = k.ptr("out", out_t);
  int64_t n = ir::num_elements(shape);
  Value* offs = k.b.arange(0, n);
  std::vector<Value*> loaded;
  for (Value* p : ptrs)
    loaded.push_back(k.b.reshape(k.b.load(k.at(p, offs)), shape));
  Value* r = make(k, loaded);
  int64_t rn = ir::num_elements(r->type.shape);
  k.b.store(k.at(out, k.b.arange(0, rn)), k.b.reshape(r, {rn}));
  k.b.ret();
  Buffer result("out", out_t, rn);
  std::vector<Arg> args;
  for (Buffer* in : inputs)
    args.push_back(Arg::of(*in));
  args.push_back(Arg::of(result));
  interpret(k.fn, {1, 1, 1}, args);
  return result;
}

// The range random lanes are drawn from (u64: its lower half; the edge values add the rest).
int64_t min_of(DType t) {
  if (ir::is_unsigned(t)) return 0;
  return t == DType::i1 ? 0 : -(int64_t(1) << (ir::dtype_bits(t) - 2)) * 2;
}
int64_t max_of(DType t) {
  if (ir::is_unsigned(t)) return t == DType::u64 ? INT64_MAX : (int64_t(1) << ir::dtype_bits(t)) - 1;
  return t == DType::i1 ? 1 : -(min_of(t) + 1);
}

// The number an element holds (Buffer::get_int gives a u64's bits as int64).
__int128 val(DType t, int64_t raw) { return t == DType::u64 ? __int128(uint64_t(raw)) : __int128(raw); }

__int128 wrap_ref(__int128 v, DType t) {
  __int128 m = __int128(1) << ir::dtype_bits(t);
  v %= m;
  if (v < 0) v += m;
  if (t != DType::i1 && !ir::is_unsigned(t) && v >= m / 2) v -= m;
  return v;
}

std::vector<double> edge_values(DType t) {
  if (ir::is_float(t)) return {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1.5, -2.75, 65504, 3e38, 1e-7};
  if (t == DType::i1) return {0, 1};
  return {double(min_of(t)), double(max_of(t)), -1, 0, 1, double(min_of(t) + 1), 7};
}

// Lane values for `t`: the first lanes pair every edge value of `a` with every
// one of `b` (`second` picks which), the rest are random.
Buffer lane_values(std::string name, DType t, bool second, std::mt19937_64& rng) {
  Buffer buf(std::move(name), t, kLanes);
  std::vector<double> e = edge_values(t);
  size_t pairs = e.size() * e.size();
  for (size_t k = 0; k < kLanes; ++k) {
    if (k < pairs) {
      double v = second ? e[k % e.size()] : e[k / e.size()];
      if (ir::is_float(t))
        buf.set(k, v);
      else
        buf.set_int(k, int64_t(v)); // exact for i64 extremes
    } else if (ir::is_float(t)) {
      buf.set(k, std::uniform_real_distribution<double>(-8, 8)(rng));
    } else {
      buf.set_int(k, std::uniform_int_distribution<int64_t>(min_of(t), max_of(t))(rng));
    }
  }
  return buf;
}

bool is_bitwise(OpKind k) {
  return k == OpKind::And || k == OpKind::Or || k == OpKind::Xor;
}
bool is_int_only(OpKind k) {
  return k == OpKind::Shl || k == OpKind::AShr || k == OpKind::LShr || k == OpKind::UMulHi;
}

float float_binary_ref(OpKind k, float x, float y) {
  switch (k) {
  case OpKind::Add:
    return x + y;
  case OpKind::Sub:
    return x - y;
  case OpKind::Mul:
    return x * y;
  case OpKind::Div:
    return x / y;
  case OpKind::Rem:
    return std::fmod(x, y);
  case OpKind::Min:
    return std::isnan(x) ? y : std::isnan(y) ? x : (y < x ? y : x);
  case OpKind::Max:
    return std::isnan(x) ? y : std::isnan(y) ? x : (y > x ? y : x);
  case OpKind::Pow:
    return std::pow(x, y);
  default:
    FAIL("no float reference for " << ir::op_name(k));
    return 0;
  }
}

// `bits`: the operands' width (shift amounts and umulhi read the operands as unsigned).
__int128 int_binary_ref(OpKind k, __int128 x, __int128 y, int bits) {
  const __int128 modulus = __int128(1) << bits;
  auto as_unsigned = [&](__int128 v) { return v < 0 ? v + modulus : v; };
  const __int128 amount = as_unsigned(y);
  switch (k) {
  case OpKind::Shl: // modulo 2^128, as Mul
    return amount >= bits ? 0 : static_cast<__int128>(static_cast<unsigned __int128>(x) << int(amount));
  case OpKind::LShr:
    return amount >= bits ? 0 : as_unsigned(x) / (__int128(1) << int(amount));
  case OpKind::AShr: { // floor division by 2^amount; the sign (the top bit) from the width on
    if (x >= modulus / 2) x -= modulus; // an unsigned dtype's bits read as signed
    if (amount >= bits) return x < 0 ? -1 : 0;
    __int128 d = __int128(1) << int(amount), q = x / d;
    return q * d > x ? q - 1 : q;
  }
  case OpKind::UMulHi: {
    unsigned __int128 p = static_cast<unsigned __int128>(as_unsigned(x)) * static_cast<unsigned __int128>(as_unsigned(y));
    return static_cast<__int128>(p >> bits);
  }
  case OpKind::Add:
    return x + y;
  case OpKind::Sub:
    return x - y;
  case OpKind::Mul: // modulo 2^128, which the caller's wrap to the width keeps exact (a u64 squared
                    // would overflow __int128)
    return static_cast<__int128>(static_cast<unsigned __int128>(x) * static_cast<unsigned __int128>(y));
  case OpKind::Div:
    return x / y;
  case OpKind::Rem:
    return x % y;
  case OpKind::Min:
    return std::min(x, y);
  case OpKind::Max:
    return std::max(x, y);
  case OpKind::And:
    return x & y;
  case OpKind::Or:
    return x | y;
  case OpKind::Xor:
    return x ^ y;
  default:
    FAIL("no integer reference for " << ir::op_name(k));
    return 0;
  }
}

template <class T> bool compare_ref(OpKind k, T x, T y) {
  switch (k) {
  case OpKind::Eq:
    return x == y;
  case OpKind::Ne:
    return x != y;
  case OpKind::Lt:
    return x < y;
  case OpKind::Le:
    return x <= y;
  case OpKind::Gt:
    return x > y;
  case OpKind::Ge:
    return x >= y;
  default:
    FAIL("not a comparison: " << ir::op_name(k));
    return false;
  }
}

} // namespace

TEST_CASE("every binary and compare op on every dtype matches a C++ reference", "[interp]") {
  std::mt19937_64 rng(10);
  int combos = 0;
  const OpKind kinds[] = {
#define TILEC_X(E, N) OpKind::E,
      TILEC_BINARY_OPS(TILEC_X) TILEC_COMPARE_OPS(TILEC_X)
#undef TILEC_X
  };
  for (OpKind kind : kinds) {
    for (DType t : ir::kAllDTypes) {
      bool cmp = ir::is_compare(kind);
      if (!cmp && (is_bitwise(kind) ? ir::is_float(t) : t == DType::i1)) continue;
      if ((is_int_only(kind) && ir::is_float(t)) || (kind == OpKind::Pow && !ir::is_float(t))) continue;
      INFO(ir::op_name(kind) << " on " << ir::dtype_name(t));
      ++combos;
      Buffer a = lane_values("a", t, false, rng), b = lane_values("b", t, true, rng);
      bool divides = kind == OpKind::Div || kind == OpKind::Rem;
      if (divides && ir::is_int(t))
        for (int64_t k = 0; k < kLanes; ++k)
          if (b.get_int(k) == 0) b.set_int(k, 3);
      DType out_t = cmp ? DType::i1 : t;
      Buffer out = run_tile(out_t, {&a, &b}, {kLanes},
                            [&](KernelDef& k, auto v) { return k.op(kind, v[0], v[1]); });
      for (int64_t k = 0; k < kLanes; ++k) {
        INFO("lane " << k << ": " << a.get(k) << ", " << b.get(k));
        if (cmp && ir::is_float(t)) {
          REQUIRE(out.get_int(k) == compare_ref(kind, a.get(k), b.get(k)));
        } else if (cmp) {
          REQUIRE(out.get_int(k) == compare_ref(kind, val(t, a.get_int(k)), val(t, b.get_int(k))));
        } else if (ir::is_float(t)) {
          float want = round_ref(float_binary_ref(kind, float(a.get(k)), float(b.get(k))), t);
          REQUIRE(same_float(out.get(k), want));
        } else {
          __int128 want =
              wrap_ref(int_binary_ref(kind, val(t, a.get_int(k)), val(t, b.get_int(k)), ir::dtype_bits(t)), t);
          REQUIRE(out.get_int(k) == int64_t(want));
        }
      }
    }
  }
  CHECK(combos == 7 * 13 + 5 + 3 * 9 + 4 * 8 + 6 * 14); // arithmetic, pow, bitwise, shifts/umulhi, comparisons
}

TEST_CASE("i8 arithmetic wraps and f16/bf16 results round to nearest even", "[interp]") {
  auto one = [](DType t, double x, double y, OpKind kind) {
    Buffer a("a", t, 1), b("b", t, 1);
    a.set(0, x);
    b.set(0, y);
    return run_tile(t, {&a, &b}, {1}, [&](KernelDef& k, auto v) { return k.op(kind, v[0], v[1]); })
        .get(0);
  };
  CHECK(one(DType::i8, 127, 1, OpKind::Add) == -128);
  CHECK(one(DType::i8, -128, -1, OpKind::Div) == -128);
  CHECK(one(DType::i8, 16, 16, OpKind::Mul) == 0);
  CHECK(one(DType::f16, 2048, 1, OpKind::Add) == 2048); // a tie: to even
  CHECK(one(DType::f16, 2048, 3, OpKind::Add) == 2052);
  CHECK(one(DType::f16, 60000, 60000, OpKind::Add) == INFINITY);
  CHECK(one(DType::bf16, 256, 1, OpKind::Add) == 256);
  CHECK(one(DType::bf16, 256, 3, OpKind::Add) == 260);
  CHECK(one(DType::f32, NAN, 2, OpKind::Min) == 2);
  CHECK(one(DType::f32, 3, NAN, OpKind::Max) == 3);
  // A signaling NaN too (std::fmax gives a NaN there): an f32 one, and the one that widening
  // the fp8 byte 0xfd (a NaN with the top mantissa bit clear) gives.
  const float snan = std::numeric_limits<float>::signaling_NaN();
  CHECK(one(DType::f32, snan, 2, OpKind::Max) == 2);
  CHECK(one(DType::f32, -5, snan, OpKind::Min) == -5);
  CHECK(one(DType::f8e5m2, f8e5m2_bits_to_f32(0xfd), -28672, OpKind::Max) == -28672);
  CHECK(one(DType::f8e5m2, 4, f8e5m2_bits_to_f32(0xfd), OpKind::Min) == 4);
}

TEST_CASE("every unary op on every dtype matches a C++ reference", "[interp]") {
  std::mt19937_64 rng(11);
  const OpKind kinds[] = {
#define TILEC_X(E, N) OpKind::E,
      TILEC_UNARY_OPS(TILEC_X)
#undef TILEC_X
  };
  for (OpKind kind : kinds) {
    for (DType t : ir::kAllDTypes) {
      bool int_ok = kind == OpKind::Abs || kind == OpKind::Neg;
      if (t == DType::i1 || (ir::is_int(t) && !int_ok)) continue;
      INFO(ir::op_name(kind) << " on " << ir::dtype_name(t));
      Buffer a = lane_values("a", t, false, rng);
      Buffer out =
          run_tile(t, {&a}, {kLanes}, [&](KernelDef& k, auto v) { return k.b.unary(kind, v[0]); });
      for (int64_t k = 0; k < kLanes; ++k) {
        INFO("lane " << k << ": " << a.get(k));
        if (ir::is_int(t)) {
          __int128 x = val(t, a.get_int(k));
          REQUIRE(out.get_int(k) == int64_t(wrap_ref(kind == OpKind::Neg || x < 0 ? -x : x, t)));
          continue;
        }
        float x = float(a.get(k)), want = 0;
        switch (kind) {
        case OpKind::Exp:
          want = std::exp(x);
          break;
        case OpKind::Exp2:
          want = std::exp2(x);
          break;
        case OpKind::Log:
          want = std::log(x);
          break;
        case OpKind::Tanh:
          want = std::tanh(x);
          break;
        case OpKind::Sqrt:
          want = std::sqrt(x);
          break;
        case OpKind::Rsqrt:
          want = 1.0f / std::sqrt(x);
          break;
        case OpKind::Abs:
          want = std::fabs(x);
          break;
        case OpKind::Neg:
          want = -x;
          break;
        case OpKind::Log2:
          want = std::log2(x);
          break;
        case OpKind::Sigmoid:
          want = float(1.0 / (1.0 + std::exp(-double(x)))); // within an ulp: compared below
          break;
        case OpKind::Floor:
          want = std::floor(x);
          break;
        case OpKind::Ceil:
          want = std::ceil(x);
          break;
        case OpKind::Round: // ties to even, whatever the rounding mode of the process
          want = std::fabs(x - std::trunc(x)) == 0.5f ? 2.0f * std::round(x / 2.0f) : std::round(x);
          break;
        case OpKind::Sin:
          want = std::sin(x);
          break;
        case OpKind::Cos:
          want = std::cos(x);
          break;
        case OpKind::Erf:
          want = std::erf(x);
          break;
        default:
          FAIL("unexpected unary op");
        }
        if (kind == OpKind::Sigmoid && !std::isnan(x)) // float formula against the double one
          REQUIRE(std::fabs(out.get(k) - round_ref(want, t)) <= 4e-7 + 1e-2 * (t != DType::f32));
        else
          REQUIRE(same_float(out.get(k), round_ref(want, t)));
      }
    }
  }
}

TEST_CASE("interpreter: casts between every pair of dtypes", "[interp]") {
  std::mt19937_64 rng(12);
  for (DType from : ir::kAllDTypes) {
    for (DType to : ir::kAllDTypes) {
      if (from == to) continue;
      INFO("cast " << ir::dtype_name(from) << " to " << ir::dtype_name(to));
      Buffer a("a", from, kLanes);
      // Ints stay within 2^24 (exact in f32) and floats within i8's range, so
      // the reference needs no rounding of its own before the final one.
      for (int64_t k = 0; k < kLanes; ++k) {
        if (ir::is_float(from)) {
          a.set(k, k < 4 ? std::vector<double>{0.0, -0.0, 0.5, -0.5}[k]
                         : std::uniform_real_distribution<double>(-100, 100)(rng));
        } else {
          int64_t lim = std::min<int64_t>(max_of(from), 1 << 24);
          a.set_int(k, k == 0   ? std::max(min_of(from), -lim)
                       : k == 1 ? lim
                                : std::uniform_int_distribution<int64_t>(
                                      std::max(min_of(from), -lim), lim)(rng));
        }
      }
      Buffer out =
          run_tile(to, {&a}, {kLanes}, [&](KernelDef& k, auto v) { return k.b.cast(v[0], to); });
      for (int64_t k = 0; k < kLanes; ++k) {
        INFO("lane " << k << ": " << a.get(k));
        double x = a.get(k), want;
        if (to == DType::i1)
          want = x != 0;
        else if (ir::is_int(to) && ir::is_int(from))
          want = double(wrap_ref(a.get_int(k), to));
        else if (ir::is_int(to)) // out of range is undefined; the interpreter saturates (unsigned: at 0)
          want = ir::is_unsigned(to) ? std::max(0.0, std::trunc(x)) : std::trunc(x);
        else
          want = round_ref(float(x), to);
        REQUIRE(same_float(out.get(k), want));
      }
    }
  }
}

TEST_CASE("int to bf16/f16 casts round once, not through f32", "[interp]") {
  auto cast_one = [](DType from, int64_t x, DType to) {
    Buffer a("a", from, 1);
    a.set_int(0, x);
    return run_tile(to, {&a}, {1}, [&](KernelDef& k, auto v) { return k.b.cast(v[0], to); }).get(0);
  };
  // Each lies just above a tie of the target type; rounding through f32 first
  // would land on the tie and round down to even.
  CHECK(cast_one(DType::i32, (1 << 24) + (1 << 16) + 1, DType::bf16) == (1 << 24) + (1 << 17));
  int64_t big = (int64_t(1) << 40) + (int64_t(1) << 32) + 1;
  CHECK(cast_one(DType::i64, big, DType::bf16) == double((int64_t(1) << 40) + (int64_t(1) << 33)));
  CHECK(cast_one(DType::i32, 2049, DType::f16) == 2048);
  CHECK(cast_one(DType::i32, 2051, DType::f16) == 2052);
  CHECK(cast_one(DType::i32, 70000, DType::f16) == INFINITY);
}

TEST_CASE("reduce over each axis of 2-d and 3-d tiles", "[interp]") {
  std::mt19937_64 rng(13);
  for (Shape shape : {Shape{4, 8}, Shape{2, 4, 8}}) {
    int64_t n = ir::num_elements(shape);
    for (DType t : {DType::f32, DType::f16, DType::i32, DType::i8, DType::u8, DType::u32, DType::u64}) {
      Buffer a("a", t, n);
      for (int64_t k = 0; k < n; ++k) {
        if (ir::is_float(t))
          a.set(k, k == 3 ? NAN : std::uniform_real_distribution<double>(-4, 4)(rng));
        else
          a.set_int(k, std::uniform_int_distribution<int64_t>(min_of(t), max_of(t))(rng));
      }
      for (int axis = 0; axis < int(shape.size()); ++axis) {
        for (auto kind : {ir::ReduceKind::sum, ir::ReduceKind::max, ir::ReduceKind::min}) {
          INFO(ir::reduce_kind_name(kind) << " of " << ir::shape_str(shape) << " "
                                          << ir::dtype_name(t) << " over axis " << axis);
          Buffer out = run_tile(t, {&a}, shape,
                                [&](KernelDef& k, auto v) { return k.b.reduce(kind, v[0], axis); });
          int64_t len = shape[axis], inner = 1;
          for (size_t d = axis + 1; d < shape.size(); ++d)
            inner *= shape[d];
          for (int64_t r = 0; r < n / len; ++r) {
            int64_t base = (r / inner) * len * inner + r % inner;
            if (ir::is_float(t)) {
              float acc = float(a.get(base));
              for (int64_t j = 1; j < len; ++j) {
                float x = float(a.get(base + j * inner));
                acc = kind == ir::ReduceKind::sum   ? acc + x
                      : kind == ir::ReduceKind::max ? float_binary_ref(OpKind::Max, acc, x)
                                                    : float_binary_ref(OpKind::Min, acc, x);
              }
              REQUIRE(same_float(out.get(r), round_ref(acc, t)));
            } else {
              __int128 acc = val(t, a.get_int(base));
              for (int64_t j = 1; j < len; ++j) {
                __int128 x = val(t, a.get_int(base + j * inner));
                acc = kind == ir::ReduceKind::sum   ? acc + x
                      : kind == ir::ReduceKind::max ? std::max(acc, x)
                                                    : std::min(acc, x);
              }
              REQUIRE(out.get_int(r) == int64_t(wrap_ref(acc, t)));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("permute, broadcast and splat move elements as specified", "[interp]") {
  Buffer a("a", DType::i32, 64);
  for (int64_t k = 0; k < 64; ++k)
    a.set_int(k, k);
  const Shape shape{2, 4, 8};
  std::vector<int64_t> perm{0, 1, 2};
  do {
    INFO("perm " << perm[0] << perm[1] << perm[2]);
    Buffer out = run_tile(DType::i32, {&a}, shape,
                          [&](KernelDef& k, auto v) { return k.b.permute(v[0], perm); });
    Shape rs{shape[perm[0]], shape[perm[1]], shape[perm[2]]};
    for (int64_t i = 0; i < rs[0]; ++i)
      for (int64_t j = 0; j < rs[1]; ++j)
        for (int64_t l = 0; l < rs[2]; ++l) {
          int64_t c[3];
          c[perm[0]] = i, c[perm[1]] = j, c[perm[2]] = l; // result dim d is operand dim perm[d]
          REQUIRE(out.get_int((i * rs[1] + j) * rs[2] + l) == (c[0] * 4 + c[1]) * 8 + c[2]);
        }
  } while (std::next_permutation(perm.begin(), perm.end()));

  Buffer row("a", DType::i32, 8);
  for (int64_t k = 0; k < 8; ++k)
    row.set_int(k, 10 + k);
  Buffer rows = run_tile(DType::i32, {&row}, {1, 8}, [](KernelDef& k, auto v) {
    return k.b.broadcast(v[0], {4, 8});
  });
  Buffer cols = run_tile(DType::i32, {&row}, {8, 1}, [](KernelDef& k, auto v) {
    return k.b.broadcast(v[0], {8, 4});
  });
  Buffer mid = run_tile(DType::i32, {&row}, {2, 1, 4}, [](KernelDef& k, auto v) {
    return k.b.broadcast(v[0], {2, 2, 4});
  });
  for (int64_t i = 0; i < 32; ++i) {
    CHECK(rows.get_int(i) == 10 + i % 8);
    CHECK(cols.get_int(i) == 10 + i / 4);
  }
  for (int64_t i = 0; i < 16; ++i)
    CHECK(mid.get_int(i) == 10 + (i / 8) * 4 + i % 4);
  Buffer splat = run_tile(DType::i32, {&row}, {8}, [](KernelDef& k, auto v) {
    return k.b.splat(k.b.reduce(ir::ReduceKind::max, v[0], 0), {2, 4});
  });
  for (int64_t i = 0; i < 8; ++i)
    CHECK(splat.get_int(i) == 17);
}

TEST_CASE("select and pointer comparisons pick between buffers", "[interp]") {
  KernelDef k("pick");
  auto& b = k.b;
  Value *x = k.ptr("x", DType::f32), *y = k.ptr("y", DType::f32), *out = k.ptr("out", DType::f32);
  Value* eq = k.ptr("eq", DType::i1);
  Value* lanes = b.arange(0, 8);
  Value* odd =
      k.op(OpKind::Eq, k.op(OpKind::Rem, lanes, b.splat(k.i32(2), {8})), b.splat(k.i32(1), {8}));
  Value* p = b.select(odd, k.at(x, lanes), k.at(y, lanes));
  b.store(k.at(out, lanes), b.load(p));
  b.store(k.at(eq, lanes), k.op(OpKind::Eq, p, k.at(x, lanes)));
  b.ret();
  Buffer xb("x", DType::f32, 8), yb("y", DType::f32, 8), ob("out", DType::f32, 8),
      eb("eq", DType::i1, 8);
  for (int64_t i = 0; i < 8; ++i)
    xb.set(i, i), yb.set(i, -i);
  interpret(k.fn, {1, 1, 1}, {Arg::of(xb), Arg::of(yb), Arg::of(ob), Arg::of(eb)});
  for (int64_t i = 0; i < 8; ++i) {
    CHECK(ob.get(i) == (i % 2 ? i : -i));
    CHECK(eb.get_int(i) == i % 2);
  }
  // One buffer passed for both: the pointers are equal everywhere.
  interpret(k.fn, {1, 1, 1}, {Arg::of(xb), Arg::of(xb), Arg::of(ob), Arg::of(eb)});
  for (int64_t i = 0; i < 8; ++i)
    CHECK(eb.get_int(i) == 1);
}
