#pragma once
// What the template tests share: comparing an output buffer with a reference.
#include <catch2/catch.hpp>
#include <cmath>

#include "launch/args.h"

namespace tilec::templates::test {

// Max |got - want| over the buffers; a NaN in `got` counts as infinite.
inline double max_err(const launch::Buffer& got, const launch::Buffer& want) {
  REQUIRE(got.count() == want.count());
  double e = 0;
  for (size_t i = 0; i < got.count(); ++i) {
    double d = std::abs(got.get(i) - want.get(i));
    if (std::isnan(got.get(i))) d = INFINITY;
    e = std::max(e, d);
  }
  return e;
}

// Paged attention's absolute tolerance against the f64 reference, by q's dtype.
inline double paged_attention_tolerance(ir::DType t) {
  return t == ir::DType::f32 ? 2e-5 : t == ir::DType::f16 ? 4e-3 : 3e-2;
}

} // namespace tilec::templates::test
