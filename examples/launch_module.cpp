// Loads a compiled vector_add module from its manifest and runs it on the GPU with the
// runtime library alone (no compiler, no IR, no LLVM): out = x + y over n floats.
//
//   launch_module examples/vector_add/manifest.toml [N]
//
// Exit codes follow the tilec CLI: 0 right result, 1 wrong result or a failing driver call,
// 2 bad usage or a module that is not a vector_add, 3 no CUDA driver or device.
#include "runtime/cuda.h"
#include "abi/error.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <vector>

namespace rt = tilec::rt;

namespace {

// vector_add(x, y, out: ptr<f32>, n: i32), each program covering `block` elements.
int elements_per_program(const rt::Manifest& m) {
  const rt::ParamType f32_ptr{rt::ScalarType::f32, true};
  const rt::ParamType i32{rt::ScalarType::i32, false};
  bool shape = m.params.size() == 4 && m.params[0].type == f32_ptr && m.params[1].type == f32_ptr &&
               m.params[2].type == f32_ptr && m.params[3].type == i32;
  if (!shape)
    throw rt::LaunchArgumentError(fmt::format(
        "module '{}' is not a vector_add: want parameters (ptr<f32>, ptr<f32>, ptr<f32>, i32)",
        m.kernel));
  auto it = m.specialization.find("block");
  const std::int64_t* block =
      it == m.specialization.end() ? nullptr : std::get_if<std::int64_t>(&it->second);
  if (!block || *block <= 0)
    throw rt::LaunchArgumentError(
        fmt::format("module '{}' has no positive integer specialization 'block'", m.kernel));
  return static_cast<int>(*block);
}

int run(const char* manifest_file, int n) {
  rt::Manifest m = rt::read_manifest(manifest_file);
  int block = elements_per_program(m);

  rt::Context ctx(0);
  const rt::DeviceProperties& dev = ctx.properties();
  rt::Kernel kernel(ctx, m);

  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = 0.5f * static_cast<float>(i % 1000);
    y[i] = 1.0f - 0.25f * static_cast<float>(i % 7);
  }
  std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  rt::Buffer dx(ctx, bytes), dy(ctx, bytes), dout(ctx, bytes);
  dx.upload(x);
  dy.upload(y);
  dout.fill_zero();

  rt::Dim3 grid{static_cast<unsigned>((n + block - 1) / block)};
  rt::Stream stream(ctx);
  rt::Event start(ctx), stop(ctx);
  start.record(&stream);
  kernel.launch(grid, {dx, dy, dout, n}, &stream);
  stop.record(&stream);
  stream.synchronize();
  float ms = stop.elapsed_ms(start);

  std::vector<float> out = dout.download<float>();
  int wrong = 0;
  for (int i = 0; i < n; ++i)
    if (out[i] != x[i] + y[i] && wrong++ < 5)
      fmt::print(stderr, "out[{}] = {}, want {}\n", i, out[i], x[i] + y[i]);

  fmt::print("{} on {} ({}, {} SMs): n = {}, {} blocks of {} threads, {:.3f} ms, {}\n", m.kernel,
             dev.name, dev.arch(), dev.sm_count, n, grid.x, m.threads_per_block, ms,
             wrong ? fmt::format("{} wrong", wrong) : "all correct");
  return wrong ? 1 : 0;
}

} // namespace

int main(int argc, char** argv) {
  int n = 1 << 20;
  if (argc == 3) {
    std::string_view s = argv[2];
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || end != s.data() + s.size() || n <= 0) {
      fmt::print(stderr, "launch_module: N must be a positive integer, got '{}'\n", s);
      return 2;
    }
  }
  if (argc < 2 || argc > 3) {
    fmt::print(stderr, "usage: launch_module MANIFEST.toml [N]\n");
    return 2;
  }
  try {
    return run(argv[1], n);
  } catch (const rt::BackendUnavailable& e) {
    fmt::print(stderr, "launch_module: {}\n", e.what());
    return 3;
  } catch (const rt::ManifestError& e) {
    fmt::print(stderr, "launch_module: {}\n", e.what());
    return 2;
  } catch (const rt::LaunchArgumentError& e) {
    fmt::print(stderr, "launch_module: {}\n", e.what());
    return 2;
  } catch (const rt::Error& e) {
    fmt::print(stderr, "launch_module: {}\n", e.what());
    return 1;
  }
}
