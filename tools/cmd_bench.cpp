// tilec bench: times kernels on a backend, each checked against its reference first, as one
// table. For paged attention, the tuned config of each problem against the template's
// defaults (and, with --decompose, the seed's decomposition); for the other templates, the
// kernel at the given --set values on each --shape.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <set>

#include "runtime/cuda.h"
#include "runtime/tuning_db.h"
#include "kernels/paged_attention.h"
#include "tools/commands.h"
#include "tools/json.h"
#include "tools/kernel_args.h"

namespace tilec::cli {

namespace {

struct BenchOptions {
  std::string kernel;
  std::string db;
  std::vector<std::vector<std::string>> shapes;
  std::vector<std::string> sets; // --set, templates other than paged_attention
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
};

Timed timed(const Measurement& m, const std::string& config, int64_t ideal) {
  Timed t;
  t.config = config;
  t.failed = m.rejected;
  if (!m.rejected.empty()) return t;
  kernels::TimingStats st = kernels::summarize_times(m.times, 0);
  t.median_ms = st.median_ms, t.min_ms = st.min_ms, t.max_ms = st.max_ms;
  if (st.median_ms > 0) t.gbps = double(ideal) / (st.median_ms * 1e6);
  t.unique_bytes = m.last.unique_bytes;
  return t;
}

std::string ms_str(const Timed& t) { return t.median_ms ? fmt::format("{:.4f}", *t.median_ms) : "failed"; }

JsonObject timed_json(const Timed& t) {
  JsonObject j;
  j.str("config", t.config).maybe("median_ms", t.median_ms).maybe("min_ms", t.min_ms).maybe("max_ms", t.max_ms);
  j.maybe("gbps", t.gbps).maybe("unique_bytes", t.unique_bytes);
  if (!t.failed.empty()) j.str("failed", t.failed);
  return j;
}

std::string config_str(const kernels::PagedAttentionConfig& c) {
  return fmt::format("block_n={} head_group={} num_splits={} num_warps={}", c.block_n, c.head_group, c.num_splits,
                     c.num_warps);
}

// The --shape sets to measure: those given, else every key the database measured on this device.
std::vector<kernels::ParamMap> problems(const kernels::KernelTemplate& t, const BenchOptions& o,
                                          const rt::TuningDb& db, const std::string& device) {
  std::vector<kernels::ParamMap> out;
  for (const auto& set : o.shapes) out.push_back(kernels::resolve_params(t.shape, set, "--shape"));
  if (!out.empty()) return out;
  std::set<std::string> seen;
  for (const rt::TuningEntry& e : db.entries) {
    if (e.kernel != t.name || e.device != device || !seen.insert(rt::format_key(e.key)).second) continue;
    std::vector<std::string> set;
    for (const auto& [k, v] : e.key)
      set.push_back(k + "=" + (std::holds_alternative<int64_t>(v) ? std::to_string(std::get<int64_t>(v))
                                                                   : std::get<std::string>(v)));
    out.push_back(kernels::resolve_params(t.shape, set, fmt::format("{} key", o.db)));
  }
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

// Any template but paged_attention: its kernel at --set on each --shape (default sizes when none).
int bench_template(const Common& common, const kernels::KernelTemplate& t, const BenchOptions& o) {
  if (!o.db.empty()) throw UserError(fmt::format("--tuned applies to paged_attention only, not {}", t.name));
  if (o.decompose) throw UserError(fmt::format("--decompose applies to paged_attention only, not {}", t.name));
  kernels::ParamMap params = resolve_set(t, o.sets);
  std::vector<kernels::ParamMap> shapes;
  for (const auto& set : o.shapes) shapes.push_back(kernels::resolve_params(t.shape, set, "--shape"));
  if (shapes.empty()) shapes.push_back(kernels::resolve_params(t.shape, {}, "--shape"));
  std::string backend;
  std::unique_ptr<kernels::Launcher> launcher = backend_launcher(o.backend, backend);
  std::string device = rt::host_device_name(backend);
  if (backend == "cuda") device = rt::Context(0).properties().name;
  int num_warps = int(params.count("num_warps") ? params.at("num_warps") : 4);
  std::string config;
  for (const auto& [k, v] : params) config += fmt::format("{}{}={}", config.empty() ? "" : " ", k, v);

  std::vector<std::vector<std::string>> cells{{"problem", "config", "median ms", "min ms", "max ms"}};
  std::string rows;
  for (const kernels::ParamMap& shape : shapes) {
    std::string sizes;
    for (const auto& [k, v] : shape) sizes += fmt::format("{}{}={}", sizes.empty() ? "" : " ", k, v);
    std::cerr << fmt::format("bench {} {}\n", t.name, sizes);
    ir::Kernel k = t.build(params, shape);
    kernels::Problem p = t.make_problem(params, shape, o.seed);
    launcher->launch(k, num_warps, p.grid, p.interp_args());
    kernels::Comparison c = kernels::compare_outputs(p);
    if (!c.ok)
      throw rt::Error(fmt::format("{} {}: wrong result before timing (max_abs_err {:.3g}; {})", t.name, sizes,
                                  c.max_abs_err, c.first_mismatch));
    kernels::TimingStats st = launcher->time(k, num_warps, p.grid, p.interp_args(), o.warmup, o.repeats);
    cells.push_back({sizes, config, fmt::format("{:.4f}", st.median_ms), fmt::format("{:.4f}", st.min_ms),
                     fmt::format("{:.4f}", st.max_ms)});
    JsonObject j;
    j.str("shape", sizes).str("config", config).number("median_ms", st.median_ms).number("min_ms", st.min_ms);
    j.number("max_ms", st.max_ms).number("max_abs_err", c.max_abs_err);
    rows += (rows.empty() ? "" : ", ") + j.str();
  }
  if (common.json) {
    JsonObject j;
    j.boolean("ok", true).str("kernel", t.name).str("backend", backend).str("device", device);
    j.integer("warmup", o.warmup).integer("repeats", o.repeats).raw("rows", "[" + rows + "]");
    std::cout << j.str() << std::endl;
  } else {
    std::cout << header(t.name, device, backend, o) << "\n";
    print_table(cells);
  }
  return kOk;
}

int run_bench(const Common& common, const BenchOptions& o) {
  const kernels::KernelTemplate* t = kernels::find_template(o.kernel);
  if (!t) throw UserError(fmt::format("unknown kernel '{}' (see tilec list)", o.kernel));
  if (o.repeats < 1) throw UserError(fmt::format("--repeats {}: must be at least 1", o.repeats));
  if (o.warmup < 0) throw UserError(fmt::format("--warmup {}: must not be negative", o.warmup));
  if (t->name != "paged_attention") return bench_template(common, *t, o);
  if (!o.sets.empty())
    throw UserError("--set: paged_attention's configs come from --tuned (tuned) and the template (default)");
  if (o.db.empty() && o.shapes.empty()) throw UserError("give --tuned DB.toml, --shape NAME=VALUE..., or both");
  if (!o.db.empty() && !std::filesystem::exists(o.db)) throw UserError(fmt::format("--tuned {}: no such file", o.db));
  if (!o.db.empty() && std::filesystem::is_directory(o.db))
    throw UserError(fmt::format("--tuned {}: is a folder, not a tuning database", o.db));
  rt::TuningDb db;
  try {
    if (!o.db.empty()) db = rt::read_tuning_db(o.db);
  } catch (const rt::TuningDbError& e) {
    throw UserError(fmt::format("--tuned {}", e.what()));
  }

  std::string backend;
  std::unique_ptr<kernels::Launcher> launcher = backend_launcher(o.backend, backend);
  std::string device = rt::host_device_name(backend);
  if (backend == "cuda") device = rt::Context(0).properties().name;

  kernels::ParamMap defaults;
  for (const kernels::Param& p : t->params) defaults[p.name] = p.value;

  struct Row {
    rt::ProblemKey key;
    int64_t ideal_bytes = 0;
    std::string rule; // how the tuned config was chosen: exact, nearest, default
    Timed base, tuned;
    std::optional<Timed> decomposed;
  };
  std::vector<Row> rows;
  bool any_failed = false;
  for (const kernels::ParamMap& shape : problems(*t, o, db, device)) {
    Row row;
    row.key = problem_key(*t, shape);
    kernels::PagedAttentionShape ps = kernels::paged_attention_shape(shape);
    kernels::PagedAttentionInputs in = kernels::make_paged_attention_inputs(ps, o.seed, shape.at("ctx"));
    kernels::validate_paged_attention(in, false);
    interp::Buffer want = kernels::paged_attention_reference(in);
    row.ideal_bytes = kernels::paged_attention_ideal_bytes(in);

    kernels::PagedAttentionConfig base = kernels::paged_attention_config(defaults);
    base.head_group = base.head_group ? base.head_group : ps.group();
    auto sel = rt::select_config(db, t->name, device, row.key, rt::kSizeFields);
    kernels::ParamMap tuned_params = defaults;
    if (sel)
      for (const auto& [k, v] : sel->entry.config) tuned_params[k] = v;
    kernels::PagedAttentionConfig tuned = kernels::paged_attention_config(tuned_params);
    tuned.head_group = tuned.head_group ? tuned.head_group : ps.group();
    row.rule = sel ? sel->rule : "default";

    std::cerr << fmt::format("bench {}: default {}\n", rt::format_key(row.key), config_str(base));
    row.base = timed(measure_paged_attention(in, want, fused_run(base), *launcher, o.warmup, o.repeats), config_str(base),
                     row.ideal_bytes);
    if (!o.db.empty())
      std::cerr << fmt::format("bench {}: tuned ({}) {}\n", rt::format_key(row.key), row.rule, config_str(tuned));
    row.tuned = o.db.empty() ? row.base // nothing tuned to compare
                             : timed(measure_paged_attention(in, want, fused_run(tuned), *launcher, o.warmup,
                                                             o.repeats),
                                     config_str(tuned), row.ideal_bytes);
    if (o.decompose) {
      std::cerr << fmt::format("bench {}: decompose\n", rt::format_key(row.key));
      Measurement m = measure_paged_attention(
          in, want, [](const auto& i, auto& l) { return kernels::run_paged_attention_decomposed(i, l); }, *launcher,
          std::min(o.warmup, 1), o.repeats);
      row.decomposed = timed(m, "decompose", row.ideal_bytes);
    }
    any_failed = any_failed || !row.base.failed.empty() || !row.tuned.failed.empty() ||
                 (row.decomposed && !row.decomposed->failed.empty());
    rows.push_back(std::move(row));
  }

  // The table.
  std::vector<std::vector<std::string>> cells{{"problem", "default ms", "tuned ms", "speedup", "tuned GB/s",
                                                "tuned config (rule)"}};
  if (o.decompose) cells[0].insert(cells[0].begin() + 1, "decompose ms");
  for (const Row& r : rows) {
    std::string speedup = r.base.median_ms && r.tuned.median_ms && *r.tuned.median_ms > 0
                              ? fmt::format("{:.2f}x", *r.base.median_ms / *r.tuned.median_ms)
                              : "-";
    std::vector<std::string> line{rt::format_key(r.key), ms_str(r.base), ms_str(r.tuned), speedup,
                                  r.tuned.gbps ? fmt::format("{:.3f}", *r.tuned.gbps) : "-",
                                  fmt::format("{} ({})", r.tuned.config, r.rule)};
    if (o.decompose) line.insert(line.begin() + 1, ms_str(*r.decomposed));
    cells.push_back(std::move(line));
  }
  if (!common.json) {
    std::cout << header(t->name, device, backend, o) << "\n";
    print_table(cells);
    for (const Row& r : rows)
      for (const Timed* v : {&r.base, &r.tuned})
        if (!v->failed.empty()) std::cout << fmt::format("{} {}: {}\n", rt::format_key(r.key), v->config, v->failed);
  } else {
    std::string arr;
    for (const Row& r : rows) {
      JsonObject j;
      j.str("key", rt::format_key(r.key)).integer("ideal_bytes", r.ideal_bytes).str("rule", r.rule);
      j.raw("default", timed_json(r.base).str()).raw("tuned", timed_json(r.tuned).str());
      if (r.decomposed) j.raw("decompose", timed_json(*r.decomposed).str());
      if (r.base.median_ms && r.tuned.median_ms && *r.tuned.median_ms > 0)
        j.number("speedup", *r.base.median_ms / *r.tuned.median_ms);
      else
        j.null("speedup");
      arr += (arr.empty() ? "" : ", ") + j.str();
    }
    JsonObject j;
    j.boolean("ok", !any_failed).str("kernel", t->name).str("backend", backend).str("device", device);
    j.integer("warmup", o.warmup).integer("repeats", o.repeats).raw("rows", "[" + arr + "]");
    std::cout << j.str() << std::endl;
  }
  return any_failed ? kFailed : kOk;
}

} // namespace

Action add_bench(CLI::App& app, Common& common) {
  auto o = std::make_shared<BenchOptions>();
  app.add_option("kernel", o->kernel, "kernel to benchmark (see tilec list)")->required();
  app.add_option("--tuned", o->db, "paged_attention: tuning database written by tilec autotune");
  app.add_option("--set", o->sets, "other kernels: template parameters NAME=VALUE...")->expected(1, -1);
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
  app.add_flag("--decompose", o->decompose, "also time the seed's decomposition (its cost grows with capacity)");
  return [&common, o]() -> int { return run_bench(common, *o); };
}

} // namespace tilec::cli
