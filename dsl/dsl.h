#pragma once
// The embedded tile DSL: kernels are C++ functions that build tile IR.
//
//   Kernel vector_add(int block) {
//     KernelBuilder k("vector_add");
//     auto x = k.arg<Ptr<f32>>("x"), out = k.arg<Ptr<f32>>("out");
//     auto n = k.arg<i32>("n");
//     auto offs = program_id(0) * block + arange(0, block);
//     auto mask = offs < n;
//     store(out + offs, load(x + offs, mask) * 2, mask);
//     return k.finish();
//   }
//
// Every call records the caller's std::source_location; a shape or dtype
// mistake throws tilec::UserError naming that file:line and the values.
// Tiles assigned inside for_range / if_then_else bodies become loop-carried
// values / if results automatically: any Tile variable alive when the loop
// starts and reassigned in its body is carried.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

#include "ir/builder.h"
#include "ir/ir.h"

namespace tilec::dsl {

using ir::DType;
using ir::ElemType;
using ir::Shape;
using Kernel = ir::Kernel;
using Loc = std::source_location;

inline constexpr ElemType i1{DType::i1, false};
inline constexpr ElemType i8{DType::i8, false};
inline constexpr ElemType i16{DType::i16, false};
inline constexpr ElemType i32{DType::i32, false};
inline constexpr ElemType i64{DType::i64, false};
inline constexpr ElemType u8{DType::u8, false}; // unsigned: /, %, <, min/max, >> and casts read them so
inline constexpr ElemType u16{DType::u16, false};
inline constexpr ElemType u32{DType::u32, false};
inline constexpr ElemType u64{DType::u64, false};
inline constexpr ElemType f16{DType::f16, false};
inline constexpr ElemType bf16{DType::bf16, false};
inline constexpr ElemType f32{DType::f32, false};
inline constexpr ElemType f8e4m3{DType::f8e4m3, false}; // 8-bit floats: storage types, computed in f32
inline constexpr ElemType f8e5m2{DType::f8e5m2, false};
template <ElemType E> inline constexpr ElemType Ptr{E.dtype, true};
inline constexpr ElemType ptr_to(DType t) { return {t, true}; }

class KernelBuilder;
struct ControlFlow;
namespace detail {
struct Tracker;
}

// A handle to an SSA tile value. Copyable; assignment rebinds the handle (and,
// inside for_range/if_then_else, makes the variable a carried value).
class Tile {
public:
  Tile();
  Tile(ir::Value* v); // NOLINT: values convert implicitly
  Tile(const Tile& o);
  Tile& operator=(const Tile& o);
  ~Tile();

  ir::Value* value() const { return v_; }
  // Whether the handle holds a value (a default-constructed Tile holds none): lets a kernel
  // leave out an optional term, `Tile bias = has_bias ? load(...) : Tile(); if (bias) ...`.
  explicit operator bool() const { return v_ != nullptr; }
  const ir::Type& type() const;
  const Shape& shape() const { return type().shape; }
  DType dtype() const { return type().dtype(); }
  int rank() const { return type().rank(); }

  Tile to(ElemType t, Loc loc = Loc::current()) const; // cast
  Tile to(DType t, Loc loc = Loc::current()) const { return to(ElemType{t, false}, loc); }
  Tile col(Loc loc = Loc::current()) const; // expand_dims(axis 1): [n] -> [n, 1]
  Tile row(Loc loc = Loc::current()) const; // expand_dims(axis 0): [n] -> [1, n]

private:
  friend struct detail::Tracker;
  friend struct ControlFlow;
  friend class KernelBuilder;
  ir::Value* v_ = nullptr;
  // Intrusive list of live tiles, so loops and ifs can see which were reassigned.
  detail::Tracker* tracker_ = nullptr;
  Tile* prev_ = nullptr;
  Tile* next_ = nullptr;
  uint64_t serial_ = 0;
  void attach();
  void detach();
};
using Scalar = Tile;
using Var = Tile; // any Tile variable can be reassigned; the name reads well for carried state

// An operand of a DSL call: a tile or a C++ number (which takes the dtype of
// the tile it meets), plus the caller's location.
struct Operand {
  ir::Value* v = nullptr;
  bool is_literal = false;
  ir::ConstValue lit;
  Loc loc;

  Operand(const Tile& t, Loc loc = Loc::current()) : v(t.value()), loc(loc) {} // NOLINT
  template <class T>
    requires std::is_arithmetic_v<T>
  Operand(T x, Loc loc = Loc::current()) // NOLINT
      : is_literal(true),
        lit(std::is_floating_point_v<T> ? ir::ConstValue::of_float(static_cast<double>(x))
                                        : ir::ConstValue::of_int(static_cast<int64_t>(x))),
        loc(loc) {}
};

class KernelBuilder {
public:
  explicit KernelBuilder(std::string name, Loc loc = Loc::current());
  ~KernelBuilder();
  KernelBuilder(const KernelBuilder&) = delete;
  KernelBuilder& operator=(const KernelBuilder&) = delete;

  template <ElemType E> Tile arg(std::string name, Loc loc = Loc::current()) {
    return arg(E, std::move(name), loc);
  }
  Tile arg(ElemType type, std::string name, Loc loc = Loc::current());
  // Asks the GPU compiler to keep registers low enough for `n` blocks per SM (1 to 32), as
  // CUDA's __launch_bounds__ does: for a kernel whose shared memory lets that many blocks in.
  void min_blocks_per_sm(int n, Loc loc = Loc::current());
  // Caps registers per thread (24 to 255), as Triton's maxnreg does: the GPU compiler
  // schedules within it (spilling if it must). With min_blocks_per_sm, the lower ceiling holds.
  void max_registers(int n, Loc loc = Loc::current());
  // Ends the kernel (adds the return), verifies it and hands it over.
  Kernel finish(Loc loc = Loc::current());

private:
  Kernel fn_;
  std::unique_ptr<detail::Tracker> tracker_;
  KernelBuilder* outer_ = nullptr;
};

// --- creation
Tile program_id(int axis, Loc loc = Loc::current());
Tile num_programs(int axis, Loc loc = Loc::current());
Tile arange(int64_t start, int64_t end, Loc loc = Loc::current());
Tile full(Shape shape, Operand value, ElemType type = f32, Loc loc = Loc::current());
Tile zeros(Shape shape, ElemType type = f32, Loc loc = Loc::current());
Tile scalar(Operand value, ElemType type, Loc loc = Loc::current());

// --- shape
Tile broadcast_to(const Tile& t, Shape shape, Loc loc = Loc::current());
Tile expand_dims(const Tile& t, int axis, Loc loc = Loc::current());
Tile reshape(const Tile& t, Shape shape, Loc loc = Loc::current());
Tile permute(const Tile& t, std::vector<int64_t> perm, Loc loc = Loc::current());
Tile trans(const Tile& t, Loc loc = Loc::current()); // swaps the two dims of a 2-d tile
// Promises that an integer kernel parameter is always a multiple of `n` (a power of two),
// like Triton's tl.multiple_of: index arithmetic from it counts as aligned, so a row stride
// can give vector loads. Launches check the promise. Returns `param`.
Tile multiple_of(const Tile& param, int64_t n, Loc loc = Loc::current());

// --- memory (mask, other and value broadcast to the address tile's shape)
Tile load(const Tile& ptr, Loc loc = Loc::current());
Tile load(const Tile& ptr, Operand mask, Loc loc = Loc::current());
Tile load(const Tile& ptr, Operand mask, Operand other, Loc loc = Loc::current());
void store(const Tile& ptr, Operand value, Loc loc = Loc::current());
void store(const Tile& ptr, Operand value, Operand mask, Loc loc = Loc::current());
// Tensor descriptors: a dense view of a global tensor that loads and stores whole blocks, as
// Triton's tensor descriptors. `base` is the tensor's first element (a scalar pointer),
// `shape` its sizes and `strides` its strides in elements, outermost dim first, the last
// stride 1 (the innermost dim is contiguous); `block` is the tile each load or store moves
// (powers of two). load(desc, offsets) reads the block whose first element is at `offsets`
// (one integer per dim), 0 where an element lies outside `shape` (negative offsets too);
// store writes the elements inside `shape` only.
// On sm_90 a load that feeds a warpgroup MMA operand becomes a TMA copy (cp.async.bulk.tensor
// completing on an mbarrier, the copy engine moving the whole block) when `base` is a kernel
// parameter, each size and stride a kernel parameter or a number, the outer strides' bytes
// multiples of 16 (a number, or a parameter promised by multiple_of) and the block fits a box;
// everywhere else, and on every other arch, it is the masked load it describes.
struct TensorDesc {
  Tile base;
  std::vector<Tile> shape, strides;
  Shape block;
};
TensorDesc make_tensor_desc(const Tile& base, std::vector<Operand> shape, std::vector<Operand> strides, Shape block,
                            Loc loc = Loc::current());
Tile load(const TensorDesc& desc, std::vector<Operand> offsets, Loc loc = Loc::current());
// A gather (paged K/V): the block's rows in rows.size() boxes of equal height, box i starting
// at row rows[i] (one integer scalar each; a power of two of them that divides block[0]), the
// other dims at `offsets` (one per dim after the first). Element (r, ...) is the tensor's at
// row rows[r / h] + r % h, h = block[0] / rows.size(), with the same bounds as load(desc, ...).
// On sm_90 each box is its own TMA copy where the load qualifies as above (docs/ARCHITECTURE.md,
// "TMA"); everywhere else the masked load it describes.
Tile load_gather(const TensorDesc& desc, std::vector<Operand> rows, std::vector<Operand> offsets,
                 Loc loc = Loc::current());
void store(const TensorDesc& desc, std::vector<Operand> offsets, Operand value, Loc loc = Loc::current());
// Atomics (relaxed, device scope; ir/SEMANTICS.md): each lane reads, combines and writes
// its element in one step and returns the old value (0 where the mask is false). add, max,
// min and xchg take f32 or i32 pointers, and, or and xor i32; float max/min ignore NaN.
Tile atomic_add(const Tile& ptr, Operand value, Loc loc = Loc::current());
Tile atomic_add(const Tile& ptr, Operand value, Operand mask, Loc loc = Loc::current());
Tile atomic_max(const Tile& ptr, Operand value, Loc loc = Loc::current());
Tile atomic_max(const Tile& ptr, Operand value, Operand mask, Loc loc = Loc::current());
Tile atomic_min(const Tile& ptr, Operand value, Loc loc = Loc::current());
Tile atomic_min(const Tile& ptr, Operand value, Operand mask, Loc loc = Loc::current());
Tile atomic_and(const Tile& ptr, Operand value, Loc loc = Loc::current());
Tile atomic_and(const Tile& ptr, Operand value, Operand mask, Loc loc = Loc::current());
Tile atomic_or(const Tile& ptr, Operand value, Loc loc = Loc::current());
Tile atomic_or(const Tile& ptr, Operand value, Operand mask, Loc loc = Loc::current());
Tile atomic_xor(const Tile& ptr, Operand value, Loc loc = Loc::current());
Tile atomic_xor(const Tile& ptr, Operand value, Operand mask, Loc loc = Loc::current());
Tile atomic_xchg(const Tile& ptr, Operand value, Loc loc = Loc::current());
Tile atomic_xchg(const Tile& ptr, Operand value, Operand mask, Loc loc = Loc::current());
// Stores `value` where the element equals `cmp` (floats: the same bits); returns the old.
Tile atomic_cas(const Tile& ptr, Operand cmp, Operand value, Loc loc = Loc::current());
Tile atomic_cas(const Tile& ptr, Operand cmp, Operand value, Operand mask, Loc loc = Loc::current());

// --- elementwise (operands are promoted to a common dtype and broadcast)
Tile operator+(Operand a, Operand b); // pointer + integer is pointer arithmetic
Tile operator-(Operand a, Operand b);
Tile operator*(Operand a, Operand b);
Tile operator/(Operand a, Operand b);
Tile operator%(Operand a, Operand b);
Tile operator&(Operand a, Operand b);
Tile operator|(Operand a, Operand b);
Tile operator^(Operand a, Operand b);
Tile operator==(Operand a, Operand b);
Tile operator!=(Operand a, Operand b);
Tile operator<(Operand a, Operand b);
Tile operator<=(Operand a, Operand b);
Tile operator>(Operand a, Operand b);
Tile operator>=(Operand a, Operand b);
Tile operator-(Operand a);
Tile operator!(Operand a); // logical not of an i1 tile
Tile max(Operand a, Operand b, Loc loc = Loc::current());
Tile min(Operand a, Operand b, Loc loc = Loc::current());
Tile where(Operand cond, Operand a, Operand b, Loc loc = Loc::current());
Tile exp(const Tile& a, Loc loc = Loc::current());
Tile exp2(const Tile& a, Loc loc = Loc::current());
Tile log(const Tile& a, Loc loc = Loc::current());
// Floats only: log2 and sigmoid (1 / (1 + e^-x)) are approximate on the GPU like exp and log;
// floor, ceil and round (to nearest, ties to even) are exact everywhere.
Tile log2(const Tile& a, Loc loc = Loc::current());
Tile sigmoid(const Tile& a, Loc loc = Loc::current());
Tile floor(const Tile& a, Loc loc = Loc::current());
Tile ceil(const Tile& a, Loc loc = Loc::current());
Tile round(const Tile& a, Loc loc = Loc::current());
// Floats (integers become f32): the C library's sinf, cosf, erff and powf on the CPU
// backends and libdevice's on the GPU, each within a few ulp (ir/SEMANTICS.md).
Tile sin(const Tile& a, Loc loc = Loc::current());
Tile cos(const Tile& a, Loc loc = Loc::current());
Tile erf(const Tile& a, Loc loc = Loc::current());
Tile pow(Operand a, Operand b, Loc loc = Loc::current());
// a * b + c rounded once (in f32, then to the dtype).
Tile fma(Operand a, Operand b, Operand c, Loc loc = Loc::current());
// min(max(x, lo), hi): a NaN x gives lo (min and max return the operand that is not NaN).
Tile clamp(Operand x, Operand lo, Operand hi, Loc loc = Loc::current());
// i1 tiles: x != x, and |x| == inf (all false for integers).
Tile isnan(const Tile& a, Loc loc = Loc::current());
Tile isinf(const Tile& a, Loc loc = Loc::current());
// Integers (i8..i64, u8..u64): << and >> (arithmetic for signed dtypes, logical for unsigned)
// and lshr (logical) read the amount as unsigned, and from the width on give 0 (>> of a
// signed dtype: the sign); umulhi is the high half of the unsigned
// double-width product; cdiv(a, b) = (a + b - 1) / b, the ceiling for b > 0.
Tile operator<<(Operand a, Operand b);
Tile operator>>(Operand a, Operand b);
Tile lshr(Operand a, Operand b, Loc loc = Loc::current());
Tile umulhi(Operand a, Operand b, Loc loc = Loc::current());
Tile cdiv(Operand a, Operand b, Loc loc = Loc::current());
// The same bits as another dtype of the same width (i8 <-> f8e4m3/f8e5m2, i16 <-> f16/bf16,
// i32 <-> f32, i64, and the unsigned dtypes with the signed ones of their width; not i1):
// int8 packing, hashing, sign tricks.
Tile bitcast(const Tile& a, ElemType to, Loc loc = Loc::current());

// Stops the launch where `cond` (an i1 tile or scalar) is false, with `message`, the
// caller's file:line and the program (interpreter), block and thread (emulator) or the
// driver's report (GPU: __assertfail). CompileOptions::device_asserts = false (tilec compile
// --no-device-asserts) compiles them out.
void device_assert(Operand cond, std::string message, Loc loc = Loc::current());
// Prints every element of `value` as "pid (x, y, z) idx (i, j) prefix: value" on the CPU
// backends (the interpreter, and the emulator with its own lowering), in program, op and
// element order; the GPU lowering drops it. Lines go to stdout (set_device_print_sink,
// abi/device_print.h, takes them instead).
void device_print(std::string prefix, Operand value, Loc loc = Loc::current());

// Counter-based random numbers: Philox 4x32-10 (Salmon et al., SC'11; as cuRAND and Triton
// use it) on the counter (offset, 0, 0, 0) with the key (seed's low 32 bits, its high 32
// bits), written with the tile ops above, so every backend gives the same bits. `seed`: an
// integer number or scalar (i32 or i64); `offsets`: an i32 tile, one draw per element. As
// Triton's tl.randint4x / randint / rand / randn:
std::array<Tile, 4> randint4x(Operand seed, const Tile& offsets, Loc loc = Loc::current()); // 4 x i32 bits
Tile randint(Operand seed, const Tile& offsets, Loc loc = Loc::current());                  // the first
// Uniform in [0, 1): the first word w as (w < 0 ? -w - 1 : w) in f32 times the f32 just
// below 2^-31 (as Triton's uint_to_uniform_float).
Tile rand(Operand seed, const Tile& offsets, Loc loc = Loc::current());
// Standard normal by Box-Muller on the first two words: sqrt(-2 log u1) cos(2 pi u2), so
// within a few ulp across backends (log, sqrt and cos are approximate), not bit for bit.
Tile randn(Operand seed, const Tile& offsets, Loc loc = Loc::current());
Tile tanh(const Tile& a, Loc loc = Loc::current());
Tile sqrt(const Tile& a, Loc loc = Loc::current());
Tile rsqrt(const Tile& a, Loc loc = Loc::current());
Tile abs(const Tile& a, Loc loc = Loc::current());

// --- reductions and dot
Tile reduce_sum(const Tile& t, int axis, Loc loc = Loc::current());
Tile reduce_max(const Tile& t, int axis, Loc loc = Loc::current());
Tile reduce_min(const Tile& t, int axis, Loc loc = Loc::current());
Tile reduce_prod(const Tile& t, int axis, Loc loc = Loc::current());
// Inclusive scans along `axis`, the shape kept (i1 counts as i32): out[i] = x[0] op ... op x[i].
// Floats combine in f32 (order unspecified, like reduce_sum) and round once to the dtype.
Tile cumsum(const Tile& t, int axis, Loc loc = Loc::current());
Tile cumprod(const Tile& t, int axis, Loc loc = Loc::current());
Tile cummax(const Tile& t, int axis, Loc loc = Loc::current());
Tile cummin(const Tile& t, int axis, Loc loc = Loc::current());
// With the user's combine function: `combine(a, b)` gets two scalars of t's dtype (i1 counts
// as i32) and returns one of that dtype, computed from them with elementwise ops, select, fma
// and casts (no loads, stores or control flow). It is traced once into the op's region and
// runs for every pair the backend combines: reduce needs it associative and commutative (the
// order is the backend's), associative_scan only associative (out[i] = x[0] op ... op x[i],
// left to right). It rounds to the dtype at every step, like the ops it is made of.
//   Tile m = reduce(x, 1, [](const Tile& a, const Tile& b) { return where(abs(a) > abs(b), a, b); });
using CombineFn = std::function<Tile(const Tile&, const Tile&)>;
Tile reduce(const Tile& t, int axis, const CombineFn& combine, Loc loc = Loc::current());
Tile associative_scan(const Tile& t, int axis, const CombineFn& combine, Loc loc = Loc::current());
// The index (i32) of the largest / smallest element along `axis`, the axis removed: the first
// one on ties; NaN elements are ignored (as max/min ignore them), and a run of NaNs only gives
// 0. Built from reduce_max/min, a compare and reduce_min over the indices.
Tile argmax(const Tile& t, int axis, Loc loc = Loc::current());
Tile argmin(const Tile& t, int axis, Loc loc = Loc::current());
// a[M,K] . b[K,N] (+ acc[M,N]) with f32 products and accumulation.
Tile dot(const Tile& a, const Tile& b, Loc loc = Loc::current());
Tile dot(const Tile& a, const Tile& b, const Tile& acc, Loc loc = Loc::current());

// --- control flow (bounds and conditions are scalars: uniform per program)
void for_range(Operand start, Operand end, Operand step, const std::function<void(Scalar)>& body,
               Loc loc = Loc::current());
// num_stages > 1: the loop's loads that feed a tensor-core dot are copied num_stages - 1
// iterations ahead into rotating shared-memory buffers (cp.async), so memory latency
// overlaps the math; each stage costs those tiles' bytes of shared memory. Loads whose
// addresses cannot be computed ahead keep their place. No effect on the CPU interpreter.
struct RangeOptions {
  int64_t num_stages = 1;
  // A producer warpgroup of its own issues the pipeline's TMA copies (sm_90; ignored where the
  // loop does not qualify: docs/ARCHITECTURE.md, "Warp specialization").
  bool warp_specialize = false;
};
void for_range(Operand start, Operand end, Operand step, const RangeOptions& opts,
               const std::function<void(Scalar)>& body, Loc loc = Loc::current());
void if_then_else(Operand cond, const std::function<void()>& then_body,
                  const std::function<void()>& else_body, Loc loc = Loc::current());
void if_then(Operand cond, const std::function<void()>& then_body, Loc loc = Loc::current());

} // namespace tilec::dsl
