// Op-focused kernels: every op kind and every dtype, masks with ragged tails,
// reductions over each axis, loops with carried values, nested if, dot at
// several shapes. Each must compile for sm_80 and sm_90 and pass ptxas with
// zero spills.
#include <set>

#include "tests/codegen/codegen_test_util.h"
#include "tests/codegen/emu_harness.h"

using namespace tilec;
using namespace tilec::codegen;
using namespace tilec::codegen::test;
using ir::DType;
using ir::OpKind;

namespace {

std::set<OpKind> g_lowered; // op kinds the kernels below have compiled

void note_ops(const ir::Function& fn) {
  ir::walk(const_cast<ir::Block&>(fn.body), [](ir::Op& op) { g_lowered.insert(op.kind); });
}

void compile_checked(const ir::Function& fn, int num_warps = 4) {
  note_ops(fn);
  compile_all_archs(fn, num_warps);
}

// Offsets of a row-major [rows, cols] tile at program `pid` and the ragged
// mask offs < n.
struct Tile2d {
  ir::Value* offs;
  ir::Value* mask;
};
Tile2d tile2d(ir::Builder& b, ir::Value* n, int64_t rows, int64_t cols) {
  ir::Shape s{rows, cols};
  auto* r = b.broadcast(b.expand_dims(b.arange(0, rows), 1), s);
  auto* c = b.broadcast(b.expand_dims(b.arange(0, cols), 0), s);
  auto* base = b.splat(b.binary(OpKind::Mul, b.program_id(0), i32c(b, rows * cols)), s);
  auto* offs = b.binary(OpKind::Add, base, b.binary(OpKind::Add, b.binary(OpKind::Mul, r, splat_i32(b, cols, s)), c));
  return {offs, b.binary(OpKind::Lt, offs, b.splat(n, s))};
}

bool unary_ok(OpKind k, DType t) {
  if (k == OpKind::Abs || k == OpKind::Neg) return t != DType::i1;
  return ir::is_float(t);
}
bool binary_ok(OpKind k, DType t) {
  bool bitwise = k == OpKind::And || k == OpKind::Or || k == OpKind::Xor;
  if (bitwise) return ir::is_int(t);
  if (k == OpKind::Pow) return ir::is_float(t);
  if (k == OpKind::Shl || k == OpKind::AShr || k == OpKind::LShr || k == OpKind::UMulHi)
    return ir::is_int(t) && t != DType::i1;
  return t != DType::i1;
}

// Every unary, binary, compare op and select on one dtype, each result stored.
ir::Kernel elementwise_kernel(DType t) {
  auto fn = std::make_shared<ir::Function>(fmt::format("elementwise_{}", ir::dtype_name(t)));
  ir::Builder b(*fn);
  auto* x = fn->add_param("x", ptr_type(t));
  auto* y = fn->add_param("y", ptr_type(t));
  auto* out = fn->add_param("out", ptr_type(t));
  auto* outb = fn->add_param("outb", ptr_type(DType::i1));
  auto* n = fn->add_param("n", ir::scalar_type(DType::i32));
  const int64_t rows = 8, cols = 32;
  ir::Shape s{rows, cols};
  Tile2d tl = tile2d(b, n, rows, cols);
  auto at = [&](ir::Value* p, int slot) {
    return b.addptr(b.splat(p, s), b.binary(OpKind::Add, tl.offs, splat_i32(b, slot * 4096, s)));
  };
  auto* xv = b.load(at(x, 0), tl.mask);
  auto* yv = b.load(at(y, 0), tl.mask, b.constant(ir::tile_type(t, s), ir::ConstValue::of_int(1)));
  int slot = 0;
#define TILEC_X(E, N)                                                                              \
  if (unary_ok(OpKind::E, t)) b.store(at(out, ++slot), b.unary(OpKind::E, xv), tl.mask);
  TILEC_UNARY_OPS(TILEC_X)
#undef TILEC_X
#define TILEC_X(E, N)                                                                              \
  if (binary_ok(OpKind::E, t)) b.store(at(out, ++slot), b.binary(OpKind::E, xv, yv), tl.mask);
  TILEC_BINARY_OPS(TILEC_X)
#undef TILEC_X
  ir::Value* last = nullptr;
#define TILEC_X(E, N)                                                                              \
  last = b.binary(OpKind::E, xv, yv);                                                              \
  b.store(at(outb, ++slot), last, tl.mask);
  TILEC_COMPARE_OPS(TILEC_X)
#undef TILEC_X
  b.store(at(out, ++slot), b.select(last, xv, yv), tl.mask);
  if (ir::is_float(t)) b.store(at(out, ++slot), b.fma(xv, yv, xv), tl.mask);
  if (t != DType::i1) { // to an integer of the width and back
    DType same = ir::dtype_bits(t) == 8 ? DType::i8 : ir::dtype_bits(t) == 16 ? DType::i16 : ir::dtype_bits(t) == 32 ? DType::i32 : DType::i64;
    b.store(at(out, ++slot), b.bitcast(b.bitcast(xv, same), t), tl.mask);
  }
  b.ret();
  return fn;
}

// Casts from `from` to every dtype.
ir::Kernel cast_kernel(DType from) {
  auto fn = std::make_shared<ir::Function>(fmt::format("cast_from_{}", ir::dtype_name(from)));
  ir::Builder b(*fn);
  auto* x = fn->add_param("x", ptr_type(from));
  std::vector<ir::Value*> outs;
  for (DType to : ir::kAllDTypes) outs.push_back(fn->add_param(fmt::format("out_{}", ir::dtype_name(to)), ptr_type(to)));
  auto* n = fn->add_param("n", ir::scalar_type(DType::i32));
  ir::Shape s{4, 64};
  Tile2d tl = tile2d(b, n, 4, 64);
  auto* xv = b.load(b.addptr(b.splat(x, s), tl.offs), tl.mask);
  for (size_t i = 0; i < outs.size(); ++i) {
    DType to = ir::kAllDTypes[i];
    ir::Value* v = to == from ? xv : b.create(OpKind::Cast, {xv}, {ir::tile_type(to, s)})->result();
    b.store(b.addptr(b.splat(outs[i], s), tl.offs), v, tl.mask);
  }
  b.ret();
  return fn;
}

// sum/max/min over each axis of a 3-d tile, and over everything.
ir::Kernel reduce_kernel(DType t, ir::Shape s) {
  auto fn = std::make_shared<ir::Function>(fmt::format("reduce_{}", ir::dtype_name(t)));
  ir::Builder b(*fn);
  auto* x = fn->add_param("x", ptr_type(t));
  auto* out = fn->add_param("out", ptr_type(t));
  // offsets of a row-major 3-d tile
  ir::Value* offs = nullptr;
  int64_t stride = 1;
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    ir::Shape one(s.size(), 1);
    one[d] = s[d];
    ir::Value* a = b.broadcast(b.reshape(b.arange(0, s[d]), one), s);
    a = b.binary(OpKind::Mul, a, splat_i32(b, stride, s));
    offs = offs ? b.binary(OpKind::Add, offs, a) : a;
    stride *= s[d];
  }
  auto* mask = b.binary(OpKind::Lt, offs, splat_i32(b, ir::num_elements(s) - 3, s));
  auto* xv = b.load(b.addptr(b.splat(x, s), offs), mask);
  int64_t slot = 0;
  for (ir::ReduceKind k : {ir::ReduceKind::sum, ir::ReduceKind::max, ir::ReduceKind::min, ir::ReduceKind::prod}) {
    for (int axis = 0; axis < static_cast<int>(s.size()); ++axis) {
      ir::Value* r = b.reduce(k, xv, axis);
      const ir::Shape& rs = r->type.shape;
      if (rs.empty()) {
        b.store(b.addptr(out, i32c(b, (slot++) * 4096)), r);
        continue;
      }
      ir::Value* ro = nullptr;
      int64_t st = 1;
      for (int d = static_cast<int>(rs.size()) - 1; d >= 0; --d) {
        ir::Value* a = b.arange(0, rs[d]);
        ir::Shape one(rs.size(), 1);
        one[d] = rs[d];
        a = b.broadcast(b.reshape(a, one), rs);
        a = b.binary(OpKind::Mul, a, splat_i32(b, st, rs));
        ro = ro ? b.binary(OpKind::Add, ro, a) : a;
        st *= rs[d];
      }
      ro = b.binary(OpKind::Add, ro, splat_i32(b, (slot++) * 4096, rs));
      b.store(b.addptr(b.splat(out, rs), ro), r);
    }
    ir::Value* all = xv;
    while (!all->type.is_scalar()) all = b.reduce(k, all, 0);
    b.store(b.addptr(out, i32c(b, 100000 + slot++)), all);
  }
  b.ret();
  return fn;
}

} // namespace

TEST_CASE("elementwise ops on every dtype", "[codegen]") {
  for (DType t : ir::kAllDTypes) {
    INFO("dtype " << ir::dtype_name(t));
    compile_checked(*elementwise_kernel(t));
  }
}

TEST_CASE("casts between every pair of dtypes", "[codegen]") {
  for (DType t : ir::kAllDTypes) {
    INFO("from " << ir::dtype_name(t));
    compile_checked(*cast_kernel(t));
  }
}

TEST_CASE("reductions over each axis, every reducible dtype", "[codegen]") {
  for (DType t : ir::kAllDTypes) {
    if (t == DType::i1) continue;
    INFO("dtype " << ir::dtype_name(t));
    compile_checked(*reduce_kernel(t, {4, 8, 32}));
  }
  compile_checked(*reduce_kernel(DType::f32, {64, 64}));
  compile_checked(*reduce_kernel(DType::f32, {1024}));
  compile_checked(*reduce_kernel(DType::f32, {2, 2}));
}

// Each scan kind along each axis of a [rows, cols] tile, each result stored.
ir::Kernel scan_kernel(DType t, int64_t rows, int64_t cols) {
  auto fn = std::make_shared<ir::Function>(fmt::format("scan_{}", ir::dtype_name(t)));
  ir::Builder b(*fn);
  auto* x = fn->add_param("x", ptr_type(t));
  auto* out = fn->add_param("out", ptr_type(t));
  auto* n = fn->add_param("n", ir::scalar_type(DType::i32));
  Tile2d tl = tile2d(b, n, rows, cols);
  ir::Shape s{rows, cols};
  auto* xv = b.load(b.addptr(b.splat(x, s), tl.offs), tl.mask);
  int slot = 0;
  for (ir::ReduceKind k : {ir::ReduceKind::sum, ir::ReduceKind::max, ir::ReduceKind::min, ir::ReduceKind::prod})
    for (int axis : {0, 1})
      b.store(b.addptr(b.splat(out, s), b.binary(OpKind::Add, tl.offs, splat_i32(b, (slot++) * rows * cols, s))),
              b.scan(k, xv, axis), tl.mask);
  b.ret();
  return fn;
}

TEST_CASE("scans along each axis, every scannable dtype", "[codegen][scan]") {
  for (DType t : ir::kAllDTypes) {
    if (t == DType::i1) continue;
    INFO("dtype " << ir::dtype_name(t));
    compile_checked(*scan_kernel(t, 8, 32));
  }
  compile_checked(*scan_kernel(DType::f32, 2, 1024), 8);
  compile_checked(*scan_kernel(DType::i32, 1, 2), 1);
}

TEST_CASE("every op kind is lowered", "[codegen]") {
  // Runs after the cases above in declaration order; builds the rest here so
  // the case also stands alone.
  for (DType t : ir::kAllDTypes) note_ops(*elementwise_kernel(t));
  note_ops(*cast_kernel(DType::f32));
  note_ops(*reduce_kernel(DType::f32, {4, 8}));
  note_ops(*scan_kernel(DType::f32, 4, 8));
  std::set<OpKind> others{OpKind::ProgramId, OpKind::NumPrograms, OpKind::Permute, OpKind::AtomicAdd,
                          OpKind::Dot, OpKind::For, OpKind::If, OpKind::Yield, // in test_structure.cpp
                          OpKind::Assert, OpKind::Print,                        // in test_math_ops.cpp
                          OpKind::AtomicMax, OpKind::AtomicMin, OpKind::AtomicAnd, OpKind::AtomicOr,
                          OpKind::AtomicXor, OpKind::AtomicXchg, OpKind::AtomicCas, // in test_atomics.cpp
                          OpKind::DescLoad, OpKind::DescStore};                     // in test_tma.cpp
  for (int k = 0; k < ir::kNumOpKinds; ++k) {
    OpKind kind = static_cast<OpKind>(k);
    INFO("op " << ir::op_name(kind));
    CHECK((g_lowered.count(kind) || others.count(kind)));
  }
}

namespace {

double dtype_tol(DType t) {
  switch (t) {
  case DType::f32: return 2e-5;
  case DType::f16: return 2e-3;
  case DType::bf16: return 1.6e-2;
  default: return 0;
  }
}

} // namespace

TEST_CASE("elementwise, cast and reduce kernels agree with the interpreter when emulated", "[codegen][emu]") {
  using launch::Arg;
  using launch::Buffer;
  for (DType t : ir::kAllDTypes) {
    INFO("dtype " << ir::dtype_name(t));
    const int64_t n = 8 * 32 * 2 - 5, size = 64 * 4096; // a slot of 4096 per op
    std::vector<Buffer> bufs{{"x", t, n}, {"y", t, n}, {"out", t, size}, {"outb", DType::i1, size}};
    bool flt = ir::is_float(t);
    fill_random(bufs[0], 11, t == DType::i1 ? 0 : -4, t == DType::i1 ? 2 : 4);
    fill_random(bufs[1], 12, t == DType::i1 ? 0 : -4, t == DType::i1 ? 2 : 4);
    // Masked-off lanes divide x by x in the interpreter too: no zeros anywhere.
    if (!flt && t != DType::i1)
      for (int i = 0; i < 2; ++i)
        for (size_t j = 0; j < bufs[i].count(); ++j)
          if (bufs[i].get(j) == 0) bufs[i].set(j, 3);
    check_against_interpreter(*elementwise_kernel(t), {2, 1, 1}, bufs, [&](std::vector<Buffer>& b) {
      return std::vector<Arg>{Arg::of(b[0]), Arg::of(b[1]), Arg::of(b[2]), Arg::of(b[3]), Arg::of_int(n)};
    }, dtype_tol(t));
  }
  for (DType from : ir::kAllDTypes) {
    INFO("cast from " << ir::dtype_name(from));
    const int64_t n = 4 * 64 * 2 - 7;
    std::vector<Buffer> bufs{{"x", from, n}};
    for (DType to : ir::kAllDTypes) bufs.emplace_back(std::string("out_") + std::string(ir::dtype_name(to)), to, n);
    fill_random(bufs[0], 13, from == DType::i1 ? 0 : -100, from == DType::i1 ? 2 : 100);
    check_against_interpreter(*cast_kernel(from), {2, 1, 1}, bufs, [&](std::vector<Buffer>& b) {
      std::vector<Arg> a;
      for (auto& buf : b) a.push_back(Arg::of(buf));
      a.push_back(Arg::of_int(n));
      return a;
    }, 1e-2);
  }
  for (DType t : ir::kAllDTypes) {
    if (t == DType::i1) continue;
    for (ir::Shape s : {ir::Shape{4, 8, 32}, ir::Shape{64, 64}, ir::Shape{1024}, ir::Shape{2, 2}}) {
      INFO("reduce " << ir::dtype_name(t) << " " << ir::shape_str(s));
      std::vector<Buffer> bufs{{"x", t, size_t(ir::num_elements(s))}, {"out", t, 100100}};
      fill_random(bufs[0], 14, -4, 4);
      check_against_interpreter(*reduce_kernel(t, s), {1, 1, 1}, bufs, [&](std::vector<Buffer>& b) {
        return std::vector<Arg>{Arg::of(b[0]), Arg::of(b[1])};
      }, ir::is_float(t) ? std::max(1e-4, 2 * dtype_tol(t)) : 0);
    }
  }
}
