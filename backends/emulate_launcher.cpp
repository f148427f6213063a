// The emulate backend: each kernel is compiled for the emu target once (per printed IR and
// warp count), cached in this process and on disk, and run by the CPU emulator
// (runtime/emulator.h) on the host buffers themselves.
#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string_view>
#include <mutex>

#include "codegen/compile.h"
#include "runtime/emulator.h"
#include "templates/launcher.h"
#include "templates/module_launcher.h"
#include "backends/launchers.h"
#include "backends/module_cache.h"

namespace tilec::backends {

using templates::Launcher;

namespace {

// The loaded emu modules of this process, by kernel (printed IR) and warp count; the
// compiled libraries themselves come from the shared module cache (launcher_support.h).
class ModuleCache {
public:
  static ModuleCache& get() {
    static auto* c = new ModuleCache; // never destroyed: modules stay loaded until exit
    return *c;
  }

  std::shared_ptr<const rt::EmuModule> module(const ir::Function& fn, int num_warps, EmuLowering lowering,
                                              const std::vector<interp::Arg>& args) {
    codegen::CompileOptions o;
    o.int_arg_divisibility = templates::int_arg_divisibility(fn, args);
    o.int_arg_values = templates::int_arg_values(fn, args);
    o.large_buffers = templates::large_buffers(fn, args);
    o.target = lowering == EmuLowering::nvptx ? codegen::Target::emu_nvptx : codegen::Target::emu;
    o.num_warps = num_warps;
    rt::Manifest manifest = cached_module(fn, o, "emu");
    std::string key = (manifest.dir / manifest.emulator).string();
    std::lock_guard lock(mutex_);
    auto it = modules_.find(key);
    if (it != modules_.end()) return it->second;
    auto m = std::make_shared<const rt::EmuModule>(manifest);
    modules_.emplace(std::move(key), m);
    return m;
  }

private:
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const rt::EmuModule>> modules_;
};

// A kernel argument as the emulator takes it, by the module's parameter type: a buffer typed
// with its element type, which the module checks against the parameter's as well.
rt::Arg to_rt_arg(const rt::ParamType& t, const interp::Arg& a, const std::string& kernel, const std::string& param) {
  if (!t.is_pointer) return templates::scalar_arg(t.element, a);
  if (!a.buffer) throw UserError(fmt::format("kernel '{}': parameter '{}' needs a buffer", kernel, param));
  auto address = reinterpret_cast<std::uint64_t>(a.buffer->bytes.data());
  if (std::optional<rt::ScalarType> element = templates::buffer_element(*a.buffer))
    return rt::Arg::buffer(address, a.buffer->bytes.size(), *element);
  return rt::Arg::buffer(address, a.buffer->bytes.size());
}

class EmulateLauncher final : public Launcher {
public:
  explicit EmulateLauncher(EmuLowering lowering) : lowering_(lowering) {}
  std::string backend() const override { return "emulate"; }

  void launch(const ir::Kernel& kernel, int num_warps, interp::Grid grid,
              const std::vector<interp::Arg>& args) override {
    const ir::Function& fn = *kernel;
    templates::check_kernel_args(fn, args); // before compiling: the interpreter's checks, in its words
    for (int64_t g : grid)
      if (g < 0 || g > std::int64_t(UINT32_MAX))
        throw UserError(fmt::format("kernel '{}': grid ({}, {}, {}) must be from 0 to 2^32 - 1", fn.name, grid[0],
                                    grid[1], grid[2]));
    auto module = ModuleCache::get().module(fn, num_warps, lowering_, args);
    std::vector<rt::Arg> rt_args;
    std::vector<std::string> names;
    for (size_t i = 0; i < args.size(); ++i) {
      rt_args.push_back(to_rt_arg(module->manifest().params.at(i).type, args[i], fn.name, fn.params[i]->name));
      names.push_back(args[i].buffer && !args[i].buffer->name.empty() ? args[i].buffer->name : fn.params[i]->name);
    }
    rt::Dim3 dim{unsigned(grid[0]), unsigned(grid[1]), unsigned(grid[2])};
    templates::add_emulated_launch(stats_, module->launch(dim, rt_args, names));
  }

private:
  EmuLowering lowering_;
};

} // namespace

EmuLowering default_emu_lowering() {
  const char* v = std::getenv("TILEC_EMU_LOWERING");
  if (!v || !*v || std::string_view(v) == "emu") return EmuLowering::emu;
  if (std::string_view(v) == "nvptx") return EmuLowering::nvptx;
  throw UserError(fmt::format("TILEC_EMU_LOWERING={}: expected emu or nvptx", v));
}

std::unique_ptr<Launcher> make_emulate_launcher(EmuLowering lowering) {
  return std::make_unique<EmulateLauncher>(lowering);
}

} // namespace tilec::backends
