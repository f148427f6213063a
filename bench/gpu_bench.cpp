// Runs the modules `tilec compile` wrote (scripts/build_gpu_modules.sh) on the GPU without the
// compiler (no LLVM here): each module's kernel makes its own problem (templates/: inputs,
// argument order, grid and plain C++ reference, the same code `tilec run` checks against)
// from the sizes the module records ([problem]) and its parameters ([specialization]); the
// module launcher (launch/module_launcher.h) runs it on the GPU, the outputs are checked
// against the reference, and the kernel is timed with events (warm-up, then the median of
// the repeats). One JSON line per module.
//
//   gpu_bench MODULES_DIR [--repeats N] [--out FILE.jsonl] [--emulate]
//   gpu_bench --module DIR [--inputs DIR] [--save-output F.npy] [--name NAME] [...]
//
// --module runs the one run whose modules DIR holds (a plan's candidate, say); --inputs reads
// the problem's inputs from .npy files (paged attention's q.npy, k_cache.npy, ...) instead of
// generating them, and --save-output writes the output as .npy: scripts/gpu_check.sh gives
// tilec and its peers (bench/gpu_peers.py) the same inputs this way and compares outputs.
//
// MODULES_DIR holds <arch>/<name>/<kernel>.toml; the arch folder is the device's (sm_80 code
// for sm_8x, sm_90 code for sm_9x and newer, which the driver JIT-compiles from the PTX), or
// "host" with --emulate, which runs emulator modules on the CPU (what CI checks this program
// with). A module whose manifest lists other kernels of its run (a combine step) finds them in
// its own folder. Exit codes: 0 all right, 1 a wrong result or failing call, 2 bad usage or
// modules, 3 no CUDA driver or device.
#include "abi/error.h"
#include "launch/launcher.h"
#include "launch/module_launcher.h"
#include "templates/registry.h"
#include "measure/measure.h"
#include "runtime/cuda.h"
#include "runtime/loaded_module.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace rt = tilec::rt;
namespace launch = tilec::launch;
namespace templates = tilec::templates;
namespace measure = tilec::measure;

namespace {

// The template values of a module: `source` values by name (choices by name), else the
// declared default.
templates::ParamMap values_of(const std::vector<templates::Param>& declared, const std::map<std::string, rt::SpecValue>& a,
                            const std::map<std::string, rt::SpecValue>& b, const fs::path& where) {
  templates::ParamMap out;
  for (const templates::Param& p : declared) {
    out[p.name] = p.value;
    for (const auto* source : {&b, &a}) {
      auto it = source->find(p.name);
      if (it == source->end()) continue;
      if (auto* i = std::get_if<std::int64_t>(&it->second)) {
        out[p.name] = *i;
      } else {
        auto c = std::find(p.choices.begin(), p.choices.end(), std::get<std::string>(it->second));
        if (c == p.choices.end())
          throw rt::ManifestError(fmt::format("{}: {} = {} is not one of its values", where.string(), p.name,
                                              std::get<std::string>(it->second)));
        out[p.name] = c - p.choices.begin();
      }
    }
  }
  return out;
}

struct Result {
  templates::Comparison check;
  launch::TimingStats timing;
  std::optional<std::int64_t> ideal_bytes;
  std::string shape;
};

// What else a run does: inputs read from .npy files instead of generated, and the output
// written as .npy (for bench/gpu_peers.py to compare with its peers).
struct RunOptions {
  std::string inputs_dir, save_output;
};

// The kernel's problem for module `m`, run on `gpu` (else the emulator) with the modules of
// m's folder, checked, then timed (measure/measure.h, as tilec-measure times).
Result bench_module(const rt::Manifest& m, bool gpu, int repeats, const RunOptions& ro = {}) {
  const templates::KernelTemplate* t = templates::find_template(m.kernel);
  if (!t) throw rt::ManifestError(fmt::format("{}: no kernel '{}' in this build of tilec's kernels", m.dir.string(), m.kernel));
  templates::ProblemRequest req;
  const templates::ParamMap params = values_of(t->params, m.specialization, {}, m.dir);
  req.shape = values_of(t->shape, m.problem, m.specialization, m.dir);
  req.seed = 1;
  req.inputs_dir = ro.inputs_dir;
  if (!ro.inputs_dir.empty() && !templates::takes_inputs(*t))
    throw rt::ManifestError(fmt::format("--inputs: kernel '{}' does not read its inputs from files", m.kernel));
  // A module specialized on one of the kernel's float options (softcap = 1) runs with it set.
  for (const templates::FloatOption& o : t->options) {
    auto it = m.specialization.find(o.name);
    if (it != m.specialization.end() && it->second != rt::SpecValue(std::int64_t(0))) req.options[o.name] = 30.0;
  }
  templates::Problem p = templates::make_problem(*t, req);
  std::unique_ptr<launch::Launcher> launcher = measure::folder_launcher(m.dir, gpu, gpu ? "cuda" : "emulate");

  Result r;
  r.shape = p.description;
  r.ideal_bytes = p.ideal_bytes;
  const int warmup = 3;
  measure::Measurement mm = measure::measure_problem(*t, "", params, p, *launcher, warmup, repeats);
  r.check = mm.cmp;
  if (!mm.rejected.empty() && mm.cmp.ok) throw rt::Error(mm.rejected); // failed to run
  if (!mm.times.empty()) r.timing = launch::summarize_times(mm.times, warmup);
  if (!ro.save_output.empty()) {
    // The outputs as the last timed run left them (measure_problem restores the initial ones).
    templates::run_problem(*t, "", params, p, *launcher);
    templates::write_output(*t, ro.save_output, p);
  }
  return r;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out + "\"";
}

std::string module_arch(const rt::DeviceProperties& d) {
  if (d.major >= 9) return "sm_90";
  if (d.major == 8) return "sm_80";
  throw rt::BackendUnavailable(fmt::format("{} is {}; tilec's modules are for sm_80 and newer", d.name, d.arch()));
}

// The first module of each run under `dir` (a combine module is launched by its run's first),
// in folder order.
std::vector<rt::Manifest> run_manifests(const fs::path& dir, bool recursive) {
  std::vector<rt::Manifest> manifests;
  auto take = [&](const fs::path& f) {
    if (f.extension() != ".toml" || f.filename().string().find(".kernel.") != std::string::npos) return;
    rt::Manifest m = rt::read_manifest(f);
    if (m.run.empty() || m.run.front() == m.kernel) manifests.push_back(std::move(m));
  };
  if (recursive)
    for (const auto& entry : fs::recursive_directory_iterator(dir)) take(entry.path());
  else
    for (const auto& entry : fs::directory_iterator(dir)) take(entry.path());
  std::sort(manifests.begin(), manifests.end(), [](const auto& a, const auto& b) { return a.dir < b.dir; });
  if (manifests.empty()) throw rt::ManifestError(fmt::format("{}: no module manifests (*.toml)", dir.string()));
  return manifests;
}

struct Options {
  std::string modules, module, out_file, name;
  int repeats = 50;
  bool emulate = false;
  RunOptions run;
};

int run(const Options& o) {
  std::string arch = "host", device = rt::host_device_name("emulate");
  if (!o.emulate) {
    const rt::DeviceProperties& dev = rt::LoadedModule::gpu_context().properties();
    arch = module_arch(dev);
    device = dev.name;
    fmt::print(stderr, "gpu_bench: {} ({}, {} SMs, {:.0f} GiB, driver {})\n", dev.name, dev.arch(), dev.sm_count,
               double(dev.total_memory) / double(1ull << 30), dev.driver_version);
  }
  fs::path dir = o.module.empty() ? fs::path(o.modules) / arch : fs::path(o.module);
  if (!fs::is_directory(dir))
    throw rt::ManifestError(fmt::format("{}: no such folder{}", dir.string(),
                                        o.module.empty() ? " (build the modules with scripts/build_gpu_modules.sh)" : ""));
  std::vector<rt::Manifest> manifests = run_manifests(dir, o.module.empty());
  if (!o.module.empty() && manifests.size() != 1)
    throw rt::ManifestError(fmt::format("--module {}: holds {} runs' modules; give one run's folder", dir.string(),
                                        manifests.size()));
  fmt::print(stderr, "gpu_bench: {} modules from {}\n", manifests.size(), dir.string());

  std::ofstream jsonl;
  if (!o.out_file.empty()) jsonl.open(o.out_file, std::ios::app);
  size_t failures = 0;
  for (const rt::Manifest& m : manifests) {
    std::string name = !o.name.empty() ? o.name : o.module.empty() ? fs::relative(m.dir, dir).string() : m.dir.string();
    std::string line;
    try {
      Result r = bench_module(m, !o.emulate, o.repeats, o.run);
      std::optional<double> gbps;
      if (r.ideal_bytes && r.timing.median_ms > 0) gbps = double(*r.ideal_bytes) / (r.timing.median_ms * 1e-3) / 1e9;
      auto opt = [](const auto& v) { return v ? fmt::format("{}", *v) : std::string("null"); };
      std::string config;
      for (const auto& [k, v] : m.specialization)
        config += fmt::format("{}{}", config.empty() ? "" : " ",
                              std::holds_alternative<std::int64_t>(v) ? fmt::format("{}={}", k, std::get<std::int64_t>(v))
                                                                      : fmt::format("{}={}", k, std::get<std::string>(v)));
      line = fmt::format("{{\"module\":{},\"name\":{},\"impl\":\"tilec\",\"kernel\":{},\"device\":{},\"arch\":{},"
                         "\"code\":{},\"ok\":{},\"max_abs_err\":{:.3g},\"max_rel_err\":{:.3g},\"median_ms\":{:.5f},"
                         "\"median_us\":{:.2f},\"min_ms\":{:.5f},\"max_ms\":{:.5f},\"repeats\":{},\"ideal_bytes\":{},"
                         "\"gbps\":{},\"registers\":{},\"config\":{},\"shape\":{}{}}}",
                         json_string(fs::relative(m.dir, dir).string()), json_string(name), json_string(m.kernel),
                         json_string(device), json_string(arch),
                         json_string(o.emulate ? "emulator" : m.cubin.empty() ? "ptx" : "cubin"), r.check.ok,
                         r.check.max_abs_err, r.check.max_rel_err, r.timing.median_ms, r.timing.median_ms * 1e3,
                         r.timing.min_ms, r.timing.max_ms, o.repeats, opt(r.ideal_bytes),
                         gbps ? fmt::format("{:.4g}", *gbps) : "null",
                         m.ptxas ? std::to_string(m.ptxas->registers) : "null", json_string(config), json_string(r.shape),
                         r.check.ok ? "" : ",\"first_mismatch\":" + json_string(r.check.first_mismatch));
      fmt::print(stderr, "  {:<40} {:<8} {:9.4f} ms {:>8} GB/s  {}\n", name, r.check.ok ? "ok" : "MISMATCH",
                 r.timing.median_ms, gbps ? fmt::format("{:.1f}", *gbps) : "-", r.shape);
      if (!r.check.ok) {
        fmt::print(stderr, "    first mismatch: {}\n", r.check.first_mismatch);
        ++failures;
      }
    } catch (const rt::BackendUnavailable&) {
      throw;
    } catch (const std::exception& e) { // rt::Error, and a UserError from a kernel's problem
      line = fmt::format("{{\"module\":{},\"name\":{},\"impl\":\"tilec\",\"ok\":false,\"error\":{}}}", json_string(name),
                         json_string(name), json_string(e.what()));
      fmt::print(stderr, "  {:<40} FAILED: {}\n", name, e.what());
      ++failures;
    }
    std::cout << line << std::endl;
    if (jsonl) jsonl << line << "\n" << std::flush;
  }
  fmt::print(stderr, "gpu_bench: {} of {} modules ok\n", manifests.size() - failures, manifests.size());
  return failures ? 1 : 0;
}

constexpr const char* kUsage =
    "usage: gpu_bench MODULES_DIR [options]      every run under MODULES_DIR/<arch>/ (host with --emulate)\n"
    "       gpu_bench --module DIR [options]     the one run whose modules DIR holds\n"
    "options: --repeats N  --out FILE.jsonl  --emulate  --name NAME (the JSON lines' name)\n"
    "         --inputs DIR (the kernel's .npy inputs instead of generated ones: paged attention's q.npy, ...)\n"
    "         --save-output F.npy (the output of the last run)\n";

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (a.empty() || a[0] == "--help" || a[0] == "-h") {
    fmt::print(stderr, "{}", kUsage);
    return a.empty() ? 2 : 0;
  }
  Options o;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto value = [&](std::string& into) {
      if (i + 1 >= a.size()) return false;
      into = a[++i];
      return true;
    };
    std::string v;
    bool ok = true;
    if (a[i] == "--repeats" && (ok = value(v))) {
      o.repeats = std::atoi(v.c_str());
      if (o.repeats < 1) {
        fmt::print(stderr, "gpu_bench: --repeats must be a positive integer, got '{}'\n", v);
        return 2;
      }
    } else if (a[i] == "--emulate") {
      o.emulate = true;
    } else if (a[i] == "--out") {
      ok = value(o.out_file);
    } else if (a[i] == "--module") {
      ok = value(o.module);
    } else if (a[i] == "--name") {
      ok = value(o.name);
    } else if (a[i] == "--inputs") {
      ok = value(o.run.inputs_dir);
    } else if (a[i] == "--save-output") {
      ok = value(o.run.save_output);
    } else if (!a[i].empty() && a[i][0] != '-' && o.modules.empty()) {
      o.modules = a[i];
    } else {
      fmt::print(stderr, "gpu_bench: unknown argument '{}'\n{}", a[i], kUsage);
      return 2;
    }
    if (!ok) {
      fmt::print(stderr, "gpu_bench: {} needs a value\n{}", a[i], kUsage);
      return 2;
    }
  }
  if (o.modules.empty() == o.module.empty()) {
    fmt::print(stderr, "gpu_bench: give MODULES_DIR or --module DIR (one of them)\n{}", kUsage);
    return 2;
  }
  try {
    return run(o);
  } catch (const rt::BackendUnavailable& e) {
    fmt::print(stderr, "gpu_bench: {}\n", e.what());
    return 3;
  } catch (const rt::ManifestError& e) {
    fmt::print(stderr, "gpu_bench: {}\n", e.what());
    return 2;
  } catch (const rt::Error& e) {
    fmt::print(stderr, "gpu_bench: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpu_bench: {}\n", e.what());
    return 1;
  }
}
