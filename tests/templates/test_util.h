#pragma once
// What the template tests share: comparing an output buffer with a reference.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <string>

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

// Whether the long form of the slowest sweeps runs (TILEC_TEST_FULL=1, scripts/test_full.sh):
// every variant of every case. The suite's short form runs each case in one variant, the
// variants taken in turn, so every variant and every case still runs.
inline bool full_sweeps() {
  const char* v = std::getenv("TILEC_TEST_FULL");
  return v && std::string(v) == "1";
}

// Paged attention's absolute tolerance against the f64 reference, by q's dtype.
inline double paged_attention_tolerance(ir::DType t) {
  return t == ir::DType::f32 ? 2e-5 : t == ir::DType::f16 ? 4e-3 : 3e-2;
}

} // namespace tilec::templates::test
