#include "runtime/module_store.h"

#include "abi/toml_reader.h"

#include <fmt/format.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>

namespace tilec::rt {

namespace fs = std::filesystem;

namespace {

std::mutex g_builder_mutex;
ModuleBuilder g_builder;

std::string spec_str(const SpecValue& v) {
  if (auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  return std::get<std::string>(v);
}

std::string format_spec(const Spec& s) {
  std::string out;
  for (const auto& [k, v] : s) out += fmt::format("{}{}={}", out.empty() ? "" : " ", k, spec_str(v));
  return out;
}

} // namespace

fs::path cache_root() {
  if (const char* dir = std::getenv("TILEC_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "tilec";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "tilec";
  return fs::temp_directory_path() / "tilec-cache";
}

fs::path cache_module_dir() { return cache_root() / "modules"; }

std::string describe(const ModuleQuery& q) {
  return fmt::format("{} for {} with {}", q.kernel, q.arch, format_spec(q.values));
}

Spec spec_of(const ProblemKey& key, const TunedConfig& config) {
  Spec s(key.begin(), key.end());
  for (const auto& [k, v] : config) s[k] = v;
  return s;
}

std::string check_module(const Manifest& m) {
  for (auto [slot, file] : {std::pair{"ptx", &m.ptx}, {"cubin", &m.cubin}, {"emulator", &m.emulator}}) {
    if (file->empty()) continue;
    fs::path path = m.code_path(*file);
    std::ifstream in(path, std::ios::binary);
    if (!in) return fmt::format("{}: missing", path.string());
    auto sum = m.checksums.find(slot);
    if (sum == m.checksums.end()) continue; // written before checksums were recorded
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string got = file_checksum(data);
    if (got != sum->second)
      return fmt::format("{}: truncated or corrupt (size:checksum {}, manifest says {})", path.string(), got,
                         sum->second);
  }
  return "";
}

bool matches(const Manifest& m, const ModuleQuery& q) {
  if (m.kernel != q.kernel || m.arch != q.arch) return false;
  if (!q.ir_hash.empty() && m.ir_hash != q.ir_hash) return false;
  for (const auto& [name, value] : m.specialization) {
    auto it = q.values.find(name);
    if (it == q.values.end() || it->second != value) return false;
  }
  return true;
}

namespace {

// How `m` differs from what `q` asks for, one item per value ("rows: it has 256, asked
// 300"); empty when only the IR hash or nothing differs.
std::vector<std::string> differences(const Manifest& m, const ModuleQuery& q) {
  std::vector<std::string> out;
  if (m.arch != q.arch) out.push_back(fmt::format("arch: it has {}, asked {}", m.arch, q.arch));
  for (const auto& [name, value] : m.specialization) {
    auto it = q.values.find(name);
    if (it == q.values.end())
      out.push_back(fmt::format("{}: it has {}, the query gives none", name, spec_str(value)));
    else if (it->second != value)
      out.push_back(fmt::format("{}: it has {}, asked {}", name, spec_str(value), spec_str(it->second)));
  }
  return out;
}

} // namespace

std::optional<Manifest> find_module(const std::vector<fs::path>& dirs, const ModuleQuery& q,
                                    std::vector<std::string>* problems) {
  // The module of this kernel that differs in the fewest values, for the error when none matches.
  std::optional<std::pair<fs::path, std::vector<std::string>>> closest;
  for (const fs::path& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::optional<Manifest> best;
    fs::file_time_type best_time{};
    for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it.depth() > 2) it.disable_recursion_pending();
      const fs::path& path = it->path();
      if (path.extension() != ".toml" || !it->is_regular_file(ec)) continue;
      Manifest m;
      try {
        m = read_manifest(path);
      } catch (const ManifestError& e) {
        // Other TOML files (a tuning database) live beside modules: report only what
        // looks like a manifest of the kernel asked for.
        std::ifstream in(path);
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (problems && text.find("[code]") != std::string::npos &&
            text.find("kernel = \"" + q.kernel + "\"") != std::string::npos)
          problems->push_back(fmt::format("skipped {}", e.what()));
        continue;
      }
      if (!matches(m, q)) {
        if (m.kernel == q.kernel) {
          std::vector<std::string> diff = differences(m, q);
          if (!diff.empty() && (!closest || diff.size() < closest->second.size())) closest.emplace(path, std::move(diff));
        }
        continue;
      }
      if (std::string why = check_module(m); !why.empty()) {
        if (problems) problems->push_back(fmt::format("skipped {}: {}", path.string(), why));
        continue;
      }
      fs::file_time_type t = fs::last_write_time(path, ec);
      if (!best || t > best_time) best = std::move(m), best_time = t;
    }
    if (best) return best;
  }
  if (problems && closest) {
    std::string why;
    for (const std::string& d : closest->second) why += (why.empty() ? "" : "; ") + d;
    problems->push_back(fmt::format("the closest module, {}, differs in {}", closest->first.string(), why));
  }
  return std::nullopt;
}

void set_module_builder(ModuleBuilder builder) {
  std::lock_guard lock(g_builder_mutex);
  g_builder = std::move(builder);
}

bool have_module_builder() {
  std::lock_guard lock(g_builder_mutex);
  return bool(g_builder);
}

Manifest load_module(const ModuleQuery& q, const std::vector<fs::path>& dirs) {
  ModuleBuilder builder;
  {
    std::lock_guard lock(g_builder_mutex);
    builder = g_builder;
  }
  if (builder) return builder(q, dirs);
  std::vector<fs::path> where = dirs;
  where.push_back(cache_module_dir());
  std::vector<std::string> problems;
  if (auto m = find_module(where, q, &problems)) return *m;
  std::string msg = fmt::format("no module {} in", describe(q));
  for (size_t i = 0; i < where.size(); ++i) msg += fmt::format("{} {}", i ? "," : "", where[i].string());
  for (const std::string& p : problems) msg += "\n  " + p;
  if (!q.build_command.empty())
    msg += fmt::format("\n  this program links only the tilec runtime; build the module with:\n    {} -o {}",
                       q.build_command, (where.front() / q.kernel).string());
  throw ModuleNotFound(msg);
}

namespace {

std::mutex g_card_mutex;
KernelCardProvider g_card_provider;

std::string card_file_name(const std::string& kernel) { return kernel + ".kernel.toml"; }

} // namespace

KernelCard read_kernel_card(const fs::path& file) {
  auto fail = [&](const std::string& what) { return ManifestError(fmt::format("{}: {}", file.string(), what)); };
  std::ifstream in(file, std::ios::binary);
  if (!in) throw fail("cannot open");
  const std::string text(std::istreambuf_iterator<char>(in), {});
  toml::table doc = parse_toml<ManifestError>(text, file.string());
  KernelCard card;
  auto kernel = doc["kernel"].value<std::string>();
  if (!kernel || kernel->empty()) throw fail("missing key 'kernel' (a non-empty string)");
  card.kernel = *kernel;
  if (const toml::node* n = doc.get("compiler")) {
    if (!n->is_string() || n->as_string()->get().empty()) throw fail("key 'compiler' must be a non-empty string");
    card.compiler = n->as_string()->get();
  }
  if (const toml::node* n = doc.get("size_fields")) {
    if (!n->is_array()) throw fail("key 'size_fields' must be an array of strings");
    for (const toml::node& f : *n->as_array()) {
      if (!f.is_string()) throw fail("key 'size_fields' must be an array of strings");
      card.size_fields.push_back(f.as_string()->get());
    }
  }
  if (const toml::node* n = doc.get("size_buckets")) {
    if (!n->is_table()) throw fail("key 'size_buckets' must be a table");
    for (auto&& [k, v] : *n->as_table()) {
      std::string field(k.str());
      auto bad = [&] {
        return fail(fmt::format("key 'size_buckets.{}' must be an array of increasing integers", field));
      };
      if (!v.is_array()) throw bad();
      std::vector<int64_t>& bounds = card.size_buckets[field];
      for (const toml::node& b : *v.as_array()) {
        if (!b.is_integer()) throw bad();
        int64_t x = b.as_integer()->get();
        if (!bounds.empty() && x <= bounds.back()) throw bad();
        bounds.push_back(x);
      }
    }
  }
  for (auto [name, into] : {std::pair{"defaults", 0}, {"spec_defaults", 1}}) {
    const toml::node* n = doc.get(name);
    if (!n) continue;
    if (!n->is_table()) throw fail(fmt::format("key '{}' must be a table", name));
    for (auto&& [k, v] : *n->as_table()) {
      std::string key(k.str());
      if (auto i = v.value<int64_t>(); i && v.is_integer()) {
        if (into == 0) card.defaults[key] = *i;
        else card.spec_defaults[key] = *i;
      } else if (into == 1 && v.is_string()) {
        card.spec_defaults[key] = v.as_string()->get();
      } else {
        throw fail(fmt::format("key '{}.{}' must be an integer{}", name, key, into ? " or a string" : ""));
      }
    }
  }
  card.run = parse_op_run(text, file.string());
  return card;
}

std::string format_kernel_card(const KernelCard& card) {
  auto quoted = [](const std::string& s) { return toml::value<std::string>(s); };
  std::ostringstream out;
  out << "# what tilec knows of this kernel beyond its modules (runtime/module_store.h)\n";
  toml::table doc;
  doc.insert("kernel", card.kernel);
  doc.insert("compiler", card.compiler);
  toml::array fields;
  for (const std::string& f : card.size_fields) fields.push_back(quoted(f));
  doc.insert("size_fields", fields);
  if (!card.size_buckets.empty()) {
    toml::table buckets;
    for (const auto& [field, bounds] : card.size_buckets) {
      toml::array a;
      for (int64_t b : bounds) a.push_back(b);
      buckets.insert(field, a);
    }
    doc.insert("size_buckets", buckets);
  }
  toml::table defaults, spec;
  for (const auto& [k, v] : card.defaults) defaults.insert(k, v);
  for (const auto& [k, v] : card.spec_defaults) {
    if (auto* i = std::get_if<int64_t>(&v)) spec.insert(k, *i);
    else spec.insert(k, std::get<std::string>(v));
  }
  doc.insert("defaults", defaults);
  doc.insert("spec_defaults", spec);
  out << doc << "\n";
  if (card.run) out << format_op_run(*card.run);
  return out.str();
}

fs::path write_kernel_card(const KernelCard& card, const fs::path& dir) {
  fs::create_directories(dir);
  fs::path file = dir / card_file_name(card.kernel);
  fs::path tmp = file;
  tmp += fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << format_kernel_card(card);
    if (!out) throw Error(fmt::format("{}: cannot write", tmp.string()));
  }
  fs::rename(tmp, file);
  return file;
}

std::optional<KernelCard> find_kernel_card(const std::string& kernel, const std::vector<fs::path>& dirs) {
  std::vector<fs::path> where = dirs;
  where.push_back(cache_module_dir());
  for (const fs::path& dir : where) {
    std::error_code ec;
    fs::path file = dir / card_file_name(kernel);
    if (fs::is_regular_file(file, ec)) return read_kernel_card(file);
  }
  std::lock_guard lock(g_card_mutex);
  if (g_card_provider) return g_card_provider(kernel);
  return std::nullopt;
}

void set_kernel_card_provider(KernelCardProvider provider) {
  std::lock_guard lock(g_card_mutex);
  g_card_provider = std::move(provider);
}

TunedModules load_tuned(const TuningDb& db, const std::string& kernel, const std::string& device,
                        const ProblemKey& key, const std::string& arch, const std::vector<fs::path>& dirs,
                        const Spec& extra) {
  TunedModules t;
  std::optional<KernelCard> card = find_kernel_card(kernel, dirs);
  if (card) t.config = card->defaults;
  t.selection = select_config(db, kernel, device, key, card ? card->size_fields : std::vector<std::string>{},
                               card ? card->size_buckets : SizeBuckets{});
  if (t.selection) {
    for (const auto& [k, v] : t.selection->entry.config) t.config[k] = v;
    t.note = t.selection->note;
  } else {
    t.note = card ? fmt::format("nothing tuned for {} on {}; using the defaults {}", format_key(key), device,
                                format_config(t.config))
                  : fmt::format("nothing tuned for {} on {}, and no {} in the module folders to give defaults",
                                format_key(key), device, card_file_name(kernel));
  }
  ModuleQuery q;
  q.arch = arch;
  q.values = spec_of(key, t.config);
  for (const auto& [k, v] : extra) q.values[k] = v;
  if (card)
    for (const auto& [k, v] : card->spec_defaults) q.values.try_emplace(k, v);
  std::string sets, shapes;
  for (const auto& [k, v] : t.config) sets += fmt::format(" {}={}", k, v);
  for (const auto& [k, v] : key) shapes += fmt::format(" {}={}", k, spec_str(v));
  q.build_command = fmt::format("{} compile {} {} --set{} --shape{}", card ? card->compiler : "tilec", kernel,
                                arch == "host" ? "--target emu" : "--arch " + arch, sets, shapes);
  q.kernel = kernel;
  t.modules.push_back(load_module(q, dirs));
  // The other kernels of one run (a combine step), specialized alike.
  for (const std::string& name : std::vector<std::string>(t.modules.front().run)) {
    if (name == kernel) continue;
    q.kernel = name;
    t.modules.push_back(load_module(q, dirs));
  }
  return t;
}

} // namespace tilec::rt
