#pragma once
// The CUDA backend over the Driver API. libcuda.so.1 is opened at run time, so a program
// built with this starts anywhere and, without a driver or a device, raises
// BackendUnavailable with one line saying what is missing. Links neither libcuda nor LLVM;
// this header needs no CUDA headers either.
//
// Every object below makes its context current for the duration of each call, so they can
// be used from any thread. None may outlive the Context it was made from; a Function lives
// as long as its Module.
#include "runtime/launch.h"
#include "abi/manifest.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

// The driver's handle types, as cuda.h declares them.
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;
struct CUmod_st;
struct CUfunc_st;

namespace tilec::rt {

// True when the driver loads, initializes and has a device. Otherwise false, with the line
// BackendUnavailable would carry in `reason`.
bool cuda_available(std::string* reason = nullptr);
int cuda_device_count(); // throws BackendUnavailable

struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0; // compute capability
  int sm_count = 0;
  std::size_t total_memory = 0;
  int max_threads_per_block = 0;
  int max_shared_per_block = 0;       // without opting in (48 KiB)
  int max_shared_per_block_optin = 0; // the most a kernel may raise its limit to
  int warp_size = 0;
  int driver_version = 0; // 12040 for CUDA 12.4

  std::string arch() const; // "sm_90"
};

// A device's primary context, retained for the object's lifetime.
class Context {
public:
  explicit Context(int device = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  const DeviceProperties& properties() const { return props_; }
  void synchronize() const;
  CUctx_st* handle() const { return ctx_; }

private:
  int device_;
  CUctx_st* ctx_ = nullptr;
  DeviceProperties props_;
};

// Device memory. Converts to a launch argument.
class Buffer {
public:
  Buffer(const Context& ctx, std::size_t bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;

  std::uint64_t address() const { return address_; }
  std::size_t bytes() const { return bytes_; }
  // Synchronous copies to and from the start of the buffer.
  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;
  void fill_zero();

  template <class T> void upload(const std::vector<T>& v) {
    upload(v.data(), v.size() * sizeof(T));
  }
  template <class T> std::vector<T> download() const {
    std::vector<T> v(bytes_ / sizeof(T));
    download(v.data(), v.size() * sizeof(T));
    return v;
  }
  operator Arg() const { return Arg::buffer(address_, bytes_); }

private:
  const Context* ctx_;
  std::uint64_t address_ = 0;
  std::size_t bytes_ = 0;
};

class Stream {
public:
  explicit Stream(const Context& ctx);
  // A stream someone else made (a host's CUstream, e.g. PyTorch's current stream) in `ctx`:
  // launches go on it, and it is not destroyed with this object.
  static Stream borrow(const Context& ctx, CUstream_st* handle);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&&) = delete;

  void synchronize() const;
  CUstream_st* handle() const { return stream_; }

private:
  Stream(const Context* ctx, CUstream_st* handle) : ctx_(ctx), stream_(handle), owned_(false) {}
  const Context* ctx_;
  CUstream_st* stream_ = nullptr;
  bool owned_ = true;
};

class Event {
public:
  explicit Event(const Context& ctx);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&&) = delete;

  void record(const Stream* stream = nullptr); // nullptr: the default stream
  void synchronize() const;
  // Milliseconds from `start` to this event; waits for this event first.
  float elapsed_ms(const Event& start) const;

private:
  const Context* ctx_;
  CUevent_st* event_ = nullptr;
};

class Function {
public:
  Function(const Context& ctx, CUfunc_st* fn, std::string name)
      : ctx_(&ctx), fn_(fn), name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  CUfunc_st* handle() const { return fn_; }
  int registers() const;
  void set_max_dynamic_shared_bytes(int bytes) const;
  // Launches without checking the arguments against anything; `extra` points at the values of
  // parameters after `args` (tensor maps).
  void launch(Dim3 grid, Dim3 block, unsigned shared_bytes, std::span<const Arg> args,
              const Stream* stream = nullptr, std::span<const void* const> extra = {}) const;

private:
  const Context* ctx_;
  CUfunc_st* fn_;
  std::string name_;
};

class Module {
public:
  // `origin` names the image in errors. A PTX image goes through the driver's JIT; when it
  // fails the JIT's error log is part of the message.
  static Module from_ptx(const Context& ctx, const std::string& ptx, const std::string& origin);
  static Module from_cubin(const Context& ctx, const std::vector<char>& cubin,
                           const std::string& origin);
  ~Module();
  Module(Module&& other) noexcept;
  Module& operator=(Module&&) = delete;

  Function function(const std::string& symbol) const;
  const std::string& info_log() const { return info_log_; }

private:
  Module(const Context& ctx, const void* image, const std::string& origin);

  const Context* ctx_;
  CUmod_st* module_ = nullptr;
  std::string info_log_;
};

// A compiled module's kernel, loaded from its manifest: the cubin when it was built for this
// device's arch, else the PTX through the driver's JIT. Raises the dynamic shared-memory
// limit when the kernel needs more than 48 KiB.
class Kernel {
public:
  Kernel(const Context& ctx, Manifest manifest);
  static Kernel load(const Context& ctx, const std::filesystem::path& manifest_file) {
    return Kernel(ctx, read_manifest(manifest_file));
  }

  const Manifest& manifest() const { return manifest_; }
  const Function& function() const { return function_; }
  // Checks `args` against the manifest's parameters (LaunchArgumentError names the one that
  // does not fit), then launches `grid` blocks of threads_per_block threads.
  void launch(Dim3 grid, std::span<const Arg> args, const Stream* stream = nullptr) const;
  void launch(Dim3 grid, std::initializer_list<Arg> args, const Stream* stream = nullptr) const {
    launch(grid, std::span<const Arg>(args.begin(), args.size()), stream);
  }

private:
  Manifest manifest_;
  Module module_;
  Function function_;
};

} // namespace tilec::rt
