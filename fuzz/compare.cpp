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

// Per parameter: whether a value that `is_source` taints (or one computed from it) may be
// stored into the buffer it points to.
std::vector<bool> tainted_params(const ir::Function& fn, bool (*is_source)(const ir::Op&)) {
  size_t n = static_cast<size_t>(fn.num_values());
  std::vector<char> inexact(n, 0);
  std::vector<uint64_t> roots(n, 0); // pointer values: the parameters they may point into
  uint64_t tainted = 0;              // parameters whose buffers may hold inexact values
  for (size_t i = 0; i < fn.params.size() && i < 64; ++i)
    if (fn.params[i]->type.is_ptr()) roots[fn.params[i]->id] = uint64_t(1) << i;
  bool changed = true;
  auto flow = [&](const ir::Value* to, bool x, uint64_t r) {
    if ((x && !inexact[to->id]) || (roots[to->id] | r) != roots[to->id]) {
      inexact[to->id] |= x;
      roots[to->id] |= r;
      changed = true;
    }
  };
  auto taint = [&](uint64_t r) {
    if ((tainted | r) != tainted) {
      tainted |= r;
      changed = true;
    }
  };
  // Loop-carried values make this a fixpoint; each round only adds flags.
  while (changed) {
    changed = false;
    ir::walk(const_cast<ir::Block&>(fn.body), [&](ir::Op& op) {
      bool x = is_source(op);
      uint64_t r = 0;
      for (const ir::Value* v : op.operands) {
        if (v->type.is_ptr()) r |= roots[v->id];
        else x = x || inexact[v->id];
      }
      if (ir::is_atomic(op.kind)) { // the value (and cas's compare value) may reach the buffer
        bool vx = inexact[op.operands[1]->id] || (op.kind == ir::OpKind::AtomicCas && inexact[op.operands[2]->id]);
        if (vx) taint(roots[op.operands[0]->id]);
        flow(op.result(), (tainted & roots[op.operands[0]->id]) != 0, 0);
        return;
      }
      switch (op.kind) {
      case ir::OpKind::For:
        for (size_t i = 3; i < op.operands.size(); ++i) {
          const ir::Value* init = op.operands[i];
          flow(op.region(0).args[i - 2], inexact[init->id], roots[init->id]);
        }
        return;
      case ir::OpKind::Yield: {
        const ir::Op* parent = op.parent->parent;
        for (size_t i = 0; i < op.operands.size(); ++i) {
          const ir::Value* y = op.operands[i];
          flow(parent->results[i], inexact[y->id], roots[y->id]);
          if (parent->kind == ir::OpKind::For) flow(parent->region(0).args[i + 1], inexact[y->id], roots[y->id]);
        }
        return;
      }
      case ir::OpKind::Store:
        if (inexact[op.operands[1]->id]) taint(roots[op.operands[0]->id]);
        return;
      case ir::OpKind::Load: flow(op.result(), (tainted & roots[op.operands[0]->id]) != 0, 0); return;
      default:
        for (const ir::Value* res : op.results) flow(res, x && !res->type.is_ptr(), res->type.is_ptr() ? r : 0);
      }
    });
  }
  std::vector<bool> out(fn.params.size(), false);
  for (size_t i = 0; i < fn.params.size() && i < 64; ++i) out[i] = (tainted >> i) & 1;
  return out;
}

} // namespace

std::vector<bool> inexact_params(const ir::Function& fn) { return tainted_params(fn, is_inexact_source); }
std::vector<bool> zero_sign_params(const ir::Function& fn) { return tainted_params(fn, is_zero_sign_source); }

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

std::string describe(const interp::Buffer& b, size_t i) {
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

BufferDiff compare_buffers(const interp::Buffer& want, const interp::Buffer& got, bool inexact, bool any_zero_sign) {
  BufferDiff r;
  internal_assert(want.dtype == got.dtype && want.count() == got.count(), "compared buffers match in type and size");
  bool fl = ir::is_float(want.dtype);
  int64_t bound = inexact ? ulp_bound(want.dtype) : 0;
  for (size_t i = 0; i < want.count(); ++i) {
    bool same;
    int64_t d = 0;
    if (!fl) {
      same = want.get_int(i) == got.get_int(i);
    } else {
      double a = want.get(i), b = got.get(i);
      d = ulp_distance(a, b, want.dtype);
      // Bitwise unless inexact: +0 and -0 differ.
      same = d >= 0 && d <= bound && (inexact || any_zero_sign || std::isnan(a) || std::signbit(a) == std::signbit(b));
    }
    if (same) continue;
    if (r.mismatches++ == 0)
      r.first = fmt::format("{}[{}]: interpreter {}, emulator {}{}", want.name, i, describe(want, i), describe(got, i),
                            !fl ? "" : d < 0 ? " (one is NaN)"
                                             : fmt::format(" ({} ulps apart; bound {})", d, bound));
  }
  return r;
}

} // namespace tilec::fuzz
