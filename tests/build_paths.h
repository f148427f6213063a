#pragma once
// Where this build put the programs the tests run (tilec, tilec-measure, gpu_bench, the example
// hosts, the runtime library, the fake CUDA driver). Only tests/build_paths.cpp knows them, so
// every other test source compiles to the same object in every build folder (the plain and the
// sanitizer builds share them through ccache).

namespace tilec::test {

const char* tilec_binary();
const char* measure_binary();
const char* gpu_bench_binary();
const char* launch_module_binary();
const char* tuned_modules_binary();
const char* runtime_library();
const char* fake_cuda_dir();

} // namespace tilec::test
