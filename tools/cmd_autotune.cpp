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
#include "kernels/paged_attention.h"
#include "tools/commands.h"
#include "tools/json.h"
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
};

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

// Builds every candidate's kernel on a pool of threads (the DSL builder's current kernel
// is thread_local) and, when ptxas is there, compiles it for the GPU and drops what ptxas
// rejects or what spills.
void compile_all(std::vector<Candidate>& cands, const kernels::PagedAttentionShape& shape, unsigned jobs,
                 const std::optional<std::string>& arch, Progress& progress) {
  std::atomic<size_t> next{0};
  std::mutex mutex;
  auto work = [&] {
    for (size_t i; (i = next++) < cands.size();) {
      if (g_interrupted) return;
      Candidate& c = cands[i];
      kernels::PagedAttentionConfig cfg = kernels::paged_attention_config(c.config);
      try {
        ir::Kernel k = kernels::paged_attention_fused_kernel(shape, cfg);
        if (arch) {
          codegen::CompileOptions o;
          o.arch = *arch;
          o.num_warps = int(cfg.num_warps);
          o.target = codegen::Target::nvptx;
          codegen::CompiledKernel ck = codegen::compile(*k, o);
          if (ck.ptxas) {
            c.registers = ck.ptxas->registers;
            int spills = ck.ptxas->spill_stores + ck.ptxas->spill_loads;
            if (spills > 0)
              c.rejected = fmt::format("spills on {} ({} bytes stored, {} loaded)", *arch, ck.ptxas->spill_stores,
                                       ck.ptxas->spill_loads);
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
  for (unsigned t = 0; t < std::max(1u, jobs); ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
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

// The problem key stored in the database: the --shape values, choices by name.
rt::ProblemKey problem_key(const kernels::KernelTemplate& t, const kernels::ParamMap& shape) {
  rt::ProblemKey key;
  for (const kernels::Param& p : t.shape) {
    int64_t v = shape.at(p.name);
    if (p.choices.empty()) key[p.name] = v;
    else key[p.name] = p.value_str(v);
  }
  return key;
}

PagedAttentionRun fused_run(const kernels::PagedAttentionConfig& cfg) {
  return [cfg](const kernels::PagedAttentionInputs& in, kernels::Launcher& l) {
    return kernels::run_paged_attention_fused(in, cfg, l);
  };
}

Measurement measure_paged_attention(const kernels::PagedAttentionInputs& in, const interp::Buffer& want,
                                    const PagedAttentionRun& run, kernels::Launcher& launcher, int warmup,
                                    int repeats) {
  // The tolerances of `tilec run`.
  const ir::DType dt = in.shape.dtype;
  Measurement r;
  try {
    kernels::Problem p;
    launcher.reset_stats();
    p.outputs = {p.add_buffer(run(in, launcher))};
    p.expected = {want};
    p.atol = dt == ir::DType::f32 ? 1e-5 : dt == ir::DType::f16 ? 4e-3 : 3e-2;
    p.rtol = dt == ir::DType::f32 ? 1e-4 : 1e-2;
    r.cmp = kernels::compare_outputs(p);
    if (!r.cmp.ok) {
      r.rejected = fmt::format("wrong result (max_abs_err {:.3g}; {})", r.cmp.max_abs_err, r.cmp.first_mismatch);
      return r;
    }
    for (int i = 0; i < warmup; ++i) run(in, launcher);
    for (int i = 0; i < repeats; ++i) {
      launcher.reset_stats();
      auto t0 = std::chrono::steady_clock::now();
      run(in, launcher);
      double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      r.last = launcher.stats();
      r.times.push_back(r.last.launches > 0 && r.last.time_ms > 0 ? r.last.time_ms : wall);
    }
  } catch (const UserError& e) {
    r.rejected = "failed to run: " + first_line(e.what());
  } catch (const rt::Error& e) {
    r.rejected = "failed to run: " + first_line(e.what());
  }
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

int run_autotune(const Common& common, const AutotuneOptions& o) {
  const kernels::KernelTemplate* t = kernels::find_template(o.kernel);
  if (!t) throw UserError(fmt::format("unknown kernel '{}' (see tilec list)", o.kernel));
  if (t->name != "paged_attention")
    throw UserError(fmt::format("autotune supports paged_attention; '{}' has no tuning harness", o.kernel));
  if (o.shapes.empty()) throw UserError("give at least one --shape NAME=VALUE... set to tune");

  autotune::SpaceNames names{t->name, {}, {}};
  for (const auto& p : t->params) names.params.push_back(p.name);
  for (const auto& p : t->shape) names.shape.push_back(p.name);
  autotune::SearchSpace space = autotune::load_space(o.space, names);

  std::string backend;
  std::unique_ptr<kernels::Launcher> launcher = backend_launcher(o.backend, backend);
  std::string device = rt::host_device_name(backend), cc;
  std::optional<std::string> arch = o.arch.empty() ? std::optional<std::string>("sm_90") : o.arch;
  if (backend == "cuda") {
    rt::Context ctx(0);
    device = ctx.properties().name;
    cc = fmt::format("{}.{}", ctx.properties().major, ctx.properties().minor);
    if (o.arch.empty()) arch = ctx.properties().arch();
  }
  // Exported modules: for the GPU arch, and for the emulator when not tuning on a GPU.
  std::vector<std::string> export_archs{*arch};
  if (backend != "cuda") export_archs.push_back("host");
  if (o.no_ptxas || !codegen::find_ptxas()) arch.reset();
  unsigned jobs = o.jobs ? o.jobs : std::max(1u, std::thread::hardware_concurrency());

  // Reading through merge_into_file moves a corrupt database aside before tuning starts.
  std::string warning;
  // Every --shape set is checked before the database is touched: bad input writes nothing.
  std::vector<kernels::ParamMap> shapes;
  for (const std::vector<std::string>& set : o.shapes) {
    shapes.push_back(kernels::resolve_params(t->shape, set, "--shape"));
    kernels::validate_paged_attention(
        kernels::make_paged_attention_inputs(kernels::paged_attention_shape(shapes.back()), o.seed,
                                               shapes.back().at("ctx")),
        false);
  }
  check_db_path(o.db);
  if (!o.export_dir.empty()) {
    std::error_code ec;
    if (fs::exists(o.export_dir, ec) && !fs::is_directory(o.export_dir, ec))
      throw UserError(fmt::format("--export {}: exists and is not a folder", o.export_dir));
  }
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

  size_t n_candidates = 0, n_rejected = 0, n_measured = 0, n_skipped = 0;
  std::vector<rt::ProblemKey> keys;
  std::vector<kernels::ParamMap> key_shapes; // the --shape values of each key
  for (const kernels::ParamMap& shape : shapes) {
    if (g_interrupted) break;
    kernels::PagedAttentionShape ps = kernels::paged_attention_shape(shape);
    rt::ProblemKey key = problem_key(*t, shape);
    keys.push_back(key);
    key_shapes.push_back(shape);
    autotune::Enumeration en = autotune::enumerate(space, shape);
    say(common, fmt::format("{}: {} candidates of {} satisfy {}'s constraints", rt::format_key(key),
                            en.candidates.size(), space.size(), space.source));
    n_candidates += en.candidates.size();
    if (en.candidates.empty())
      throw UserError(fmt::format("{}: no candidate satisfies the constraints for {} (e.g. {}: {})", space.source,
                                  rt::format_key(key), autotune::format_values(en.rejected.at(0).params),
                                  en.rejected.at(0).reason));

    rt::TuningEntry slot;
    slot.kernel = t->name;
    slot.device = device;
    slot.compute_capability = cc;
    slot.backend = backend;
    slot.key = key;
    std::vector<Candidate> todo;
    size_t skipped_here = 0;
    for (const autotune::Values& v : en.candidates) {
      autotune::Values full;
      for (const auto& p : t->params) full[p.name] = p.value;
      for (const auto& [k, x] : v) full[k] = x;
      slot.config = rt::TunedConfig(full.begin(), full.end());
      if (!o.force && db.find(slot)) {
        ++skipped_here;
        continue;
      }
      todo.push_back({full, {}, {}});
    }
    n_skipped += skipped_here;
    if (skipped_here)
      say(common, fmt::format("  {} already in {} (use --force to measure again)", skipped_here, o.db));

    Progress compiling("compile", todo.size());
    compile_all(todo, ps, jobs, arch, compiling);

    kernels::PagedAttentionInputs in = kernels::make_paged_attention_inputs(ps, o.seed, shape.at("ctx"));
    kernels::validate_paged_attention(in, false);
    interp::Buffer want = kernels::paged_attention_reference(in);
    const int64_t ideal = kernels::paged_attention_ideal_bytes(in);

    size_t survivors = 0;
    for (const Candidate& c : todo) survivors += c.rejected.empty();
    Progress measuring("measure", survivors);
    for (Candidate& c : todo) {
      if (g_interrupted) break;
      if (!c.rejected.empty()) {
        ++n_rejected;
        say(common, fmt::format("  dropped {}: {}", autotune::format_values(c.config), c.rejected));
        continue;
      }
      Measurement r = measure_paged_attention(in, want, fused_run(kernels::paged_attention_config(c.config)),
                                              *launcher, space.warmup, space.repeats);
      c.rejected = r.rejected;
      if (!c.rejected.empty()) {
        ++n_rejected;
        measuring.step(autotune::format_values(c.config) + "  dropped: " + c.rejected);
        say(common, fmt::format("  dropped {}: {}", autotune::format_values(c.config), c.rejected));
        continue;
      }
      const std::vector<double>& times = r.times;
      const kernels::LaunchStats& last = r.last;
      const kernels::Comparison& cmp = r.cmp;
      rt::TuningEntry e = slot;
      e.config = rt::TunedConfig(c.config.begin(), c.config.end());
      e.median_ms = median(times);
      e.min_ms = *std::min_element(times.begin(), times.end());
      e.max_ms = *std::max_element(times.begin(), times.end());
      e.repeats = int64_t(times.size());
      e.ideal_bytes = ideal;
      if (e.median_ms > 0) e.gbps = double(ideal) / (e.median_ms * 1e6);
      e.bytes_loaded = last.bytes_loaded;
      e.bytes_stored = last.bytes_stored;
      e.unique_bytes = last.unique_bytes;
      e.max_abs_err = cmp.max_abs_err;
      rt::TuningDb one;
      one.entries.push_back(e);
      db = rt::merge_into_file(o.db, one, &warning); // after every config: ^C keeps what was measured
      if (!warning.empty()) measuring.note("tilec: warning: " + std::exchange(warning, ""));
      ++n_measured;
      measuring.step(fmt::format("{}  median {:.4f} ms", autotune::format_values(c.config), e.median_ms));
    }
  }
  sigaction(SIGINT, &old, nullptr);

  std::vector<rt::TuningEntry> best;
  std::vector<std::string> exported;
  for (size_t i = 0; i < keys.size(); ++i) {
    const rt::ProblemKey& key = keys[i];
    auto sel = rt::select_config(db, t->name, device, key);
    if (sel && sel->rule == "exact") {
      best.push_back(sel->entry);
      if (!o.export_dir.empty() && !g_interrupted)
        for (const std::string& a : export_archs)
          for (int64_t softcap : {0, 1}) { // the kernel is specialized on whether a softcap applies
            kernels::ParamMap params(sel->entry.config.begin(), sel->entry.config.end());
            kernels::ParamMap shape = key_shapes[i];
            shape["softcap"] = softcap;
            for (const rt::Manifest& m : backends::write_template_modules(*t, params, shape, a, o.export_dir, true))
              exported.push_back((m.dir / (m.ptx.empty() ? m.emulator : m.ptx).stem()).string() + ".toml");
          }
      say(common, fmt::format("best for {}: {}  median {:.4f} ms{}", rt::format_key(key),
                              rt::format_config(sel->entry.config), sel->entry.median_ms,
                              sel->entry.gbps ? fmt::format("  {:.3f} GB/s", *sel->entry.gbps) : ""));
    }
  }
  say(common, fmt::format("{} candidates, {} rejected, {} measured, {} already measured; database {}", n_candidates,
                          n_rejected, n_measured, n_skipped, o.db));
  if (!o.export_dir.empty() && !g_interrupted) {
    // The database travels with its modules: a deployment ships the folder.
    fs::path copy = fs::path(o.export_dir) / fs::path(o.db).filename();
    if (fs::absolute(copy).lexically_normal() != fs::absolute(o.db).lexically_normal())
      rt::merge_into_file(copy.string(), db);
    say(common, fmt::format("exported {} modules ({}) and the database to {}", exported.size(),
                            fmt::join(export_archs, ", "), o.export_dir));
  }
  if (g_interrupted) std::cerr << fmt::format("tilec: interrupted; {} holds the {} configs measured so far\n", o.db, n_measured);
  if (common.json) {
    JsonObject j;
    j.str("kernel", t->name).str("backend", backend).str("device", device);
    j.integer("candidates", int64_t(n_candidates)).integer("rejected", int64_t(n_rejected));
    j.integer("measured", int64_t(n_measured)).integer("skipped", int64_t(n_skipped));
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

kernels::PagedAttentionConfig tuned_paged_attention_config(const Common& common, const std::string& db_path,
                                                             const kernels::ParamMap& shape,
                                                             const kernels::PagedAttentionInputs& in,
                                                             bool from_files, const std::string& backend,
                                                             const kernels::PagedAttentionConfig& fallback) {
  const kernels::KernelTemplate* t = kernels::find_template("paged_attention");
  kernels::ParamMap problem = shape;
  if (from_files) {
    const kernels::PagedAttentionShape& s = in.shape;
    problem["batch"] = s.batch, problem["hq"] = s.hq, problem["hkv"] = s.hkv, problem["sq"] = s.sq;
    problem["head_dim"] = s.head_dim, problem["block_size"] = s.block_size, problem["alibi"] = s.alibi;
    problem["max_blocks"] = s.max_blocks, problem["num_blocks"] = s.num_blocks;
    int64_t ctx = 0;
    for (size_t b = 0; b < in.context_lens.count(); ++b) ctx = std::max(ctx, in.context_lens.get_int(b));
    problem["ctx"] = ctx;
    for (const auto& p : t->shape)
      if (p.name == "dtype")
        for (size_t i = 0; i < p.choices.size(); ++i)
          if (p.choices[i] == ir::dtype_name(s.dtype)) problem["dtype"] = int64_t(i);
  }
  std::string device = rt::host_device_name(backend);
  if (backend == "cuda") device = rt::Context(0).properties().name;
  rt::TuningDb db;
  try {
    db = rt::read_tuning_db(db_path);
  } catch (const rt::TuningDbError& e) {
    throw UserError(fmt::format("--tuned {}", e.what()));
  }
  rt::ProblemKey key = problem_key(*t, problem);
  auto sel = rt::select_config(db, "paged_attention", device, key,
                               rt::kSizeFields);
  if (!sel) {
    say(common, fmt::format("--tuned {}: nothing tuned for {} on {}; using the default config", db_path,
                            rt::format_key(key), device));
    return fallback;
  }
  say(common, "--tuned " + db_path + ": " + sel->note);
  kernels::ParamMap cfg{{"block_n", fallback.block_n}, {"head_group", fallback.head_group},
                         {"num_warps", fallback.num_warps}, {"num_splits", fallback.num_splits}};
  for (const auto& [k, v] : sel->entry.config) cfg[k] = v;
  return kernels::paged_attention_config(cfg);
}

Action add_autotune(CLI::App& app, Common& common) {
  auto o = std::make_shared<AutotuneOptions>();
  app.add_option("kernel", o->kernel, "kernel to tune (paged_attention)")->required();
  app.add_option("--space", o->space, "search space (TOML, e.g. configs/paged_attention.toml)")->required();
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
  return [&common, o]() -> int { return run_autotune(common, *o); };
}

} // namespace tilec::cli
