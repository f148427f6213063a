// tilec autotune: enumerate a search space (autotune/space.h), compile the candidates in
// parallel, check each against the reference, time the survivors and merge the results
// into the tuning database (runtime/tuning_db.h) after every measured config.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>
#include <utility>
#include <unistd.h>

#include "autotune/space.h"
#include "codegen/compile.h"
#include "runtime/cuda.h"
#include "runtime/tuning_db.h"
#include "backends/module_builder.h"
#include "tools/commands.h"
#include "tools/json.h"
#include "tools/kernel_args.h"
#include "tools/progress.h"

namespace tilec::cli {

namespace fs = std::filesystem;

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_sigint(int) { g_interrupted = 1; }

struct AutotuneOptions {
  std::string kernel;
  std::string space;
  std::vector<std::vector<std::string>> shapes;
  std::string db = "tuning.toml";
  std::string backend = "auto";
  std::string arch;
  bool force = false;
  bool no_ptxas = false;
  std::string export_dir;
  unsigned jobs = 0;
  uint64_t seed = 1;
  std::string shard;                  // "I/N": this run's share of every key's candidates
  size_t shard_index = 0, shard_count = 1; // from `shard`: I - 1 and N
};

// "I/N" with 1 <= I <= N: this run measures candidates I-1, I-1+N, I-1+2N, ... of each key.
void parse_shard(AutotuneOptions& o) {
  if (o.shard.empty()) return;
  unsigned long i = 0, n = 0;
  char extra = 0;
  if (std::sscanf(o.shard.c_str(), "%lu/%lu%c", &i, &n, &extra) != 2 || n < 1 || i < 1 || i > n || n > 100000)
    throw UserError(fmt::format("--shard '{}': expected I/N with 1 <= I <= N (e.g. 2/8)", o.shard));
  if (!o.export_dir.empty())
    throw UserError("--shard with --export: a shard sees only its share of the candidates; merge the shards' "
                    "databases (tilec db merge) and export from a run over the merged database");
  o.shard_index = i - 1;
  o.shard_count = n;
}

// One candidate config of one problem key, as it goes through the stages.
struct Candidate {
  autotune::Values config;
  std::string rejected; // why it was dropped; empty while it survives
  std::optional<int> registers;
};


std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Builds every candidate's kernels on a pool of threads (the DSL builder's current kernel
// is thread_local) and, when ptxas is there, compiles them for the GPU and drops what ptxas
// rejects or what spills.
void compile_all(std::vector<Candidate>& cands, const kernels::KernelTemplate& t, const kernels::ParamMap& shape,
                 unsigned jobs, const std::optional<std::string>& arch, Progress& progress) {
  std::atomic<size_t> next{0};
  std::mutex mutex;
  auto work = [&] {
    for (size_t i; (i = next++) < cands.size();) {
      if (g_interrupted) return;
      Candidate& c = cands[i];
      try {
        for (const ir::Kernel& k : kernels::build_kernels(t, c.config, shape)) {
          if (!arch) continue;
          codegen::CompileOptions o = compile_options(c.config, *arch, "nvptx");
          o.large_buffers = kernels::large_buffers(t, c.config, shape, *k);
          codegen::CompiledKernel ck = codegen::compile(*k, o);
          if (!ck.ptxas) continue;
          c.registers = std::max(c.registers.value_or(0), ck.ptxas->registers);
          if (ck.ptxas->spill_stores + ck.ptxas->spill_loads > 0) {
            c.rejected = fmt::format("{} spills on {} ({} bytes stored, {} loaded)", k->name, *arch,
                                     ck.ptxas->spill_stores, ck.ptxas->spill_loads);
            break;
          }
        }
      } catch (const codegen::PtxasError& e) {
        c.rejected = "ptxas rejected it: " + first_line(e.what());
      } catch (const UserError& e) {
        c.rejected = first_line(e.what());
      }
      std::lock_guard lock(mutex);
      progress.step(autotune::format_values(c.config) + (c.rejected.empty() ? "" : "  dropped: " + c.rejected));
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < std::max(1u, jobs); ++i) pool.emplace_back(work);
  for (auto& th : pool) th.join();
}

JsonObject best_json(const rt::TuningEntry& e) {
  JsonObject cfg;
  for (const auto& [k, v] : e.config) cfg.integer(k, v);
  JsonObject j;
  j.str("key", rt::format_key(e.key)).raw("config", cfg.str()).number("median_ms", e.median_ms);
  j.maybe("gbps", e.gbps);
  return j;
}


} // namespace


Measurement measure_problem(const kernels::KernelTemplate& t, const std::string& path,
                            const kernels::ParamMap& params, const kernels::ParamMap& shape, kernels::Problem& p,
                            kernels::Launcher& launcher, int warmup, int repeats) {
  Measurement r;
  // Each measurement starts from the problem's own output values, not from what the last
  // config left there: a config that writes nothing must not pass on another's results.
  std::vector<interp::Buffer> initial;
  for (int o : p.outputs) initial.push_back(p.buffers[size_t(o)]);
  try {
    launcher.reset_stats();
    kernels::run_problem(t, path, params, shape, p, launcher);
    r.cmp = kernels::compare_outputs(p);
    if (!r.cmp.ok) {
      r.rejected = fmt::format("wrong result (max_abs_err {:.3g}; {})", r.cmp.max_abs_err, r.cmp.first_mismatch);
    } else {
      for (int i = 0; i < warmup; ++i) kernels::run_problem(t, path, params, shape, p, launcher);
      for (int i = 0; i < repeats; ++i) {
        launcher.reset_stats();
        auto t0 = std::chrono::steady_clock::now();
        kernels::run_problem(t, path, params, shape, p, launcher);
        double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        r.last = launcher.stats();
        r.times.push_back(r.last.launches > 0 && r.last.time_ms > 0 ? r.last.time_ms : wall);
      }
    }
  } catch (const UserError& e) {
    r.rejected = "failed to run: " + first_line(e.what());
  } catch (const rt::Error& e) {
    r.rejected = "failed to run: " + first_line(e.what());
  }
  for (size_t i = 0; i < initial.size(); ++i) p.buffers[size_t(p.outputs[i])] = std::move(initial[i]);
  return r;
}

namespace {

// The database path must name a file in an existing folder: checked before any work, so a
// bad -o leaves nothing behind (not even the lock file).
void check_db_path(const std::string& db) {
  if (db.empty()) throw UserError("-o: the database file name is empty");
  fs::path p(db), parent = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::error_code ec;
  if (fs::is_directory(p, ec)) throw UserError(fmt::format("-o {}: is a folder, not a database file", db));
  if (!fs::is_directory(parent, ec))
    throw UserError(fmt::format("-o {}: {} is not an existing folder", db, parent.string()));
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    throw UserError(fmt::format("-o {}: cannot write in {}: {}", db, parent.string(), std::strerror(errno)));
}

// Where the candidates are timed and for which GPU arch they are checked and exported.
struct Target {
  std::string backend, device, cc;
  std::optional<std::string> ptxas_arch;   // empty: no ptxas check
  std::vector<std::string> export_archs;   // the GPU arch, plus "host" off the GPU
};

Target resolve_target(const AutotuneOptions& o, std::unique_ptr<kernels::Launcher>& launcher) {
  Target tg;
  launcher = backend_launcher(o.backend, tg.backend);
  tg.device = rt::host_device_name(tg.backend);
  std::string arch = o.arch.empty() ? "sm_90" : o.arch;
  if (tg.backend == "cuda") {
    rt::Context ctx(0);
    tg.device = ctx.properties().name;
    tg.cc = fmt::format("{}.{}", ctx.properties().major, ctx.properties().minor);
    if (o.arch.empty()) arch = ctx.properties().arch();
  }
  tg.export_archs = {arch};
  if (tg.backend != "cuda") tg.export_archs.push_back("host");
  if (!o.no_ptxas && codegen::find_ptxas()) tg.ptxas_arch = arch;
  return tg;
}

// One problem key to tune: its --shape values and its problem (inputs and reference).
struct KeyToTune {
  kernels::ParamMap shape;
  rt::ProblemKey key;
  kernels::Problem problem;
};

// Every --shape set, with its problem made (and so checked) before anything is written.
std::vector<KeyToTune> make_keys(const kernels::KernelTemplate& t, const AutotuneOptions& o) {
  std::vector<KeyToTune> keys;
  kernels::ParamMap defaults = kernels::resolve_params(t.params, {}, "--set");
  for (const std::vector<std::string>& set : o.shapes) {
    KeyToTune k;
    k.shape = kernels::resolve_params(t.shape, set, "--shape");
    k.key = kernels::problem_key(t, k.shape);
    k.problem = kernels::make_problem(t, {defaults, k.shape, o.seed, {}, {}});
    keys.push_back(std::move(k));
  }
  return keys;
}

struct Counts {
  size_t candidates = 0, rejected = 0, measured = 0, skipped = 0;
};

// Enumerates the space for one key, compiles what the database lacks, checks and times each
// survivor, and merges each measured config into the database as soon as it is measured.
void tune_key(const Common& common, const kernels::KernelTemplate& t, const autotune::SearchSpace& space,
              const AutotuneOptions& o, const Target& tg, kernels::Launcher& launcher, KeyToTune& k,
              rt::TuningDb& db, Counts& n) {
  autotune::Enumeration en = autotune::enumerate(space, k.shape);
  say(common, fmt::format("{}: {} candidates of {} satisfy {}'s constraints", rt::format_key(k.key),
                          en.candidates.size(), space.size(), space.source));
  if (en.candidates.empty())
    throw UserError(fmt::format("{}: no candidate satisfies the constraints for {} (e.g. {}: {})", space.source,
                                rt::format_key(k.key), autotune::format_values(en.rejected.at(0).params),
                                en.rejected.at(0).reason));
  if (o.shard_count > 1) { // the same order on every machine, so the shards partition it
    std::vector<autotune::Values> mine;
    for (size_t i = o.shard_index; i < en.candidates.size(); i += o.shard_count) mine.push_back(en.candidates[i]);
    say(common, fmt::format("  shard {}/{}: {} of them", o.shard_index + 1, o.shard_count, mine.size()));
    en.candidates = std::move(mine);
  }
  n.candidates += en.candidates.size();
  rt::TuningEntry slot;
  slot.kernel = t.name;
  slot.device = tg.device;
  slot.compute_capability = tg.cc;
  slot.backend = tg.backend;
  slot.key = k.key;
  std::vector<Candidate> todo;
  size_t skipped_here = 0;
  for (const autotune::Values& v : en.candidates) {
    autotune::Values full;
    for (const auto& p : t.params) full[p.name] = p.value;
    for (const auto& [name, x] : v) full[name] = x;
    slot.config = rt::TunedConfig(full.begin(), full.end());
    if (!o.force && db.find(slot)) {
      ++skipped_here;
      continue;
    }
    todo.push_back({full, {}, {}});
  }
  n.skipped += skipped_here;
  if (skipped_here) say(common, fmt::format("  {} already in {} (use --force to measure again)", skipped_here, o.db));

  Progress compiling("compile", todo.size());
  compile_all(todo, t, k.shape, o.jobs ? o.jobs : std::max(1u, std::thread::hardware_concurrency()), tg.ptxas_arch,
              compiling);

  size_t survivors = 0;
  for (const Candidate& c : todo) survivors += c.rejected.empty();
  Progress measuring("measure", survivors);
  std::string warning;
  for (Candidate& c : todo) {
    if (g_interrupted) break;
    if (c.rejected.empty()) {
      Measurement r = measure_problem(t, "", c.config, k.shape, k.problem, launcher, space.warmup, space.repeats);
      c.rejected = r.rejected;
      if (c.rejected.empty()) {
        rt::TuningEntry e = slot;
        e.config = rt::TunedConfig(c.config.begin(), c.config.end());
        e.median_ms = median(r.times);
        e.min_ms = *std::min_element(r.times.begin(), r.times.end());
        e.max_ms = *std::max_element(r.times.begin(), r.times.end());
        e.repeats = int64_t(r.times.size());
        e.ideal_bytes = k.problem.ideal_bytes;
        if (e.median_ms > 0 && k.problem.ideal_bytes) e.gbps = double(*k.problem.ideal_bytes) / (e.median_ms * 1e6);
        e.bytes_loaded = r.last.bytes_loaded;
        e.bytes_stored = r.last.bytes_stored;
        e.unique_bytes = r.last.unique_bytes;
        e.max_abs_err = r.cmp.max_abs_err;
        rt::TuningDb one;
        one.entries.push_back(e);
        db = rt::merge_into_file(o.db, one, &warning); // after every config: ^C keeps what was measured
        if (!warning.empty()) measuring.note("tilec: warning: " + std::exchange(warning, ""));
        ++n.measured;
        measuring.step(fmt::format("{}  median {:.4f} ms", autotune::format_values(c.config), e.median_ms));
        continue;
      }
      measuring.step(autotune::format_values(c.config) + "  dropped: " + c.rejected);
    }
    ++n.rejected;
    say(common, fmt::format("  dropped {}: {}", autotune::format_values(c.config), c.rejected));
  }
}

// Compiles the winner of `key` for every export arch and module variant into o.export_dir;
// returns the manifests written.
std::vector<std::string> export_winner(const kernels::KernelTemplate& t, const rt::TuningEntry& best,
                                       const kernels::ParamMap& shape, const Target& tg, const std::string& dir) {
  std::vector<std::string> written;
  std::vector<kernels::ParamMap> variants = t.module_variants;
  if (variants.empty()) variants.emplace_back();
  kernels::ParamMap params(best.config.begin(), best.config.end());
  for (const std::string& arch : tg.export_archs)
    for (const kernels::ParamMap& variant : variants) {
      kernels::ParamMap s = shape;
      for (const auto& [name, v] : variant) s[name] = v;
      for (const rt::Manifest& m : backends::write_template_modules(t, params, s, arch, dir, true))
        written.push_back((m.dir / (m.ptx.empty() ? m.emulator : m.ptx).stem()).string() + ".toml");
    }
  return written;
}

int run_autotune(const Common& common, const AutotuneOptions& o) {
  const kernels::KernelTemplate& t = find_kernel(o.kernel);
  if (o.shapes.empty()) throw UserError("give at least one --shape NAME=VALUE... set to tune");

  autotune::SpaceNames names{t.name, {}, {}};
  for (const auto& p : t.params) names.params.push_back(p.name);
  for (const auto& p : t.shape) names.shape.push_back(p.name);
  autotune::SearchSpace space = autotune::load_space(o.space, names);

  // Everything is checked before the database is touched: bad input writes nothing.
  std::vector<KeyToTune> keys = make_keys(t, o);
  check_db_path(o.db);
  if (!o.export_dir.empty()) {
    std::error_code ec;
    if (fs::exists(o.export_dir, ec) && !fs::is_directory(o.export_dir, ec))
      throw UserError(fmt::format("--export {}: exists and is not a folder", o.export_dir));
  }
  std::unique_ptr<kernels::Launcher> launcher;
  Target tg = resolve_target(o, launcher);
  // Read only: nothing is written until a config is measured (a corrupt file is moved aside
  // then, by merge_into_file); bad input found later leaves no file behind.
  rt::TuningDb db;
  try {
    db = rt::read_tuning_db(o.db);
  } catch (const rt::TuningDbError& e) {
    std::cerr << "tilec: warning: " << e.what() << "; it will be moved aside when the first result is stored\n";
  }

  struct sigaction sa{}, old{};
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESETHAND; // a second ^C ends the process at once
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old);
  g_interrupted = 0;
  Counts n;
  for (KeyToTune& k : keys) {
    if (g_interrupted) break;
    tune_key(common, t, space, o, tg, *launcher, k, db, n);
  }
  sigaction(SIGINT, &old, nullptr);

  std::vector<rt::TuningEntry> best;
  std::vector<std::string> exported;
  for (const KeyToTune& k : keys) {
    auto sel = rt::select_config(db, t.name, tg.device, k.key, {});
    if (!sel || sel->rule != "exact") continue;
    best.push_back(sel->entry);
    if (!o.export_dir.empty() && !g_interrupted)
      for (std::string& m : export_winner(t, sel->entry, k.shape, tg, o.export_dir)) exported.push_back(std::move(m));
    say(common, fmt::format("best for {}: {}  median {:.4f} ms{}", rt::format_key(k.key),
                            rt::format_config(sel->entry.config), sel->entry.median_ms,
                            sel->entry.gbps ? fmt::format("  {:.3f} GB/s", *sel->entry.gbps) : ""));
  }
  say(common, fmt::format("{} candidates, {} rejected, {} measured, {} already measured; database {}", n.candidates,
                          n.rejected, n.measured, n.skipped, o.db));
  if (!o.export_dir.empty() && !g_interrupted) {
    // The database and the kernel's card travel with its modules: a deployment ships the folder.
    rt::write_kernel_card(kernels::kernel_card(t), o.export_dir);
    fs::path copy = fs::path(o.export_dir) / fs::path(o.db).filename();
    if (fs::absolute(copy).lexically_normal() != fs::absolute(o.db).lexically_normal())
      rt::merge_into_file(copy.string(), db);
    say(common, fmt::format("exported {} modules ({}) and the database to {}", exported.size(),
                            fmt::join(tg.export_archs, ", "), o.export_dir));
  }
  if (g_interrupted)
    std::cerr << fmt::format("tilec: interrupted; {} holds the {} configs measured so far\n", o.db, n.measured);
  if (common.json) {
    JsonObject j;
    j.str("kernel", t.name).str("backend", tg.backend).str("device", tg.device);
    j.integer("candidates", int64_t(n.candidates)).integer("rejected", int64_t(n.rejected));
    j.integer("measured", int64_t(n.measured)).integer("skipped", int64_t(n.skipped));
    if (best.empty()) j.null("best");
    else if (keys.size() == 1) j.raw("best", best_json(best[0]).str());
    else {
      std::string arr;
      for (const auto& e : best) arr += (arr.empty() ? "" : ", ") + best_json(e).str();
      j.raw("best", "[" + arr + "]");
    }
    j.str("db", o.db).boolean("interrupted", g_interrupted != 0);
    if (!o.export_dir.empty()) {
      std::string arr;
      for (const std::string& e : exported) arr += (arr.empty() ? "\"" : ", \"") + json_escape(e) + "\"";
      j.str("export_dir", o.export_dir).raw("exported", "[" + arr + "]");
    }
    std::cout << j.str() << std::endl;
  }
  return g_interrupted ? kFailed : kOk;
}

} // namespace

kernels::ParamMap tuned_params(const Common& common, const kernels::KernelTemplate& t, const std::string& db_path,
                               const kernels::ParamMap& shape, const std::string& backend,
                               const kernels::ParamMap& fallback) {
  std::string device = rt::host_device_name(backend);
  if (backend == "cuda") device = rt::Context(0).properties().name;
  rt::TuningDb db;
  try {
    db = rt::read_tuning_db(db_path);
  } catch (const rt::TuningDbError& e) {
    throw UserError(fmt::format("--tuned {}", e.what()));
  }
  rt::ProblemKey key = kernels::problem_key(t, shape);
  auto sel = rt::select_config(db, t.name, device, key, t.size_fields);
  if (!sel) {
    say(common, fmt::format("--tuned {}: nothing tuned for {} on {}; using the default config", db_path,
                            rt::format_key(key), device));
    return fallback;
  }
  say(common, "--tuned " + db_path + ": " + sel->note);
  kernels::ParamMap params = fallback;
  for (const auto& [k, v] : sel->entry.config) params[k] = v;
  return params;
}

Action add_autotune(CLI::App& app, Common& common) {
  auto o = std::make_shared<AutotuneOptions>();
  app.add_option("kernel", o->kernel, "kernel to tune (any with a reference; see tilec list)")->required();
  app.add_option("--space", o->space, "search space (TOML; configs/ holds examples)")->required();
  app.add_option("--shape", o->shapes, "problem sizes NAME=VALUE...; repeat --shape to tune several keys")
      ->expected(1, -1)
      ->required();
  app.add_option("-o,--db", o->db, "tuning database to create or merge into")->capture_default_str();
  app.add_option("--backend", o->backend, "where to time: auto, interpret, emulate or cuda")
      ->check(CLI::IsMember({"auto", "interpret", "emulate", "cuda"}))
      ->capture_default_str();
  app.add_flag("--force", o->force, "measure again (key, config) pairs the database already has");
  app.add_option("--arch", o->arch, "GPU arch for the ptxas check (default: the device's, else sm_90)");
  app.add_option("--export", o->export_dir,
                 "write the winning modules (GPU arch, plus the emulator's off the GPU) and a copy of the "
                 "database into this folder, for a host program to load with runtime/module_store.h");
  app.add_flag("--no-ptxas", o->no_ptxas, "skip the ptxas register/spill check");
  app.add_option("-j,--jobs", o->jobs, "compile threads (default: every core)")->check(CLI::Range(1u, 1024u));
  app.add_option("--seed", o->seed, "seed of the generated inputs")
      ->check(kSeedCheck)
      ->capture_default_str();
  app.add_option("--shard", o->shard,
                 "I/N: measure only every N-th candidate of each key, from the I-th (run N of these, e.g. as a "
                 "job array, each with its own -o, then tilec db merge)");
  return [&common, o]() -> int {
    parse_shard(*o);
    return run_autotune(common, *o);
  };
}

} // namespace tilec::cli
