#include "templates/module_launcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include "abi/arg_errors.h"
#include "abi/float16.h"
#include "abi/float8.h"
#include "ir/error.h"
#include "runtime/cuda.h"
#include "runtime/loaded_module.h"

namespace tilec::templates {

namespace {

// A launch made ready: the loaded module, the device copies of the host buffers on the GPU
// (one per distinct buffer), and the arguments pointing at them.
struct Prepared {
  const rt::LoadedModule* module = nullptr;
  rt::Dim3 grid;
  std::vector<std::pair<interp::Buffer*, rt::Buffer>> device;
  std::vector<rt::Arg> args;

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

  void launch(const ir::Kernel& kernel, int num_warps, interp::Grid grid,
              const std::vector<interp::Arg>& args) override {
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
      add_emulated_launch(stats_, *p.module->launch_counted(p.grid, p.args));
      return;
    }
    stats_.launches++;
    stats_.time_ms += ms;
  }

  // On the GPU the buffers move once: up before the warm-up launches, down after the last
  // timed one; the launches are timed with events.
  TimingStats time(const ir::Kernel& kernel, int num_warps, interp::Grid grid, const std::vector<interp::Arg>& args,
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
  const rt::LoadedModule& loaded(const ir::Function& fn, int num_warps, const std::vector<interp::Arg>& args) {
    rt::Manifest m = source_(fn, num_warps, args);
    std::string key = (m.dir / m.kernel).string() + "|" + m.ir_hash + "|" + m.arch;
    auto it = modules_.find(key);
    if (it == modules_.end()) it = modules_.emplace(key, rt::LoadedModule::load(m)).first;
    return it->second;
  }

  Prepared prepare(const ir::Function& fn, int num_warps, interp::Grid grid, const std::vector<interp::Arg>& args) {
    check_kernel_args(fn, args); // before compiling, loading or allocating anything
    for (int64_t g : grid)
      if (g < 0 || g > std::int64_t(UINT32_MAX))
        throw UserError(fmt::format("kernel '{}': grid ({}, {}, {}) must be from 0 to 2^32 - 1", fn.name, grid[0],
                                    grid[1], grid[2]));
    Prepared p;
    p.module = &loaded(fn, num_warps, args);
    const rt::Manifest& m = p.module->manifest();
    if (m.params.size() != args.size())
      throw UserError(fmt::format("module {} of kernel '{}' takes {} arguments, the launch gives {}", m.dir.string(),
                                  fn.name, m.params.size(), args.size()));
    p.grid = {unsigned(grid[0]), unsigned(grid[1]), unsigned(grid[2])};
    if (stream_) { // the device copies must fit the device: say so before allocating any
      std::vector<const interp::Buffer*> seen;
      std::size_t bytes = 0;
      for (const interp::Arg& a : args)
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
      if (!type.is_pointer) {
        p.args.push_back(scalar_arg(type.element, args[i]));
        continue;
      }
      interp::Buffer* host = args[i].buffer;
      if (!host)
        throw UserError(fmt::format("kernel '{}': parameter '{}' needs a buffer", fn.name, m.params[i].name));
      // Typed, so the module checks the element type against its parameter too.
      auto typed = [&](std::uint64_t address) {
        std::optional<rt::ScalarType> element = buffer_element(*host);
        return element ? rt::Arg::buffer(address, host->bytes.size(), *element)
                       : rt::Arg::buffer(address, host->bytes.size());
      };
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
  std::map<std::string, rt::LoadedModule> modules_;
};

} // namespace

void add_emulated_launch(LaunchStats& stats, const rt::EmuLaunchStats& st) {
  stats.launches++;
  stats.time_ms += st.time_ms;
  stats.bytes_loaded = stats.bytes_loaded.value_or(0) + st.bytes_loaded;
  stats.bytes_stored = stats.bytes_stored.value_or(0) + st.bytes_stored;
  stats.unique_bytes = stats.unique_bytes.value_or(0) + st.unique_bytes;
  stats.requests = stats.requests.value_or(0) + st.requests;
  stats.sectors = stats.sectors.value_or(0) + st.sectors;
  stats.request_bytes = stats.request_bytes.value_or(0) + st.request_bytes;
  stats.ideal_sectors = stats.ideal_sectors.value_or(0) + st.ideal_sectors;
}

void check_kernel_args(const ir::Function& fn, const std::vector<interp::Arg>& args) {
  if (std::string why = interp::argument_error(fn, args); !why.empty())
    throw UserError(fmt::format("kernel '{}': {}", fn.name, why));
}

std::optional<rt::ScalarType> buffer_element(const interp::Buffer& b) {
  return rt::parse_scalar_type(ir::dtype_name(b.dtype));
}

rt::Arg scalar_arg(rt::ScalarType type, const interp::Arg& a) {
  if (auto t = ir::parse_dtype(rt::scalar_type_name(type)))
    if (std::string why = interp::scalar_arg_error(*t, a); !why.empty())
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

std::map<std::string, int64_t> int_arg_divisibility(const ir::Function& fn, const std::vector<interp::Arg>& args) {
  std::map<std::string, int64_t> r;
  for (size_t i = 0; i < fn.params.size() && i < args.size(); ++i) {
    const ir::Type& t = fn.params[i]->type;
    if (t.is_ptr() || !ir::is_int(t.dtype()) || t.dtype() == ir::DType::i1 || args[i].buffer) continue;
    if (args[i].i % 16 == 0) r[fn.params[i]->name] = 16;
  }
  return r;
}

std::map<std::string, int64_t> int_arg_values(const ir::Function& fn, const std::vector<interp::Arg>& args) {
  std::map<std::string, int64_t> r;
  for (size_t i = 0; i < fn.params.size() && i < args.size(); ++i) {
    const ir::Type& t = fn.params[i]->type;
    if (t.is_ptr() || !ir::is_int(t.dtype()) || t.dtype() == ir::DType::i1 || args[i].buffer) continue;
    if (args[i].i == 1) r[fn.params[i]->name] = 1;
  }
  return r;
}

std::set<std::string> large_buffers(const ir::Function& fn, const std::vector<interp::Arg>& args) {
  std::set<std::string> r;
  for (size_t i = 0; i < fn.params.size() && i < args.size(); ++i)
    if (fn.params[i]->type.is_ptr() && args[i].buffer && args[i].buffer->count() > rt::kMaxElements32)
      r.insert(fn.params[i]->name);
  return r;
}

std::unique_ptr<Launcher> make_module_launcher(ModuleSource source, bool gpu, std::string backend) {
  return std::make_unique<ModuleLauncher>(std::move(source), gpu, std::move(backend));
}

} // namespace tilec::templates
