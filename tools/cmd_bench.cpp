// tilec bench: times a kernel on a backend, each config checked against its reference first,
// as one table: for each problem, the default config (the template's, with --set on top) and,
// with --tuned, the config the database selects; with --also PATH, the kernel's other ways
// of computing it too (paged attention's decomposition).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <set>

#include "runtime/cuda.h"
#include "runtime/tuning_db.h"
#include "tools/commands.h"
#include "tools/json.h"
#include "tools/kernel_args.h"

namespace tilec::cli {

namespace {

struct BenchOptions {
  std::string kernel;
  std::string db;
  std::vector<std::vector<std::string>> shapes;
  std::vector<std::string> sets;  // --set: the default config
  std::vector<std::string> also;  // other run paths to time
  std::string backend = "auto";
  int warmup = 2, repeats = 10;
  uint64_t seed = 1;
  bool decompose = false;
};

// One timed variant of one problem.
struct Timed {
  std::string config; // "block_n=32 ..." or "decompose"
  std::optional<double> median_ms, min_ms, max_ms, gbps;
  std::optional<int64_t> unique_bytes;
  std::string failed; // why it has no time
  std::string traffic; // its check run moved more than the traffic budget allows (a warning)
};

Timed timed(const Measurement& m, const std::string& config, int64_t ideal) {
  Timed t;
  t.config = config;
  t.failed = m.rejected;
  t.traffic = m.traffic_error;
  if (!t.traffic.empty()) std::cerr << program_name() << ": warning: " << config << ": " << t.traffic << "\n";
  if (!m.rejected.empty()) return t;
  launch::TimingStats st = launch::summarize_times(m.times, 0);
  t.median_ms = st.median_ms, t.min_ms = st.min_ms, t.max_ms = st.max_ms;
  if (st.median_ms > 0 && ideal > 0) t.gbps = double(ideal) / (st.median_ms * 1e6);
  t.unique_bytes = m.last.unique_bytes;
  return t;
}

std::string ms_str(const Timed& t) { return t.median_ms ? fmt::format("{:.4f}", *t.median_ms) : "failed"; }

JsonObject timed_json(const Timed& t) {
  JsonObject j;
  j.str("config", t.config).maybe("median_ms", t.median_ms).maybe("min_ms", t.min_ms).maybe("max_ms", t.max_ms);
  j.maybe("gbps", t.gbps).maybe("unique_bytes", t.unique_bytes);
  if (!t.failed.empty()) j.str("failed", t.failed);
  if (!t.traffic.empty()) j.str("traffic_error", t.traffic);
  return j;
}

std::string config_str(const templates::ParamMap& params) {
  std::string out;
  for (const auto& [k, v] : params) out += fmt::format("{}{}={}", out.empty() ? "" : " ", k, v);
  return out;
}

// The --shape sets to measure: those given, else every key the database measured on this device.
std::vector<templates::ParamMap> problems(const templates::KernelTemplate& t, const BenchOptions& o,
                                          const rt::TuningDb& db, const std::string& device) {
  std::vector<templates::ParamMap> out;
  for (const auto& set : o.shapes) out.push_back(templates::resolve_params(t.shape, set, "--shape"));
  if (!out.empty()) return out;
  std::set<std::string> seen;
  for (const rt::TuningEntry& e : db.entries) {
    if (e.kernel != t.name || e.device != device || !seen.insert(rt::format_key(e.key)).second) continue;
    std::vector<std::string> set;
    for (const auto& [k, v] : e.key)
      set.push_back(k + "=" + (std::holds_alternative<int64_t>(v) ? std::to_string(std::get<int64_t>(v))
                                                                   : std::get<std::string>(v)));
    out.push_back(templates::resolve_params(t.shape, set, fmt::format("{} key", o.db)));
  }
  if (out.empty() && o.db.empty()) out.push_back(templates::resolve_params(t.shape, {}, "--shape"));
  if (out.empty())
    throw UserError(fmt::format("{} has no {} entries for {}; give --shape NAME=VALUE... to benchmark", o.db,
                                t.name, device));
  return out;
}

// Prints `cells` (a header row, then one row per problem) as aligned columns.
void print_table(const std::vector<std::vector<std::string>>& cells) {
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& line : cells)
    for (size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  for (size_t i = 0; i < cells.size(); ++i) {
    std::string out;
    for (size_t c = 0; c < cells[i].size(); ++c)
      out += fmt::format("{:<{}}{}", cells[i][c], c + 1 < cells[i].size() ? width[c] : 0,
                         c + 1 < cells[i].size() ? "  " : "");
    std::cout << out << "\n";
    if (i == 0) std::cout << std::string(out.size(), '-') << "\n";
  }
}

std::string header(const std::string& kernel, const std::string& device, const std::string& backend,
                   const BenchOptions& o) {
  return fmt::format("{} on {} ({}), median of {} after {} warm-up{}", kernel, device, backend, o.repeats, o.warmup,
                     backend == "cuda" ? "" : "; CPU timings, not GPU ones");
}

int run_bench(const Common& common, const BenchOptions& o) {
  const templates::KernelTemplate& t = find_kernel(o.kernel);
  if (o.repeats < 1) throw UserError(fmt::format("--repeats {}: must be at least 1", o.repeats));
  if (o.warmup < 0) throw UserError(fmt::format("--warmup {}: must not be negative", o.warmup));
  std::vector<std::string> also = o.also;
  if (o.decompose) also.push_back("decompose");
  for (const std::string& path : also)
    if (std::none_of(t.paths.begin() + (t.paths.empty() ? 0 : 1), t.paths.end(),
                     [&](const templates::RunPath& r) { return r.name == path; }))
      throw UserError(fmt::format("--also {}: {} has no other path of that name{}", path, t.name,
                                  t.paths.size() > 1 ? fmt::format(" (its paths: {})", t.paths[1].name) : ""));
  if (!o.db.empty() && !std::filesystem::exists(o.db)) throw UserError(fmt::format("--tuned {}: no such file", o.db));
  if (!o.db.empty() && std::filesystem::is_directory(o.db))
    throw UserError(fmt::format("--tuned {}: is a folder, not a tuning database", o.db));
  templates::ParamMap defaults = resolve_set(t, o.sets);
  rt::TuningDb db;
  try {
    if (!o.db.empty()) db = rt::read_tuning_db(o.db);
  } catch (const rt::TuningDbError& e) {
    throw UserError(fmt::format("--tuned {}", e.what()));
  }

  std::string backend;
  std::unique_ptr<launch::Launcher> launcher = backend_launcher(o.backend, backend);
  std::string device = rt::host_device_name(backend);
  if (backend == "cuda") device = rt::Context(0).properties().name;

  struct Row {
    rt::ProblemKey key;
    std::optional<int64_t> ideal_bytes;
    std::string rule; // how the tuned config was chosen: exact, nearest, default
    Timed base, tuned;
    std::vector<Timed> others; // the --also paths
  };
  std::vector<Row> rows;
  bool any_failed = false;
  for (const templates::ParamMap& shape : problems(t, o, db, device)) {
    templates::build_kernels(t, defaults, shape); // a bad --set is bad input, not a failed config
    Row row;
    row.key = templates::problem_key(t, shape);
    templates::Problem p = templates::make_problem(t, {shape, o.seed, {}, {}});
    row.ideal_bytes = p.ideal_bytes;
    int64_t ideal = p.ideal_bytes.value_or(0);
    auto sel = rt::select_config(db, t.name, device, row.key, t.size_fields, t.size_buckets);
    templates::ParamMap tuned = defaults;
    if (sel)
      for (const auto& [k, v] : sel->entry.config) tuned[k] = v;
    row.rule = sel ? sel->rule : "default";

    std::cerr << fmt::format("bench {}: default {}\n", rt::format_key(row.key), config_str(defaults));
    row.base = timed(measure_problem(t, "", defaults, p, *launcher, o.warmup, o.repeats), config_str(defaults),
                     ideal);
    if (!o.db.empty())
      std::cerr << fmt::format("bench {}: tuned ({}) {}\n", rt::format_key(row.key), row.rule, config_str(tuned));
    row.tuned = o.db.empty() ? row.base // nothing tuned to compare
                             : timed(measure_problem(t, "", tuned, p, *launcher, o.warmup, o.repeats),
                                     config_str(tuned), ideal);
    for (const std::string& path : also) {
      std::cerr << fmt::format("bench {}: {}\n", rt::format_key(row.key), path);
      row.others.push_back(
          timed(measure_problem(t, path, defaults, p, *launcher, std::min(o.warmup, 1), o.repeats), path, ideal));
    }
    any_failed = any_failed || !row.base.failed.empty() || !row.tuned.failed.empty();
    for (const Timed& x : row.others) any_failed = any_failed || !x.failed.empty();
    rows.push_back(std::move(row));
  }

  // The table.
  std::vector<std::vector<std::string>> cells{{"problem", "default ms", "tuned ms", "speedup", "tuned GB/s",
                                                "tuned config (rule)"}};
  for (size_t i = 0; i < also.size(); ++i) cells[0].insert(cells[0].begin() + 1 + long(i), also[i] + " ms");
  for (const Row& r : rows) {
    std::string speedup = r.base.median_ms && r.tuned.median_ms && *r.tuned.median_ms > 0
                              ? fmt::format("{:.2f}x", *r.base.median_ms / *r.tuned.median_ms)
                              : "-";
    std::vector<std::string> line{rt::format_key(r.key), ms_str(r.base), ms_str(r.tuned), speedup,
                                  r.tuned.gbps ? fmt::format("{:.3f}", *r.tuned.gbps) : "-",
                                  fmt::format("{} ({})", r.tuned.config, r.rule)};
    for (size_t i = 0; i < r.others.size(); ++i) line.insert(line.begin() + 1 + long(i), ms_str(r.others[i]));
    cells.push_back(std::move(line));
  }
  if (!common.json) {
    std::cout << header(t.name, device, backend, o) << "\n";
    print_table(cells);
    for (const Row& r : rows) {
      std::vector<const Timed*> all{&r.base, &r.tuned};
      for (const Timed& x : r.others) all.push_back(&x);
      for (const Timed* v : all)
        if (!v->failed.empty()) std::cout << fmt::format("{} {}: {}\n", rt::format_key(r.key), v->config, v->failed);
    }
  } else {
    std::string arr;
    for (const Row& r : rows) {
      JsonObject j;
      j.str("key", rt::format_key(r.key)).maybe("ideal_bytes", r.ideal_bytes).str("rule", r.rule);
      j.raw("default", timed_json(r.base).str()).raw("tuned", timed_json(r.tuned).str());
      for (size_t i = 0; i < r.others.size(); ++i) j.raw(also[i], timed_json(r.others[i]).str());
      if (r.base.median_ms && r.tuned.median_ms && *r.tuned.median_ms > 0)
        j.number("speedup", *r.base.median_ms / *r.tuned.median_ms);
      else
        j.null("speedup");
      arr += (arr.empty() ? "" : ", ") + j.str();
    }
    JsonObject j;
    j.boolean("ok", !any_failed).str("kernel", t.name).str("backend", backend).str("device", device);
    j.integer("warmup", o.warmup).integer("repeats", o.repeats).raw("rows", "[" + arr + "]");
    std::cout << j.str() << std::endl;
  }
  return any_failed ? kFailed : kOk;
}

} // namespace

Action add_bench(CLI::App& app, Common& common) {
  auto o = std::make_shared<BenchOptions>();
  app.add_option("kernel", o->kernel, "kernel to benchmark (see tilec list)")->required();
  app.add_option("--tuned", o->db, "tuning database written by tilec autotune: time its config beside the default");
  app.add_option("--set", o->sets, "parameters NAME=VALUE... of the default config (else the template's)")
      ->expected(1, -1);
  app.add_option("--also", o->also, "also time this other path of the kernel (see tilec list)");
  app.add_option("--shape", o->shapes,
                 "problem sizes NAME=VALUE...; repeat for several problems (default: every key in the database "
                 "measured on this device)")
      ->expected(1, -1);
  app.add_option("--backend", o->backend, "where to run: auto, interpret, emulate or cuda")
      ->check(CLI::IsMember({"auto", "interpret", "emulate", "cuda"}))
      ->capture_default_str();
  app.add_option("--warmup", o->warmup, "untimed runs before timing")->capture_default_str();
  app.add_option("--repeats", o->repeats, "timed runs (the table shows their median)")->capture_default_str();
  app.add_option("--seed", o->seed, "seed of the generated inputs")->check(kSeedCheck)->capture_default_str();
  app.add_flag("--decompose", o->decompose, "the same as --also decompose");
  return [&common, o]() -> int { return run_bench(common, *o); };
}

} // namespace tilec::cli
