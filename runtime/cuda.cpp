#include "runtime/cuda.h"

#include "abi/error.h"
#include "runtime/tensor_map.h"

#include <cuda.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

namespace tilec::rt {
namespace {

// The ABI the pointer types below follow: cuda.h's prototypes of these entry points have
// been stable since CUDA 12.0, and cuGetProcAddress_v2 exists from 12.0 on.
constexpr int kAbiVersion = 12000;
constexpr int kDefaultSharedLimit = 48 * 1024;

struct DriverApi {
#define X(name) decltype(&::name) name = nullptr;
#include "runtime/cuda_entry_points.def"
#undef X
};

struct LoadedDriver {
  DriverApi api;
  std::string unavailable; // empty when the driver is usable
};

std::string describe(const DriverApi& api, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "unknown CUresult";
  if (api.cuGetErrorString(r, &text) != CUDA_SUCCESS || !text) text = "no description";
  return fmt::format("{} ({}): {}", name, static_cast<int>(r), text);
}

LoadedDriver load_driver() {
  LoadedDriver d;
  // Said to a host program, which may run the module's emulator build instead.
  constexpr const char* kAdvice = "; without a GPU, load the module built for the CPU emulator (runtime/emulator/emulator.h)";
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = ::dlerror();
    d.unavailable =
        fmt::format("CUDA driver not found ({}){}",
                    why ? why : "libcuda.so.1: cannot open shared object file", kAdvice);
    return d;
  }
  // Never dlclose'd: the driver stays loaded for the life of the process.
  auto get_proc =
      reinterpret_cast<decltype(&::cuGetProcAddress)>(::dlsym(lib, "cuGetProcAddress_v2"));
  if (!get_proc) {
    d.unavailable = fmt::format(
        "CUDA driver too old (libcuda.so.1 has no cuGetProcAddress_v2; CUDA 12.0 or newer is "
        "needed){}",
        kAdvice);
    return d;
  }
#define X(name)                                                                                    \
  {                                                                                                \
    void* fn = nullptr;                                                                            \
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;                   \
    CUresult r = get_proc(#name, &fn, kAbiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &found);           \
    if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || !fn) {                        \
      d.unavailable = fmt::format("CUDA driver unusable (it lacks {}){}", #name, kAdvice);         \
      return d;                                                                                    \
    }                                                                                              \
    d.api.name = reinterpret_cast<decltype(d.api.name)>(fn);                                       \
  }
#include "runtime/cuda_entry_points.def"
#undef X

  if (CUresult r = d.api.cuInit(0); r != CUDA_SUCCESS) {
    d.unavailable =
        r == CUDA_ERROR_NO_DEVICE
            ? fmt::format("no CUDA device found (cuInit: {}){}", describe(d.api, r), kAdvice)
            : fmt::format("CUDA driver failed to initialize (cuInit: {}){}", describe(d.api, r),
                          kAdvice);
    return d;
  }
  int count = 0;
  if (CUresult r = d.api.cuDeviceGetCount(&count); r != CUDA_SUCCESS || count == 0) {
    d.unavailable = fmt::format("no CUDA device found{}", kAdvice);
    return d;
  }
  return d;
}

const LoadedDriver& loaded_driver() {
  static const LoadedDriver driver = load_driver();
  return driver;
}

const DriverApi& driver() {
  const LoadedDriver& d = loaded_driver();
  if (!d.unavailable.empty()) throw BackendUnavailable(d.unavailable);
  return d.api;
}

void check(CUresult r, std::string_view call, std::string_view subject = {}) {
  if (r == CUDA_SUCCESS) return;
  std::string what(call);
  if (!subject.empty()) what += fmt::format("({})", subject);
  throw CudaError(fmt::format("{} failed: {}", what, describe(driver(), r)), r);
}

// Calls a driver entry point and checks its result under the entry point's plain name.
#define CU_CHECK(name, ...) check(driver().name(__VA_ARGS__), #name)

// Makes a context current for one call, restoring the previous one after.
class ScopedContext {
public:
  explicit ScopedContext(const Context& ctx) { CU_CHECK(cuCtxPushCurrent, ctx.handle()); }
  ~ScopedContext() {
    CUcontext popped = nullptr;
    loaded_driver().api.cuCtxPopCurrent(&popped);
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;
};

// Runs a release call with the context current. Destructors cannot report a failure, so
// nothing here throws; at worst the resource leaks.
template <class Release> void release_in(const Context& ctx, Release release) noexcept {
  const DriverApi& api = loaded_driver().api;
  if (api.cuCtxPushCurrent(ctx.handle()) != CUDA_SUCCESS) return;
  release(api);
  CUcontext popped = nullptr;
  api.cuCtxPopCurrent(&popped);
}

int attribute(CUdevice dev, CUdevice_attribute which, std::string_view what) {
  int value = 0;
  check(driver().cuDeviceGetAttribute(&value, which, dev), "cuDeviceGetAttribute", what);
  return value;
}

std::string read_code_file(const Manifest& m, const std::filesystem::path& file) {
  std::filesystem::path path = m.code_path(file);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ManifestError(fmt::format("module '{}': cannot open code file {}: {}", m.kernel,
                                    path.string(), std::strerror(errno)));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Module load_module(const Context& ctx, const Manifest& m) {
  const DeviceProperties& props = ctx.properties();
  if (m.threads_per_block > props.max_threads_per_block)
    throw LaunchArgumentError(fmt::format("kernel '{}' needs {} threads per block; {} allows {}",
                                          m.kernel, m.threads_per_block, props.name,
                                          props.max_threads_per_block));
  if (m.shared_bytes > props.max_shared_per_block_optin)
    throw LaunchArgumentError(
        fmt::format("kernel '{}' needs {} bytes of shared memory per block; {} allows at most {}",
                    m.kernel, m.shared_bytes, props.name, props.max_shared_per_block_optin));

  std::string arch = props.arch();
  if (!m.cubin.empty() && m.arch == arch) {
    std::string image = read_code_file(m, m.cubin);
    return Module::from_cubin(ctx, std::vector<char>(image.begin(), image.end()),
                              m.code_path(m.cubin).string());
  }
  if (!m.ptx.empty())
    return Module::from_ptx(ctx, read_code_file(m, m.ptx), m.code_path(m.ptx).string());
  throw ManifestError(fmt::format("module '{}' has no code for {}: {}", m.kernel, arch,
                                  m.cubin.empty()
                                      ? "no PTX or cubin in [code]"
                                      : "its cubin is for " + m.arch + " and it has no PTX"));
}

} // namespace

bool cuda_available(std::string* reason) {
  const LoadedDriver& d = loaded_driver();
  if (reason) *reason = d.unavailable;
  return d.unavailable.empty();
}

int cuda_device_count() {
  int count = 0;
  CU_CHECK(cuDeviceGetCount, &count);
  return count;
}

std::string DeviceProperties::arch() const {
  return fmt::format("sm_{}{}", major, minor);
}

Context::Context(int device) : device_(device) {
  int count = cuda_device_count();
  if (device < 0 || device >= count)
    throw BackendUnavailable(fmt::format("no CUDA device {} ({} present)", device, count));
  CUdevice dev = 0;
  CU_CHECK(cuDeviceGet, &dev, device);

  char name[256] = {};
  CU_CHECK(cuDeviceGetName, name, sizeof(name), dev);
  props_.name = name;
  props_.major = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability");
  props_.minor = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability");
  props_.sm_count = attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count");
  props_.max_threads_per_block =
      attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max threads per block");
  props_.max_shared_per_block =
      attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "max shared memory");
  props_.max_shared_per_block_optin =
      attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "max shared memory");
  props_.warp_size = attribute(dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE, "warp size");
  CU_CHECK(cuDeviceTotalMem, &props_.total_memory, dev);
  CU_CHECK(cuDriverGetVersion, &props_.driver_version);

  CU_CHECK(cuDevicePrimaryCtxRetain, &ctx_, dev);
}

Context::~Context() {
  const DriverApi& api = loaded_driver().api;
  CUdevice dev = 0;
  if (api.cuDeviceGet(&dev, device_) == CUDA_SUCCESS) api.cuDevicePrimaryCtxRelease(dev);
}

void Context::synchronize() const {
  ScopedContext guard(*this);
  CU_CHECK(cuCtxSynchronize);
}

Buffer::Buffer(const Context& ctx, std::size_t bytes) : ctx_(&ctx), bytes_(bytes) {
  if (bytes == 0) return;
  ScopedContext guard(ctx);
  CUdeviceptr ptr = 0;
  check(driver().cuMemAlloc(&ptr, bytes), "cuMemAlloc", fmt::format("{} bytes", bytes));
  address_ = ptr;
}

Buffer::~Buffer() {
  if (address_) release_in(*ctx_, [&](const DriverApi& api) { api.cuMemFree(address_); });
}

Buffer::Buffer(Buffer&& other) noexcept
    : ctx_(other.ctx_), address_(std::exchange(other.address_, 0)),
      bytes_(std::exchange(other.bytes_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Buffer old(std::move(*this));
    ctx_ = other.ctx_;
    address_ = std::exchange(other.address_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void Buffer::upload(const void* host, std::size_t bytes) {
  if (bytes > bytes_)
    throw Error(fmt::format("upload of {} bytes into a buffer of {} bytes", bytes, bytes_));
  if (bytes == 0) return;
  ScopedContext guard(*ctx_);
  CU_CHECK(cuMemcpyHtoD, address_, host, bytes);
}

void Buffer::download(void* host, std::size_t bytes) const {
  if (bytes > bytes_)
    throw Error(fmt::format("download of {} bytes from a buffer of {} bytes", bytes, bytes_));
  if (bytes == 0) return;
  ScopedContext guard(*ctx_);
  CU_CHECK(cuMemcpyDtoH, host, address_, bytes);
}

void Buffer::fill_zero() {
  if (bytes_ == 0) return;
  ScopedContext guard(*ctx_);
  CU_CHECK(cuMemsetD8, address_, 0, bytes_);
}

Stream::Stream(const Context& ctx) : ctx_(&ctx) {
  ScopedContext guard(ctx);
  CU_CHECK(cuStreamCreate, &stream_, CU_STREAM_DEFAULT);
}

Stream Stream::borrow(const Context& ctx, CUstream_st* handle) { return Stream(&ctx, handle); }

Stream::~Stream() {
  if (stream_ && owned_) release_in(*ctx_, [&](const DriverApi& api) { api.cuStreamDestroy(stream_); });
}

Stream::Stream(Stream&& other) noexcept
    : ctx_(other.ctx_), stream_(std::exchange(other.stream_, nullptr)), owned_(other.owned_) {}

void Stream::synchronize() const {
  ScopedContext guard(*ctx_);
  CU_CHECK(cuStreamSynchronize, stream_);
}

Event::Event(const Context& ctx) : ctx_(&ctx) {
  ScopedContext guard(ctx);
  CU_CHECK(cuEventCreate, &event_, CU_EVENT_DEFAULT);
}

Event::~Event() {
  if (event_) release_in(*ctx_, [&](const DriverApi& api) { api.cuEventDestroy(event_); });
}

Event::Event(Event&& other) noexcept
    : ctx_(other.ctx_), event_(std::exchange(other.event_, nullptr)) {}

void Event::record(const Stream* stream) {
  ScopedContext guard(*ctx_);
  CU_CHECK(cuEventRecord, event_, stream ? stream->handle() : nullptr);
}

void Event::synchronize() const {
  ScopedContext guard(*ctx_);
  CU_CHECK(cuEventSynchronize, event_);
}

float Event::elapsed_ms(const Event& start) const {
  synchronize();
  ScopedContext guard(*ctx_);
  float ms = 0;
  CU_CHECK(cuEventElapsedTime, &ms, start.event_, event_);
  return ms;
}

Module::Module(const Context& ctx, const void* image, const std::string& origin) : ctx_(&ctx) {
  std::string error_log(16 * 1024, '\0'), info_log(16 * 1024, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log.data(), reinterpret_cast<void*>(error_log.size()), info_log.data(),
                    reinterpret_cast<void*>(info_log.size())};
  ScopedContext guard(ctx);
  CUresult r = driver().cuModuleLoadDataEx(&module_, image, 4, options, values);
  info_log_ = info_log.c_str();
  if (r != CUDA_SUCCESS) {
    std::string log = error_log.c_str();
    throw CudaError(fmt::format("cuModuleLoadDataEx({}) failed: {}{}", origin,
                                describe(driver(), r), log.empty() ? "" : "\n" + log),
                    r);
  }
}

Module Module::from_ptx(const Context& ctx, const std::string& ptx, const std::string& origin) {
  return Module(ctx, ptx.c_str(), origin);
}

Module Module::from_cubin(const Context& ctx, const std::vector<char>& cubin,
                          const std::string& origin) {
  return Module(ctx, cubin.data(), origin);
}

Module::~Module() {
  if (module_) release_in(*ctx_, [&](const DriverApi& api) { api.cuModuleUnload(module_); });
}

Module::Module(Module&& other) noexcept
    : ctx_(other.ctx_), module_(std::exchange(other.module_, nullptr)),
      info_log_(std::move(other.info_log_)) {}

Function Module::function(const std::string& symbol) const {
  ScopedContext guard(*ctx_);
  CUfunction fn = nullptr;
  check(driver().cuModuleGetFunction(&fn, module_, symbol.c_str()), "cuModuleGetFunction", symbol);
  return Function(*ctx_, fn, symbol);
}

int Function::registers() const {
  ScopedContext guard(*ctx_);
  int n = 0;
  check(driver().cuFuncGetAttribute(&n, CU_FUNC_ATTRIBUTE_NUM_REGS, fn_), "cuFuncGetAttribute",
        name_);
  return n;
}

void Function::set_max_dynamic_shared_bytes(int bytes) const {
  ScopedContext guard(*ctx_);
  check(driver().cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes),
        "cuFuncSetAttribute", fmt::format("{}, max dynamic shared memory {} bytes", name_, bytes));
}

void Function::launch(Dim3 grid, Dim3 block, unsigned shared_bytes, std::span<const Arg> args,
                      const Stream* stream, std::span<const void* const> extra) const {
  std::vector<void*> params;
  params.reserve(args.size() + extra.size());
  for (const Arg& a : args)
    params.push_back(const_cast<void*>(a.value()));
  for (const void* e : extra) params.push_back(const_cast<void*>(e));
  ScopedContext guard(*ctx_);
  check(driver().cuLaunchKernel(fn_, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                shared_bytes, stream ? stream->handle() : nullptr, params.data(),
                                nullptr),
        "cuLaunchKernel",
        fmt::format("{}, grid {}x{}x{}, block {}x{}x{}, {} shared bytes", name_, grid.x, grid.y,
                    grid.z, block.x, block.y, block.z, shared_bytes));
}

Kernel::Kernel(const Context& ctx, Manifest manifest)
    : manifest_(std::move(manifest)), module_(load_module(ctx, manifest_)),
      function_(module_.function(manifest_.symbol)) {
  if (manifest_.shared_bytes > kDefaultSharedLimit)
    function_.set_max_dynamic_shared_bytes(manifest_.shared_bytes);
}

void Kernel::launch(Dim3 grid, std::span<const Arg> args, const Stream* stream) const {
  check_launch_args(manifest_, args);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return; // no programs: nothing to run (the driver refuses it)
  std::vector<ResolvedTensorMap> maps = resolve_tensor_maps(manifest_, args);
  // The TMA copies' tensor maps, encoded by the driver and passed by value after the arguments.
  std::vector<CUtensorMap> encoded(maps.size());
  std::vector<const void*> extra;
  for (std::size_t i = 0; i < maps.size(); ++i) {
    const ResolvedTensorMap& r = maps[i];
    CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
    switch (r.element) {
    case ScalarType::f16: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
    case ScalarType::bf16: type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
    case ScalarType::f32: type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32; break;
    case ScalarType::i32: type = CU_TENSOR_MAP_DATA_TYPE_INT32; break;
    case ScalarType::u32: type = CU_TENSOR_MAP_DATA_TYPE_UINT32; break;
    case ScalarType::i64: type = CU_TENSOR_MAP_DATA_TYPE_INT64; break;
    case ScalarType::u64: type = CU_TENSOR_MAP_DATA_TYPE_UINT64; break;
    case ScalarType::i16:
    case ScalarType::u16: type = CU_TENSOR_MAP_DATA_TYPE_UINT16; break;
    default: type = CU_TENSOR_MAP_DATA_TYPE_UINT8; break; // 8-bit data, fp8 included: bytes
    }
    const CUtensorMapSwizzle swizzle = r.swizzle == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                       : r.swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                       : r.swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                         : CU_TENSOR_MAP_SWIZZLE_NONE;
    cuuint64_t sizes[5], strides[4];
    cuuint32_t box[5], unit[5] = {1, 1, 1, 1, 1};
    for (int d = 0; d < r.rank; ++d) {
      sizes[d] = r.sizes[d];
      box[d] = r.box[d];
      if (d > 0) strides[d - 1] = r.strides[d];
    }
    check(driver().cuTensorMapEncodeTiled(&encoded[i], type, cuuint32_t(r.rank), reinterpret_cast<void*>(r.base), sizes,
                                          strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
          "cuTensorMapEncodeTiled",
          fmt::format("{}, the tensor map of '{}'", manifest_.kernel, manifest_.tensor_maps[i].base));
    extra.push_back(&encoded[i]);
  }
  function_.launch(grid, Dim3{static_cast<unsigned>(manifest_.threads_per_block), 1, 1},
                   static_cast<unsigned>(manifest_.shared_bytes), args, stream, extra);
}

} // namespace tilec::rt
