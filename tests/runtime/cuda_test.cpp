#include "runtime/cuda.h"
#include "runtime/error.h"

#include <catch2/catch.hpp>

using namespace tilec::rt;

// On machines without a CUDA driver or device (this project's CI) every entry point must
// fail with BackendUnavailable and one clear line, never crash. With a GPU, the same calls
// succeed.
TEST_CASE("the cuda runtime without a driver raises BackendUnavailable", "[runtime]") {
  std::string reason;
  if (cuda_available(&reason)) {
    CHECK(reason.empty());
    Context ctx;
    CHECK(ctx.properties().major > 0);
    CHECK(ctx.properties().arch().starts_with("sm_"));
    return;
  }
  INFO(reason);
  CHECK(reason.find('\n') == std::string::npos);
  CHECK_THAT(reason, Catch::EndsWith("; use --backend emulate"));
  if (reason.starts_with("CUDA driver not found"))
    CHECK_THAT(reason, Catch::StartsWith("CUDA driver not found (libcuda.so.1: cannot open shared "
                                         "object file"));
  else
    CHECK_THAT(reason, Catch::StartsWith("no CUDA device") || Catch::StartsWith("CUDA driver"));

  CHECK_THROWS_AS(cuda_device_count(), BackendUnavailable);
  CHECK_THROWS_AS(Context(0), BackendUnavailable);
  CHECK_THROWS_WITH(Context(0), reason);
  // Asking again gives the same answer: the failed load is remembered, not retried half-way.
  CHECK_THROWS_WITH(Context(1), reason);
  CHECK_FALSE(cuda_available());
}

TEST_CASE("BackendUnavailable is a runtime Error the CLI can tell apart", "[runtime]") {
  try {
    Context ctx(0);
    SUCCEED("a device is present");
  } catch (const BackendUnavailable& e) {
    const Error& base = e;
    CHECK(std::string(base.what()).size() > 0);
  }
}
