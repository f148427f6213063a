#include "ir/types.h"

#include <fmt/format.h>

#include "abi/float16.h"
#include "abi/float8.h"
#include "ir/error.h"

namespace tilec {

void internal_fail(const std::string& msg, std::source_location where) {
  throw InternalError(fmt::format("{} ({}:{})", msg, where.file_name(), where.line()));
}

namespace ir {

float round_to_dtype(float x, DType t) {
  switch (t) {
  case DType::f16: return f16_bits_to_f32(f32_to_f16_bits(x));
  case DType::bf16: return bf16_bits_to_f32(f32_to_bf16_bits(x));
  case DType::f8e4m3: return f8e4m3_bits_to_f32(f32_to_f8e4m3_bits(x));
  case DType::f8e5m2: return f8e5m2_bits_to_f32(f32_to_f8e5m2_bits(x));
  default: return x;
  }
}

std::string ElemType::str() const {
  return is_ptr ? fmt::format("ptr<{}>", dtype_name(dtype)) : std::string(dtype_name(dtype));
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b, size_t* bad_dim) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      if (bad_dim) *bad_dim = i;
      return std::nullopt;
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  std::optional<Shape> s = broadcast_shapes(from, to);
  return from.size() <= to.size() && s && *s == to;
}

int64_t num_elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

std::string Type::str() const {
  if (shape.empty()) return elem.str();
  return fmt::format("tile<{}x{}>", fmt::join(shape, "x"), elem.str());
}

} // namespace ir
} // namespace tilec
