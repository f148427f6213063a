// The cuda backend: each kernel is compiled for the device's arch once (backends/
// module_cache.h caches the module in this process and on disk), loaded through the
// Driver API, and launched on device copies of the host buffers. time_ms is the kernel's
// time between two events, not the copies.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>

#include "runtime/cuda.h"
#include "abi/error.h"
#include "kernels/launcher.h"
#include "backends/jit.h"
#include "backends/module_cache.h"

namespace tilec::backends {

using kernels::Launcher;
using kernels::TimingStats;
using kernels::summarize_times;

namespace {

// The arch tilec compiles for on this device (gpu_arch: sm_86 runs sm_80 code, sm_100 the
// sm_90 PTX the driver JIT-compiles).
std::string compile_arch(const rt::DeviceProperties& d) { return gpu_arch(d.name, d.major, d.minor); }

// A launch made ready on the device: the loaded kernel, the device copies of the host buffers
// (one per distinct buffer) and the arguments pointing at them.
struct DeviceLaunch {
  const rt::Kernel* kernel = nullptr;
  rt::Dim3 grid;
  std::vector<std::pair<interp::Buffer*, rt::Buffer>> buffers;
  std::vector<rt::Arg> args;

  void download() const {
    for (const auto& [host, device] : buffers) device.download(host->bytes.data(), host->bytes.size());
  }
};

class CudaLauncher final : public Launcher {
public:
  CudaLauncher() : ctx_(0), stream_(ctx_), arch_(compile_arch(ctx_.properties())) {}

  std::string backend() const override { return "cuda"; }

  void launch(const ir::Kernel& kernel, int num_warps, interp::Grid grid,
              const std::vector<interp::Arg>& args) override {
    DeviceLaunch l = prepare(*kernel, num_warps, grid, args);
    rt::Event start(ctx_), stop(ctx_);
    start.record(&stream_);
    l.kernel->launch(l.grid, l.args, &stream_);
    stop.record(&stream_);
    float ms = stop.elapsed_ms(start);
    l.download();
    stats_.launches++;
    stats_.time_ms += ms;
  }

  // The buffers move once: up before the warm-up launches, down after the last timed one.
  TimingStats time(const ir::Kernel& kernel, int num_warps, interp::Grid grid, const std::vector<interp::Arg>& args,
                   int warmup, int repeats) override {
    if (warmup < 0 || repeats < 1)
      throw UserError(fmt::format("timing needs warmup >= 0 and repeats >= 1, got warmup {} and repeats {}",
                                  warmup, repeats));
    DeviceLaunch l = prepare(*kernel, num_warps, grid, args);
    for (int i = 0; i < warmup; ++i) l.kernel->launch(l.grid, l.args, &stream_);
    std::vector<rt::Event> starts, stops;
    starts.reserve(size_t(repeats));
    stops.reserve(size_t(repeats));
    for (int i = 0; i < repeats; ++i) {
      starts.emplace_back(ctx_);
      stops.emplace_back(ctx_);
    }
    for (int i = 0; i < repeats; ++i) {
      starts[size_t(i)].record(&stream_);
      l.kernel->launch(l.grid, l.args, &stream_);
      stops[size_t(i)].record(&stream_);
    }
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) ms.push_back(stops[size_t(i)].elapsed_ms(starts[size_t(i)]));
    l.download();
    return summarize_times(std::move(ms), warmup);
  }

private:
  const rt::Kernel& loaded(const ir::Function& fn, int num_warps) {
    codegen::CompileOptions o;
    o.arch = arch_;
    o.num_warps = num_warps;
    o.target = codegen::Target::nvptx;
    // A cubin is only of use on a device of exactly its arch; elsewhere the driver JITs the PTX.
    o.run_ptxas = arch_ == ctx_.properties().arch();
    rt::Manifest m = cached_module(fn, o, "cuda");
    std::string key = m.code_path(m.ptx).string(); // named by the cache key's hash
    auto it = kernels_.find(key);
    if (it == kernels_.end()) it = kernels_.emplace(key, std::make_unique<rt::Kernel>(ctx_, std::move(m))).first;
    return *it->second;
  }

  DeviceLaunch prepare(const ir::Function& fn, int num_warps, interp::Grid grid, const std::vector<interp::Arg>& args) {
    if (args.size() != fn.params.size())
      throw UserError(fmt::format("kernel '{}' takes {} arguments, got {}", fn.name, fn.params.size(), args.size()));
    for (int64_t g : grid)
      if (g < 1 || g > std::int64_t(UINT32_MAX))
        throw UserError(fmt::format("kernel '{}': grid ({}, {}, {}) must be positive and fit 32 bits", fn.name,
                                    grid[0], grid[1], grid[2]));
    DeviceLaunch l;
    l.kernel = &loaded(fn, num_warps);
    l.grid = {unsigned(grid[0]), unsigned(grid[1]), unsigned(grid[2])};
    for (size_t i = 0; i < args.size(); ++i) {
      const ir::Type& type = fn.params[i]->type;
      if (!type.is_ptr()) {
        l.args.push_back(scalar_arg(type, args[i]));
        continue;
      }
      interp::Buffer* host = args[i].buffer;
      if (!host)
        throw UserError(fmt::format("kernel '{}': parameter '{}' needs a buffer", fn.name, fn.params[i]->name));
      auto same = [&](const auto& b) { return b.first == host; };
      auto it = std::find_if(l.buffers.begin(), l.buffers.end(), same);
      if (it == l.buffers.end()) {
        rt::Buffer device(ctx_, host->bytes.size());
        device.upload(host->bytes.data(), host->bytes.size());
        l.buffers.emplace_back(host, std::move(device));
        it = l.buffers.end() - 1;
      }
      l.args.push_back(it->second);
    }
    return l;
  }

  // Declared first: everything below lives in this context and goes before it.
  rt::Context ctx_;
  rt::Stream stream_;
  std::string arch_;
  std::map<std::string, std::unique_ptr<rt::Kernel>> kernels_;
};

} // namespace

std::unique_ptr<Launcher> make_cuda_launcher() { return std::make_unique<CudaLauncher>(); }

} // namespace tilec::backends
