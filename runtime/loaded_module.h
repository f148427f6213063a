#pragma once
// One launch call for every module a host program has, wherever it runs: a module built for
// the GPU (PTX/cubin through the CUDA driver) or for the CPU emulator (its host library).
// Host programs that link only the runtime load exported modules with it; backends/jit.h
// compiles a DSL kernel into one.
//
//   rt::LoadedModule m = rt::LoadedModule::load(manifest);  // arch "host": the emulator
//   m.launch({blocks}, {rt::Arg::array(x, n), rt::Arg::array(y, n), std::int32_t(n)});
//
// Arguments are checked against the manifest's parameters before anything runs: their count,
// buffer against scalar, a scalar's exact type (an f32 for an i32 parameter is an error, not a
// conversion) and a typed buffer's element type. On the GPU a buffer is a device address
// (rt::Buffer) and the launch is asynchronous on `stream`; on the emulator it is a host
// pointer and the launch returns when the grid is done.
#include <memory>
#include <optional>
#include <span>

#include "abi/manifest.h"
#include "runtime/emulator/emulator.h"
#include "runtime/launch.h"

namespace tilec::rt {

class Context;
class Stream;

class LoadedModule {
public:
  // Loads `m`: its host library when its arch is "host", else its GPU code on device 0 (the
  // process shares one context). Throws BackendUnavailable when a GPU module meets no driver
  // or device, ManifestError when its files are unusable.
  static LoadedModule load(const Manifest& m);

  const Manifest& manifest() const;
  bool on_gpu() const;
  // The context GPU modules run in (created on first use); BackendUnavailable without a GPU.
  static const Context& gpu_context();

  void launch(Dim3 grid, std::span<const Arg> args, const Stream* stream = nullptr) const;
  void launch(Dim3 grid, std::initializer_list<Arg> args, const Stream* stream = nullptr) const {
    launch(grid, std::span<const Arg>(args.begin(), args.size()), stream);
  }
  // On the emulator: launches and returns what the emulator counted (time, bytes moved, warp
  // requests); `buffer_names`, when given, name the arguments in its errors and stats
  // (EmuModule::launch). A GPU module is not launched: std::nullopt (time it with events instead).
  std::optional<EmuLaunchStats> launch_counted(Dim3 grid, std::span<const Arg> args,
                                               std::span<const std::string> buffer_names = {}) const;

private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

} // namespace tilec::rt
