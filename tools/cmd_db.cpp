// tilec db merge / show: tuning databases (runtime/tuning_db.h) as files to combine and read.
// `merge` joins databases measured apart (shards of one search, machines of one fleet):
// where two measured the same (kernel, device, backend, key, config), the faster median
// wins and the conflict is reported; the output is sorted, so the same inputs in any order
// give the same file. `show` prints each problem key's measured configs, fastest first.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <tuple>

#include "ir/error.h"
#include "tools/commands.h"
#include "tools/json.h"

namespace tilec::cli {

namespace {

auto order_key(const rt::TuningEntry& e) {
  return std::make_tuple(e.kernel, e.device, e.compute_capability, e.backend, rt::format_key(e.key),
                         rt::format_config(e.config));
}

std::string slot_name(const rt::TuningEntry& e) {
  return fmt::format("{} on {} ({}) {} [{}]", e.kernel, e.device, e.backend, rt::format_key(e.key),
                     rt::format_config(e.config));
}

rt::TuningDb read_existing(const std::string& path) {
  if (!std::filesystem::exists(path)) throw UserError(fmt::format("{}: no such file", path));
  return rt::read_tuning_db(path);
}

} // namespace

Action add_db(CLI::App& app, Common& common) {
  app.require_subcommand(1, 1);
  struct Opts {
    std::vector<std::string> inputs;
    std::string out, show;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* merge = app.add_subcommand("merge", "merge tuning databases (shards, machines) into one");
  merge->add_option("databases", o->inputs, "the databases to merge (TOML)")->required();
  merge->add_option("-o,--out", o->out, "the merged database to write (replaced if it exists)")->required();
  merge->add_flag("--json", common.json, "print one JSON object on stdout as the last line");
  CLI::App* show = app.add_subcommand("show", "print a tuning database: each problem's configs, fastest first");
  show->add_option("database", o->show, "the database (TOML)")->required();
  show->add_flag("--json", common.json, "print one JSON object on stdout as the last line");

  return [&common, o, merge, show]() -> int {
    if (merge->parsed()) {
      rt::TuningDb out;
      std::vector<std::string> from; // which input each entry of `out` came from
      int conflicts = 0;
      std::string conflicts_json = "[";
      for (const std::string& path : o->inputs) {
        rt::TuningDb db = read_existing(path);
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
      rt::write_tuning_db(o->out, sorted);
      say(common, fmt::format("{} entries from {} database(s) -> {} ({} conflict(s), the faster kept)",
                              sorted.entries.size(), o->inputs.size(), o->out, conflicts));
      if (common.json)
        std::cout << JsonObject()
                         .boolean("ok", true)
                         .str("out", o->out)
                         .integer("entries", int64_t(sorted.entries.size()))
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
    if (es.empty()) say(common, fmt::format("{}: no entries", o->show));
    if (common.json)
      std::cout << JsonObject()
                       .boolean("ok", true)
                       .integer("entries", int64_t(es.size()))
                       .integer("keys", ngroups)
                       .raw("entry_list", groups + "]")
                       .str()
                << std::endl;
    return kOk;
  };
}

} // namespace tilec::cli
