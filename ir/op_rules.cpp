#include "ir/op_rules.h"

#include <fmt/format.h>

#include <algorithm>

namespace tilec::ir {

std::string describe(const Value* v) {
  if (!v) return "<null>";
  return fmt::format("%{} ({})", v->id, v->type.str());
}

std::string describe_all(const std::vector<Value*>& values) {
  std::string out;
  for (const Value* v : values) out += (out.empty() ? "" : ", ") + describe(v);
  return out;
}

namespace {

std::string expect_count(const Op& op, size_t lo, size_t hi, size_t results) {
  if (op.operands.size() < lo || op.operands.size() > hi) {
    if (lo == hi) return fmt::format("expects {} operands, got {}", lo, op.operands.size());
    return fmt::format("expects {} to {} operands, got {}", lo, hi, op.operands.size());
  }
  if (op.results.size() != results)
    return fmt::format("expects {} results, got {}", results, op.results.size());
  for (Value* v : op.operands)
    if (!v) return "has a null operand";
  return "";
}

std::string same_shape(const Value* a, const Value* b) {
  if (a->type.shape != b->type.shape)
    return fmt::format("operands {} and {} differ in shape", describe(a), describe(b));
  return "";
}

std::string check_shape_dims(const Type& t, const Value* v) {
  for (int64_t d : t.shape)
    if (!is_pow2(d))
      return fmt::format("{} has dimension {} that is not a power of two", describe(v), d);
  return "";
}

std::string check_region_args(const Op& op, const Block& region, const std::vector<Type>& want,
                              std::string_view what) {
  if (region.args.size() != want.size())
    return fmt::format("{} region has {} arguments, expected {}", what, region.args.size(),
                       want.size());
  for (size_t i = 0; i < want.size(); ++i)
    if (region.args[i]->type != want[i])
      return fmt::format("{} region argument {} is {}, expected {}", what, i,
                         describe(region.args[i]), want[i].str());
  (void)op;
  return "";
}

std::string check_yield(const Block& region, const std::vector<Value*>& results,
                        std::string_view what) {
  const Op* term = region.terminator();
  if (!term || term->kind != OpKind::Yield) return fmt::format("{} region does not end in yield", what);
  if (term->operands.size() != results.size())
    return fmt::format("{} region yields {} values, the op has {} results", what,
                       term->operands.size(), results.size());
  for (size_t i = 0; i < results.size(); ++i)
    if (term->operands[i]->type != results[i]->type)
      return fmt::format("{} region yields {} for result {}", what, describe(term->operands[i]),
                         describe(results[i]));
  return "";
}

// A reduce or scan of kind combine has one region, (a, b) of the operand's element type as
// scalars, yielding one such scalar; every op in it works on scalars (no tiles, pointers,
// memory or control flow), so any backend can run it once per pair of elements. The other
// kinds have no region.
std::string check_combine(const Op& op, const Type& a) {
  if (op.attrs.reduce != ReduceKind::combine)
    return op.regions.empty() ? "" : fmt::format("kind {} takes no region", reduce_kind_name(op.attrs.reduce));
  if (op.regions.size() != 1) return "kind combine needs exactly one region, the combine function";
  const Type elem = scalar_type(a.dtype());
  std::string e;
  if (!(e = check_region_args(op, op.region(0), {elem, elem}, "combine")).empty()) return e;
  for (const auto& inner : op.region(0).ops) {
    if (!inner) continue;
    const OpKind k = inner->kind;
    if (!(is_elementwise(k) || k == OpKind::Constant || k == OpKind::Select || k == OpKind::Fma ||
          k == OpKind::Cast || k == OpKind::Bitcast || k == OpKind::Yield))
      return fmt::format("combine region holds {}; it may hold only elementwise ops, constant, select, fma, "
                         "cast and bitcast",
                         op_name(k));
    for (const Value* v : inner->operands)
      if (v && (!v->type.is_scalar() || v->type.is_ptr()))
        return fmt::format("combine region: {} reads {}, not a scalar", op_name(k), describe(v));
    for (const Value* v : inner->results)
      if (v && !v->type.is_scalar()) return fmt::format("combine region: {} gives {}, not a scalar", op_name(k), describe(v));
  }
  const Op* term = op.region(0).terminator();
  if (!term || term->kind != OpKind::Yield) return "combine region does not end in yield";
  if (term->operands.size() != 1 || term->operands[0]->type != elem)
    return fmt::format("combine region yields {}; it must yield one {}", (term->operands.empty() ? "nothing" : describe_all(term->operands)), elem.str());
  return "";
}

bool is_int_scalar(const Value* v) {
  return v->type.is_scalar() && !v->type.is_ptr() && is_int(v->type.dtype()) &&
         v->type.dtype() != DType::i1;
}

// The rules, one per op family (rule_for below picks one). Each runs once check_op_types
// has found no null result, and checks the operand and result counts before reading them.

// exp, log, abs, ...: one operand, not a pointer, result of its type; float only but abs, neg.
std::string check_unary(const Op& op) {
  const auto& in = op.operands;
  const auto& out = op.results;
  std::string e;
  if (!(e = expect_count(op, 1, 1, 1)).empty()) return e;
  if (in[0]->type.is_ptr()) return fmt::format("operand {} is a pointer", describe(in[0]));
  if (out[0]->type != in[0]->type)
    return fmt::format("result {} differs from operand {}", describe(out[0]), describe(in[0]));
  bool float_only = op.kind != OpKind::Abs && op.kind != OpKind::Neg;
  if (float_only && !is_float(in[0]->type.dtype()))
    return fmt::format("needs a float operand, got {}", describe(in[0]));
  if (!float_only && in[0]->type.dtype() == DType::i1)
    return fmt::format("is not defined on i1 operand {}", describe(in[0]));
  return "";
}

// add, shl, pow, ... and eq, lt, ...: two operands of one type; the result of that type, or
// i1 of its shape for a compare.
std::string check_binary_or_compare(const Op& op) {
  const auto& in = op.operands;
  const auto& out = op.results;
  std::string e;
  if (!(e = expect_count(op, 2, 2, 1)).empty()) return e;
  if (in[0]->type != in[1]->type)
    return fmt::format("operands {} and {} differ in type", describe(in[0]), describe(in[1]));
  if (in[0]->type.is_ptr() && !(op.kind == OpKind::Eq || op.kind == OpKind::Ne))
    return fmt::format("operand {} is a pointer", describe(in[0]));
  DType dt = in[0]->type.dtype();
  bool bitwise = op.kind == OpKind::And || op.kind == OpKind::Or || op.kind == OpKind::Xor;
  bool int_only = op.kind == OpKind::Shl || op.kind == OpKind::AShr || op.kind == OpKind::LShr ||
                  op.kind == OpKind::UMulHi;
  if ((bitwise || int_only) && is_float(dt)) return fmt::format("needs integer operands, got {}", describe(in[0]));
  if (op.kind == OpKind::Pow && !is_float(dt)) return fmt::format("needs float operands, got {}", describe(in[0]));
  if (dt == DType::i1 && is_binary(op.kind) && !bitwise)
    return fmt::format("is not defined on i1 operands ({})", describe(in[0]));
  Type want = is_compare(op.kind) ? tile_type(DType::i1, in[0]->type.shape) : in[0]->type;
  if (out[0]->type != want)
    return fmt::format("result {} should be {}", describe(out[0]), want.str());
  return "";
}

// program_id, num_programs: no operands, axis 0 to 2, an i32 scalar.
std::string check_program_index(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 0, 0, 1)).empty()) return e;
  if (op.attrs.axis < 0 || op.attrs.axis > 2)
    return fmt::format("axis {} is not 0, 1 or 2", op.attrs.axis);
  if (op.results[0]->type != scalar_type(DType::i32))
    return fmt::format("result {} should be i32", describe(op.results[0]));
  return "";
}

std::string check_arange(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 0, 0, 1)).empty()) return e;
  const Value* out = op.results[0];
  if (out->type.rank() != 1 || out->type.is_ptr() || out->type.dtype() != DType::i32)
    return fmt::format("result {} should be a 1-d i32 tile", describe(out));
  return check_shape_dims(out->type, out);
}

std::string check_constant(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 0, 0, 1)).empty()) return e;
  const Value* out = op.results[0];
  if (out->type.is_ptr()) return "cannot make a pointer constant";
  if (op.attrs.value.is_float && !is_float(out->type.dtype()))
    return fmt::format("float value {} for integer result {}", op.attrs.value.f, describe(out));
  return check_shape_dims(out->type, out);
}

std::string check_splat(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 1, 1, 1)).empty()) return e;
  const Value *in = op.operands[0], *out = op.results[0];
  if (!in->type.is_scalar()) return fmt::format("operand {} is not a scalar", describe(in));
  if (out->type.elem != in->type.elem || out->type.is_scalar())
    return fmt::format("result {} should be a tile of {}", describe(out), in->type.elem.str());
  return check_shape_dims(out->type, out);
}

std::string check_broadcast(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 1, 1, 1)).empty()) return e;
  const Value *in = op.operands[0], *out = op.results[0];
  const Type &a = in->type, &r = out->type;
  if (r.elem != a.elem || r.rank() != a.rank())
    return fmt::format("result {} must keep the element type and rank of {}", describe(out), describe(in));
  for (int i = 0; i < a.rank(); ++i)
    if (a.shape[i] != r.shape[i] && a.shape[i] != 1)
      return fmt::format("cannot broadcast {} to {}: dimension {} is {}, not 1", describe(in), shape_str(r.shape), i,
                         a.shape[i]);
  return check_shape_dims(r, out);
}

std::string check_expand_dims(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 1, 1, 1)).empty()) return e;
  const Value *in = op.operands[0], *out = op.results[0];
  const Type& a = in->type;
  if (op.attrs.axis < 0 || op.attrs.axis > a.rank())
    return fmt::format("axis {} out of range for {}", op.attrs.axis, describe(in));
  Shape s = a.shape;
  s.insert(s.begin() + op.attrs.axis, 1);
  if (out->type != a.with_shape(s))
    return fmt::format("result {} should be {}", describe(out), a.with_shape(s).str());
  return "";
}

std::string check_reshape(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 1, 1, 1)).empty()) return e;
  const Value *in = op.operands[0], *out = op.results[0];
  if (out->type.elem != in->type.elem || num_elements(out->type.shape) != num_elements(in->type.shape))
    return fmt::format("cannot reshape {} to {}", describe(in), describe(out));
  return check_shape_dims(out->type, out);
}

std::string check_permute(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 1, 1, 1)).empty()) return e;
  const Value *in = op.operands[0], *out = op.results[0];
  const Type& a = in->type;
  const auto& p = op.attrs.perm;
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < static_cast<int>(sorted.size()); ++i)
    if (sorted[i] != i) return fmt::format("[{}] is not a permutation", fmt::join(p, ", "));
  if (static_cast<int>(p.size()) != a.rank())
    return fmt::format("permutation of {} dims for {}", p.size(), describe(in));
  Shape s;
  for (int64_t d : p) s.push_back(a.shape[d]);
  if (out->type != a.with_shape(s))
    return fmt::format("result {} should be {}", describe(out), a.with_shape(s).str());
  return "";
}

std::string check_addptr(const Op& op) {
  const auto& in = op.operands;
  std::string e;
  if (!(e = expect_count(op, 2, 2, 1)).empty()) return e;
  const Value* out = op.results[0];
  if (!in[0]->type.is_ptr()) return fmt::format("operand {} is not a pointer", describe(in[0]));
  if (in[1]->type.is_ptr() || !is_int(in[1]->type.dtype()) || in[1]->type.dtype() == DType::i1)
    return fmt::format("offset {} is not an integer", describe(in[1]));
  if (!(e = same_shape(in[0], in[1])).empty()) return e;
  if (out->type != in[0]->type) return fmt::format("result {} should be {}", describe(out), in[0]->type.str());
  return "";
}

// ptr [, mask [, other]]: the pointees' tile; the mask i1 of the pointers' shape.
std::string check_load(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 1, 3, 1)).empty()) return e;
  const Value *ptr = op.operands[0], *out = op.results[0];
  const Type& p = ptr->type;
  if (!p.is_ptr()) return fmt::format("address {} is not a pointer", describe(ptr));
  Type want = tile_type(p.dtype(), p.shape);
  if (out->type != want) return fmt::format("result {} should be {}", describe(out), want.str());
  if (Value* m = op.mask()) {
    if (m->type != tile_type(DType::i1, p.shape))
      return fmt::format("mask {} should be {}", describe(m), tile_type(DType::i1, p.shape).str());
  }
  if (Value* o = op.other())
    if (o->type != want) return fmt::format("other {} should be {}", describe(o), want.str());
  return "";
}

// base, then per dim (outermost first) its size, its stride in elements and the block's
// offset: scalar integers; the block is the result's (or the stored value's) shape.
std::string check_desc_access(const Op& op) {
  const auto& in = op.operands;
  const bool store = op.kind == OpKind::DescStore;
  const size_t fixed = store ? 2 : 1;
  const int64_t boxes = op.attrs.boxes;
  if (boxes < 1 || (boxes > 1 && store)) return fmt::format("has {} boxes: a desc_load gathers 1 or more, a desc_store 1", boxes);
  const size_t extra = size_t(boxes - 1); // dim 0's offsets past the first
  if (op.operands.size() < fixed + 3 + extra || (op.operands.size() - fixed - extra) % 3 != 0)
    return fmt::format("expects a base{}, then a size, a stride and an offset per dim{}; got {} operands",
                       store ? " and a value" : "", boxes > 1 ? fmt::format(" ({} offsets for dim 0)", boxes) : "",
                       op.operands.size());
  if (op.results.size() != (store ? 0u : 1u)) return fmt::format("expects {} results", store ? 0 : 1);
  for (Value* v : op.operands)
    if (!v) return "has a null operand";
  const size_t rank = desc_rank(op);
  const Type& base = in[0]->type;
  if (!base.is_ptr() || base.rank() != 0) return fmt::format("base {} is not a scalar pointer", describe(in[0]));
  for (size_t i = 1; i < 1 + 3 * rank + extra; ++i) {
    const Type& t = in[i]->type;
    if (t.is_ptr() || t.rank() != 0 || !is_int(t.dtype()) || t.dtype() == DType::i1)
      return fmt::format("{} {} is not an integer scalar", i <= rank ? "size" : i <= 2 * rank ? "stride" : "offset",
                         describe(in[i]));
  }
  const Value* block = store ? in.back() : op.results[0];
  if (int(rank) != block->type.rank() || block->type.is_ptr() || block->type.dtype() != base.dtype())
    return fmt::format("{} {} should be a rank-{} tile of {}", store ? "value" : "result", describe(block), rank,
                       base.elem.str());
  if (boxes > 1 && block->type.shape[0] % boxes != 0)
    return fmt::format("gathers {} boxes, which do not divide the block's {} rows", boxes, block->type.shape[0]);
  return check_shape_dims(block->type, block);
}

// store: ptr, value [, mask]; atomic_*: the same, giving the old values; atomic_cas: ptr,
// compare value, value [, mask]. Atomics on f32, i32 and u32 (the bitwise ones integers only).
std::string check_store_or_atomic(const Op& op) {
  const auto& in = op.operands;
  const bool atomic = op.kind != OpKind::Store, cas = op.kind == OpKind::AtomicCas;
  std::string e;
  if (!(e = expect_count(op, cas ? 3 : 2, cas ? 4 : 3, atomic ? 1 : 0)).empty()) return e;
  const Type& p = in[0]->type;
  if (!p.is_ptr()) return fmt::format("address {} is not a pointer", describe(in[0]));
  Type want = tile_type(p.dtype(), p.shape);
  for (size_t i = 1; i < (cas ? 3u : 2u); ++i)
    if (in[i]->type != want)
      return fmt::format("{} {} should be {}", cas && i == 1 ? "compare value" : "value", describe(in[i]), want.str());
  if (Value* m = op.mask())
    if (m->type != tile_type(DType::i1, p.shape))
      return fmt::format("mask {} should be {}", describe(m), tile_type(DType::i1, p.shape).str());
  if (atomic) {
    const Value* out = op.results[0];
    if (out->type != want) return fmt::format("result {} should be {}", describe(out), want.str());
    const bool bits = op.kind == OpKind::AtomicAnd || op.kind == OpKind::AtomicOr || op.kind == OpKind::AtomicXor;
    const bool i32 = p.dtype() == DType::i32 || p.dtype() == DType::u32;
    if (bits ? !i32 : p.dtype() != DType::f32 && !i32)
      return fmt::format("{} supports {}, not {}", op_name(op.kind), bits ? "i32 and u32" : "f32, i32 and u32",
                         p.elem.str());
  }
  return "";
}

std::string check_select(const Op& op) {
  const auto& in = op.operands;
  std::string e;
  if (!(e = expect_count(op, 3, 3, 1)).empty()) return e;
  const Value* out = op.results[0];
  if (in[0]->type.is_ptr() || in[0]->type.dtype() != DType::i1)
    return fmt::format("condition {} is not i1", describe(in[0]));
  if (in[1]->type != in[2]->type)
    return fmt::format("operands {} and {} differ in type", describe(in[1]), describe(in[2]));
  if (!(e = same_shape(in[0], in[1])).empty()) return e;
  if (out->type != in[1]->type) return fmt::format("result {} should be {}", describe(out), in[1]->type.str());
  return "";
}

std::string check_fma(const Op& op) {
  const auto& in = op.operands;
  std::string e;
  if (!(e = expect_count(op, 3, 3, 1)).empty()) return e;
  const Value* out = op.results[0];
  if (in[0]->type != in[1]->type || in[0]->type != in[2]->type)
    return fmt::format("operands {}, {} and {} differ in type", describe(in[0]), describe(in[1]), describe(in[2]));
  if (in[0]->type.is_ptr() || !is_float(in[0]->type.dtype()))
    return fmt::format("needs float operands, got {}", describe(in[0]));
  if (out->type != in[0]->type) return fmt::format("result {} should be {}", describe(out), in[0]->type.str());
  return "";
}

std::string check_assert(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 1, 1, 0)).empty()) return e;
  const Value* cond = op.operands[0];
  if (cond->type.is_ptr() || cond->type.dtype() != DType::i1)
    return fmt::format("condition {} is not i1", describe(cond));
  return "";
}

std::string check_print(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 1, 1, 0)).empty()) return e;
  if (op.operands[0]->type.is_ptr()) return fmt::format("cannot print pointer {}", describe(op.operands[0]));
  return "";
}

// cast, bitcast: no pointers, the shape kept; a bitcast keeps the width too (i1 excluded).
std::string check_cast(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 1, 1, 1)).empty()) return e;
  const Value *in = op.operands[0], *out = op.results[0];
  if (in->type.is_ptr() || out->type.is_ptr()) return fmt::format("cannot {} pointers", op_name(op.kind));
  if (out->type.shape != in->type.shape)
    return fmt::format("result {} differs in shape from {}", describe(out), describe(in));
  if (op.kind == OpKind::Bitcast && (in->type.dtype() == DType::i1 || out->type.dtype() == DType::i1 ||
                                     dtype_bits(in->type.dtype()) != dtype_bits(out->type.dtype())))
    return fmt::format("{} and {} differ in width (bitcast needs equal widths, i1 excluded)", describe(in),
                       describe(out));
  return "";
}

// a [M, K], b [K, N] floats of one dtype, acc and result [M, N] f32.
std::string check_dot(const Op& op) {
  const auto& in = op.operands;
  std::string e;
  if (!(e = expect_count(op, 3, 3, 1)).empty()) return e;
  const Value* out = op.results[0];
  const Type &a = in[0]->type, &b = in[1]->type, &c = in[2]->type;
  if (a.rank() != 2 || b.rank() != 2 || a.shape[1] != b.shape[0])
    return fmt::format("operands {} and {} are not [M, K] and [K, N]", describe(in[0]), describe(in[1]));
  if (a.is_ptr() || b.is_ptr() || !is_float(a.dtype()) || a.elem != b.elem)
    return fmt::format("operands {} and {} must be floats of one dtype", describe(in[0]), describe(in[1]));
  Type want = tile_type(DType::f32, {a.shape[0], b.shape[1]});
  if (c != want) return fmt::format("accumulator {} should be {}", describe(in[2]), want.str());
  if (out->type != want) return fmt::format("result {} should be {}", describe(out), want.str());
  return "";
}

// The axis removed from the shape; kind combine checked by check_combine.
std::string check_reduce(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 1, 1, 1)).empty()) return e;
  const Value *in = op.operands[0], *out = op.results[0];
  const Type& a = in->type;
  if (a.is_ptr() || a.dtype() == DType::i1) return fmt::format("cannot reduce {}", describe(in));
  if (op.attrs.axis < 0 || op.attrs.axis >= a.rank())
    return fmt::format("axis {} out of range for {}", op.attrs.axis, describe(in));
  Shape s = a.shape;
  s.erase(s.begin() + op.attrs.axis);
  if (out->type != a.with_shape(s))
    return fmt::format("result {} should be {}", describe(out), a.with_shape(s).str());
  return check_combine(op, a);
}

// The operand's type kept; kind combine checked by check_combine.
std::string check_scan(const Op& op) {
  std::string e;
  if (!(e = expect_count(op, 1, 1, 1)).empty()) return e;
  const Value *in = op.operands[0], *out = op.results[0];
  const Type& a = in->type;
  if (a.is_ptr() || a.dtype() == DType::i1 || a.is_scalar()) return fmt::format("cannot scan {}", describe(in));
  if (op.attrs.axis < 0 || op.attrs.axis >= a.rank())
    return fmt::format("axis {} out of range for {}", op.attrs.axis, describe(in));
  if (out->type != a) return fmt::format("result {} should be {}", describe(out), a.str());
  return check_combine(op, a);
}

// lb, ub, step (signed integer scalars of one type), then the carried values; the body
// takes (iv, carried...) and yields the carried values' types.
std::string check_for(const Op& op) {
  const auto& in = op.operands;
  const auto& out = op.results;
  std::string e;
  if (in.size() < 3) return fmt::format("expects at least 3 operands, got {}", in.size());
  for (int i = 0; i < 3; ++i)
    if (!is_int_scalar(in[i]) || is_unsigned(in[i]->type.dtype()))
      return fmt::format("bound {} must be a signed integer scalar (control flow is uniform)", describe(in[i]));
  if (in[0]->type != in[1]->type || in[0]->type != in[2]->type)
    return fmt::format("bounds {}, {}, {} differ in type", describe(in[0]), describe(in[1]), describe(in[2]));
  if (op.attrs.num_stages < 1 || op.attrs.num_stages > kMaxPipelineStages)
    return fmt::format("stages {} must be from 1 to {}", op.attrs.num_stages, kMaxPipelineStages);
  if (out.size() != in.size() - 3)
    return fmt::format("has {} carried values but {} results", in.size() - 3, out.size());
  std::vector<Type> args{in[0]->type};
  for (size_t i = 3; i < in.size(); ++i) {
    if (in[i]->type != out[i - 3]->type)
      return fmt::format("initial value {} and result {} differ in type", describe(in[i]), describe(out[i - 3]));
    args.push_back(in[i]->type);
  }
  if (op.regions.size() != 1) return "needs exactly one region";
  if (!(e = check_region_args(op, op.region(0), args, "body")).empty()) return e;
  return check_yield(op.region(0), out, "body");
}

// An i1 scalar condition; then and else take nothing and both yield the results.
std::string check_if(const Op& op) {
  const auto& in = op.operands;
  std::string e;
  if (in.size() != 1) return fmt::format("expects 1 operand, got {}", in.size());
  if (in[0]->type != scalar_type(DType::i1))
    return fmt::format("condition {} must be an i1 scalar (control flow is uniform)", describe(in[0]));
  if (op.regions.size() != 2) return "needs a then and an else region";
  if (!(e = check_region_args(op, op.region(0), {}, "then")).empty()) return e;
  if (!(e = check_region_args(op, op.region(1), {}, "else")).empty()) return e;
  if (!(e = check_yield(op.region(0), op.results, "then")).empty()) return e;
  return check_yield(op.region(1), op.results, "else");
}

// Its operands are checked against the parent's results by check_yield.
std::string check_yield_op(const Op& op) {
  if (!op.results.empty()) return "yield has no results";
  if (!op.parent || !op.parent->parent || !has_yield_regions(op.parent->parent->kind))
    return "yield outside a for, if or combine region";
  return "";
}

std::string check_return(const Op& op) {
  if (!op.operands.empty() || !op.results.empty()) return "return takes no operands";
  if (!op.parent || op.parent->parent) return "return outside the kernel body";
  return "";
}

using Rule = std::string (*)(const Op&);

// The rule of each kind: a switch over every OpKind without a default, so that an op added
// to ir/ops.def without a rule is a -Wswitch error.
Rule rule_for(OpKind kind) {
  switch (kind) {
  TILEC_UNARY_OPS(TILEC_OP_CASE) return check_unary;
  TILEC_BINARY_OPS(TILEC_OP_CASE)
  TILEC_COMPARE_OPS(TILEC_OP_CASE) return check_binary_or_compare;
  case OpKind::ProgramId:
  case OpKind::NumPrograms: return check_program_index;
  case OpKind::Arange: return check_arange;
  case OpKind::Constant: return check_constant;
  case OpKind::Splat: return check_splat;
  case OpKind::Broadcast: return check_broadcast;
  case OpKind::ExpandDims: return check_expand_dims;
  case OpKind::Reshape: return check_reshape;
  case OpKind::Permute: return check_permute;
  case OpKind::AddPtr: return check_addptr;
  case OpKind::Load: return check_load;
  case OpKind::DescLoad:
  case OpKind::DescStore: return check_desc_access;
  case OpKind::Store:
  TILEC_ATOMIC_RMW_OPS(TILEC_OP_CASE)
  case OpKind::AtomicCas: return check_store_or_atomic;
  case OpKind::Select: return check_select;
  case OpKind::Fma: return check_fma;
  case OpKind::Assert: return check_assert;
  case OpKind::Print: return check_print;
  case OpKind::Cast:
  case OpKind::Bitcast: return check_cast;
  case OpKind::Dot: return check_dot;
  case OpKind::Reduce: return check_reduce;
  case OpKind::Scan: return check_scan;
  case OpKind::For: return check_for;
  case OpKind::If: return check_if;
  case OpKind::Yield: return check_yield_op;
  case OpKind::Return: return check_return;
  }
  return nullptr;
}

} // namespace

std::string check_op_types(const Op& op) {
  for (Value* r : op.results)
    if (!r) return "has a null result";
  Rule rule = rule_for(op.kind);
  if (!rule) internal_fail(fmt::format("no typing rule for op {}", op_name(op.kind)));
  return rule(op);
}

} // namespace tilec::ir
