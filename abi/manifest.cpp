#include "abi/manifest.h"

#include "abi/error.h"
#include "abi/hash.h"
#include "abi/toml_reader.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <unistd.h>

namespace tilec::rt {
namespace {

using Reader = TomlReader<ManifestError>;

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

std::vector<ModuleParam> read_params(const Reader& r, const toml::table& doc) {
  const toml::node* node = r.find(doc, "params", "params", nullptr, true);
  if (!node->is_array())
    r.fail(node, fmt::format("key 'params' must be an array of tables, got {}", toml_kind(*node)));
  std::vector<ModuleParam> params;
  const toml::array& array = *node->as_array();
  for (std::size_t i = 0; i < array.size(); ++i) {
    std::string path = fmt::format("params[{}]", i);
    const toml::table& t = r.table(array[i], path);
    ModuleParam p;
    p.name = r.string(t, "name", path + ".name", &t);
    std::string type = r.string(t, "type", path + ".type", &t);
    auto parsed = parse_param_type(type);
    if (!parsed)
      r.fail(t.get("type"),
             fmt::format("key '{}.type' is '{}', not a parameter type (i1 i8 i16 i32 i64 u8 u16 u32 u64 "
                         "f16 bf16 f32 f8e4m3 f8e5m2, or ptr<T> of one)",
                         path, type));
    p.type = *parsed;
    std::string access = r.string(t, "access", path + ".access", &t, false);
    if (!access.empty() && access != "read" && access != "write")
      r.fail(t.get("access"), fmt::format("key '{}.access' is '{}', not \"read\" or \"write\"", path, access));
    if (access == "read" && !p.type.is_pointer)
      r.fail(t.get("access"), fmt::format("key '{}.access': only a pointer parameter has an access", path));
    p.read_only = access == "read";
    if (const toml::node* off = t.get("offsets")) {
      const auto* bits = off->as_integer();
      if (!bits || (bits->get() != 32 && bits->get() != 64))
        r.fail(off, fmt::format("key '{}.offsets' must be 32 or 64 (the bits of the offsets into the buffer)", path));
      if (!p.type.is_pointer) r.fail(off, fmt::format("key '{}.offsets': only a pointer parameter has offsets", path));
      p.offsets64 = bits->get() == 64;
    }
    for (const ModuleParam& earlier : params)
      if (earlier.name == p.name)
        r.fail(t.get("name"),
               fmt::format("key '{}.name': parameter '{}' appears twice", path, p.name));
    params.push_back(std::move(p));
  }
  return params;
}

std::map<std::string, SpecValue> read_values(const Reader& r, const toml::table& doc, const char* table_name) {
  std::map<std::string, SpecValue> values;
  const toml::node* node = doc.get(table_name);
  if (!node) return values;
  const toml::table& t = r.table(*node, table_name);
  for (auto&& [key, value] : t) {
    std::string path = fmt::format("{}.{}", table_name, key.str());
    if (value.is_integer())
      values.emplace(std::string(key.str()), value.as_integer()->get());
    else if (value.is_string())
      values.emplace(std::string(key.str()), value.as_string()->get());
    else
      r.fail(&value, fmt::format("key '{}' must be an integer or a string, got {}", path,
                                 toml_kind(value)));
  }
  return values;
}

// [[tensor_maps]]: each names a pointer parameter, sizes and strides (numbers or integer
// parameters) and a box of the base's rank, and a swizzle.
std::vector<ModuleTensorMap> read_tensor_maps(const Reader& r, const toml::table& doc,
                                              const std::vector<ModuleParam>& params) {
  std::vector<ModuleTensorMap> maps;
  const toml::node* node = doc.get("tensor_maps");
  if (!node) return maps;
  if (!node->is_array())
    r.fail(node, fmt::format("key 'tensor_maps' must be an array of tables, got {}", toml_kind(*node)));
  const toml::array& array = *node->as_array();
  auto param = [&](const std::string& name) -> const ModuleParam* {
    for (const ModuleParam& p : params)
      if (p.name == name) return &p;
    return nullptr;
  };
  for (std::size_t i = 0; i < array.size(); ++i) {
    std::string path = fmt::format("tensor_maps[{}]", i);
    const toml::table& t = r.table(array[i], path);
    ModuleTensorMap tm;
    tm.base = r.string(t, "base", path + ".base", &t);
    const ModuleParam* b = param(tm.base);
    if (!b || !b->type.is_pointer)
      r.fail(t.get("base"), fmt::format("key '{}.base' names no pointer parameter ('{}')", path, tm.base));
    auto list = [&](const char* name, bool ints_only) {
      const toml::node* n = r.find(t, name, path + "." + name, &t, true);
      if (!n->is_array()) r.fail(n, fmt::format("key '{}.{}' must be an array", path, name));
      std::vector<SpecValue> out;
      for (const toml::node& e : *n->as_array()) {
        if (e.is_integer()) out.push_back(e.as_integer()->get());
        else if (!ints_only && e.is_string()) {
          std::string pname = e.as_string()->get();
          const ModuleParam* p = param(pname);
          if (!p || p->type.is_pointer || !is_integer(p->type.element))
            r.fail(&e, fmt::format("key '{}.{}' names no integer parameter ('{}')", path, name, pname));
          out.push_back(pname);
        } else {
          r.fail(&e, fmt::format("key '{}.{}' holds {}: {}", path, name, toml_kind(e),
                                 ints_only ? "integers only" : "integers or integer parameters' names"));
        }
      }
      return out;
    };
    tm.sizes = list("sizes", false);
    tm.strides = list("strides", false);
    for (const SpecValue& v : list("box", true)) {
      const std::int64_t d = std::get<std::int64_t>(v);
      if (d < 1 || d > 256) r.fail(t.get("box"), fmt::format("key '{}.box' holds {}: each from 1 to 256", path, d));
      tm.box.push_back(d);
    }
    const std::size_t rank = tm.box.size();
    if (rank < 1 || rank > 5 || tm.sizes.size() != rank || tm.strides.size() != rank)
      r.fail(&t, fmt::format("'{}': sizes, strides and box must have one entry per dim (1 to 5), got {}, {} and {}",
                             path, tm.sizes.size(), tm.strides.size(), rank));
    if (tm.strides.back() != SpecValue(std::int64_t(1)))
      r.fail(t.get("strides"), fmt::format("key '{}.strides': the last stride must be 1", path));
    tm.swizzle = int(r.integer(t, "swizzle", path + ".swizzle", &t, 0, 128));
    if (tm.swizzle != 0 && tm.swizzle != 32 && tm.swizzle != 64 && tm.swizzle != 128)
      r.fail(t.get("swizzle"), fmt::format("key '{}.swizzle' is {}: 0, 32, 64 or 128", path, tm.swizzle));
    maps.push_back(std::move(tm));
  }
  return maps;
}

Manifest read_document(const Reader& r, const toml::table& doc) {
  Manifest m;
  m.kernel = r.string(doc, "kernel", "kernel", nullptr);
  m.symbol = r.string(doc, "symbol", "symbol", nullptr);
  m.arch = r.string(doc, "arch", "arch", nullptr);
  m.threads_per_block = int(r.integer(doc, "threads_per_block", "threads_per_block", nullptr, 1, 1024));
  m.shared_bytes = int(r.integer(doc, "shared_bytes", "shared_bytes", nullptr, 0, kIntMax));
  m.compiler_version = r.string(doc, "compiler_version", "compiler_version", nullptr);
  m.ir_hash = r.string(doc, "ir_hash", "ir_hash", nullptr);

  const toml::node* code_node = r.find(doc, "code", "code", nullptr, true);
  const toml::table& code = r.table(*code_node, "code");
  m.ptx = r.string(code, "ptx", "code.ptx", &code, false);
  m.cubin = r.string(code, "cubin", "code.cubin", &code, false);
  m.emulator = r.string(code, "emulator", "code.emulator", &code, false);
  if (m.ptx.empty() && m.cubin.empty() && m.emulator.empty())
    r.fail(&code, "missing key 'code.ptx' (the [code] table names no ptx, cubin or emulator file)");

  m.params = read_params(r, doc);
  m.tensor_maps = read_tensor_maps(r, doc, m.params);
  m.specialization = read_values(r, doc, "specialization");
  m.problem = read_values(r, doc, "problem");
  for (const auto& [name, value] : read_values(r, doc, "divisibility")) {
    const std::int64_t* d = std::get_if<std::int64_t>(&value);
    const toml::node* at = doc.at_path("divisibility").as_table()->get(name);
    if (!d || *d < 2 || (*d & (*d - 1)) != 0)
      r.fail(at, fmt::format("key 'divisibility.{}' must be a power of two from 2", name));
    auto p = std::find_if(m.params.begin(), m.params.end(), [&](const ModuleParam& q) { return q.name == name; });
    if (p == m.params.end() || p->type.is_pointer || !is_integer(p->type.element))
      r.fail(at, fmt::format("key 'divisibility.{}' names no integer parameter", name));
    m.divisibility[name] = *d;
  }
  for (const auto& [name, value] : read_values(r, doc, "fixed")) {
    const std::int64_t* v = std::get_if<std::int64_t>(&value);
    const toml::node* at = doc.at_path("fixed").as_table()->get(name);
    if (!v) r.fail(at, fmt::format("key 'fixed.{}' must be an integer", name));
    auto p = std::find_if(m.params.begin(), m.params.end(), [&](const ModuleParam& q) { return q.name == name; });
    if (p == m.params.end() || p->type.is_pointer || !is_integer(p->type.element))
      r.fail(at, fmt::format("key 'fixed.{}' names no integer parameter", name));
    m.fixed[name] = *v;
  }
  if (const toml::node* run = doc.get("run")) {
    if (!run->is_array()) r.fail(run, fmt::format("key 'run' must be an array of kernel names, got {}", toml_kind(*run)));
    const toml::array& names = *run->as_array();
    for (std::size_t i = 0; i < names.size(); ++i) {
      const toml::node& n = *names.get(i);
      if (!n.is_string() || n.as_string()->get().empty())
        r.fail(&n, fmt::format("key 'run[{}]' must be a kernel name (a non-empty string)", i));
      m.run.push_back(n.as_string()->get());
    }
    if (std::find(m.run.begin(), m.run.end(), m.kernel) == m.run.end())
      r.fail(run, fmt::format("key 'run' does not name this module's kernel '{}'", m.kernel));
  }

  if (const toml::node* ptxas = doc.get("ptxas")) {
    const toml::table& t = r.table(*ptxas, "ptxas");
    m.ptxas = PtxasReport{int(r.integer(t, "registers", "ptxas.registers", &t, 0, kIntMax)),
                          int(r.integer(t, "spills", "ptxas.spills", &t, 0, kIntMax))};
  }
  if (const toml::node* sums = doc.get("checksums")) {
    const toml::table& t = r.table(*sums, "checksums");
    for (const char* file : {"ptx", "cubin", "emulator"})
      if (t.get(file)) m.checksums[file] = r.string(t, file, fmt::format("checksums.{}", file), &t);
    for (auto&& [name, value] : t)
      if (!m.checksums.count(std::string(name.str())))
        r.fail(&value, fmt::format("key 'checksums.{}' names no code file (ptx, cubin, emulator)", name.str()));
  }
  return m;
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string key(std::string_view k) {
  bool bare = !k.empty();
  for (char c : k)
    bare = bare && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
  return bare ? std::string(k) : quote(k);
}

} // namespace

std::string file_checksum(std::string_view data) {
  return fmt::format("{}:{:016x}", data.size(), fnv1a64(data));
}

Manifest parse_manifest(std::string_view text, const std::filesystem::path& source) {
  Reader r(source.string());
  toml::table doc = parse_toml<ManifestError>(text, source.string());
  Manifest m = read_document(r, doc);
  m.dir = source.parent_path();
  return m;
}

Manifest read_manifest(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw ManifestError(fmt::format("{}: cannot open: {}", file.string(), std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ManifestError(fmt::format("{}: cannot read", file.string()));
  return parse_manifest(text.str(), file);
}

std::string format_manifest(const Manifest& m) {
  std::string out = "# tilec module manifest\n";
  out += fmt::format("kernel = {}\n", quote(m.kernel));
  out += fmt::format("symbol = {}\n", quote(m.symbol));
  out += fmt::format("arch = {}\n", quote(m.arch));
  out += fmt::format("threads_per_block = {}\n", m.threads_per_block);
  out += fmt::format("shared_bytes = {}\n", m.shared_bytes);
  out += fmt::format("compiler_version = {}\n", quote(m.compiler_version));
  out += fmt::format("ir_hash = {}\n", quote(m.ir_hash));
  if (m.params.empty()) out += "params = []\n"; // a kernel without parameters: the key is required
  if (!m.run.empty()) {
    std::string names;
    for (const std::string& k : m.run) names += (names.empty() ? "" : ", ") + quote(k);
    out += fmt::format("run = [{}]\n", names);
  }

  out += "\n[code]\n";
  if (!m.ptx.empty()) out += fmt::format("ptx = {}\n", quote(m.ptx.generic_string()));
  if (!m.cubin.empty()) out += fmt::format("cubin = {}\n", quote(m.cubin.generic_string()));
  if (!m.emulator.empty())
    out += fmt::format("emulator = {}\n", quote(m.emulator.generic_string()));

  for (const ModuleParam& p : m.params)
    out += fmt::format("\n[[params]]\nname = {}\ntype = {}\n{}{}", quote(p.name), quote(p.type.str()),
                       p.read_only ? "access = \"read\"\n" : "", p.offsets64 ? "offsets = 64\n" : "");

  auto value = [&](const SpecValue& v) {
    if (auto* i = std::get_if<std::int64_t>(&v)) return fmt::format("{}", *i);
    return quote(std::get<std::string>(v));
  };
  for (const ModuleTensorMap& t : m.tensor_maps) {
    auto join = [&](const auto& vs) {
      std::string s;
      for (const auto& v : vs) {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, SpecValue>) s += (s.empty() ? "" : ", ") + value(v);
        else s += (s.empty() ? "" : ", ") + fmt::format("{}", v);
      }
      return "[" + s + "]";
    };
    out += fmt::format("\n[[tensor_maps]]\nbase = {}\nsizes = {}\nstrides = {}\nbox = {}\nswizzle = {}\n", quote(t.base),
                       join(t.sizes), join(t.strides), join(t.box), t.swizzle);
  }

  auto values = [&](const char* table, const std::map<std::string, SpecValue>& vs) {
    out += fmt::format("\n[{}]\n", table);
    for (const auto& [name, value] : vs) {
      if (auto* i = std::get_if<std::int64_t>(&value))
        out += fmt::format("{} = {}\n", key(name), *i);
      else
        out += fmt::format("{} = {}\n", key(name), quote(std::get<std::string>(value)));
    }
  };
  values("specialization", m.specialization);
  if (!m.divisibility.empty()) {
    out += "\n[divisibility]\n";
    for (const auto& [name, d] : m.divisibility) out += fmt::format("{} = {}\n", key(name), d);
  }
  if (!m.fixed.empty()) {
    out += "\n[fixed]\n";
    for (const auto& [name, v] : m.fixed) out += fmt::format("{} = {}\n", key(name), v);
  }
  if (!m.problem.empty()) values("problem", m.problem);

  if (m.ptxas)
    out += fmt::format("\n[ptxas]\nregisters = {}\nspills = {}\n", m.ptxas->registers,
                       m.ptxas->spills);
  if (!m.checksums.empty()) {
    out += "\n[checksums]\n";
    for (const auto& [file, sum] : m.checksums) out += fmt::format("{} = {}\n", key(file), quote(sum));
  }
  return out;
}

void write_manifest(const Manifest& m, const std::filesystem::path& file) {
  std::string text = format_manifest(m);
  parse_manifest(text, file); // refuse to write what could not be read back

  std::filesystem::path tmp = file;
  tmp += fmt::format(".tmp.{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      int err = errno;
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      throw ManifestError(fmt::format("{}: cannot write: {}", file.string(), std::strerror(err)));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw ManifestError(fmt::format("{}: cannot write: {}", file.string(), ec.message()));
  }
}

} // namespace tilec::rt
