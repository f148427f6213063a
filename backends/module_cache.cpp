#include "backends/module_cache.h"

#include <fmt/format.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>

#include "codegen/module.h"
#include "abi/float16.h"
#include "ir/printer.h"
#include "abi/error.h"
#include "runtime/module_store.h"
#include "abi/hash.h"

namespace tilec::backends {

namespace fs = std::filesystem;

namespace {

const char* target_name(codegen::Target t) {
  switch (t) {
  case codegen::Target::nvptx: return "nvptx";
  case codegen::Target::emu: return "emu";
  case codegen::Target::emu_nvptx: return "emu-nvptx";
  }
  return "?";
}

// A usable module at `manifest`: it reads, is `kernel`, and every code file it names exists.
std::optional<rt::Manifest> read_cached(const fs::path& manifest, const std::string& kernel) {
  std::error_code ec;
  if (!fs::exists(manifest, ec)) return std::nullopt;
  try {
    rt::Manifest m = rt::read_manifest(manifest);
    if (m.kernel != kernel || !rt::check_module(m).empty()) return std::nullopt; // missing, truncated, corrupt
    return m;
  } catch (const rt::ManifestError&) {
    return std::nullopt; // unreadable: compile again and overwrite it
  }
}

} // namespace

fs::path module_cache_dir(const std::string& backend) {
  fs::path dir = rt::cache_root() / backend;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    dir = fs::temp_directory_path() / fmt::format("tilec-cache-{}", ::getuid()) / backend;
    fs::create_directories(dir);
  }
  return dir;
}

std::string compiler_identity() {
  std::string id;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) -> int {
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          auto* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
          const char* end = p + ph.p_memsz;
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
            const char* name = p + sizeof(ElfW(Nhdr));
            const char* desc = name + ((n->n_namesz + 3) & ~3u);
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && std::string_view(name, 3) == "GNU") {
              auto* s = static_cast<std::string*>(out);
              for (unsigned j = 0; j < n->n_descsz; ++j) *s += fmt::format("{:02x}", std::uint8_t(desc[j]));
              return 1;
            }
            p = desc + ((n->n_descsz + 3) & ~3u);
          }
        }
        return 1; // the first object is the executable: look no further
      },
      &id);
  if (!id.empty()) return id;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "unknown";
  auto size = fs::file_size(exe, ec);
  auto time = fs::last_write_time(exe, ec).time_since_epoch().count();
  return fmt::format("{}:{}:{}", exe.string(), size, time);
}

rt::Manifest cached_module(const ir::Function& fn, const codegen::CompileOptions& opts, const std::string& backend) {
  static const std::string identity = compiler_identity();
  static std::mutex mutex;
  // By the full key, for this process. The lock guards the map only: different kernels
  // compile in parallel, and a thread asking for one being compiled waits for it.
  static std::map<std::string, std::shared_future<rt::Manifest>> modules;
  static std::atomic<int> counter{0};

  std::string divisibility;
  for (const auto& [name, d] : opts.int_arg_divisibility) divisibility += fmt::format(" {}%{}", name, d);
  for (const auto& [name, v] : opts.int_arg_values) divisibility += fmt::format(" {}={}", name, v);
  for (const std::string& name : opts.large_buffers) divisibility += fmt::format(" {}:i64", name);
  std::string key = fmt::format("{}\ntarget={} arch={} num_warps={} ptxas={} tensor_cores={} wgmma={} tma={} asserts={} o3={} max_registers={} divisible:{}\ncompiler={}\n",
                                ir::print(fn), target_name(opts.target), opts.arch, opts.num_warps, opts.run_ptxas,
                                opts.tensor_cores, opts.wgmma, opts.tma, opts.device_asserts, opts.stock_o3,
                                opts.max_registers, divisibility, identity);
  std::promise<rt::Manifest> promise;
  std::shared_future<rt::Manifest> pending;
  {
    std::lock_guard lock(mutex);
    if (auto it = modules.find(key); it != modules.end()) pending = it->second;
    else modules.emplace(key, promise.get_future().share());
  }
  if (pending.valid()) return pending.get(); // compiled, or being compiled by another thread
  try {
    std::string hash = fmt::format("{:016x}", fnv1a64(key));
    fs::path dir = module_cache_dir(backend);
    fs::path manifest = dir / (hash + ".toml");
    std::optional<rt::Manifest> m = read_cached(manifest, fn.name);
    if (!m) {
      codegen::CompiledKernel k = codegen::compile(fn, opts);
      fs::path tmp = dir / fmt::format("tmp-{}-{}", ::getpid(), counter++);
      fs::create_directories(tmp);
      codegen::write_module(fn, k, opts, {{"num_warps", std::int64_t(opts.num_warps)}}, tmp, hash);
      for (const fs::directory_entry& e : fs::directory_iterator(tmp))
        if (e.path().extension() != ".toml") fs::rename(e.path(), dir / e.path().filename());
      fs::rename(tmp / (hash + ".toml"), manifest);
      std::error_code ec;
      fs::remove_all(tmp, ec);
      m = rt::read_manifest(manifest);
    }
    promise.set_value(*m);
    return *m;
  } catch (...) {
    { // a failed compile is not cached: the next caller tries again (and gets the error)
      std::lock_guard lock(mutex);
      modules.erase(key);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}


} // namespace tilec::backends
