#pragma once
// Element types and tile types of the tile IR.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abi/dtype.h"

namespace tilec::ir {

// The dtypes are tilec::DType (abi/dtype.h), one enum with the runtime's element types.
using tilec::DType;
using tilec::dtype_bits;
using tilec::dtype_bytes;
using tilec::dtype_name;
using tilec::is_float;
using tilec::is_fp8;
using tilec::is_int;
using tilec::is_unsigned;
using tilec::kAllDTypes;
using tilec::parse_dtype;
// `x` rounded to a float dtype (nearest even; fp8 saturates, abi/float8.h); f32 unchanged.
float round_to_dtype(float x, DType t);

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
