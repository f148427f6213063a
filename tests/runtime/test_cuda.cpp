#include "runtime/cuda.h"
#include "abi/error.h"

#include <catch2/catch.hpp>

#include <type_traits>

using namespace tilec::rt;

// The CLI maps BackendUnavailable to exit code 3 and other runtime errors by kind.
static_assert(std::is_base_of_v<Error, BackendUnavailable>);
static_assert(std::is_base_of_v<Error, CudaError>);
static_assert(std::is_base_of_v<Error, ManifestError>);
static_assert(std::is_base_of_v<Error, LaunchArgumentError>);

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
  CHECK_THAT(reason, Catch::EndsWith("; without a GPU, load the module built for the CPU emulator (runtime/emulator/emulator.h)"));
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
