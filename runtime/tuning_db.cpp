#include "runtime/tuning_db.h"

#include "abi/toml_reader.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace tilec::rt {

namespace {

namespace fs = std::filesystem;

std::string value_str(const KeyValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  return std::get<std::string>(v);
}

using Reader = TomlReader<TuningDbError>;

} // namespace

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

// Holds an exclusive flock on a side file for the object's lifetime (the database itself
// is replaced by rename, so it cannot carry the lock).
class FileLock {
public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw TuningDbError(fmt::format("{}: cannot open the lock file: {}", path, std::strerror(errno)));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd_);
      throw TuningDbError(fmt::format("{}: cannot lock: {}", path, std::strerror(e)));
    }
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

private:
  int fd_ = -1;
};

void write_atomically(const std::string& path, const std::string& text) {
  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw TuningDbError(fmt::format("{}: cannot write: {}", tmp, std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw TuningDbError(fmt::format("{}: write failed: {}", tmp, std::strerror(e)));
    }
    done += size_t(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw TuningDbError(fmt::format("{}: cannot replace it: {}", path, std::strerror(e)));
  }
}

} // namespace

void write_tuning_db(const std::string& path, const TuningDb& db) { write_atomically(path, format_tuning_db(db)); }

namespace {

double log_distance(const KeyValue& a, const KeyValue& b) {
  const auto* x = std::get_if<int64_t>(&a);
  const auto* y = std::get_if<int64_t>(&b);
  if (!x || !y) return value_str(a) == value_str(b) ? 0.0 : INFINITY;
  return std::abs(std::log2(double(std::max<int64_t>(*x, 0) + 1)) - std::log2(double(std::max<int64_t>(*y, 0) + 1)));
}

} // namespace

std::string format_key(const ProblemKey& key) {
  std::string s;
  for (const auto& [k, v] : key) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, value_str(v));
  return s;
}

std::string format_config(const TunedConfig& cfg) {
  std::string s;
  for (const auto& [k, v] : cfg) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, v);
  return s;
}

ProblemKey parse_key(std::string_view text) {
  ProblemKey key;
  std::istringstream in{std::string(text)};
  std::string item;
  while (in >> item) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw TuningDbError(fmt::format("problem key '{}': '{}' is not NAME=VALUE", text, item));
    std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(value.c_str(), &end, 10);
    if (errno == 0 && end && *end == '\0') key[name] = int64_t(v);
    else key[name] = value;
  }
  return key;
}

namespace {
// What an entry and a rejection share: the kernel, where it ran, the key and the config.
template <class A, class B> bool same_config_of(const A& a, const B& b) {
  return a.kernel == b.kernel && a.device == b.device && a.compute_capability == b.compute_capability &&
         a.backend == b.backend && a.key == b.key && a.config == b.config;
}
} // namespace

bool TuningEntry::same_slot(const TuningEntry& o) const { return same_config_of(*this, o); }

bool TuningRejection::same_config(const TuningEntry& e) const { return same_config_of(*this, e); }

bool TuningRejection::same_slot(const TuningRejection& o) const { return same_config_of(*this, o) && arch == o.arch; }

void TuningDb::merge(const TuningDb& newer) {
  // The newer verdict on a config wins: it ran (its rejections go), or it was dropped (its
  // measurement goes).
  std::erase_if(rejections, [&](const TuningRejection& r) {
    return std::any_of(newer.entries.begin(), newer.entries.end(),
                       [&](const TuningEntry& e) { return r.same_config(e); });
  });
  std::erase_if(entries, [&](const TuningEntry& e) {
    return std::any_of(newer.rejections.begin(), newer.rejections.end(),
                       [&](const TuningRejection& r) { return r.same_config(e); });
  });
  for (const TuningRejection& r : newer.rejections) {
    auto mine = std::find_if(rejections.begin(), rejections.end(),
                             [&](const TuningRejection& m) { return m.same_slot(r); });
    if (mine != rejections.end()) *mine = r;
    else rejections.push_back(r);
  }
  for (const TuningEntry& e : newer.entries) {
    bool replaced = false;
    for (TuningEntry& mine : entries)
      if (mine.same_slot(e)) {
        mine = e;
        replaced = true;
        break;
      }
    if (!replaced) entries.push_back(e);
  }
}

const TuningEntry* TuningDb::find(const TuningEntry& slot) const {
  for (const TuningEntry& e : entries)
    if (e.same_slot(slot)) return &e;
  return nullptr;
}

const TuningRejection* TuningDb::find_rejection(const TuningEntry& slot, const std::string& arch,
                                                const std::string& compiler) const {
  for (const TuningRejection& r : rejections)
    if (r.same_config(slot) && (r.arch.empty() || r.arch == arch) && r.compiler == compiler) return &r;
  return nullptr;
}

namespace {

void read_key(const Reader& r, const toml::table& t, ProblemKey& out) {
  const toml::node& key = r.need(t, "key");
  if (!key.is_table()) r.fail(key, "'key' must be a table");
  for (auto&& [name, v] : *key.as_table()) {
    if (v.is_integer()) out[std::string(name.str())] = v.as_integer()->get();
    else if (v.is_string()) out[std::string(name.str())] = v.as_string()->get();
    else r.fail(v, fmt::format("key.{} must be an integer or a string", name.str()));
  }
}

void read_config(const Reader& r, const toml::table& t, TunedConfig& out) {
  const toml::node& cfg = r.need(t, "config");
  if (!cfg.is_table()) r.fail(cfg, "'config' must be a table");
  for (auto&& [name, v] : *cfg.as_table()) {
    if (!v.is_integer()) r.fail(v, fmt::format("config.{} must be an integer", name.str()));
    out[std::string(name.str())] = v.as_integer()->get();
  }
}

const toml::array* table_array(const Reader& r, const toml::table& doc, const char* name) {
  const toml::node* n = doc.get(name);
  if (!n) return nullptr;
  const toml::array* arr = n->as_array();
  if (!arr) r.fail(*n, fmt::format("'{0}' must be an array of tables ([[{0}]])", name));
  for (const toml::node& item : *arr)
    if (!item.is_table()) r.fail(item, fmt::format("each {} must be a table", name));
  return arr;
}

toml::table key_table(const ProblemKey& k) {
  toml::table key;
  for (const auto& [name, v] : k) {
    if (const auto* i = std::get_if<int64_t>(&v)) key.insert(name, *i);
    else key.insert(name, std::get<std::string>(v));
  }
  key.is_inline(true);
  return key;
}

toml::table config_table(const TunedConfig& c) {
  toml::table cfg;
  for (const auto& [name, v] : c) cfg.insert(name, v);
  cfg.is_inline(true);
  return cfg;
}

// The fields an [[entry]] and a [[rejected]] share, read and written the same way.
template <class Record> void read_identity(const Reader& r, const toml::table& t, Record& x) {
  x.kernel = r.string(t, "kernel");
  x.device = r.string(t, "device");
  x.compute_capability = r.optional_string(t, "compute_capability");
  x.backend = r.string(t, "backend");
  read_key(r, t, x.key);
  read_config(r, t, x.config);
}

template <class Record> toml::table identity_table(const Record& x) {
  toml::table t;
  t.insert("kernel", x.kernel);
  t.insert("device", x.device);
  t.insert("compute_capability", x.compute_capability);
  t.insert("backend", x.backend);
  t.insert("key", key_table(x.key));
  t.insert("config", config_table(x.config));
  return t;
}

} // namespace

TuningDb parse_tuning_db(std::string_view text, const std::string& source) {
  toml::table doc = parse_toml<TuningDbError>(text, source);
  Reader r(source);
  TuningDb db;
  if (const toml::node* v = doc.get("version")) {
    if (!v->is_integer() || v->as_integer()->get() < 1 || v->as_integer()->get() > 2)
      r.fail(*v, "unsupported version (this tilec reads versions 1 and 2)");
  }
  for (auto&& [k, node] : doc)
    if (k.str() != "version" && k.str() != "entry" && k.str() != "rejected")
      r.fail(node, fmt::format("unknown key '{}'", k.str()));
  if (const toml::array* arr = table_array(r, doc, "entry"))
    for (const toml::node& n : *arr) {
      const toml::table* t = n.as_table();
      TuningEntry e;
      read_identity(r, *t, e);
      e.median_ms = r.number(*t, "median_ms");
      e.min_ms = r.optional_number(*t, "min_ms").value_or(e.median_ms);
      e.max_ms = r.optional_number(*t, "max_ms").value_or(e.median_ms);
      e.repeats = r.optional_integer(*t, "repeats").value_or(1);
      e.gbps = r.optional_number(*t, "gbps");
      e.ideal_bytes = r.optional_integer(*t, "ideal_bytes");
      e.bytes_loaded = r.optional_integer(*t, "bytes_loaded");
      e.bytes_stored = r.optional_integer(*t, "bytes_stored");
      e.unique_bytes = r.optional_integer(*t, "unique_bytes");
      e.max_abs_err = r.optional_number(*t, "max_abs_err");
      e.measured_at = r.optional_string(*t, "measured_at");
      db.entries.push_back(std::move(e));
    }
  if (const toml::array* arr = table_array(r, doc, "rejected"))
    for (const toml::node& n : *arr) {
      const toml::table* t = n.as_table();
      TuningRejection x;
      read_identity(r, *t, x);
      x.stage = r.string(*t, "stage");
      if (x.stage != "build" && x.stage != "compile" && x.stage != "run")
        r.fail(r.need(*t, "stage"), fmt::format("stage '{}' is not build, compile or run", x.stage));
      x.arch = r.optional_string(*t, "arch");
      x.reason = r.string(*t, "reason");
      x.compiler = r.optional_string(*t, "compiler");
      x.rejected_at = r.optional_string(*t, "rejected_at");
      db.rejections.push_back(std::move(x));
    }
  return db;
}

TuningDb read_tuning_db(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return {};
    throw TuningDbError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_tuning_db(ss.str(), path);
}

std::string format_tuning_db(const TuningDb& db) {
  toml::array entries, rejected;
  for (const TuningEntry& e : db.entries) {
    toml::table t = identity_table(e);
    t.insert("median_ms", e.median_ms);
    t.insert("min_ms", e.min_ms);
    t.insert("max_ms", e.max_ms);
    t.insert("repeats", e.repeats);
    if (e.gbps) t.insert("gbps", *e.gbps);
    if (e.ideal_bytes) t.insert("ideal_bytes", *e.ideal_bytes);
    if (e.bytes_loaded) t.insert("bytes_loaded", *e.bytes_loaded);
    if (e.bytes_stored) t.insert("bytes_stored", *e.bytes_stored);
    if (e.unique_bytes) t.insert("unique_bytes", *e.unique_bytes);
    if (e.max_abs_err) t.insert("max_abs_err", *e.max_abs_err);
    t.insert("measured_at", e.measured_at.empty() ? utc_now() : e.measured_at);
    entries.push_back(std::move(t));
  }
  for (const TuningRejection& x : db.rejections) {
    toml::table t = identity_table(x);
    t.insert("stage", x.stage);
    t.insert("arch", x.arch);
    t.insert("reason", x.reason);
    t.insert("compiler", x.compiler);
    t.insert("rejected_at", x.rejected_at.empty() ? utc_now() : x.rejected_at);
    rejected.push_back(std::move(t));
  }
  toml::table doc;
  // Version 1 unless there are rejections: a file of measurements alone stays readable by
  // every earlier reader.
  doc.insert("version", rejected.empty() ? 1 : 2);
  if (!entries.empty()) doc.insert("entry", std::move(entries));
  if (!rejected.empty()) doc.insert("rejected", std::move(rejected));
  std::ostringstream out;
  out << "# tilec tuning database (tilec autotune); entries merge by kernel, device, backend, key and config\n";
  out << doc << "\n";
  return out.str();
}

TuningDb merge_into_file(const std::string& path, const TuningDb& add, std::string* warning) {
  FileLock lock(path + ".lock");
  TuningDb db;
  try {
    db = read_tuning_db(path);
  } catch (const TuningDbError& e) {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
    std::string aside = fmt::format("{}.corrupt-{}", path, stamp);
    std::error_code ec;
    for (int i = 1; fs::exists(aside, ec); ++i) aside = fmt::format("{}.corrupt-{}-{}", path, stamp, i);
    fs::rename(path, aside, ec);
    if (ec) throw TuningDbError(fmt::format("{} (and it cannot be moved aside: {})", e.what(), ec.message()));
    if (warning) *warning = fmt::format("{}; moved it to {} and started a new database", e.what(), aside);
  }
  db.merge(add);
  for (TuningEntry& e : db.entries)
    if (e.measured_at.empty()) e.measured_at = utc_now();
  for (TuningRejection& x : db.rejections)
    if (x.rejected_at.empty()) x.rejected_at = utc_now();
  write_atomically(path, format_tuning_db(db));
  return db;
}

std::string host_device_name(const std::string& backend) {
  return backend == "interpret" ? "cpu-interpreter" : "cpu-emulator";
}

int size_bucket(const SizeBuckets& buckets, const std::string& field, const KeyValue& v) {
  auto it = buckets.find(field);
  const auto* x = std::get_if<int64_t>(&v);
  if (it == buckets.end() || !x) return -1;
  const std::vector<int64_t>& bounds = it->second;
  return int(std::lower_bound(bounds.begin(), bounds.end(), *x) - bounds.begin());
}

std::optional<Selection> select_config(const TuningDb& db, const std::string& kernel, const std::string& device,
                                       const ProblemKey& key, const std::vector<std::string>& distance_fields,
                                       const SizeBuckets& buckets) {
  std::vector<const TuningEntry*> pool;
  for (const TuningEntry& e : db.entries)
    if (e.kernel == kernel && e.device == device) pool.push_back(&e);
  std::string device_note;
  if (pool.empty()) {
    // Another GPU's timings are a fair guess for a GPU, the CPU backends' for each other; a
    // CPU's (which rank configs by host time) never stand in for a GPU's, nor the reverse.
    auto on_cpu = [](const std::string& d) { return d.starts_with("cpu-"); };
    for (const TuningEntry& e : db.entries)
      if (e.kernel == kernel && on_cpu(e.device) == on_cpu(device)) pool.push_back(&e);
    if (pool.empty()) return std::nullopt;
    device_note = fmt::format(" (nothing tuned on {}; using entries of other {} devices)", device,
                              on_cpu(device) ? "CPU" : "GPU");
  }
  auto fastest_of = [&](const ProblemKey& k) {
    const TuningEntry* best = nullptr;
    for (const TuningEntry* e : pool)
      if (e->key == k && (!best || e->median_ms < best->median_ms)) best = e;
    return best;
  };
  if (const TuningEntry* e = fastest_of(key))
    return Selection{*e, "exact",
                     fmt::format("tuned config {} for {} (exact key, {} on {}){}", format_config(e->config),
                                 format_key(key), e->backend, e->device, device_note)};

  auto is_distance = [&](const std::string& f) {
    return std::find(distance_fields.begin(), distance_fields.end(), f) != distance_fields.end();
  };
  auto comparable = [&](const ProblemKey& k) {
    for (const auto& [name, v] : key) {
      if (is_distance(name)) continue;
      auto it = k.find(name);
      if (it == k.end() || it->second != v) return false;
    }
    for (const auto& [name, v] : k)
      if (!is_distance(name) && !key.count(name)) return false;
    for (const auto& [name, bounds] : buckets) {
      auto a = key.find(name), b = k.find(name);
      if (a != key.end() && b != k.end() && size_bucket(buckets, name, a->second) != size_bucket(buckets, name, b->second))
        return false;
    }
    return true;
  };
  const ProblemKey* nearest = nullptr;
  std::vector<double> best_dist;
  for (const TuningEntry* e : pool) {
    if (!comparable(e->key)) continue;
    std::vector<double> dist;
    for (const std::string& f : distance_fields) {
      auto a = key.find(f), b = e->key.find(f);
      if (a == key.end() || b == e->key.end()) dist.push_back(a == key.end() && b == e->key.end() ? 0.0 : INFINITY);
      else dist.push_back(log_distance(a->second, b->second));
    }
    if (!nearest || dist < best_dist) {
      nearest = &e->key;
      best_dist = dist;
    }
  }
  if (!nearest) return std::nullopt;
  const TuningEntry* e = fastest_of(*nearest);
  return Selection{*e, "nearest",
                   fmt::format("tuned config {} from the nearest key {} (asked for {}; {} on {}){}",
                               format_config(e->config), format_key(*nearest), format_key(key), e->backend,
                               e->device, device_note)};
}

} // namespace tilec::rt
