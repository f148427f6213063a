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

#include "abi/version.h"
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

// While it lives, ^C sets g_interrupted (a second ^C ends the process at once); the previous
// handler comes back however the scope ends.
class SigintScope {
public:
  SigintScope() {
    struct sigaction sa{};
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_);
    g_interrupted = 0;
  }
  ~SigintScope() { sigaction(SIGINT, &old_, nullptr); }
  SigintScope(const SigintScope&) = delete;
  SigintScope& operator=(const SigintScope&) = delete;

private:
  struct sigaction old_{};
};

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
  std::string shard_text;             // "I/N": this run's share of every key's candidates
  measure::Shard shard;               // candidates I-1, I-1+N, I-1+2N, ... of each key
  std::string prepare_dir;            // --prepare: compile and check into a plan, time nothing
  bool no_check = false;              // --prepare without the emulator check
  bool db_given = false;
};

void parse_shard(AutotuneOptions& o) {
  o.shard = measure::parse_shard(o.shard_text);
  if (!o.shard.whole() && !o.export_dir.empty())
    throw UserError("--shard with --export: a shard sees only its share of the candidates; merge the shards' "
                    "databases (tilec db merge) and export from a run over the merged database");
  if (!o.prepare_dir.empty()) {
    if (!o.shard_text.empty())
      throw UserError("--shard with --prepare: a plan holds every candidate; shard its measurement instead "
                      "(tilec-measure PLAN --shard I/N)");
    if (!o.export_dir.empty()) throw UserError("--export with --prepare: a plan is measured before anything is exported");
    if (o.db_given) throw UserError("-o with --prepare: tilec-measure writes the database when it times the plan");
  }
  if (o.no_check && o.prepare_dir.empty()) throw UserError("--no-check applies to --prepare only");
}

// One candidate config of one problem key, as it goes through the stages.
struct Candidate {
  autotune::Values config;
  std::string rejected; // why it was dropped; empty while it survives
  std::optional<int> registers;
};


std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

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

// Every --shape set, with its problem made (and so checked) before anything is written;
// without `problems` only the sizes are checked (--prepare --no-check: the GPU machine makes
// each problem and its reference, and large ones take minutes here).
std::vector<KeyToTune> make_keys(const kernels::KernelTemplate& t, const AutotuneOptions& o, bool problems = true) {
  std::vector<KeyToTune> keys;
  for (const std::vector<std::string>& set : o.shapes) {
    KeyToTune k;
    k.shape = kernels::resolve_params(t.shape, set, "--shape");
    k.key = kernels::problem_key(t, k.shape);
    if (problems) k.problem = kernels::make_problem(t, {k.shape, o.seed, {}, {}});
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
  if (!o.shard.whole()) { // the same order on every machine, so the shards partition it
    std::vector<autotune::Values> mine;
    for (size_t i = 0; i < en.candidates.size(); ++i)
      if (o.shard.takes(i)) mine.push_back(en.candidates[i]);
    say(common, fmt::format("  shard {}/{}: {} of them", o.shard.index + 1, o.shard.count, mine.size()));
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
      Measurement r = measure_problem(t, "", c.config, k.problem, launcher, space.warmup, space.repeats);
      c.rejected = r.rejected;
      if (c.rejected.empty()) {
        rt::TuningEntry e = measure::tuning_entry(slot, c.config, r, k.problem);
        rt::TuningDb one;
        one.entries.push_back(e);
        db = rt::merge_into_file(o.db, one, &warning); // after every config: ^C keeps what was measured
        if (!warning.empty()) measuring.note(program_name() + ": warning: " + std::exchange(warning, ""));
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

// --prepare DIR: every candidate of every key compiled for the GPU arch (ptxas's rejections
// and spills dropped) and for the emulator, each checked against its reference on the
// emulator, into a plan that tilec-measure times where the GPU is (measure/plan.h). The plan
// is built in DIR.partial and renamed to DIR when whole.
int prepare_plan(const Common& common, const kernels::KernelTemplate& t, const autotune::SearchSpace& space,
                 const AutotuneOptions& o, std::vector<KeyToTune>& keys) {
  fs::path dir = fs::path(o.prepare_dir).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path(); // "plan/": the folder plan, and plan.partial beside it
  std::error_code ec;
  if (fs::exists(dir, ec) && (!fs::is_directory(dir, ec) || !fs::is_empty(dir, ec)))
    throw UserError(fmt::format("--prepare {}: exists and is not an empty folder; choose a new folder", dir.string()));
  const fs::path partial = dir.string() + ".partial";
  fs::remove_all(partial, ec);
  fs::create_directories(partial / "modules", ec);
  if (ec) throw UserError(fmt::format("--prepare {}: cannot create {}: {}", dir.string(), partial.string(), ec.message()));

  measure::Plan plan;
  plan.kernel = t.name;
  plan.arch = o.arch.empty() ? "sm_90" : o.arch;
  plan.compiler = "tilec " TILEC_VERSION;
  plan.created_at = rt::utc_now();
  plan.warmup = space.warmup;
  plan.repeats = space.repeats;
  fs::copy_file(o.space, partial / plan.space, fs::copy_options::overwrite_existing, ec);
  if (ec) throw UserError(fmt::format("--prepare: cannot copy {} into the plan: {}", o.space, ec.message()));
  if (!codegen::find_ptxas())
    std::cerr << program_name() << ": warning: no ptxas here: the plan carries PTX only (the driver compiles it), unchecked for "
                 "spills\n";

  struct Item {
    measure::PlanCandidate c;
    std::string rejected;
  };
  std::vector<Item> items;
  for (size_t p = 0; p < keys.size(); ++p) {
    plan.problems.push_back({keys[p].key, o.seed});
    autotune::Enumeration en = autotune::enumerate(space, keys[p].shape);
    say(common, fmt::format("{}: {} candidates of {} satisfy {}'s constraints", rt::format_key(keys[p].key),
                            en.candidates.size(), space.size(), space.source));
    if (en.candidates.empty())
      throw UserError(fmt::format("{}: no candidate satisfies the constraints for {} (e.g. {}: {})", space.source,
                                  rt::format_key(keys[p].key), autotune::format_values(en.rejected.at(0).params),
                                  en.rejected.at(0).reason));
    for (size_t i = 0; i < en.candidates.size(); ++i) {
      Item it;
      it.c.problem = p;
      it.c.index = i;
      for (const auto& param : t.params) it.c.config[param.name] = param.value;
      for (const auto& [name, x] : en.candidates[i]) it.c.config[name] = x;
      it.c.modules = fmt::format("p{}/c{}", p, i);
      items.push_back(std::move(it));
    }
  }

  // Compiled on every core: the GPU modules first (ptxas decides), then the emulator's.
  Progress compiling("compile", items.size());
  std::atomic<size_t> next{0}, done{0};
  std::mutex mutex;
  auto work = [&] {
    for (size_t i; (i = next++) < items.size();) {
      if (g_interrupted) return;
      Item& it = items[i];
      const kernels::ParamMap& shape = keys[it.c.problem].shape;
      try {
        for (const rt::Manifest& m : backends::write_template_modules(
                 t, it.c.config, shape, plan.arch, measure::candidate_dir(partial, plan.arch, it.c), false)) {
          if (!m.ptxas) continue;
          it.c.registers = std::max(it.c.registers.value_or(0), m.ptxas->registers);
          if (m.ptxas->spills > 0) {
            it.rejected = fmt::format("{} spills on {} ({} bytes)", m.kernel, plan.arch, m.ptxas->spills);
            break;
          }
        }
        if (it.rejected.empty())
          backends::write_template_modules(t, it.c.config, shape, "host", measure::candidate_dir(partial, "host", it.c),
                                           false);
      } catch (const codegen::PtxasError& e) {
        it.rejected = "ptxas rejected it: " + first_line(e.what());
      } catch (const UserError& e) {
        it.rejected = first_line(e.what());
      }
      std::lock_guard lock(mutex);
      compiling.set(++done, autotune::format_values(it.c.config) + (it.rejected.empty() ? "" : "  dropped: " + it.rejected));
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < (o.jobs ? o.jobs : std::max(1u, std::thread::hardware_concurrency())); ++i)
    pool.emplace_back(work);
  for (auto& th : pool) th.join();
  if (g_interrupted) throw UserError(fmt::format("interrupted; the unfinished plan is in {}", partial.string()));

  // Each survivor checked against its reference on the emulator, through the plan's own
  // emulator modules (what tilec-measure --backend emulate loads).
  size_t survivors = 0;
  for (const Item& it : items) survivors += it.rejected.empty();
  if (!o.no_check) {
    Progress checking("check", survivors);
    for (Item& it : items) {
      if (g_interrupted) throw UserError(fmt::format("interrupted; the unfinished plan is in {}", partial.string()));
      if (!it.rejected.empty()) continue;
      KeyToTune& k = keys[it.c.problem];
      auto launcher = measure::folder_launcher(measure::candidate_dir(partial, "host", it.c), false, "emulate");
      measure::Measurement m = measure_problem(t, "", it.c.config, k.problem, *launcher, 0, 0);
      it.rejected = m.rejected;
      it.c.checked = m.rejected.empty();
      if (it.c.checked) it.c.max_abs_err = m.cmp.max_abs_err;
      checking.step(autotune::format_values(it.c.config) + (it.rejected.empty() ? "  ok" : "  dropped: " + it.rejected));
    }
  }
  for (Item& it : items) {
    if (it.rejected.empty()) {
      plan.candidates.push_back(std::move(it.c));
      continue;
    }
    plan.rejected.push_back({it.c.problem, it.c.config, it.rejected});
    fs::remove_all(partial / "modules" / plan.arch / it.c.modules, ec);
    fs::remove_all(partial / "modules" / "host" / it.c.modules, ec);
  }
  if (plan.candidates.empty())
    throw UserError(fmt::format("--prepare: every candidate was dropped (first: {}); nothing to measure",
                                plan.rejected.front().reason));
  measure::write_plan(partial, plan);
  fs::rename(partial, dir, ec);
  if (ec) throw UserError(fmt::format("--prepare: cannot rename {} to {}: {}", partial.string(), dir.string(), ec.message()));
  say(common, fmt::format("plan {}: {} candidates for {} ({} dropped){}; time it where the GPU is with: "
                          "tilec-measure {} [--shard I/N] -o db.toml (for a kernel of your own, the program "
                          "tilec_add_measure builds)",
                          dir.string(), plan.candidates.size(), plan.arch, plan.rejected.size(),
                          o.no_check ? ", not checked on the emulator (--no-check)" : ", each checked on the emulator",
                          dir.string()));
  if (common.json) {
    JsonObject j;
    j.str("kernel", t.name).str("arch", plan.arch).str("plan", dir.string());
    j.integer("problems", int64_t(plan.problems.size())).integer("candidates", int64_t(plan.candidates.size()));
    j.integer("rejected", int64_t(plan.rejected.size())).boolean("checked", !o.no_check);
    std::cout << j.str() << std::endl;
  }
  return kOk;
}

int run_autotune(const Common& common, const AutotuneOptions& o) {
  const kernels::KernelTemplate& t = find_kernel(o.kernel);
  if (o.shapes.empty()) throw UserError("give at least one --shape NAME=VALUE... set to tune");

  autotune::SpaceNames names{t.name, {}, {}};
  for (const auto& p : t.params) names.params.push_back(p.name);
  for (const auto& p : t.shape) names.shape.push_back(p.name);
  autotune::SearchSpace space = autotune::load_space(o.space, names);

  // Everything is checked before the database is touched: bad input writes nothing.
  std::vector<KeyToTune> keys = make_keys(t, o, o.prepare_dir.empty() || !o.no_check);
  if (!o.prepare_dir.empty()) {
    SigintScope sigint;
    return prepare_plan(common, t, space, o, keys);
  }
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
    std::cerr << program_name() << ": warning: " << e.what() << "; it will be moved aside when the first result is stored\n";
  }

  Counts n;
  {
    SigintScope sigint;
    for (KeyToTune& k : keys) {
      if (g_interrupted) break;
      tune_key(common, t, space, o, tg, *launcher, k, db, n);
    }
  }

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
    rt::KernelCard card = kernels::kernel_card(t);
    card.compiler = program_name();
    rt::write_kernel_card(card, o.export_dir);
    fs::path copy = fs::path(o.export_dir) / fs::path(o.db).filename();
    // Merged in memory and written atomically without a lock file: the folder is what ships
    // (a deployment holds no tuning.toml.lock).
    if (fs::absolute(copy).lexically_normal() != fs::absolute(o.db).lexically_normal()) {
      rt::TuningDb shipped;
      try {
        shipped = rt::read_tuning_db(copy.string());
      } catch (const rt::TuningDbError& e) {
        std::cerr << program_name() << ": warning: " << e.what() << "; replaced by this run's database\n";
      }
      shipped.merge(db);
      rt::write_tuning_db(copy.string(), shipped);
    }
    say(common, fmt::format("exported {} modules ({}) and the database to {}", exported.size(),
                            fmt::join(tg.export_archs, ", "), o.export_dir));
  }
  if (g_interrupted)
    std::cerr << fmt::format("{}: interrupted; {} holds the {} configs measured so far\n", program_name(), o.db, n.measured);
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
  app.add_option("--shard", o->shard_text,
                 "I/N: measure only every N-th candidate of each key, from the I-th (run N of these, e.g. as a "
                 "job array, each with its own -o, then tilec db merge)");
  app.add_option("--prepare", o->prepare_dir,
                 "compile and check every candidate into this new folder, a plan that tilec-measure times on "
                 "the GPU machine (nothing is timed here; --arch is the GPU's)");
  app.add_flag("--no-check", o->no_check,
               "with --prepare: do not run each candidate against its reference on the emulator (large problems)");
  auto* db_opt = app.get_option("--db");
  return [&common, o, db_opt]() -> int {
    o->db_given = db_opt->count() > 0;
    parse_shard(*o);
    return run_autotune(common, *o);
  };
}

} // namespace tilec::cli
