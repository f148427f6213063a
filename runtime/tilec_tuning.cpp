#include "runtime/tilec_tuning.h"

#include <cstring>
#include <deque>
#include <string>

#include "runtime/module_store.h"
#include "runtime/tuning_db.h"

struct tilec_tuning_db {
  tilec::rt::TuningDb db;
  std::filesystem::path dir;     // the database's folder, where its kernel cards are
  std::deque<std::string> names; // storage for the names handed out
};

namespace {

void copy_out(const std::string& s, char* buf, size_t len) {
  if (!buf || len == 0) return;
  size_t n = std::min(len - 1, s.size());
  std::memcpy(buf, s.data(), n);
  buf[n] = '\0';
}

} // namespace

extern "C" tilec_tuning_db* tilec_tuning_open(const char* path, char* err, size_t err_len) {
  try {
    auto* h = new tilec_tuning_db;
    try {
      h->db = tilec::rt::read_tuning_db(path ? path : "");
      h->dir = std::filesystem::path(path ? path : "").parent_path();
      if (h->dir.empty()) h->dir = ".";
    } catch (...) {
      delete h;
      throw;
    }
    return h;
  } catch (const std::exception& e) {
    copy_out(e.what(), err, err_len);
    return nullptr;
  }
}

extern "C" void tilec_tuning_close(tilec_tuning_db* db) { delete db; }

extern "C" int tilec_tuning_size(const tilec_tuning_db* db) { return db ? int(db->db.entries.size()) : 0; }

extern "C" int tilec_tuning_select(const tilec_tuning_db* db, const char* kernel, const char* device,
                                   const char* key, const char** names, long long* values, int capacity,
                                   char* note, size_t note_len) {
  if (!db || !kernel || !device || !key) {
    copy_out("tilec_tuning_select: a required argument is NULL", note, note_len);
    return -1;
  }
  try {
    // A nearer key may differ in the sizes the kernel card beside the database names.
    auto card = tilec::rt::find_kernel_card(kernel, {db->dir});
    auto sel = tilec::rt::select_config(db->db, kernel, device, tilec::rt::parse_key(key),
                                        card ? card->size_fields : std::vector<std::string>{},
                                        card ? card->size_buckets : tilec::rt::SizeBuckets{});
    if (!sel) {
      copy_out(std::string("nothing tuned for ") + key + "; use the defaults", note, note_len);
      return 0;
    }
    copy_out(sel->note, note, note_len);
    auto& mut = const_cast<tilec_tuning_db&>(*db);
    int n = 0;
    for (const auto& [name, v] : sel->entry.config) {
      if (n >= capacity) break;
      mut.names.push_back(name);
      if (names) names[n] = mut.names.back().c_str();
      if (values) values[n] = v;
      ++n;
    }
    return n;
  } catch (const std::exception& e) {
    copy_out(e.what(), note, note_len);
    return -1;
  }
}

extern "C" int tilec_tuned_modules(const tilec_tuning_db* db, const char* kernel, const char* device,
                                   const char* key, const char* arch, const char* dirs, const char* extra,
                                   char* manifests, size_t manifests_len, char* note, size_t note_len) {
  if (!db || !kernel || !device || !key || !arch) {
    copy_out("tilec_tuned_modules: a required argument is NULL", note, note_len);
    return -1;
  }
  try {
    std::vector<std::filesystem::path> folders;
    for (std::string rest = dirs ? dirs : ""; !rest.empty();) {
      size_t colon = rest.find(':');
      if (colon) folders.emplace_back(rest.substr(0, colon));
      rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    }
    tilec::rt::Spec more;
    if (extra)
      for (const auto& [k, v] : tilec::rt::parse_key(extra)) more[k] = v;
    tilec::rt::TunedModules t =
        tilec::rt::load_tuned(db->db, kernel, device, tilec::rt::parse_key(key), arch, folders, more);
    std::string paths;
    for (const tilec::rt::Manifest& m : t.modules) {
      // The manifest's file: tilec names a module's files alike (<name>.toml, <name>.ptx, ...).
      const std::filesystem::path& code = !m.ptx.empty() ? m.ptx : !m.cubin.empty() ? m.cubin : m.emulator;
      std::filesystem::path file = m.dir / code.stem();
      file += ".toml";
      paths += file.string() + "\n";
    }
    if (manifests && paths.size() >= manifests_len) {
      copy_out("tilec_tuned_modules: the manifests buffer is too small", note, note_len);
      return -1;
    }
    copy_out(paths, manifests, manifests_len);
    copy_out(t.note, note, note_len);
    return int(t.modules.size());
  } catch (const std::exception& e) {
    copy_out(e.what(), note, note_len);
    return -1;
  }
}
