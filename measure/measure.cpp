#include "measure/measure.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "ir/error.h"
#include "ir/printer.h"
#include "launch/module_launcher.h"
#include "runtime/cuda.h"
#include "runtime/loaded_module.h"
#include "runtime/module_store.h"

namespace tilec::measure {

namespace fs = std::filesystem;

namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

} // namespace

Measurement measure_problem(const templates::KernelTemplate& t, const std::string& path,
                            const templates::ParamMap& params, templates::Problem& p, launch::Launcher& launcher,
                            int warmup, int repeats) {
  Measurement r;
  // Each measurement starts from the problem's own output values, not from what the last
  // config left there: a config that writes nothing must not pass on another's results.
  std::vector<launch::Buffer> initial;
  for (int o : p.outputs) initial.push_back(p.buffers[size_t(o)]);
  try {
    launcher.reset_stats();
    templates::run_problem(t, path, params, p, launcher);
    r.cmp = templates::compare_outputs(p);
    r.traffic_error = templates::traffic_error(t, path, params, p, launcher.stats());
    if (!r.cmp.ok) {
      r.rejected = fmt::format("wrong result (max_abs_err {:.3g}; {})", r.cmp.max_abs_err, r.cmp.first_mismatch);
    } else {
      for (int i = 0; i < warmup; ++i) templates::run_problem(t, path, params, p, launcher);
      for (int i = 0; i < repeats; ++i) {
        launcher.reset_stats();
        auto t0 = std::chrono::steady_clock::now();
        templates::run_problem(t, path, params, p, launcher);
        double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        r.last = launcher.stats();
        r.times.push_back(r.last.launches > 0 && r.last.time_ms > 0 ? r.last.time_ms : wall);
      }
    }
  } catch (const UserError& e) {
    r.rejected = "failed to run: " + first_line(e.what());
  } catch (const rt::BackendUnavailable&) {
    throw;
  } catch (const rt::Error& e) {
    r.rejected = "failed to run: " + first_line(e.what());
  }
  for (size_t i = 0; i < initial.size(); ++i) p.buffers[size_t(p.outputs[i])] = std::move(initial[i]);
  return r;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

rt::TuningEntry tuning_entry(const rt::TuningEntry& slot, const templates::ParamMap& config, const Measurement& m,
                             const templates::Problem& p) {
  rt::TuningEntry e = slot;
  e.config = rt::TunedConfig(config.begin(), config.end());
  e.median_ms = median(m.times);
  e.min_ms = *std::min_element(m.times.begin(), m.times.end());
  e.max_ms = *std::max_element(m.times.begin(), m.times.end());
  e.repeats = int64_t(m.times.size());
  e.ideal_bytes = p.ideal_bytes;
  if (e.median_ms > 0 && p.ideal_bytes) e.gbps = double(*p.ideal_bytes) / (e.median_ms * 1e6);
  e.bytes_loaded = m.last.bytes_loaded;
  e.bytes_stored = m.last.bytes_stored;
  e.unique_bytes = m.last.unique_bytes;
  e.max_abs_err = m.cmp.max_abs_err;
  return e;
}

templates::ParamMap shape_of_key(const templates::KernelTemplate& t, const rt::ProblemKey& key) {
  std::vector<std::string> sets;
  for (const auto& [name, v] : key)
    sets.push_back(name + "=" +
                   (std::holds_alternative<int64_t>(v) ? std::to_string(std::get<int64_t>(v)) : std::get<std::string>(v)));
  return templates::resolve_params(t.shape, sets, "problem key");
}

std::unique_ptr<launch::Launcher> folder_launcher(const fs::path& dir, bool gpu, const std::string& backend) {
  std::map<std::string, rt::Manifest> here;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".toml" && entry.path().filename().string().find(".kernel.") == std::string::npos) {
      rt::Manifest m = rt::read_manifest(entry.path());
      // Code files that differ from what their manifest recorded (cut short, or another
      // module's) are refused before anything loads them.
      if (std::string why = rt::check_module(m); !why.empty()) throw rt::ManifestError(why);
      here.emplace(m.kernel, std::move(m));
    }
  if (ec) throw rt::ManifestError(fmt::format("{}: {}", dir.string(), ec.message()));
  auto source = [here = std::move(here), dir](const ir::Function& fn, int, const launch::Specialization&) {
    auto it = here.find(fn.name);
    if (it == here.end())
      throw rt::ManifestError(fmt::format("{}: no module of kernel '{}', which this run launches", dir.string(),
                                          fn.name));
    // A module compiled from other IR (another config, or sizes and dtypes the kernel bakes in)
    // would read the problem's buffers with the wrong layout: refused, not run.
    if (!it->second.ir_hash.empty() && it->second.ir_hash != ir::content_hash(fn))
      throw rt::ManifestError(fmt::format("{}: its {} module was compiled for another problem or config than this "
                                          "run's (IR hash {}, the run's {})",
                                          dir.string(), fn.name, it->second.ir_hash, ir::content_hash(fn)));
    return it->second;
  };
  return launch::make_module_launcher(source, gpu, backend);
}

MeasureSummary measure_plan(const MeasureOptions& opts, const std::function<void(const std::string&)>& progress) {
  if (opts.backend != "cuda" && opts.backend != "emulate")
    throw UserError(fmt::format("--backend '{}': expected cuda or emulate", opts.backend));
  Plan plan = read_plan(opts.plan_dir);
  const templates::KernelTemplate* t = templates::find_template(plan.kernel);
  if (!t)
    throw PlanError(fmt::format("{}: kernel '{}' is not in this build (its kernels: the registry's; a user's "
                                "kernels need a measuring program built with them: tilec_add_measure in CMake)",
                                opts.plan_dir.string(), plan.kernel));
  const bool gpu = opts.backend == "cuda";
  MeasureSummary s;
  s.backend = opts.backend;
  s.device = rt::host_device_name("emulate");
  std::string cc, arch = "host";
  if (gpu) {
    const rt::DeviceProperties& dev = rt::LoadedModule::gpu_context().properties();
    s.device = dev.name;
    cc = fmt::format("{}.{}", dev.major, dev.minor);
    arch = plan.arch;
    if (dev.major * 10 + dev.minor < std::stoi(plan.arch.substr(3)))
      throw PlanError(fmt::format("{}: compiled for {}, which {} ({}) cannot run; prepare it with --arch {}",
                                  opts.plan_dir.string(), plan.arch, dev.name, dev.arch(), dev.arch()));
  }

  // Everything of this shard is checked before anything runs: a truncated module is
  // reported, never launched.
  std::vector<const PlanCandidate*> mine;
  for (const PlanCandidate& c : plan.candidates)
    if (opts.shard.takes(c.index)) mine.push_back(&c);
  std::vector<std::string> broken;
  for (const PlanCandidate* c : mine)
    if (std::string why = check_candidate_modules(opts.plan_dir, arch, *c); !why.empty()) broken.push_back(why);
  if (!broken.empty())
    throw PlanError(fmt::format("{}: {} of the candidates' modules cannot run; nothing was measured:\n  {}",
                                opts.plan_dir.string(), broken.size(), fmt::join(broken, "\n  ")));
  s.candidates = mine.size();
  if (mine.empty()) return s;

  const int warmup = opts.warmup.value_or(plan.warmup), repeats = opts.repeats.value_or(plan.repeats);
  std::optional<size_t> made; // the problem whose inputs and reference are in `problem`
  templates::Problem problem;
  size_t done = 0;
  for (const PlanCandidate* c : mine) {
    const PlanProblem& pp = plan.problems[c->problem];
    if (made != c->problem) {
      progress(fmt::format("problem {}: making inputs (seed {}) and the reference on the host", rt::format_key(pp.key),
                           pp.seed));
      problem = templates::make_problem(*t, {shape_of_key(*t, pp.key), pp.seed, {}, {}});
      made = c->problem;
    }
    std::unique_ptr<launch::Launcher> launcher =
        folder_launcher(candidate_dir(opts.plan_dir, arch, *c), gpu, opts.backend);
    Measurement m = measure_problem(*t, "", c->config, problem, *launcher, warmup, repeats);
    ++done;
    std::string config = rt::format_config(rt::TunedConfig(c->config.begin(), c->config.end()));
    if (!m.rejected.empty()) {
      ++s.rejected;
      s.failures.push_back(fmt::format("{} [{}]: {}", rt::format_key(pp.key), config, m.rejected));
      progress(fmt::format("[{}/{}] {}  FAILED: {}", done, mine.size(), config, m.rejected));
      continue;
    }
    rt::TuningEntry slot;
    slot.kernel = t->name;
    slot.device = s.device;
    slot.compute_capability = cc;
    slot.backend = opts.backend;
    slot.key = pp.key;
    rt::TuningDb one;
    one.entries.push_back(tuning_entry(slot, c->config, m, problem));
    std::string warning;
    rt::merge_into_file(opts.db, one, &warning); // after every config: an interrupted run keeps what it measured
    if (!warning.empty()) progress("warning: " + warning);
    ++s.measured;
    const rt::TuningEntry& e = one.entries.front();
    progress(fmt::format("[{}/{}] {}  median {:.4f} ms{}", done, mine.size(), config, e.median_ms,
                         e.gbps ? fmt::format("  {:.3g} GB/s", *e.gbps) : ""));
  }
  return s;
}

std::vector<Winner> plan_winners(const Plan& plan, const rt::TuningDb& db, const std::string& backend) {
  std::vector<Winner> out;
  for (size_t p = 0; p < plan.problems.size(); ++p) {
    std::optional<Winner> best;
    for (const rt::TuningEntry& e : db.entries) {
      if (e.kernel != plan.kernel || e.key != plan.problems[p].key || e.backend != backend) continue;
      for (const PlanCandidate& c : plan.candidates)
        if (c.problem == p && rt::TunedConfig(c.config.begin(), c.config.end()) == e.config &&
            (!best || e.median_ms < best->entry.median_ms))
          best = Winner{p, &c, e};
    }
    if (best) out.push_back(*best);
  }
  return out;
}

} // namespace tilec::measure
