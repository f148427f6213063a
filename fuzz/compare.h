#pragma once
// What "the interpreter and the emulator agree" means for a fuzz program (docs/TESTING.md "Differential
// fuzzing", ir/SEMANTICS.md "Backends agree"):
// - integer and i1 buffers: bitwise;
// - float buffers that no inexact value reaches: bitwise, except that any two NaNs are equal
//   (and +0 equals -0 where a min or max of zeros may reach);
// - float buffers an inexact value may reach: within ulp_bound ulps of the coarsest float
//   dtype the value passed through, both rounded to it (distance in representable values;
//   NaN only equals NaN, infinities only themselves).
// A value is inexact when an op whose result the semantics leave a few ulps open computes it
// (float exp, exp2, log, log2, sigmoid, tanh and rsqrt; float sum reductions, whose order is unspecified) or when it is
// computed from an inexact value. The generator feeds inexact values only to ops that keep
// their error within a few ulps (no subtraction, comparison or float-to-int cast of them), so
// the bound holds however the program combines them.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launch/args.h"
#include "ir/ir.h"

namespace tilec::fuzz {

// The ulp bound of inexact float outputs, per dtype.
int64_t ulp_bound(ir::DType t);

// Whether `op`'s result may differ between backends by a few ulps even when its operands agree.
bool is_inexact_source(const ir::Op& op);

// Per kernel parameter: whether an inexact value may be stored into (or atomically added to)
// the buffer it points to. False for scalars.
std::vector<bool> inexact_params(const ir::Function& fn);
// Per kernel parameter: the float dtype in whose ulps an output may differ (ulp_bound of it),
// none where no inexact value reaches the buffer: the coarsest float dtype an inexact value
// passed through on its way (a bf16 sum cast to f32: 16 bf16 ulps), else the buffer's own.
std::vector<std::optional<ir::DType>> inexact_dtypes(const ir::Function& fn);

// Whether `op`'s result may be a zero whose sign the semantics leave open: float min and max
// (and their reductions) of +0 and -0 return either.
bool is_zero_sign_source(const ir::Op& op);
// Per kernel parameter: whether such a zero may reach the buffer; there +0 equals -0.
std::vector<bool> zero_sign_params(const ir::Function& fn);

// Distance between two floats of dtype `t` in representable values of `t` (0 when equal, also
// for +0 and -0); -1 when exactly one is NaN.
int64_t ulp_distance(double a, double b, ir::DType t);

struct BufferDiff {
  int64_t mismatches = 0;
  std::string first; // the first mismatching element, described; empty when they agree
};
// Compares `got` with the interpreter's `want` element by element under the rules above:
// bitwise, or with `inexact_in` within ulp_bound(*inexact_in) ulps of that dtype (both values
// rounded to it); `any_zero_sign`: +0 equals -0.
BufferDiff compare_buffers(const launch::Buffer& want, const launch::Buffer& got, std::optional<ir::DType> inexact_in,
                           bool any_zero_sign = false);

} // namespace tilec::fuzz
