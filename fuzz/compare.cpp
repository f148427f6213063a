#include <optional>
#include "fuzz/compare.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>

#include "abi/float16.h"
#include "abi/float8.h"

namespace tilec::fuzz {

int64_t ulp_bound(ir::DType t) {
  switch (t) {
  case ir::DType::f32: return 256;
  case ir::DType::f16:
  case ir::DType::bf16: return 16;
  case ir::DType::f8e4m3:
  case ir::DType::f8e5m2: return 2; // 3 and 2 mantissa bits: f32's error is below one ulp
  default: return 0;
  }
}

bool is_inexact_source(const ir::Op& op) {
  if (op.results.size() != 1 || op.result()->type.is_ptr() || !ir::is_float(op.result()->type.dtype())) return false;
  switch (op.kind) {
  case ir::OpKind::Exp:
  case ir::OpKind::Exp2:
  case ir::OpKind::Log:
  case ir::OpKind::Log2:
  case ir::OpKind::Sigmoid:
  case ir::OpKind::Sin: // the C library's on the CPU, libdevice's on the GPU
  case ir::OpKind::Cos:
  case ir::OpKind::Erf:
  case ir::OpKind::Pow:
  case ir::OpKind::Tanh:  // the GPU's (and the nvptx lowering's) from ex2 or a polynomial
  case ir::OpKind::Rsqrt: return true; // rsqrt.approx on the GPU
  case ir::OpKind::Reduce:
  case ir::OpKind::Scan: // a combine function may add, in the backend's order
    return op.attrs.reduce == ir::ReduceKind::sum || op.attrs.reduce == ir::ReduceKind::combine;
  default: return false;
  }
}

bool is_zero_sign_source(const ir::Op& op) {
  if (op.results.size() != 1 || op.result()->type.is_ptr() || !ir::is_float(op.result()->type.dtype())) return false;
  if (op.kind == ir::OpKind::Min || op.kind == ir::OpKind::Max) return true;
  return (op.kind == ir::OpKind::Reduce || op.kind == ir::OpKind::Scan) && op.attrs.reduce != ir::ReduceKind::sum;
}

namespace {

// How coarse an inexact value is: 0 for an exact one, else one more than the mantissa bits its
// dtype lacks against f32's 23 (f32 1, f16 14, bf16 17, f8e4m3 21, f8e5m2 22). An error of a
// few ulps in a coarse dtype is many ulps of a finer one the value is cast to later.
int mantissa_bits(ir::DType t) {
  switch (t) {
  case ir::DType::f16: return 10;
  case ir::DType::bf16: return 7;
  case ir::DType::f8e4m3: return 3;
  case ir::DType::f8e5m2: return 2;
  default: return 23;
  }
}
int coarseness(ir::DType t) { return 1 + 23 - mantissa_bits(t); }

// Per parameter: 0 when no value that `is_source` taints (or one computed from it) may be
// stored into the buffer it points to, else the coarsest such value's coarseness: the most of
// any tainted float value on the way (a cast to a coarser dtype keeps the taint, coarser).
std::vector<int> tainted_params(const ir::Function& fn, bool (*is_source)(const ir::Op&)) {
  size_t n = static_cast<size_t>(fn.num_values());
  std::vector<int> level(n, 0);
  std::vector<uint64_t> roots(n, 0); // pointer values: the parameters they may point into
  std::vector<int> tainted(64, 0);   // per parameter: the coarsest value its buffer may hold
  for (size_t i = 0; i < fn.params.size() && i < 64; ++i)
    if (fn.params[i]->type.is_ptr()) roots[fn.params[i]->id] = uint64_t(1) << i;
  bool changed = true;
  auto flow = [&](const ir::Value* to, int x, uint64_t r) {
    if (x > 0 && !to->type.is_ptr() && ir::is_float(to->type.dtype())) x = std::max(x, coarseness(to->type.dtype()));
    if (x > level[to->id] || (roots[to->id] | r) != roots[to->id]) {
      level[to->id] = std::max(level[to->id], x);
      roots[to->id] |= r;
      changed = true;
    }
  };
  auto taint = [&](uint64_t r, int x) {
    for (size_t i = 0; i < 64; ++i)
      if ((r >> i) & 1 && x > tainted[i]) {
        tainted[i] = x;
        changed = true;
      }
  };
  // The level a load from the buffers `r` gives.
  auto held = [&](uint64_t r) {
    int x = 0;
    for (size_t i = 0; i < 64; ++i)
      if ((r >> i) & 1) x = std::max(x, tainted[i]);
    return x;
  };
  // Loop-carried values make this a fixpoint; each round only raises levels.
  while (changed) {
    changed = false;
    ir::walk(const_cast<ir::Block&>(fn.body), [&](ir::Op& op) {
      int x = is_source(op) ? coarseness(op.result()->type.dtype()) : 0;
      uint64_t r = 0;
      for (const ir::Value* v : op.operands) {
        if (v->type.is_ptr()) r |= roots[v->id];
        else x = std::max(x, level[v->id]);
      }
      if (ir::is_atomic(op.kind)) { // the value (and cas's compare value) may reach the buffer
        int vx = std::max(level[op.operands[1]->id],
                          op.kind == ir::OpKind::AtomicCas ? level[op.operands[2]->id] : 0);
        if (vx) taint(roots[op.operands[0]->id], vx);
        flow(op.result(), held(roots[op.operands[0]->id]), 0);
        return;
      }
      switch (op.kind) {
      case ir::OpKind::For:
        for (size_t i = 3; i < op.operands.size(); ++i) {
          const ir::Value* init = op.operands[i];
          flow(op.region(0).args[i - 2], level[init->id], roots[init->id]);
        }
        return;
      case ir::OpKind::Yield: {
        const ir::Op* parent = op.parent->parent;
        for (size_t i = 0; i < op.operands.size(); ++i) {
          const ir::Value* y = op.operands[i];
          flow(parent->results[i], level[y->id], roots[y->id]);
          if (parent->kind == ir::OpKind::For) flow(parent->region(0).args[i + 1], level[y->id], roots[y->id]);
        }
        return;
      }
      case ir::OpKind::Store:
        if (level[op.operands[1]->id]) taint(roots[op.operands[0]->id], level[op.operands[1]->id]);
        return;
      case ir::OpKind::Load:
      case ir::OpKind::DescLoad: flow(op.result(), held(roots[op.operands[0]->id]), 0); return;
      case ir::OpKind::DescStore:
        if (level[op.operands.back()->id]) taint(roots[op.operands[0]->id], level[op.operands.back()->id]);
        return;
      default:
        for (const ir::Value* res : op.results) flow(res, res->type.is_ptr() ? 0 : x, res->type.is_ptr() ? r : 0);
      }
    });
  }
  std::vector<int> out(fn.params.size(), 0);
  for (size_t i = 0; i < fn.params.size() && i < 64; ++i) out[i] = tainted[i];
  return out;
}

} // namespace

std::vector<bool> inexact_params(const ir::Function& fn) {
  std::vector<int> levels = tainted_params(fn, is_inexact_source);
  return std::vector<bool>(levels.begin(), levels.end());
}

std::vector<std::optional<ir::DType>> inexact_dtypes(const ir::Function& fn) {
  std::vector<int> levels = tainted_params(fn, is_inexact_source);
  std::vector<std::optional<ir::DType>> out(levels.size());
  for (size_t i = 0; i < levels.size(); ++i) {
    const ir::Type& t = fn.params[i]->type;
    if (!levels[i] || !t.is_ptr() || !ir::is_float(t.dtype())) continue;
    out[i] = t.dtype();
    for (ir::DType c : {ir::DType::f16, ir::DType::bf16, ir::DType::f8e4m3, ir::DType::f8e5m2})
      if (coarseness(c) == levels[i] && coarseness(c) > coarseness(*out[i])) out[i] = c;
  }
  return out;
}

std::vector<bool> zero_sign_params(const ir::Function& fn) {
  std::vector<int> levels = tainted_params(fn, is_zero_sign_source);
  return std::vector<bool>(levels.begin(), levels.end());
}

namespace {

// The bit pattern of `v` (exactly representable in `t`).
int64_t raw_bits(double v, ir::DType t) {
  switch (t) {
  case ir::DType::f16: return f32_to_f16_bits(static_cast<float>(v));
  case ir::DType::bf16: return f32_to_bf16_bits(static_cast<float>(v));
  case ir::DType::f8e4m3: return f32_to_f8e4m3_bits(static_cast<float>(v));
  case ir::DType::f8e5m2: return f32_to_f8e5m2_bits(static_cast<float>(v));
  default: return std::bit_cast<uint32_t>(static_cast<float>(v));
  }
}

// The bits of `v` as an integer ordered like the values (+0 and -0 both 0).
int64_t ordered_bits(double v, ir::DType t) {
  int64_t bits = raw_bits(v, t), sign = t == ir::DType::f32 ? 0x80000000ll : ir::is_fp8(t) ? 0x80 : 0x8000;
  return bits & sign ? -(bits & (sign - 1)) : bits;
}

std::string describe(const launch::Buffer& b, size_t i) {
  if (ir::is_int(b.dtype)) return fmt::format("{}", b.get_int(i));
  double v = b.get(i);
  return fmt::format("{} ({:#x})", v, raw_bits(v, b.dtype));
}

} // namespace

int64_t ulp_distance(double a, double b, ir::DType t) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : -1;
  int64_t d = ordered_bits(a, t) - ordered_bits(b, t);
  return d < 0 ? -d : d;
}

BufferDiff compare_buffers(const launch::Buffer& want, const launch::Buffer& got, std::optional<ir::DType> inexact_in,
                           bool any_zero_sign) {
  BufferDiff r;
  internal_assert(want.dtype == got.dtype && want.count() == got.count(), "compared buffers match in type and size");
  bool fl = ir::is_float(want.dtype), inexact = inexact_in.has_value() && fl;
  // Inexact values are compared in ulps of the coarsest type they passed through (both rounded
  // to it: subnormals there are spaced as they are there).
  const ir::DType in = inexact ? *inexact_in : want.dtype;
  int64_t bound = inexact ? ulp_bound(in) : 0;
  for (size_t i = 0; i < want.count(); ++i) {
    bool same;
    int64_t d = 0;
    if (!fl) {
      same = want.get_int(i) == got.get_int(i);
    } else {
      double a = want.get(i), b = got.get(i);
      d = ulp_distance(a, b, in);
      // Bitwise unless inexact: +0 and -0 differ.
      same = d >= 0 && d <= bound && (inexact || any_zero_sign || std::isnan(a) || std::signbit(a) == std::signbit(b));
    }
    if (same) continue;
    if (r.mismatches++ == 0)
      r.first = fmt::format("{}[{}]: interpreter {}, emulator {}{}", want.name, i, describe(want, i), describe(got, i),
                            !fl ? "" : d < 0 ? " (one is NaN)"
                            : in != want.dtype ? fmt::format(" ({} ulps of {} apart; bound {})", d, ir::dtype_name(in), bound)
                                               : fmt::format(" ({} ulps apart; bound {})", d, bound));
  }
  return r;
}

} // namespace tilec::fuzz
