#include "autotune/tuner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

#include "abi/version.h"
#include "autotune/export.h"
#include "autotune/progress.h"
#include "backends/module_builder.h"
#include "codegen/compile.h"
#include "measure/measure.h"

namespace tilec::autotune {

namespace fs = std::filesystem;

namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

unsigned threads(unsigned jobs) { return jobs ? jobs : std::max(1u, std::thread::hardware_concurrency()); }

// One candidate config of one problem key, as it goes through the stages.
struct Candidate {
  templates::ParamMap config;
  std::string rejected; // why it was dropped; empty while it survives
  std::string stage;    // where: build, compile (for the ptxas arch) or run (rt::TuningRejection)
  CompileTime time;     // its compile stage, once built
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The tilec that records a rejection: one of another version tries the config again.
const std::string kCompiler = "tilec " TILEC_VERSION;

// Runs `work(i)` for i in [0, n) on `jobs` threads (the DSL builder's current kernel is
// thread_local, so each thread builds its own), stopping early when interrupted.
void parallel_for(size_t n, unsigned jobs, const Reporter& r, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  auto loop = [&] {
    for (size_t i; (i = next++) < n;) {
      if (r.interrupted()) return;
      work(i);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < threads(jobs); ++i) pool.emplace_back(loop);
  for (auto& th : pool) th.join();
}

// Builds every candidate's kernels and, when ptxas is there, compiles them for the GPU and
// drops what ptxas rejects or what spills. Returns how many it built (fewer when interrupted).
size_t compile_candidates(std::vector<Candidate>& cands, const templates::KernelTemplate& t, const templates::ParamMap& shape,
                        unsigned jobs, const std::optional<std::string>& arch, Progress& progress, const Reporter& r) {
  std::mutex mutex;
  size_t built = 0;
  parallel_for(cands.size(), jobs, r, [&](size_t i) {
    Candidate& c = cands[i];
    c.stage = "build";
    const auto t0 = std::chrono::steady_clock::now();
    try {
      std::vector<ir::Kernel> kernels = templates::build_kernels(t, c.config, shape);
      c.time.build_ms = ms_since(t0);
      for (const ir::Kernel& k : kernels) {
        if (!arch) continue;
        c.stage = "compile";
        codegen::CompileOptions o = backends::compile_options(c.config, *arch, "nvptx");
        o.large_buffers = templates::large_buffers(t, c.config, shape, *k);
        codegen::CompiledKernel ck = codegen::compile(*k, o);
        c.time.lower_ms += ck.phases.lower_ms;
        c.time.optimize_ms += ck.phases.optimize_ms;
        c.time.codegen_ms += ck.phases.codegen_ms;
        c.time.ptxas_ms += ck.phases.ptxas_ms;
        if (!ck.ptxas) continue;
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
    c.time.total_ms = ms_since(t0);
    std::lock_guard lock(mutex);
    ++built;
    progress.step(format_values(c.config) + (c.rejected.empty() ? "" : "  dropped: " + c.rejected));
  });
  return built;
}

// The compile stage in a line: its wall time, and the median candidate's time by phase (each
// phase's own median; DSL->PTX is the phases before ptxas, other what no phase times).
std::string compile_summary(const std::vector<CompileTime>& times, double wall_ms, unsigned jobs, const std::string& arch) {
  auto med = [&](auto field) {
    std::vector<double> v;
    for (const CompileTime& x : times) v.push_back(field(x));
    return measure::median(std::move(v));
  };
  return fmt::format("  compiled {} candidates on {} thread{} in {:.0f} ms; median per candidate {:.1f} ms: DSL->PTX "
                     "{:.1f} ms (DSL build {:.2f}, tile passes and lowering {:.2f}, LLVM passes {:.2f}, NVPTX {:.2f}), "
                     "ptxas {:.1f} ms, other {:.1f} ms{}",
                     times.size(), jobs, jobs == 1 ? "" : "s", wall_ms, med([](auto& x) { return x.total_ms; }),
                     med([](auto& x) { return x.build_ms + x.lower_ms + x.optimize_ms + x.codegen_ms; }),
                     med([](auto& x) { return x.build_ms; }), med([](auto& x) { return x.lower_ms; }),
                     med([](auto& x) { return x.optimize_ms; }), med([](auto& x) { return x.codegen_ms; }),
                     med([](auto& x) { return x.ptxas_ms; }),
                     med([](auto& x) {
                       return x.total_ms - x.build_ms - x.lower_ms - x.optimize_ms - x.codegen_ms - x.ptxas_ms;
                     }),
                     arch.empty() ? " (no ptxas arch: built only)" : "");
}

// The candidates of `space` for one key, each a full config (defaults under the space's
// values); UserError naming an example when none fits.
std::vector<templates::ParamMap> candidates_of(const templates::KernelTemplate& t, const SearchSpace& space,
                                             const KeyToTune& k, int64_t sm, const Reporter& r) {
  Enumeration en = enumerate_for(t, space, Values(k.shape.begin(), k.shape.end()), sm);
  r.say(fmt::format("{}: {} candidates of {} satisfy {}'s constraints", rt::format_key(k.key), en.candidates.size(),
                    space.size(), space.source));
  if (en.candidates.empty())
    throw UserError(fmt::format("{}: no candidate satisfies the constraints for {} (e.g. {}: {})", space.source,
                                rt::format_key(k.key), format_values(en.rejected.at(0).params),
                                en.rejected.at(0).reason));
  const templates::ParamMap defaults = templates::resolve_params(t.params, {}, "--set");
  std::vector<templates::ParamMap> out;
  for (const Values& v : en.candidates) {
    templates::ParamMap full = defaults;
    for (const auto& [name, x] : v) full[name] = x;
    out.push_back(std::move(full));
  }
  return out;
}

// Why candidates were dropped, by kind: the reason with its numbers left out, so "block=3 must be
// a power of two" and "block=5 must be ..." are one kind, shown by its first example.
std::string reason_kind(const std::string& reason) {
  std::string kind;
  for (char c : reason)
    if (!std::isdigit(static_cast<unsigned char>(c))) kind += c;
    else if (kind.empty() || kind.back() != '#') kind += '#';
  return kind;
}
using Reasons = std::map<std::string, std::pair<std::string, size_t>>; // kind -> (first example, count)

// The record of candidate `c` of `slot`'s key dropped at its stage (the compile stage's for
// the target's ptxas arch).
rt::TuningRejection rejection(const rt::TuningEntry& slot, const Candidate& c, const Target& tg) {
  rt::TuningRejection x;
  x.kernel = slot.kernel;
  x.device = slot.device;
  x.compute_capability = slot.compute_capability;
  x.backend = slot.backend;
  x.key = slot.key;
  x.config = rt::TunedConfig(c.config.begin(), c.config.end());
  x.stage = c.stage;
  if (c.stage == "compile") x.arch = tg.ptxas_arch.value_or("");
  x.reason = c.rejected;
  x.compiler = kCompiler;
  x.rejected_at = rt::utc_now();
  return x;
}

// Enumerates the space for one key, compiles what the database has neither measured nor
// rejected, checks and times each survivor, and merges each measured config, and each one
// dropped, into the database as soon as it is known.
void tune_key(const templates::KernelTemplate& t, const SearchSpace& space, const TuneSettings& s, const Target& tg,
              launch::Launcher& launcher, KeyToTune& k, rt::TuningDb& db, TuneResult& n, const Reporter& r,
              Reasons& reasons) {
  std::vector<templates::ParamMap> all = candidates_of(t, space, k, tg.export_archs.empty() ? 0 : sm_of(tg.export_archs.front()), r);
  if (!s.shard.whole()) { // the same order on every machine, so the shards partition it
    std::vector<templates::ParamMap> mine;
    for (size_t i = 0; i < all.size(); ++i)
      if (s.shard.takes(i)) mine.push_back(all[i]);
    r.say(fmt::format("  shard {}/{}: {} of them", s.shard.index + 1, s.shard.count, mine.size()));
    all = std::move(mine);
  }
  n.candidates += all.size();
  rt::TuningEntry slot;
  slot.kernel = t.name;
  slot.device = tg.device;
  slot.compute_capability = tg.cc;
  slot.backend = tg.backend;
  slot.key = k.key;
  const std::string arch = tg.ptxas_arch.value_or("");
  std::string warning;
  auto record = [&](const rt::TuningDb& add) {
    if (add.entries.empty() && add.rejections.empty()) return;
    db = rt::merge_into_file(s.db, add, &warning); // after every step: ^C keeps what was learned
    if (!warning.empty()) r.warn(std::exchange(warning, ""));
  };
  auto count_reason = [&](const std::string& reason) {
    auto [kind, fresh] = reasons.try_emplace(reason_kind(reason), reason, 0);
    ++kind->second.second;
  };
  std::vector<Candidate> todo;
  size_t skipped_here = 0, rejected_here = 0;
  for (templates::ParamMap& config : all) {
    slot.config = rt::TunedConfig(config.begin(), config.end());
    if (!s.force && db.find(slot)) {
      ++skipped_here;
      continue;
    }
    if (const rt::TuningRejection* known = s.force ? nullptr : db.find_rejection(slot, arch, kCompiler)) {
      ++rejected_here;
      ++n.rejected;
      ++n.rejected_before;
      count_reason(known->reason);
      continue;
    }
    todo.push_back({std::move(config), {}, {}, {}});
  }
  n.skipped += skipped_here;
  if (skipped_here) r.say(fmt::format("  {} already in {} (use --force to measure again)", skipped_here, s.db));
  if (rejected_here)
    r.say(fmt::format("  {} rejected by an earlier run, as {} records (use --force to try them again)", rejected_here,
                      s.db));

  Progress compiling("compile", todo.size());
  const auto compile_t0 = std::chrono::steady_clock::now();
  n.compiled += compile_candidates(todo, t, k.shape, s.jobs, tg.ptxas_arch, compiling, r);
  std::vector<CompileTime> times;
  for (const Candidate& c : todo)
    if (!c.stage.empty()) times.push_back(c.time); // built (an interrupted stage skips the rest)
  if (!times.empty()) r.say(compile_summary(times, ms_since(compile_t0), threads(s.jobs), arch));
  n.compile_times.insert(n.compile_times.end(), times.begin(), times.end());
  // What the compile stage dropped is recorded at once: a re-run compiles none of it again.
  rt::TuningDb dropped;
  for (const Candidate& c : todo)
    if (!c.rejected.empty()) dropped.rejections.push_back(rejection(slot, c, tg));
  record(dropped);

  size_t survivors = 0;
  for (const Candidate& c : todo) survivors += c.rejected.empty();
  Progress measuring("measure", survivors);
  for (Candidate& c : todo) {
    if (r.interrupted()) break;
    if (c.rejected.empty()) {
      measure::Measurement m = measure::measure_problem(t, "", c.config, k.problem, launcher, space.warmup, space.repeats);
      c.rejected = m.rejected;
      rt::TuningDb one;
      if (c.rejected.empty()) {
        rt::TuningEntry e = measure::tuning_entry(slot, c.config, m, k.problem);
        one.entries.push_back(e);
        record(one);
        ++n.measured;
        measuring.step(fmt::format("{}  median {:.4f} ms", format_values(c.config), e.median_ms));
        continue;
      }
      c.stage = "run";
      one.rejections.push_back(rejection(slot, c, tg));
      record(one);
      measuring.step(format_values(c.config) + "  dropped: " + c.rejected);
    }
    ++n.rejected;
    count_reason(c.rejected);
    r.say(fmt::format("  dropped {}: {}", format_values(c.config), c.rejected));
  }
}

} // namespace

SpaceNames space_names(const templates::KernelTemplate& t) {
  SpaceNames names{t.name, {}, {}, t.derived};
  for (const templates::Param& p : t.params) names.params.push_back(p.name);
  for (const templates::Param& p : t.shape) names.shape.push_back(p.name);
  names.shape.push_back("sm");
  return names;
}

int64_t sm_of(const std::optional<std::string>& arch) {
  if (!arch || !arch->starts_with("sm_")) return 0;
  int64_t v = 0;
  for (char c : arch->substr(3)) {
    if (c < '0' || c > '9') break;
    v = v * 10 + (c - '0');
  }
  return v;
}

Enumeration enumerate_for(const templates::KernelTemplate& t, const SearchSpace& space, const Values& given,
                          int64_t sm) {
  Values shape = given;
  shape["sm"] = sm;
  if (!t.derive) return enumerate(space, shape);
  const templates::ParamMap defaults = templates::resolve_params(t.params, {}, "--set");
  return enumerate(space, shape, [&](const Values& candidate, const Values& s) {
    templates::ParamMap full = defaults;
    for (const auto& [name, v] : candidate) full[name] = v;
    return t.derive(full, templates::ParamMap(s.begin(), s.end()));
  });
}

std::vector<KeyToTune> make_keys(const templates::KernelTemplate& t, const std::vector<std::vector<std::string>>& shapes,
                                 uint64_t seed, bool problems) {
  std::vector<KeyToTune> keys;
  for (const std::vector<std::string>& set : shapes) {
    KeyToTune k;
    k.shape = templates::resolve_params(t.shape, set, "--shape");
    k.key = templates::problem_key(t, k.shape);
    if (problems) k.problem = templates::make_problem(t, {k.shape, seed, {}, {}});
    keys.push_back(std::move(k));
  }
  return keys;
}

TuneResult tune(const templates::KernelTemplate& t, const SearchSpace& space, std::vector<KeyToTune>& keys,
                const TuneSettings& s, const Target& tg, launch::Launcher& launcher, const Reporter& r) {
  // Read only: nothing is written until a config is measured (a corrupt file is moved aside
  // then, by merge_into_file).
  rt::TuningDb db;
  try {
    db = rt::read_tuning_db(s.db);
  } catch (const rt::TuningDbError& e) {
    r.warn(fmt::format("{}; it will be moved aside when the first result is stored", e.what()));
  }
  TuneResult n;
  Reasons reasons;
  for (KeyToTune& k : keys) {
    if (r.interrupted()) break;
    tune_key(t, space, s, tg, launcher, k, db, n, r, reasons);
  }
  n.interrupted = r.interrupted();
  for (const auto& [kind, example] : reasons) n.reasons.push_back(example);
  std::stable_sort(n.reasons.begin(), n.reasons.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const KeyToTune& k : keys) {
    auto sel = rt::select_config(db, t.name, tg.device, k.key, {});
    if (!sel || sel->rule != "exact") n.failed_keys.push_back(rt::format_key(k.key));
  }
  // A shard measures part of each key's candidates: its keys may all be dropped there and won elsewhere.
  if (!s.shard.whole()) n.failed_keys.clear();
  const std::string before = n.rejected_before ? fmt::format(" ({} by an earlier run)", n.rejected_before) : "";
  if (!n.interrupted && !n.failed_keys.empty()) {
    // No database line and no export: the run failed, and says why candidates were dropped.
    std::string why;
    for (const auto& [reason, count] : n.reasons)
      why += count == 1 ? fmt::format("\n  1 dropped: {}", reason) : fmt::format("\n  {} dropped, e.g. {}", count, reason);
    r.warn(fmt::format("no valid candidate for {} ({} candidates, {} rejected{}, {} measured){}",
                       fmt::join(n.failed_keys, "; "), n.candidates, n.rejected, before, n.measured, why));
    return n;
  }
  for (const KeyToTune& k : keys) {
    auto sel = rt::select_config(db, t.name, tg.device, k.key, {});
    if (!sel || sel->rule != "exact") continue;
    n.best.push_back(sel->entry);
    if (!s.export_dir.empty() && !n.interrupted)
      // Keys that share a winner (and its modules) list each manifest once.
      for (std::string& m : export_modules(t, sel->entry, k.shape, tg.export_archs, s.export_dir))
        if (std::find(n.exported.begin(), n.exported.end(), m) == n.exported.end()) n.exported.push_back(std::move(m));
    r.say(fmt::format("best for {}: {}  median {:.4f} ms{}", rt::format_key(k.key), rt::format_config(sel->entry.config),
                      sel->entry.median_ms, sel->entry.gbps ? fmt::format("  {:.3f} GB/s", *sel->entry.gbps) : ""));
  }
  r.say(fmt::format("{} candidates, {} rejected{}, {} measured, {} already measured; database {}", n.candidates,
                    n.rejected, before, n.measured, n.skipped, s.db));
  if (!s.export_dir.empty() && !n.interrupted) {
    export_card_and_db(t, db, s.db, s.export_dir, s.compiler, r.warn);
    r.say(fmt::format("exported {} modules ({}) and the database to {}", n.exported.size(),
                      fmt::join(tg.export_archs, ", "), s.export_dir));
  }
  return n;
}

measure::Plan prepare(const templates::KernelTemplate& t, const SearchSpace& space, std::vector<KeyToTune>& keys,
                      const PrepareSettings& ps, const Reporter& r) {
  fs::path dir = ps.dir.lexically_normal();
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
  plan.arch = ps.arch;
  plan.compiler = "tilec " TILEC_VERSION;
  plan.created_at = rt::utc_now();
  plan.warmup = space.warmup;
  plan.repeats = space.repeats;
  fs::copy_file(ps.space_file, partial / plan.space, fs::copy_options::overwrite_existing, ec);
  if (ec) throw UserError(fmt::format("--prepare: cannot copy {} into the plan: {}", ps.space_file, ec.message()));
  if (!codegen::find_ptxas()) r.warn("no ptxas here: the plan carries PTX only (the driver compiles it), unchecked for spills");

  struct Item {
    measure::PlanCandidate c;
    std::string rejected;
  };
  std::vector<Item> items;
  for (size_t p = 0; p < keys.size(); ++p) {
    plan.problems.push_back({keys[p].key, ps.seed});
    std::vector<templates::ParamMap> all = candidates_of(t, space, keys[p], sm_of(ps.arch), r);
    for (size_t i = 0; i < all.size(); ++i) {
      Item it;
      it.c.problem = p;
      it.c.index = i;
      it.c.config = all[i];
      it.c.modules = fmt::format("p{}/c{}", p, i);
      items.push_back(std::move(it));
    }
  }

  // Compiled on every core: the GPU modules first (ptxas decides), then the emulator's.
  Progress compiling("compile", items.size());
  std::atomic<size_t> done{0};
  std::mutex mutex;
  parallel_for(items.size(), ps.jobs, r, [&](size_t i) {
    Item& it = items[i];
    const templates::ParamMap& shape = keys[it.c.problem].shape;
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
    compiling.set(++done, format_values(it.c.config) + (it.rejected.empty() ? "" : "  dropped: " + it.rejected));
  });
  if (r.interrupted()) throw UserError(fmt::format("interrupted; the unfinished plan is in {}", partial.string()));

  // Each survivor checked against its reference on the emulator, through the plan's own
  // emulator modules (what tilec-measure --backend emulate loads).
  size_t survivors = 0;
  for (const Item& it : items) survivors += it.rejected.empty();
  if (ps.check) {
    Progress checking("check", survivors);
    for (Item& it : items) {
      if (r.interrupted()) throw UserError(fmt::format("interrupted; the unfinished plan is in {}", partial.string()));
      if (!it.rejected.empty()) continue;
      KeyToTune& k = keys[it.c.problem];
      auto launcher = measure::folder_launcher(measure::candidate_dir(partial, "host", it.c), false, "emulate");
      measure::Measurement m = measure::measure_problem(t, "", it.c.config, k.problem, *launcher, 0, 0);
      it.rejected = m.rejected;
      it.c.checked = m.rejected.empty();
      if (it.c.checked) it.c.max_abs_err = m.cmp.max_abs_err;
      checking.step(format_values(it.c.config) + (it.rejected.empty() ? "  ok" : "  dropped: " + it.rejected));
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
  r.say(fmt::format("plan {}: {} candidates for {} ({} dropped){}; time it where the GPU is with: "
                    "tilec-measure {} [--shard I/N] -o db.toml (for a kernel of your own, the program "
                    "tilec_add_measure builds)",
                    dir.string(), plan.candidates.size(), plan.arch, plan.rejected.size(),
                    ps.check ? ", each checked on the emulator" : ", not checked on the emulator (--no-check)",
                    dir.string()));
  return plan;
}

templates::ParamMap tuned_params(const templates::KernelTemplate& t, const std::string& db_path,
                               const templates::ParamMap& shape, const std::string& device,
                               const templates::ParamMap& fallback, std::string& note) {
  rt::TuningDb db;
  try {
    db = rt::read_tuning_db(db_path);
  } catch (const rt::TuningDbError& e) {
    throw UserError(fmt::format("--tuned {}", e.what()));
  }
  rt::ProblemKey key = templates::problem_key(t, shape);
  auto sel = rt::select_config(db, t.name, device, key, t.size_fields, t.size_buckets);
  if (!sel) {
    note = fmt::format("nothing tuned for {} on {}; using the default config", rt::format_key(key), device);
    return fallback;
  }
  note = sel->note;
  templates::ParamMap params = fallback;
  for (const auto& [k, v] : sel->entry.config) params[k] = v;
  return params;
}

} // namespace tilec::autotune
