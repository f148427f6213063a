#include "autotune/export.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "autotune/progress.h"
#include "backends/module_builder.h"
#include "ir/error.h"
#include "measure/measure.h"
#include "runtime/module_store.h"

namespace tilec::autotune {

namespace fs = std::filesystem;

std::vector<std::string> export_modules(const templates::KernelTemplate& t, const rt::TuningEntry& winner,
                                        const templates::ParamMap& shape, const std::vector<std::string>& archs,
                                        const fs::path& dir, const std::function<void(const std::string&)>& each) {
  std::vector<std::string> written;
  std::vector<templates::ParamMap> variants = t.module_variants;
  if (variants.empty()) variants.emplace_back();
  templates::ParamMap params(winner.config.begin(), winner.config.end());
  for (const std::string& arch : archs)
    for (const templates::ParamMap& variant : variants) {
      templates::ParamMap s = shape;
      for (const auto& [name, v] : variant) s[name] = v;
      for (const rt::Manifest& m : backends::write_template_modules(t, params, s, arch, dir, true)) {
        std::string manifest = (m.dir / (m.ptx.empty() ? m.emulator : m.ptx).stem()).string() + ".toml";
        if (each) each(manifest);
        // Keys that share a winner (and its modules) list each manifest once.
        if (std::find(written.begin(), written.end(), manifest) == written.end()) written.push_back(std::move(manifest));
      }
    }
  return written;
}

void export_card_and_db(const templates::KernelTemplate& t, const rt::TuningDb& db, const std::string& db_path,
                        const fs::path& dir, const std::string& compiler,
                        const std::function<void(const std::string&)>& warn) {
  // The database and the kernel's card travel with its modules: a deployment ships the folder.
  rt::KernelCard card = templates::kernel_card(t);
  card.compiler = compiler;
  rt::write_kernel_card(card, dir);
  fs::path copy = dir / fs::path(db_path).filename();
  if (fs::absolute(copy).lexically_normal() == fs::absolute(db_path).lexically_normal()) return;
  // Merged in memory and written atomically without a lock file: the folder is what ships (a
  // deployment holds no tuning.toml.lock). Measurements only: hosts never tune, and a file
  // without rejections is version 1, which every runtime reads.
  rt::TuningDb shipped;
  try {
    shipped = rt::read_tuning_db(copy.string());
  } catch (const rt::TuningDbError& e) {
    warn(fmt::format("{}; replaced by this database", e.what()));
  }
  rt::TuningDb measured;
  measured.entries = db.entries;
  shipped.merge(measured);
  shipped.rejections.clear();
  rt::write_tuning_db(copy.string(), shipped);
}

std::vector<rt::TuningEntry> winners(const rt::TuningDb& db, const std::optional<std::string>& kernel) {
  std::vector<rt::TuningEntry> out;
  std::map<std::tuple<std::string, std::string, std::string>, size_t> at; // (kernel, device, key) -> index in out
  for (const rt::TuningEntry& e : db.entries) {
    if (kernel && e.kernel != *kernel) continue;
    auto [it, fresh] = at.try_emplace({e.kernel, e.device, rt::format_key(e.key)}, out.size());
    if (fresh) out.push_back(e);
    else if (e.median_ms < out[it->second].median_ms) out[it->second] = e;
  }
  return out;
}

std::string default_arch(const rt::TuningEntry& winner) {
  const std::string& cc = winner.compute_capability;
  std::string digits;
  for (char c : cc)
    if (c != '.') digits += c;
  const bool numeric = !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  return numeric && cc.find('.') != std::string::npos ? "sm_" + digits : "sm_90";
}

Exported export_database(const ExportRequest& rq, const std::function<void(const std::string&)>& say,
                         const std::function<void(const std::string&)>& warn) {
  std::error_code ec;
  if (!fs::exists(rq.db_path, ec)) throw UserError(fmt::format("{}: no such file", rq.db_path));
  rt::TuningDb db;
  try {
    db = rt::read_tuning_db(rq.db_path);
  } catch (const rt::TuningDbError& e) {
    throw UserError(e.what());
  }
  if (db.entries.empty())
    throw UserError(fmt::format("{}: no measured configs to export{}", rq.db_path,
                                db.rejections.empty()
                                    ? ""
                                    : fmt::format(" (it records {} rejected configs only)", db.rejections.size())));
  std::vector<std::string> kernels;
  for (const rt::TuningEntry& e : db.entries)
    if (std::find(kernels.begin(), kernels.end(), e.kernel) == kernels.end()) kernels.push_back(e.kernel);
  if (rq.kernel) {
    if (!templates::find_template(*rq.kernel))
      throw UserError(fmt::format("--kernel {}: no such kernel in this tilec (tilec list shows them)", *rq.kernel));
    if (std::find(kernels.begin(), kernels.end(), *rq.kernel) == kernels.end())
      throw UserError(fmt::format("--kernel {}: {} has no measurements of it (kernels there: {})", *rq.kernel,
                                  rq.db_path, fmt::join(kernels, ", ")));
    kernels = {*rq.kernel};
  }
  std::vector<const templates::KernelTemplate*> templates_of;
  for (const std::string& k : kernels) {
    const templates::KernelTemplate* t = templates::find_template(k);
    if (!t)
      throw UserError(fmt::format("{}: kernel '{}' is not one this tilec knows (tilec list shows them; a kernel of "
                                  "your own is exported by the tilec that tilec_add_kernels built){}",
                                  rq.db_path, k, kernels.size() > 1 ? "; --kernel K exports one kernel alone" : ""));
    templates_of.push_back(t);
  }
  if (fs::exists(rq.dir, ec) && !fs::is_directory(rq.dir, ec))
    throw UserError(fmt::format("--to {}: exists and is not a folder", rq.dir.string()));

  Exported out;
  out.kernels = kernels;
  out.winners = winners(db, rq.kernel);
  // Each winner's key as sizes: checked for every winner before any module is written.
  std::vector<templates::ParamMap> shapes;
  std::vector<std::vector<std::string>> archs;
  size_t steps = 0;
  for (const rt::TuningEntry& w : out.winners) {
    const templates::KernelTemplate& t = *templates::find_template(w.kernel);
    try {
      shapes.push_back(measure::shape_of_key(t, w.key));
    } catch (const UserError& e) {
      throw UserError(fmt::format("{}: {} {}: {}", rq.db_path, w.kernel, rt::format_key(w.key), e.what()));
    }
    archs.push_back(rq.archs.empty() ? std::vector<std::string>{default_arch(w), "host"} : rq.archs);
    steps += archs.back().size();
  }
  fs::create_directories(rq.dir, ec);
  if (ec) throw UserError(fmt::format("--to {}: cannot create it: {}", rq.dir.string(), ec.message()));

  Progress progress("export", steps);
  for (size_t i = 0; i < out.winners.size(); ++i) {
    const rt::TuningEntry& w = out.winners[i];
    const templates::KernelTemplate& t = *templates::find_template(w.kernel);
    for (const std::string& arch : archs[i]) {
      std::vector<std::string> files;
      for (std::string& m : export_modules(t, w, shapes[i], {arch}, rq.dir)) {
        files.push_back(fs::path(m).filename().string());
        if (std::find(out.manifests.begin(), out.manifests.end(), m) == out.manifests.end())
          out.manifests.push_back(std::move(m));
      }
      progress.step(fmt::format("{} {} [{}] {}: {}", w.kernel, rt::format_key(w.key), rt::format_config(w.config), arch,
                                fmt::join(files, ", ")));
    }
  }
  rt::TuningDb shipped;
  for (const rt::TuningEntry& e : db.entries)
    if (!rq.kernel || e.kernel == *rq.kernel) shipped.entries.push_back(e);
  for (const templates::KernelTemplate* t : templates_of)
    export_card_and_db(*t, shipped, rq.db_path, rq.dir, rq.compiler, warn);
  say(fmt::format("exported {} modules of {} winners ({}) with their kernel cards and the database to {}",
                  out.manifests.size(), out.winners.size(), fmt::join(kernels, ", "), rq.dir.string()));
  return out;
}

} // namespace tilec::autotune
