// The emulate backend: each kernel is compiled for the emu target once (per printed IR and
// warp count), cached in this process and on disk, and run by the CPU emulator
// (runtime/emulator.h) on the host buffers themselves.
#include <fmt/format.h>
#include <link.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <unistd.h>

#include "codegen/compile.h"
#include "codegen/module.h"
#include "ir/float16.h"
#include "ir/printer.h"
#include "runtime/emulator.h"
#include "templates/launcher.h"

namespace tilec::templates {

namespace {

namespace fs = std::filesystem;

std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// What identifies the compiler that produced a cached library: the GNU build id of this
// program (so a rebuilt code generator never picks up a stale library), else the
// executable's size and modification time.
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

// $XDG_CACHE_HOME/tilec/emu, else ~/.cache/tilec/emu, else a folder under the temp dir.
fs::path cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path dir = xdg && *xdg ? fs::path(xdg) / "tilec" / "emu"
                 : home && *home ? fs::path(home) / ".cache" / "tilec" / "emu"
                                 : fs::temp_directory_path() / "tilec-cache" / "emu";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    dir = fs::temp_directory_path() / fmt::format("tilec-cache-{}", ::getuid()) / "emu";
    fs::create_directories(dir);
  }
  return dir;
}

// The compiled emu modules of this process, by kernel (printed IR) and warp count.
class ModuleCache {
public:
  static ModuleCache& get() {
    static auto* c = new ModuleCache; // never destroyed: modules stay loaded until exit
    return *c;
  }

  std::shared_ptr<const rt::EmuModule> module(const ir::Function& fn, int num_warps) {
    std::string key = fmt::format("{}\nnum_warps={}\ncompiler={}\n", ir::print(fn), num_warps, identity_);
    std::lock_guard lock(mutex_);
    auto it = modules_.find(key);
    if (it != modules_.end()) return it->second;
    auto m = std::make_shared<const rt::EmuModule>(load_or_compile(fn, num_warps, fmt::format("{:016x}", fnv1a(key))));
    modules_.emplace(std::move(key), m);
    return m;
  }

private:
  rt::Manifest load_or_compile(const ir::Function& fn, int num_warps, const std::string& hash) {
    fs::path dir = cache_dir();
    fs::path manifest = dir / (hash + ".toml");
    std::error_code ec;
    if (fs::exists(manifest, ec) && fs::exists(dir / (hash + ".so"), ec)) {
      try {
        rt::Manifest m = rt::read_manifest(manifest);
        if (m.kernel == fn.name && !m.emulator.empty()) return m;
      } catch (const rt::ManifestError&) {
        // unreadable: compile again and overwrite it
      }
    }
    codegen::CompileOptions o;
    o.target = codegen::Target::emu;
    o.num_warps = num_warps;
    codegen::CompiledKernel k = codegen::compile(fn, o);
    // Written in a private folder, then renamed into place (library first, manifest last),
    // so a concurrent process sees either nothing or a complete module.
    fs::path tmp = dir / fmt::format("tmp-{}-{}", ::getpid(), counter_++);
    rt::Manifest m = codegen::write_module(fn, k, o, {{"num_warps", std::int64_t(num_warps)}}, tmp, hash);
    fs::rename(tmp / (hash + ".so"), dir / (hash + ".so"));
    fs::rename(tmp / (hash + ".toml"), manifest);
    fs::remove_all(tmp, ec);
    m.dir = dir;
    return m;
  }

  std::string identity_ = compiler_identity();
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const rt::EmuModule>> modules_;
  int counter_ = 0;
};

// A kernel argument as the emulator takes it, by the parameter's type.
rt::Arg to_rt_arg(const ir::Type& t, const interp::Arg& a, const std::string& kernel, const std::string& param) {
  if (t.is_ptr()) {
    if (!a.buffer) throw UserError(fmt::format("kernel '{}': parameter '{}' needs a buffer", kernel, param));
    return rt::Arg::buffer(reinterpret_cast<std::uint64_t>(a.buffer->bytes.data()), a.buffer->bytes.size());
  }
  switch (t.dtype()) {
  case ir::DType::i1: return rt::Arg(a.i != 0);
  case ir::DType::i8: return rt::Arg(static_cast<std::int8_t>(a.i));
  case ir::DType::i16: return rt::Arg(static_cast<std::int16_t>(a.i));
  case ir::DType::i32: return rt::Arg(static_cast<std::int32_t>(a.i));
  case ir::DType::i64: return rt::Arg(static_cast<std::int64_t>(a.i));
  case ir::DType::f32: return rt::Arg(static_cast<float>(a.f));
  case ir::DType::f16: return rt::Arg::f16_bits(f32_to_f16_bits(static_cast<float>(a.f)));
  case ir::DType::bf16: return rt::Arg::bf16_bits(f32_to_bf16_bits(static_cast<float>(a.f)));
  }
  internal_fail("unknown dtype");
}

class EmulateLauncher final : public Launcher {
public:
  std::string backend() const override { return "emulate"; }

  void launch(const ir::Kernel& kernel, int num_warps, interp::Grid grid,
              const std::vector<interp::Arg>& args) override {
    const ir::Function& fn = *kernel;
    if (args.size() != fn.params.size())
      throw UserError(fmt::format("kernel '{}' takes {} arguments, got {}", fn.name, fn.params.size(), args.size()));
    for (int64_t g : grid)
      if (g < 1 || g > std::int64_t(UINT32_MAX))
        throw UserError(fmt::format("kernel '{}': grid ({}, {}, {}) must be positive", fn.name, grid[0], grid[1],
                                    grid[2]));
    auto module = ModuleCache::get().module(fn, num_warps);
    std::vector<rt::Arg> rt_args;
    std::vector<std::string> names;
    for (size_t i = 0; i < args.size(); ++i) {
      rt_args.push_back(to_rt_arg(fn.params[i]->type, args[i], fn.name, fn.params[i]->name));
      names.push_back(args[i].buffer && !args[i].buffer->name.empty() ? args[i].buffer->name : fn.params[i]->name);
    }
    rt::Dim3 dim{unsigned(grid[0]), unsigned(grid[1]), unsigned(grid[2])};
    rt::EmuLaunchStats st = module->launch(dim, rt_args, names);
    stats_.launches++;
    stats_.time_ms += st.time_ms;
    stats_.bytes_loaded = stats_.bytes_loaded.value_or(0) + st.bytes_loaded;
    stats_.bytes_stored = stats_.bytes_stored.value_or(0) + st.bytes_stored;
    stats_.unique_bytes = stats_.unique_bytes.value_or(0) + st.unique_bytes;
  }
};

} // namespace

std::unique_ptr<Launcher> make_emulate_launcher() { return std::make_unique<EmulateLauncher>(); }

} // namespace tilec::templates
