#include "runtime/loaded_module.h"

#include <fmt/format.h>

#include <mutex>
#include <optional>
#include <variant>

#include "abi/error.h"
#include "runtime/cuda.h"
#include "runtime/emulator/emulator.h"

namespace tilec::rt {

struct LoadedModule::Impl {
  std::variant<std::unique_ptr<EmuModule>, std::unique_ptr<Kernel>> code;
  const Manifest& manifest() const {
    return code.index() == 0 ? std::get<0>(code)->manifest() : std::get<1>(code)->manifest();
  }
};

const Context& LoadedModule::gpu_context() {
  static std::once_flag once;
  static std::unique_ptr<Context> ctx;
  static std::string why;
  std::call_once(once, [] {
    if (cuda_available(&why)) ctx = std::make_unique<Context>(0);
  });
  if (!ctx) throw BackendUnavailable(why);
  return *ctx;
}

LoadedModule LoadedModule::load(const Manifest& m) {
  auto impl = std::make_shared<Impl>();
  if (m.arch == "host") {
    if (m.emulator.empty())
      throw ManifestError(fmt::format("module '{}' ({}) is for the emulator but names no emulator library", m.kernel,
                                      m.dir.string()));
    impl->code = std::make_unique<EmuModule>(m);
  } else {
    impl->code = std::make_unique<Kernel>(gpu_context(), m);
  }
  LoadedModule out;
  out.impl_ = std::move(impl);
  return out;
}

const Manifest& LoadedModule::manifest() const { return impl_->manifest(); }

bool LoadedModule::on_gpu() const { return impl_->code.index() == 1; }

void LoadedModule::launch(Dim3 grid, std::span<const Arg> args, const Stream* stream) const {
  if (impl_->code.index() == 0) {
    std::get<0>(impl_->code)->launch(grid, args);
    return;
  }
  std::get<1>(impl_->code)->launch(grid, args, stream);
}

std::optional<EmuLaunchStats> LoadedModule::launch_counted(Dim3 grid, std::span<const Arg> args,
                                                           std::span<const std::string> buffer_names) const {
  if (impl_->code.index() != 0) return std::nullopt;
  return std::get<0>(impl_->code)->launch(grid, args, buffer_names);
}

} // namespace tilec::rt
