// The paths of tests/build_paths.h, from the definitions tests/CMakeLists.txt gives this file alone.
#include "tests/build_paths.h"

namespace tilec::test {

const char* tilec_binary() { return TILEC_BINARY; }
const char* measure_binary() { return TILEC_MEASURE_BINARY; }
const char* gpu_bench_binary() { return TILEC_GPU_BENCH_BINARY; }
const char* launch_module_binary() { return TILEC_LAUNCH_MODULE_BINARY; }
const char* tuned_modules_binary() { return TILEC_TUNED_MODULES_BINARY; }
const char* runtime_library() { return TILEC_RUNTIME_LIBRARY; }
const char* fake_cuda_dir() { return TILEC_FAKE_CUDA_DIR; }

} // namespace tilec::test
