#pragma once
// Small conveniences for building interpreter test kernels with ir::Builder
// directly (the tests do not depend on the DSL).
#include <cmath>
#include <random>
#include <vector>

#include "interp/interpreter.h"
#include "ir/builder.h"
#include "abi/float16.h"
#include "abi/float8.h"

namespace tilec::interp::test {

using ir::DType;
using ir::OpKind;
using ir::Shape;
using ir::Value;

inline ir::Type ptr_type(DType t) {
  return {{t, true}, {}};
}

// A kernel under construction: the function and a builder appending to its body.
struct KernelDef {
  explicit KernelDef(std::string name) : fn(std::move(name)), b(fn) { b.loc = {"test.cpp", 1, 1}; }
  ir::Function fn;
  ir::Builder b;

  Value* ptr(const std::string& name, DType t) { return fn.add_param(name, ptr_type(t)); }
  Value* scalar(const std::string& name, DType t) { return fn.add_param(name, ir::scalar_type(t)); }
  Value* i32(int64_t v) {
    return b.constant(ir::scalar_type(DType::i32), ir::ConstValue::of_int(v));
  }
  Value* full(Shape s, DType t, double v) {
    return b.constant(ir::tile_type(t, std::move(s)), ir::is_float(t)
                                                          ? ir::ConstValue::of_float(v)
                                                          : ir::ConstValue::of_int(int64_t(v)));
  }
  Value* op(OpKind k, Value* x, Value* y) { return b.binary(k, x, y); }
  // Binary op of a tile and a scalar splatted to its shape.
  Value* op_s(OpKind k, Value* x, Value* s) { return b.binary(k, x, b.splat(s, x->type.shape)); }
  // v[:, None] broadcast to [len, n] and v[None, :] broadcast to [m, len].
  Value* col(Value* v, int64_t n) {
    return b.broadcast(b.expand_dims(v, 1), {v->type.shape[0], n});
  }
  Value* row(Value* v, int64_t m) {
    return b.broadcast(b.expand_dims(v, 0), {m, v->type.shape[0]});
  }
  Value* at(Value* p, Value* offsets) { return b.addptr(b.splat(p, offsets->type.shape), offsets); }
};

inline launch::Buffer random_buffer(std::string name, DType t, size_t n, std::mt19937& rng, double lo,
                            double hi) {
  launch::Buffer buf(std::move(name), t, n);
  std::uniform_real_distribution<double> d(lo, hi);
  for (size_t i = 0; i < n; ++i)
    buf.set(i, ir::is_float(t) ? d(rng) : std::floor(d(rng)));
  return buf;
}

// Rounds an f32 to `t` the way the IR defines it (nearest even), for references.
inline float round_ref(float x, DType t) {
  if (t == DType::f16) return f16_bits_to_f32(f32_to_f16_bits(x));
  if (t == DType::bf16) return bf16_bits_to_f32(f32_to_bf16_bits(x));
  if (t == DType::f8e4m3) return f8e4m3_bits_to_f32(f32_to_f8e4m3_bits(x));
  if (t == DType::f8e5m2) return f8e5m2_bits_to_f32(f32_to_f8e5m2_bits(x));
  return x;
}

inline bool same_float(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

} // namespace tilec::interp::test
