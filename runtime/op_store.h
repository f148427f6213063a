#pragma once
// Running whole ops from a folder of exported modules: the C++ side of the C ABI
// (runtime/tilec.h). A folder written by `tilec autotune ... --export DIR` (or `tilec compile
// -o DIR`) holds each op's kernel card with its run described as data (runtime/op_run.h),
// its modules and the tuning databases; an OpStore opens it, and for the tensors and scalars
// a caller gives, an op
//   1. works out every size (given, implied by a tensor's shape or dtype, or a default),
//   2. selects the config for them (the tuning key: select_config's nearest-key rule with the
//      card's size fields, else the card's defaults, as rt::load_tuned does),
//   3. checks every tensor (present or not, dtype, shape, contiguity) naming the argument,
//   4. finds the modules of each launch by the run's specialization (rt::load_module), and
//   5. runs the launches in order: grids from their expressions, parameters bound by name.
// Nothing here knows any op by name.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "abi/error.h"
#include "runtime/launch.h"
#include "runtime/loaded_module.h"
#include "runtime/module_store.h"
#include "runtime/op_run.h"
#include "runtime/tuning_db.h"

struct CUstream_st;

namespace tilec::rt {

// A caller's array: its address (device address on the GPU, host pointer on the emulator),
// element type, shape and strides in elements (empty: contiguous, row-major).
struct OpTensorArg {
  std::string name;
  std::uint64_t address = 0;
  ScalarType dtype = ScalarType::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
};

struct OpScalarArg {
  std::string name;
  double value = 0;
};

struct OpArgs {
  std::vector<OpTensorArg> tensors;
  std::vector<OpScalarArg> scalars;
  // Sizes no tensor implies (paged attention: ctx, window, causal), or to pin one.
  std::map<std::string, SpecValue> sizes;
  // Config values that replace the selected ones (a caller that knows better, or a test).
  TunedConfig config;
};

// What the caller gave that does not fit the op: the message names the argument.
class OpArgumentError : public LaunchArgumentError {
public:
  using LaunchArgumentError::LaunchArgumentError;
};
// No such op in the store.
class OpNotFound : public Error {
public:
  using Error::Error;
};

// One launch, ready to go.
struct PreparedLaunch {
  std::string kernel;
  Dim3 grid;
  std::shared_ptr<const LoadedModule> module;
  std::vector<Arg> args;                      // workspace buffers at offsets from 0, rebased at run
  std::vector<std::size_t> workspace_args;    // indices into args of workspace buffers
};

// One problem: the sizes, the config and the launches for one set of arguments.
struct OpCall {
  std::string op;
  ProblemKey key;                          // the tuning key
  TunedConfig config;                      // selected (then the caller's overrides)
  std::string note;                        // what was selected and why
  std::map<std::string, SpecValue> values; // every size, config value and let
  std::size_t workspace_bytes = 0;
  std::map<std::string, std::size_t> workspace_offsets;
  std::vector<PreparedLaunch> launches;
};

class OpStore;

class Op {
public:
  const std::string& name() const { return card_.kernel; }
  const KernelCard& card() const { return card_; }
  const OpRun& run() const { return *card_.run; }

  // Steps 1-4 above; OpArgumentError naming the argument, ModuleNotFound naming the module.
  OpCall prepare(const OpArgs& args) const;
  // Steps 1 and 2 alone: every size, the config and the lets (call.values), nothing checked
  // and no module looked up. What a test evaluates the run's expressions with.
  OpCall resolve(const OpArgs& args) const { return prepare(args, true); }
  // The shape and dtype tensor `tensor` must have for `args` (whose outputs may be missing):
  // what a binding allocates an output with.
  std::pair<std::vector<std::int64_t>, ScalarType> tensor_shape(const OpArgs& args, const std::string& tensor) const;
  // Runs every launch. `workspace` (call.workspace_bytes, 256-byte aligned) may be 0 on the
  // emulator (host memory is allocated for the run); on the GPU it is a device address, and
  // the launches go on `stream` (nullptr: the default stream) without waiting for them.
  void run(const OpCall& call, std::uint64_t workspace, std::size_t workspace_bytes, CUstream_st* stream) const;

private:
  friend class OpStore;
  Op(const OpStore* store, KernelCard card) : store_(store), card_(std::move(card)) {}
  // values_only: stop once every size, config value and let is known (nothing is checked).
  OpCall prepare(const OpArgs& args, bool values_only) const;
  const OpStore* store_;
  KernelCard card_;
};

class OpStore {
public:
  // Opens `dir`: every <kernel>.kernel.toml with a [run] table is an op, every other top-level
  // .toml holding [[entry]] tables a tuning database. `backend` is "emulate" (modules for
  // arch "host", device "cpu-emulator"), "cuda" (device 0's arch and name; BackendUnavailable
  // without one), or "auto"/"" (cuda when a driver and device are present, else emulate).
  static std::shared_ptr<OpStore> open(const std::filesystem::path& dir, const std::string& backend = "auto");

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& arch() const { return arch_; }     // "host", "sm_90"
  const std::string& device() const { return device_; } // what tuning entries are selected for
  bool on_gpu() const { return arch_ != "host"; }
  std::vector<std::string> ops() const;
  const Op& op(const std::string& name) const; // OpNotFound naming the ops there are
  const TuningDb& db() const { return db_; }

  // The module of `kernel` with specialization `values`, loaded once per store.
  std::shared_ptr<const LoadedModule> module(const std::string& kernel, const Spec& values,
                                             const std::string& build_command) const;

private:
  std::filesystem::path dir_;
  std::string arch_, device_;
  TuningDb db_;
  std::map<std::string, std::unique_ptr<Op>> ops_;
  struct Cache;
  std::shared_ptr<Cache> cache_;
};

} // namespace tilec::rt
