#include "launch/module_launcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>

#include "abi/arg_errors.h"
#include "abi/float16.h"
#include "abi/float8.h"
#include "ir/error.h"
#include "runtime/cuda.h"
#include "runtime/emulator/emulator.h"
#include "runtime/launch.h"
#include "runtime/loaded_module.h"

namespace tilec::launch {

namespace {

// Adds one emulated launch's counts to `stats` (its time, bytes and warp requests).
void add_emulated_launch(LaunchStats& stats, const std::string& kernel, const rt::EmuLaunchStats& st) {
  stats.launches++;
  stats.time_ms += st.time_ms;
  stats.bytes_loaded = stats.bytes_loaded.value_or(0) + st.bytes_loaded;
  stats.bytes_stored = stats.bytes_stored.value_or(0) + st.bytes_stored;
  stats.unique_bytes = stats.unique_bytes.value_or(0) + st.unique_bytes;
  stats.requests = stats.requests.value_or(0) + st.requests;
  stats.sectors = stats.sectors.value_or(0) + st.sectors;
  stats.request_bytes = stats.request_bytes.value_or(0) + st.request_bytes;
  stats.ideal_sectors = stats.ideal_sectors.value_or(0) + st.ideal_sectors;
  for (const rt::EmuBufferStats& b : st.buffers) stats.buffer_request_bytes[b.name] += b.request_bytes;
  const std::vector<std::int64_t>& per = st.block_request_bytes;
  if (!per.empty()) {
    LaunchStats::ProgramWork w;
    w.kernel = kernel;
    w.programs = int64_t(per.size());
    const auto [lo, hi] = std::minmax_element(per.begin(), per.end());
    w.min_bytes = *lo;
    w.max_bytes = *hi;
    w.mean_bytes = double(std::accumulate(per.begin(), per.end(), std::int64_t(0))) / double(per.size());
    std::int64_t busy_bytes = 0;
    for (std::int64_t b : per)
      if (b > *lo) ++w.busy, busy_bytes += b;
    w.busy_mean_bytes = w.busy ? double(busy_bytes) / double(w.busy) : w.mean_bytes;
    stats.program_work.push_back(std::move(w));
  }
}

// A scalar argument as a module's parameter type takes it (f16/bf16/fp8 as their bits).
rt::Arg scalar_arg(rt::ScalarType type, const Arg& a) {
  if (std::string why = scalar_arg_error(type, a); !why.empty())
    throw UserError(fmt::format("a {} scalar argument was given {}", rt::scalar_type_name(type), why));
  switch (type) {
  case rt::ScalarType::i1: return rt::Arg(a.i != 0);
  case rt::ScalarType::i8: return rt::Arg(static_cast<std::int8_t>(a.i));
  case rt::ScalarType::i16: return rt::Arg(static_cast<std::int16_t>(a.i));
  case rt::ScalarType::i32: return rt::Arg(static_cast<std::int32_t>(a.i));
  case rt::ScalarType::i64: return rt::Arg(static_cast<std::int64_t>(a.i));
  case rt::ScalarType::u8: return rt::Arg(static_cast<std::uint8_t>(a.i));
  case rt::ScalarType::u16: return rt::Arg(static_cast<std::uint16_t>(a.i));
  case rt::ScalarType::u32: return rt::Arg(static_cast<std::uint32_t>(a.i));
  case rt::ScalarType::u64: return rt::Arg(static_cast<std::uint64_t>(a.i));
  case rt::ScalarType::f32: return rt::Arg(static_cast<float>(a.f));
  case rt::ScalarType::f16: return rt::Arg::f16_bits(f32_to_f16_bits(static_cast<float>(a.f)));
  case rt::ScalarType::bf16: return rt::Arg::bf16_bits(f32_to_bf16_bits(static_cast<float>(a.f)));
  case rt::ScalarType::f8e4m3: return rt::Arg::fp8_bits(type, f32_to_f8e4m3_bits(static_cast<float>(a.f)));
  case rt::ScalarType::f8e5m2: return rt::Arg::fp8_bits(type, f32_to_f8e5m2_bits(static_cast<float>(a.f)));
  }
  internal_fail("unknown scalar type");
}

// The modules loaded in this process, by folder and manifest (the module cache names each
// module's files by a hash of its kernel, IR, arch, warp count and specialization): the one
// cache of every module launcher (the emulate and cuda backends', measure's). A module stays
// loaded while a launcher that used it lives, and is unloaded with the last one.
std::shared_ptr<const rt::LoadedModule> loaded_module(const rt::Manifest& m) {
  static auto* mutex = new std::mutex;
  static auto* modules = new std::map<std::string, std::weak_ptr<const rt::LoadedModule>>;
  std::string key = m.dir.string() + "\n" + rt::format_manifest(m);
  std::lock_guard lock(*mutex);
  if (auto live = (*modules)[key].lock()) return live;
  std::erase_if(*modules, [](const auto& entry) { return entry.second.expired(); });
  auto fresh = std::make_shared<const rt::LoadedModule>(rt::LoadedModule::load(m));
  (*modules)[key] = fresh;
  return fresh;
}

// A launch made ready: the loaded module, the device copies of the host buffers on the GPU
// (one per distinct buffer), and the arguments pointing at them.
struct Prepared {
  const rt::LoadedModule* module = nullptr;
  rt::Dim3 grid;
  std::vector<std::pair<Buffer*, rt::Buffer>> device;
  std::vector<rt::Arg> args;
  // On the emulator: each argument's name in its errors and stats, the host buffer's when it
  // has one, else the parameter's.
  std::vector<std::string> names;

  void download() const {
    for (const auto& [host, copy] : device) copy.download(host->bytes.data(), host->bytes.size());
  }
};

class ModuleLauncher final : public Launcher {
public:
  ModuleLauncher(ModuleSource source, bool gpu, std::string backend)
      : source_(std::move(source)), backend_(std::move(backend)) {
    if (gpu) stream_.emplace(rt::LoadedModule::gpu_context());
  }

  std::string backend() const override { return backend_; }

  void launch(const ir::Kernel& kernel, int num_warps, Grid grid,
              const std::vector<Arg>& args) override {
    Prepared p = prepare(*kernel, num_warps, grid, args);
    double ms = 0;
    if (stream_) {
      const rt::Context& ctx = rt::LoadedModule::gpu_context();
      rt::Event start(ctx), stop(ctx);
      start.record(&*stream_);
      p.module->launch(p.grid, p.args, &*stream_);
      stop.record(&*stream_);
      ms = stop.elapsed_ms(start);
      p.download();
    } else {
      add_emulated_launch(stats_, kernel->name, *p.module->launch_counted(p.grid, p.args, p.names));
      return;
    }
    stats_.launches++;
    stats_.time_ms += ms;
  }

  // On the GPU the buffers move once: up before the warm-up launches, down after the last
  // timed one; the launches are timed with events.
  TimingStats time(const ir::Kernel& kernel, int num_warps, Grid grid, const std::vector<Arg>& args,
                   int warmup, int repeats) override {
    if (!stream_) return Launcher::time(kernel, num_warps, grid, args, warmup, repeats);
    if (warmup < 0 || repeats < 1)
      throw UserError(fmt::format("timing needs warmup >= 0 and repeats >= 1, got warmup {} and repeats {}",
                                  warmup, repeats));
    const rt::Context& ctx = rt::LoadedModule::gpu_context();
    Prepared p = prepare(*kernel, num_warps, grid, args);
    for (int i = 0; i < warmup; ++i) p.module->launch(p.grid, p.args, &*stream_);
    std::vector<rt::Event> starts, stops;
    starts.reserve(size_t(repeats));
    stops.reserve(size_t(repeats));
    for (int i = 0; i < repeats; ++i) {
      starts.emplace_back(ctx);
      stops.emplace_back(ctx);
    }
    for (int i = 0; i < repeats; ++i) {
      starts[size_t(i)].record(&*stream_);
      p.module->launch(p.grid, p.args, &*stream_);
      stops[size_t(i)].record(&*stream_);
    }
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) ms.push_back(stops[size_t(i)].elapsed_ms(starts[size_t(i)]));
    p.download();
    return summarize_times(std::move(ms), warmup);
  }

private:
  Prepared prepare(const ir::Function& fn, int num_warps, Grid grid, const std::vector<Arg>& args) {
    check_kernel_args(fn, args); // before compiling, loading or allocating anything
    for (int64_t g : grid)
      if (g < 0 || g > std::int64_t(UINT32_MAX))
        throw UserError(fmt::format("kernel '{}': grid ({}, {}, {}) must be from 0 to 2^32 - 1", fn.name, grid[0],
                                    grid[1], grid[2]));
    Prepared p;
    std::shared_ptr<const rt::LoadedModule> module = loaded_module(source_(fn, num_warps, specialize(fn, args)));
    if (std::find(held_.begin(), held_.end(), module) == held_.end()) held_.push_back(module);
    p.module = module.get();
    const rt::Manifest& m = p.module->manifest();
    if (m.params.size() != args.size())
      throw UserError(fmt::format("module {} of kernel '{}' takes {} arguments, the launch gives {}", m.dir.string(),
                                  fn.name, m.params.size(), args.size()));
    p.grid = {unsigned(grid[0]), unsigned(grid[1]), unsigned(grid[2])};
    if (stream_) { // the device copies must fit the device: say so before allocating any
      std::vector<const Buffer*> seen;
      std::size_t bytes = 0;
      for (const Arg& a : args)
        if (a.buffer && std::find(seen.begin(), seen.end(), a.buffer) == seen.end()) {
          seen.push_back(a.buffer);
          bytes += a.buffer->bytes.size();
        }
      const rt::DeviceProperties& d = rt::LoadedModule::gpu_context().properties();
      if (d.total_memory && bytes > d.total_memory)
        throw UserError(fmt::format("kernel '{}': its buffers take {} bytes; {} has {} bytes of memory", fn.name,
                                    bytes, d.name, d.total_memory));
    }
    for (size_t i = 0; i < args.size(); ++i) {
      const rt::ParamType& type = m.params[i].type;
      if (!stream_)
        p.names.push_back(args[i].buffer && !args[i].buffer->name.empty() ? args[i].buffer->name : m.params[i].name);
      if (!type.is_pointer) {
        p.args.push_back(scalar_arg(type.element, args[i]));
        continue;
      }
      Buffer* host = args[i].buffer;
      if (!host)
        throw UserError(fmt::format("kernel '{}': parameter '{}' needs a buffer", fn.name, m.params[i].name));
      // Typed, so the module checks the element type against its parameter too.
      auto typed = [&](std::uint64_t address) { return rt::Arg::buffer(address, host->bytes.size(), host->dtype); };
      if (!stream_) { // the emulator reads and writes the host buffer itself
        p.args.push_back(typed(reinterpret_cast<std::uintptr_t>(host->bytes.data())));
        continue;
      }
      auto same = [&](const auto& b) { return b.first == host; };
      auto it = std::find_if(p.device.begin(), p.device.end(), same);
      if (it == p.device.end()) {
        rt::Buffer copy(rt::LoadedModule::gpu_context(), host->bytes.size());
        copy.upload(host->bytes.data(), host->bytes.size());
        p.device.emplace_back(host, std::move(copy));
        it = p.device.end() - 1;
      }
      p.args.push_back(typed(it->second.address()));
    }
    return p;
  }

  ModuleSource source_;
  std::string backend_;
  std::optional<rt::Stream> stream_;
  std::vector<std::shared_ptr<const rt::LoadedModule>> held_; // what this launcher keeps loaded
};

} // namespace

std::unique_ptr<Launcher> make_module_launcher(ModuleSource source, bool gpu, std::string backend) {
  return std::make_unique<ModuleLauncher>(std::move(source), gpu, std::move(backend));
}

} // namespace tilec::launch
