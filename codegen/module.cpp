#include "codegen/module.h"
#include "ir/param_access.h"

#include <fmt/format.h>

#include <algorithm>

#include <regex>

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iterator>

#include "abi/version.h"
#include "ir/printer.h"

namespace tilec::codegen {

namespace {

// A name beside `path` no other writer (process or thread) uses at the same time.
std::filesystem::path temp_beside(const std::filesystem::path& path) {
  static std::atomic<unsigned> counter{0};
  std::filesystem::path tmp = path;
  tmp += fmt::format(".tmp.{}.{}", ::getpid(), counter++);
  return tmp;
}

void write_file_atomically(const std::filesystem::path& path, const void* data, size_t size) {
  std::filesystem::path tmp = temp_beside(path);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw UserError(fmt::format("{}: cannot write", path.string()));
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!f) throw UserError(fmt::format("{}: write failed", path.string()));
  }
  std::filesystem::rename(tmp, path);
}

rt::ParamType param_type(const ir::Type& t) {
  auto parsed = rt::parse_param_type(t.elem.str());
  internal_assert(parsed.has_value(), "every IR element type has a manifest spelling");
  return *parsed;
}

} // namespace

std::string ir_hash(const ir::Function& fn) { return ir::content_hash(fn); }

rt::Manifest write_module(const ir::Function& fn, const CompiledKernel& k, const CompileOptions& opts,
                          const std::map<std::string, rt::SpecValue>& specialization,
                          const std::filesystem::path& dir, const std::string& name,
                          const std::vector<std::string>& run,
                          const std::map<std::string, rt::SpecValue>& problem) {
  std::filesystem::create_directories(dir);
  rt::Manifest m;
  m.kernel = fn.name;
  m.symbol = k.symbol;
  m.arch = opts.target == Target::nvptx ? opts.arch : "host";
  std::vector<ir::ParamAccess> access = ir::param_access(fn);
  for (size_t i = 0; i < fn.params.size(); ++i)
    m.params.push_back({fn.params[i]->name, param_type(fn.params[i]->type), access[i] == ir::ParamAccess::read,
                        opts.large_buffers.count(fn.params[i]->name) > 0});
  m.tensor_maps = k.stats.tensor_maps;
  m.threads_per_block = k.threads_per_block;
  m.shared_bytes = k.shared_bytes;
  m.specialization = specialization;
  m.divisibility = opts.int_arg_divisibility;
  m.fixed = opts.int_arg_values;
  for (const ir::Value* p : fn.params)
    if (p->multiple_of) m.divisibility[p->name] = std::max(m.divisibility[p->name], p->multiple_of);
  m.compiler_version = "tilec " TILEC_VERSION;
  m.ir_hash = ir_hash(fn);
  if (run.size() > 1) m.run = run;
  m.problem = problem;
  if (opts.target == Target::nvptx) {
    m.ptx = name + ".ptx";
    write_file_atomically(dir / m.ptx, k.ptx.data(), k.ptx.size());
    if (!k.cubin.empty()) {
      m.cubin = name + ".cubin";
      write_file_atomically(dir / m.cubin, k.cubin.data(), k.cubin.size());
    }
    if (k.ptxas) m.ptxas = rt::PtxasReport{k.ptxas->registers, k.ptxas->spill_stores + k.ptxas->spill_loads};
  } else {
    m.emulator = name + ".so";
    std::filesystem::path tmp = temp_beside(dir / m.emulator);
    link_emu_library(k.object, tmp.string());
    std::filesystem::rename(tmp, dir / m.emulator); // a process running the old library keeps its copy
  }
  for (auto [slot, file] : {std::pair{"ptx", &m.ptx}, {"cubin", &m.cubin}, {"emulator", &m.emulator}}) {
    if (file->empty()) continue;
    std::ifstream in(dir / *file, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    m.checksums[slot] = rt::file_checksum(data);
  }
  rt::write_manifest(m, dir / (name + ".toml"));
  m.dir = dir;
  return m;
}

} // namespace tilec::codegen
