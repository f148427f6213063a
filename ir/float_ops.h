#pragma once
// The float ops as the IR defines them (ir/SEMANTICS.md), computed in f32 (the caller rounds
// to the result's dtype): one definition for the interpreter and constant folding, so the
// oracle and the folder cannot drift apart. The op tests (tests/interp/test_ops.cpp) keep
// their own independent reference.
#include <cmath>

#include "ir/ir.h"

namespace tilec::ir {

// min and max give the other operand when one is a NaN, quiet or signaling, as PTX's
// min.f32/max.f32 and LLVM's minnum/maxnum on x86 do (std::fmin/std::fmax return a NaN for a
// signaling NaN: an fp8 or f16 NaN with the top mantissa bit clear widens to one).
inline float float_min(float x, float y) { return std::isnan(x) ? y : std::isnan(y) ? x : std::fmin(x, y); }
inline float float_max(float x, float y) { return std::isnan(x) ? y : std::isnan(y) ? x : std::fmax(x, y); }

using FloatUnary = float (*)(float);
using FloatBinary = float (*)(float, float);

// The function of a float unary op kind; nullptr for a kind that is not one.
inline FloatUnary float_unary(OpKind k) {
  switch (k) {
  case OpKind::Exp: return [](float x) { return std::exp(x); };
  case OpKind::Exp2: return [](float x) { return std::exp2(x); };
  case OpKind::Log: return [](float x) { return std::log(x); };
  case OpKind::Log2: return [](float x) { return std::log2(x); };
  case OpKind::Tanh: return [](float x) { return std::tanh(x); };
  case OpKind::Sqrt: return [](float x) { return std::sqrt(x); };
  case OpKind::Rsqrt: return [](float x) { return 1.0f / std::sqrt(x); };
  case OpKind::Abs: return [](float x) { return std::fabs(x); };
  case OpKind::Neg: return [](float x) { return -x; };
  case OpKind::Sigmoid: return [](float x) { return 1.0f / (1.0f + std::exp(-x)); };
  case OpKind::Floor: return [](float x) { return std::floor(x); };
  case OpKind::Ceil: return [](float x) { return std::ceil(x); };
  case OpKind::Round: return [](float x) { return std::nearbyint(x); }; // to nearest, ties to even
  case OpKind::Sin: return [](float x) { return std::sin(x); };
  case OpKind::Cos: return [](float x) { return std::cos(x); };
  case OpKind::Erf: return [](float x) { return std::erf(x); };
  default: return nullptr;
  }
}

// The function of a float binary op kind; nullptr for a kind that is not one.
inline FloatBinary float_binary(OpKind k) {
  switch (k) {
  case OpKind::Add: return [](float x, float y) { return x + y; };
  case OpKind::Sub: return [](float x, float y) { return x - y; };
  case OpKind::Mul: return [](float x, float y) { return x * y; };
  case OpKind::Div: return [](float x, float y) { return x / y; };
  case OpKind::Rem: return [](float x, float y) { return std::fmod(x, y); };
  case OpKind::Min: return float_min;
  case OpKind::Max: return float_max;
  case OpKind::Pow: return [](float x, float y) { return std::pow(x, y); };
  default: return nullptr;
  }
}

} // namespace tilec::ir
