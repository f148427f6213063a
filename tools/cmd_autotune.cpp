// tilec autotune: the command line of the tuner (autotune/tuner.h), which enumerates a search
// space, compiles and checks the candidates, times the survivors into the tuning database and
// exports the winners, or prepares a plan for tilec-measure (--prepare).
#include <fmt/format.h>

#include <csignal>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <unistd.h>

#include "autotune/tuner.h"
#include "codegen/compile.h"
#include "runtime/cuda.h"
#include "tools/commands.h"
#include "tools/json.h"
#include "tools/kernel_args.h"

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

JsonObject best_json(const rt::TuningEntry& e) {
  JsonObject cfg;
  for (const auto& [k, v] : e.config) cfg.integer(k, v);
  JsonObject j;
  j.str("key", rt::format_key(e.key)).raw("config", cfg.str()).number("median_ms", e.median_ms);
  j.maybe("gbps", e.gbps);
  return j;
}


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
autotune::Target resolve_target(const AutotuneOptions& o, std::unique_ptr<launch::Launcher>& launcher) {
  autotune::Target tg;
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

// The tuner's voice: lines on stdout (not with --json), warnings on stderr, ^C.
autotune::Reporter reporter(const Common& common) {
  autotune::Reporter r;
  r.say = [&common](const std::string& line) { say(common, line); };
  r.warn = [](const std::string& line) { std::cerr << program_name() << ": warning: " << line << "\n"; };
  r.interrupted = [] { return g_interrupted != 0; };
  return r;
}

int run_autotune(const Common& common, const AutotuneOptions& o) {
  const templates::KernelTemplate& t = find_kernel(o.kernel);
  if (o.shapes.empty()) throw UserError("give at least one --shape NAME=VALUE... set to tune");

  autotune::SearchSpace space = autotune::load_space(o.space, autotune::space_names(t));

  // Everything is checked before the database is touched: bad input writes nothing.
  std::vector<autotune::KeyToTune> keys =
      autotune::make_keys(t, o.shapes, o.seed, o.prepare_dir.empty() || !o.no_check);
  if (!o.prepare_dir.empty()) {
    SigintScope sigint;
    autotune::PrepareSettings ps{o.prepare_dir, o.space, o.arch.empty() ? "sm_90" : o.arch, o.seed, !o.no_check, o.jobs};
    measure::Plan plan = autotune::prepare(t, space, keys, ps, reporter(common));
    if (common.json) {
      JsonObject j;
      j.str("kernel", t.name).str("arch", plan.arch).str("plan", fs::path(o.prepare_dir).lexically_normal().string());
      j.integer("problems", int64_t(plan.problems.size())).integer("candidates", int64_t(plan.candidates.size()));
      j.integer("rejected", int64_t(plan.rejected.size())).boolean("checked", !o.no_check);
      std::cout << j.str() << std::endl;
    }
    return kOk;
  }
  check_db_path(o.db);
  if (!o.export_dir.empty()) {
    std::error_code ec;
    if (fs::exists(o.export_dir, ec) && !fs::is_directory(o.export_dir, ec))
      throw UserError(fmt::format("--export {}: exists and is not a folder", o.export_dir));
    // The kernel card the export writes: a declaration hosts cannot run fails now, not after
    // the whole search.
    (void)templates::kernel_card(t);
  }
  std::unique_ptr<launch::Launcher> launcher;
  autotune::Target tg = resolve_target(o, launcher);
  autotune::TuneSettings ts{o.db, o.force, o.shard, o.jobs, o.export_dir, program_name()};
  autotune::TuneResult n;
  {
    SigintScope sigint;
    n = autotune::tune(t, space, keys, ts, tg, *launcher, reporter(common));
  }
  if (n.interrupted)
    std::cerr << fmt::format("{}: interrupted; {} holds the {} configs measured so far\n", program_name(), o.db, n.measured);
  if (common.json) {
    auto arr = [](const std::vector<std::string>& items) {
      std::string a;
      for (const std::string& e : items) a += (a.empty() ? "" : ", ") + e;
      return "[" + a + "]";
    };
    JsonObject j;
    j.str("kernel", t.name).str("backend", tg.backend).str("device", tg.device);
    j.integer("candidates", int64_t(n.candidates)).integer("rejected", int64_t(n.rejected));
    j.integer("measured", int64_t(n.measured)).integer("skipped", int64_t(n.skipped));
    j.integer("rejected_before", int64_t(n.rejected_before)).integer("compiled", int64_t(n.compiled));
    std::vector<std::string> best, exported;
    for (const auto& e : n.best) best.push_back(best_json(e).str());
    for (const std::string& e : n.exported) exported.push_back("\"" + json_escape(e) + "\"");
    if (best.empty()) j.null("best");
    else if (keys.size() == 1) j.raw("best", best[0]);
    else j.raw("best", arr(best));
    j.str("db", o.db).boolean("interrupted", n.interrupted);
    std::vector<std::string> failed, reasons;
    for (const std::string& key : n.failed_keys) failed.push_back("\"" + json_escape(key) + "\"");
    for (const auto& [reason, count] : n.reasons)
      reasons.push_back(fmt::format("{{\"reason\": \"{}\", \"count\": {}}}", json_escape(reason), count));
    j.raw("failed_keys", arr(failed)).raw("rejections", arr(reasons));
    if (!o.export_dir.empty()) j.str("export_dir", o.export_dir).raw("exported", arr(exported));
    std::cout << j.str() << std::endl;
  }
  return n.interrupted || !n.failed_keys.empty() ? kFailed : kOk;
}

} // namespace

templates::ParamMap tuned_params(const Common& common, const templates::KernelTemplate& t, const std::string& db_path,
                               const templates::ParamMap& shape, const std::string& backend,
                               const templates::ParamMap& fallback) {
  std::string device = rt::host_device_name(backend);
  if (backend == "cuda") device = rt::Context(0).properties().name;
  std::string note;
  templates::ParamMap params = autotune::tuned_params(t, db_path, shape, device, fallback, note);
  say(common, "--tuned " + db_path + ": " + note);
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
  app.add_flag("--force", o->force,
               "compile and measure again (key, config) pairs the database already has, measured or rejected");
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
