// tilec db merge / show / export: tuning databases (runtime/tuning_db.h) as files to combine,
// read and deploy. `merge` joins databases measured apart (shards of one search, machines of
// one fleet): where two measured the same (kernel, device, backend, key, config), the faster
// median wins and the conflict is reported; rejected configs are united (a config measured in
// any input is not rejected); the output is sorted, so the same inputs in any order give the
// same file. `show` prints each problem key's measured configs, fastest first, then the
// rejected ones. `export` writes the winners' modules, kernel cards and the database into a
// folder (autotune/export.h), measuring nothing.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <iostream>
#include <tuple>

#include "autotune/export.h"
#include "ir/error.h"
#include "tools/commands.h"
#include "tools/json.h"

namespace tilec::cli {

namespace {

auto order_key(const rt::TuningEntry& e) {
  return std::make_tuple(e.kernel, e.device, e.compute_capability, e.backend, rt::format_key(e.key),
                         rt::format_config(e.config));
}

auto order_key(const rt::TuningRejection& x) {
  return std::make_tuple(x.kernel, x.device, x.compute_capability, x.backend, rt::format_key(x.key),
                         rt::format_config(x.config), x.arch);
}

// The rejections of all `inputs` as one list: one per slot (the latest), none of a config
// `measured` holds, sorted.
std::vector<rt::TuningRejection> merged_rejections(const std::vector<rt::TuningDb>& inputs, const rt::TuningDb& measured) {
  std::vector<rt::TuningRejection> out;
  for (const rt::TuningDb& db : inputs)
    for (const rt::TuningRejection& x : db.rejections) {
      if (std::any_of(measured.entries.begin(), measured.entries.end(),
                      [&](const rt::TuningEntry& e) { return x.same_config(e); }))
        continue;
      auto same = std::find_if(out.begin(), out.end(), [&](const rt::TuningRejection& m) { return m.same_slot(x); });
      if (same == out.end()) out.push_back(x);
      else if (x.rejected_at > same->rejected_at) *same = x;
    }
  std::sort(out.begin(), out.end(),
            [](const rt::TuningRejection& a, const rt::TuningRejection& b) { return order_key(a) < order_key(b); });
  return out;
}

std::string slot_name(const rt::TuningEntry& e) {
  return fmt::format("{} on {} ({}) {} [{}]", e.kernel, e.device, e.backend, rt::format_key(e.key),
                     rt::format_config(e.config));
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

// One problem key's measurements as heatmaps: the two config fields with the most values
// (block_n and head_group first when they vary) as columns and rows, one panel per
// combination of the other varying fields (num_warps, num_stages, ...). A cell's colour is
// its speed relative to the key's slowest and fastest (GB/s where measured, else 1 / time),
// its text the GB/s or the time; a config never measured is grey.
struct Heatmap {
  std::string title;
  std::vector<const rt::TuningEntry*> entries;
};

std::string heatmap_svg(const std::vector<Heatmap>& maps, const std::string& source) {
  const int cell_w = 64, cell_h = 26, label_w = 92, gap = 28, panels_per_row = 3;
  std::string body;
  int y = 46, width = 600;
  for (const Heatmap& h : maps) {
    // The fields whose values differ, by how many values each has.
    std::map<std::string, std::set<int64_t>> values;
    for (const rt::TuningEntry* e : h.entries)
      for (const auto& [k, v] : e->config) values[k].insert(v);
    std::vector<std::string> varying;
    for (const char* first : {"block_n", "head_group"})
      if (values.count(first) && values[first].size() > 1) varying.push_back(first);
    std::vector<std::string> rest;
    for (const auto& [k, vs] : values)
      if (vs.size() > 1 && std::find(varying.begin(), varying.end(), k) == varying.end()) rest.push_back(k);
    std::stable_sort(rest.begin(), rest.end(),
                     [&](const std::string& a, const std::string& b) { return values[a].size() > values[b].size(); });
    for (const std::string& k : rest) varying.push_back(k);
    const std::string xf = varying.size() > 0 ? varying[0] : "", yf = varying.size() > 1 ? varying[1] : "";
    std::vector<std::string> panel_fields(varying.begin() + std::min<size_t>(2, varying.size()), varying.end());
    auto axis = [&](const std::string& f) {
      return f.empty() ? std::vector<int64_t>{0} : std::vector<int64_t>(values[f].begin(), values[f].end());
    };
    const std::vector<int64_t> xs = axis(xf), ys = axis(yf);
    auto at = [](const rt::TuningEntry* e, const std::string& f) {
      auto it = e->config.find(f);
      return f.empty() || it == e->config.end() ? int64_t(0) : it->second;
    };
    auto speed = [](const rt::TuningEntry* e) { return e->gbps ? *e->gbps : e->median_ms > 0 ? 1.0 / e->median_ms : 0.0; };
    double lo = 1e300, hi = -1e300;
    for (const rt::TuningEntry* e : h.entries) {
      lo = std::min(lo, speed(e));
      hi = std::max(hi, speed(e));
    }
    std::map<std::vector<int64_t>, std::vector<const rt::TuningEntry*>> panels;
    for (const rt::TuningEntry* e : h.entries) {
      std::vector<int64_t> pk;
      for (const std::string& f : panel_fields) pk.push_back(at(e, f));
      panels[pk].push_back(e);
    }
    body += fmt::format("<text x=\"16\" y=\"{}\" font-size=\"13\" font-weight=\"bold\">{}</text>\n", y, xml_escape(h.title));
    width = std::max(width, 32 + int(8.5 * double(h.title.size()))); // 13 px bold: about 8.5 px a character
    body += fmt::format("<text x=\"16\" y=\"{}\" fill=\"#555\">columns {}, rows {}; colour: {} (darker is faster)</text>\n",
                        y + 16, xf.empty() ? "-" : xf, yf.empty() ? "-" : yf,
                        h.entries.front()->gbps ? "GB/s" : "1 / median time");
    y += 30;
    const int panel_w = label_w + cell_w * int(xs.size()), panel_h = 40 + cell_h * int(ys.size());
    int col = 0, row_y = y;
    for (const auto& [pk, es] : panels) {
      const int x0 = 16 + col * (panel_w + gap);
      std::string name;
      for (size_t i = 0; i < panel_fields.size(); ++i) name += fmt::format("{}{}={}", i ? " " : "", panel_fields[i], pk[i]);
      body += fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{}</text>\n", x0, row_y + 12,
                          xml_escape(name.empty() ? "all configs" : name));
      for (size_t i = 0; i < xs.size(); ++i)
        body += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                            x0 + label_w + cell_w * int(i) + cell_w / 2, row_y + 32, xf.empty() ? "" : fmt::format("{}", xs[i]));
      for (size_t j = 0; j < ys.size(); ++j) {
        const int cy = row_y + 38 + cell_h * int(j);
        body += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", x0 + label_w - 6,
                            cy + cell_h / 2 + 4, yf.empty() ? "" : fmt::format("{} {}", yf, ys[j]));
        for (size_t i = 0; i < xs.size(); ++i) {
          const rt::TuningEntry* best = nullptr; // several when a field outside the map varies too
          for (const rt::TuningEntry* e : es)
            if (at(e, xf) == xs[i] && at(e, yf) == ys[j] && (!best || speed(e) > speed(best))) best = e;
          const int cx = x0 + label_w + cell_w * int(i);
          std::string fill = "#dddddd", text = "-", colour = "#333";
          if (best) {
            double t = hi > lo ? (speed(best) - lo) / (hi - lo) : 1.0;
            // Pale yellow (slowest) to dark blue (fastest).
            int r = int(255 + (8 - 255) * t), g = int(247 + (48 - 247) * t), b = int(188 + (107 - 188) * t);
            fill = fmt::format("#{:02x}{:02x}{:02x}", r, g, b);
            text = best->gbps ? fmt::format("{:.3g}", *best->gbps) : fmt::format("{:.3g} ms", best->median_ms);
            colour = t > 0.55 ? "white" : "#111";
          }
          body += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"white\"/>\n", cx, cy,
                              cell_w, cell_h, fill);
          body += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{}\">{}</text>\n", cx + cell_w / 2,
                              cy + cell_h / 2 + 4, colour, text);
          if (best && speed(best) == hi)
            body += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#d62728\" "
                                "stroke-width=\"2\"><title>fastest: {}</title></rect>\n",
                                cx + 1, cy + 1, cell_w - 2, cell_h - 2, xml_escape(rt::format_config(best->config)));
        }
      }
      width = std::max(width, x0 + panel_w + 16);
      if (++col == panels_per_row) {
        col = 0;
        row_y += panel_h + gap;
      }
    }
    y = row_y + (col ? panel_h + gap : 0) + 10;
  }
  return fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                     "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
                     "<text x=\"16\" y=\"24\" font-size=\"15\" font-weight=\"bold\">Tuning results: {2}</text>\n{3}</svg>\n",
                     width, y, xml_escape(source), body);
}

rt::TuningDb read_existing(const std::string& path) {
  if (!std::filesystem::exists(path)) throw UserError(fmt::format("{}: no such file", path));
  return rt::read_tuning_db(path);
}

struct DbOpts {
  std::vector<std::string> inputs;
  std::string out, show, svg;
  autotune::ExportRequest ex;
  std::string ex_kernel;
};

// tilec db export: the winners of a database as a folder a host loads, nothing measured.
int run_export(const Common& common, DbOpts& o, const CLI::App* exp) {
  if (exp->count("--kernel")) o.ex.kernel = o.ex_kernel;
  o.ex.compiler = program_name();
  autotune::Exported done = autotune::export_database(
      o.ex, [&](const std::string& line) { say(common, line); },
      [](const std::string& line) { std::cerr << program_name() << ": warning: " << line << "\n"; });
  if (common.json) {
    std::string manifests = "[", winners = "[";
    for (const std::string& m : done.manifests) manifests += (manifests.size() > 1 ? ", \"" : "\"") + json_escape(m) + "\"";
    for (const rt::TuningEntry& w : done.winners) {
      JsonObject j;
      j.str("kernel", w.kernel).str("device", w.device).str("key", rt::format_key(w.key));
      j.str("config", rt::format_config(w.config)).number("median_ms", w.median_ms);
      winners += (winners.size() > 1 ? ", " : "") + j.str();
    }
    std::cout << JsonObject()
                     .boolean("ok", true)
                     .str("to", o.ex.dir.string())
                     .raw("winners", winners + "]")
                     .raw("exported", manifests + "]")
                     .str()
              << std::endl;
  }
  return kOk;
}

} // namespace

Action add_db(CLI::App& app, Common& common) {
  app.require_subcommand(1, 1);
  auto o = std::make_shared<DbOpts>();
  CLI::App* merge = app.add_subcommand("merge", "merge tuning databases (shards, machines) into one");
  merge->add_option("databases", o->inputs, "the databases to merge (TOML)")->required();
  merge->add_option("-o,--out", o->out, "the merged database to write (replaced if it exists)")->required();
  merge->add_flag("--json", common.json, "print one JSON object on stdout as the last line");
  CLI::App* show = app.add_subcommand("show", "print a tuning database: each problem's configs, fastest first");
  show->add_option("database", o->show, "the database (TOML)")->required();
  show->add_option("--svg", o->svg,
                   "also draw each problem's configs as heatmaps into this SVG file (block_n x head_group, one "
                   "panel per num_warps/num_stages, colour: GB/s)");
  show->add_flag("--json", common.json, "print one JSON object on stdout as the last line");
  CLI::App* exp = app.add_subcommand(
      "export", "write the winners' modules (GPU arch and emulator), kernel cards and the database into a folder, "
                "measuring nothing");
  exp->add_option("database", o->ex.db_path, "the database (TOML)")->required();
  exp->add_option("--to", o->ex.dir, "the folder to write (created if missing; files of the same name replaced)")
      ->required();
  exp->add_option("--kernel", o->ex_kernel, "export this kernel's winners only");
  exp->add_option("--arch", o->ex.archs,
                  "the archs to write modules for, e.g. --arch sm_90 --arch host (default: each winner's GPU arch, "
                  "from its compute capability, else sm_90; and host, the emulator's)")
      ->expected(1, -1);
  exp->add_flag("--json", common.json, "print one JSON object on stdout as the last line");

  return [&common, o, merge, exp]() -> int {
    if (exp->parsed()) return run_export(common, *o, exp);
    if (merge->parsed()) {
      rt::TuningDb out;
      std::vector<std::string> from; // which input each entry of `out` came from
      int conflicts = 0;
      std::string conflicts_json = "[";
      std::vector<rt::TuningDb> inputs;
      for (const std::string& path : o->inputs) {
        inputs.push_back(read_existing(path));
        const rt::TuningDb& db = inputs.back();
        for (const rt::TuningEntry& e : db.entries) {
          auto same = std::find_if(out.entries.begin(), out.entries.end(),
                                   [&](const rt::TuningEntry& m) { return m.same_slot(e); });
          if (same == out.entries.end()) {
            out.entries.push_back(e);
            from.push_back(path);
            continue;
          }
          size_t at = size_t(same - out.entries.begin());
          if (same->median_ms == e.median_ms && same->measured_at == e.measured_at) continue; // the same entry twice
          ++conflicts;
          const bool newer_wins = e.median_ms < same->median_ms;
          say(common, fmt::format("conflict: {}: {} has {:.4g} ms, {} has {:.4g} ms: kept {}", slot_name(e), from[at],
                                  same->median_ms, path, e.median_ms, newer_wins ? path : from[at]));
          conflicts_json += fmt::format("{}{}", conflicts > 1 ? ", " : "",
                                        JsonObject()
                                            .str("slot", slot_name(e))
                                            .str("kept", newer_wins ? path : from[at])
                                            .number("kept_ms", std::min(e.median_ms, same->median_ms))
                                            .number("dropped_ms", std::max(e.median_ms, same->median_ms))
                                            .str());
          if (newer_wins) {
            *same = e;
            from[at] = path;
          }
        }
      }
      std::vector<size_t> idx(out.entries.size());
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
      std::sort(idx.begin(), idx.end(),
                [&](size_t a, size_t b) { return order_key(out.entries[a]) < order_key(out.entries[b]); });
      rt::TuningDb sorted;
      for (size_t i : idx) sorted.entries.push_back(out.entries[i]);
      sorted.rejections = merged_rejections(inputs, sorted);
      rt::write_tuning_db(o->out, sorted);
      say(common, fmt::format("{} entries and {} rejected configs from {} database(s) -> {} ({} conflict(s), the "
                              "faster kept)",
                              sorted.entries.size(), sorted.rejections.size(), o->inputs.size(), o->out, conflicts));
      if (common.json)
        std::cout << JsonObject()
                         .boolean("ok", true)
                         .str("out", o->out)
                         .integer("entries", int64_t(sorted.entries.size()))
                         .integer("rejected", int64_t(sorted.rejections.size()))
                         .integer("conflicts", conflicts)
                         .raw("conflict_list", conflicts_json + "]")
                         .str()
                  << std::endl;
      return kOk;
    }
    // show
    rt::TuningDb db = read_existing(o->show);
    std::vector<const rt::TuningEntry*> es;
    for (const auto& e : db.entries) es.push_back(&e);
    std::sort(es.begin(), es.end(), [](const rt::TuningEntry* a, const rt::TuningEntry* b) {
      auto ka = std::make_tuple(a->kernel, a->device, a->backend, rt::format_key(a->key));
      auto kb = std::make_tuple(b->kernel, b->device, b->backend, rt::format_key(b->key));
      return ka != kb ? ka < kb : a->median_ms < b->median_ms;
    });
    std::string last, groups = "[";
    int ngroups = 0;
    for (const rt::TuningEntry* e : es) {
      std::string head = fmt::format("{} on {} ({}): {}", e->kernel, e->device, e->backend, rt::format_key(e->key));
      if (head != last) {
        say(common, (last.empty() ? "" : "\n") + head);
        say(common, fmt::format("  {:>10}  {:>9}  {}", "median ms", "GB/s", "config"));
        last = head;
        ++ngroups;
      }
      say(common, fmt::format("  {:>10.4g}  {:>9}  {}", e->median_ms, e->gbps ? fmt::format("{:.1f}", *e->gbps) : "-",
                              rt::format_config(e->config)));
      JsonObject j;
      j.str("kernel", e->kernel).str("device", e->device).str("backend", e->backend);
      j.str("key", rt::format_key(e->key)).str("config", rt::format_config(e->config)).number("median_ms", e->median_ms);
      if (e->gbps) j.number("gbps", *e->gbps);
      groups += (groups.size() > 1 ? ", " : "") + j.str();
    }
    std::string rejected = "[";
    if (!db.rejections.empty()) {
      std::vector<const rt::TuningRejection*> xs;
      for (const auto& x : db.rejections) xs.push_back(&x);
      std::sort(xs.begin(), xs.end(), [](auto* a, auto* b) { return order_key(*a) < order_key(*b); });
      say(common, fmt::format("{}rejected configs ({}; tilec autotune tries them again with --force):",
                              es.empty() ? "" : "\n", xs.size()));
      last.clear();
      for (const rt::TuningRejection* x : xs) {
        std::string head = fmt::format("{} on {} ({}): {}", x->kernel, x->device, x->backend, rt::format_key(x->key));
        if (head != last) say(common, "  " + head);
        last = head;
        std::string where = x->arch.empty() ? x->stage : x->stage + " " + x->arch;
        say(common, fmt::format("    {}  [{}] {}", rt::format_config(x->config), where, x->reason));
        JsonObject j;
        j.str("kernel", x->kernel).str("device", x->device).str("backend", x->backend);
        j.str("key", rt::format_key(x->key)).str("config", rt::format_config(x->config));
        j.str("stage", x->stage).str("arch", x->arch).str("reason", x->reason);
        rejected += (rejected.size() > 1 ? ", " : "") + j.str();
      }
    }
    if (es.empty() && db.rejections.empty()) say(common, fmt::format("{}: no entries", o->show));
    if (!o->svg.empty()) {
      if (es.empty()) throw UserError(fmt::format("--svg: {} has no entries to draw", o->show));
      std::vector<Heatmap> maps;
      for (const rt::TuningEntry* e : es) {
        std::string title = fmt::format("{} on {} ({}): {}", e->kernel, e->device, e->backend, rt::format_key(e->key));
        if (maps.empty() || maps.back().title != title) maps.push_back({title, {}});
        maps.back().entries.push_back(e);
      }
      std::ofstream f(o->svg, std::ios::binary | std::ios::trunc);
      f << heatmap_svg(maps, o->show);
      f.flush();
      if (!f) throw UserError(fmt::format("--svg {}: cannot write", o->svg));
      say(common, fmt::format("heatmaps of {} problem key(s) -> {}", maps.size(), o->svg));
    }
    if (common.json)
      std::cout << JsonObject()
                       .boolean("ok", true)
                       .integer("entries", int64_t(es.size()))
                       .integer("keys", ngroups)
                       .integer("rejected", int64_t(db.rejections.size()))
                       .raw("rejected_list", rejected + "]")
                       .raw("entry_list", groups + "]")
                       .str()
                << std::endl;
    return kOk;
  };
}

} // namespace tilec::cli
