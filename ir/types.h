#pragma once
// Element types and tile types of the tile IR.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tilec::ir {

// f8e4m3 and f8e5m2 are 8-bit floats (abi/float8.h): stored as bytes, computed in f32.
// Unsigned integers come last so the others keep their numbers (hashes, stored caches).
enum class DType : uint8_t { i1, i8, i16, i32, i64, f16, bf16, f32, f8e4m3, f8e5m2, u8, u16, u32, u64 };
inline constexpr DType kAllDTypes[] = {DType::i1,     DType::i8,     DType::i16, DType::i32, DType::i64,
                                       DType::f16,    DType::bf16,   DType::f32, DType::f8e4m3,
                                       DType::f8e5m2, DType::u8,     DType::u16, DType::u32, DType::u64};

std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);
int dtype_bits(DType t);
int dtype_bytes(DType t); // i1 is stored as one byte
bool is_float(DType t);
inline bool is_fp8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }
// `x` rounded to a float dtype (nearest even; fp8 saturates, abi/float8.h); f32 unchanged.
float round_to_dtype(float x, DType t);
inline bool is_int(DType t) { return !is_float(t); }
// u8..u64: held zero-extended; their division, remainder, comparisons, min/max, `>>` (the
// DSL's), conversions and reductions read the bits as unsigned (ir/SEMANTICS.md).
inline bool is_unsigned(DType t) { return t == DType::u8 || t == DType::u16 || t == DType::u32 || t == DType::u64; }

// An element: a value of some dtype, or a pointer to one (pointers are 64-bit).
struct ElemType {
  DType dtype = DType::f32;
  bool is_ptr = false;
  constexpr bool operator==(const ElemType&) const = default;
  std::string str() const; // "f32" or "ptr<f32>"
};

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s); // "[4, 8]"

// The broadcast rule of tiles (the DSL) and tensors (the decomposition's primitives), NumPy's:
// shapes align at their last dimension, missing leading ones count as 1, and a dimension of 1
// takes the other's size. The shape of `a` op `b`, or nullopt when they do not broadcast (with
// the first dimension that differs, counted in the result, in *bad_dim).
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b, size_t* bad_dim = nullptr);
// Whether `from` broadcasts to exactly `to`.
bool broadcasts_to(const Shape& from, const Shape& to);
int64_t num_elements(const Shape& s);
bool is_pow2(int64_t v);

// The type of an SSA value: a tile of a static shape (rank 0 = scalar).
struct Type {
  ElemType elem;
  Shape shape;

  bool operator==(const Type&) const = default;
  bool is_scalar() const { return shape.empty(); }
  int rank() const { return static_cast<int>(shape.size()); }
  bool is_ptr() const { return elem.is_ptr; }
  DType dtype() const { return elem.dtype; }
  Type with_shape(Shape s) const { return {elem, std::move(s)}; }
  Type with_elem(ElemType e) const { return {e, shape}; }
  std::string str() const; // "f32", "ptr<f16>", "tile<4x8xf32>"
};

inline Type scalar_type(DType t) { return {{t, false}, {}}; }
inline Type tile_type(DType t, Shape s) { return {{t, false}, std::move(s)}; }

} // namespace tilec::ir
