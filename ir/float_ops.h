#pragma once
// Float min and max as the IR defines them (ir/SEMANTICS.md): the other operand when one is a
// NaN, quiet or signaling, as PTX's min.f32/max.f32 and LLVM's minnum/maxnum on x86 give. One
// definition for the interpreter and constant folding: std::fmin/std::fmax return a NaN for a
// signaling NaN (an fp8 or f16 NaN with the top mantissa bit clear widens to one).
#include <cmath>

namespace tilec::ir {

inline float float_min(float x, float y) { return std::isnan(x) ? y : std::isnan(y) ? x : std::fmin(x, y); }
inline float float_max(float x, float y) { return std::isnan(x) ? y : std::isnan(y) ? x : std::fmax(x, y); }

} // namespace tilec::ir
