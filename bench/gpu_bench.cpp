// Runs the modules `tilec compile` wrote (scripts/build_gpu_modules.sh) on the GPU without the
// compiler (no LLVM here): each module's kernel makes its own problem (kernels/: inputs,
// argument order, grid and plain C++ reference, the same code `tilec run` checks against)
// from the sizes the module records ([problem]) and its parameters ([specialization]); the
// module launcher (kernels/module_launcher.h) runs it on the GPU, the outputs are checked
// against the reference, and the kernel is timed with events (warm-up, then the median of
// the repeats). One JSON line per module.
//
//   gpu_bench MODULES_DIR [--repeats N] [--out FILE.jsonl] [--emulate]
//
// MODULES_DIR holds <arch>/<name>/<kernel>.toml; the arch folder is the device's (sm_80 code
// for sm_8x, sm_90 code for sm_9x and newer, which the driver JIT-compiles from the PTX), or
// "host" with --emulate, which runs emulator modules on the CPU (what CI checks this program
// with). A module whose manifest lists other kernels of its run (a combine step) finds them in
// its own folder. Exit codes: 0 all right, 1 a wrong result or failing call, 2 bad usage or
// modules, 3 no CUDA driver or device.
#include "abi/error.h"
#include "kernels/launcher.h"
#include "kernels/module_launcher.h"
#include "kernels/registry.h"
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
namespace kernels = tilec::kernels;

namespace {

// The template values of a module: `source` values by name (choices by name), else the
// declared default.
kernels::ParamMap values_of(const std::vector<kernels::Param>& declared, const std::map<std::string, rt::SpecValue>& a,
                            const std::map<std::string, rt::SpecValue>& b, const fs::path& where) {
  kernels::ParamMap out;
  for (const kernels::Param& p : declared) {
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
  kernels::Comparison check;
  kernels::TimingStats timing;
  std::optional<std::int64_t> ideal_bytes;
  std::string shape;
};

// The kernel's problem for module `m`, run on `gpu` (else the emulator) with the modules of
// m's folder, checked, then timed.
Result bench_module(const rt::Manifest& m, bool gpu, int repeats) {
  const kernels::KernelTemplate* t = kernels::find_template(m.kernel);
  if (!t) throw rt::ManifestError(fmt::format("{}: no kernel '{}' in this build of tilec's kernels", m.dir.string(), m.kernel));
  kernels::ProblemRequest req;
  req.params = values_of(t->params, m.specialization, {}, m.dir);
  req.shape = values_of(t->shape, m.problem, m.specialization, m.dir);
  req.seed = 1;
  // A module specialized on one of the kernel's float options (softcap = 1) runs with it set.
  for (const kernels::FloatOption& o : t->options) {
    auto it = m.specialization.find(o.name);
    if (it != m.specialization.end() && it->second != rt::SpecValue(std::int64_t(0))) req.options[o.name] = 30.0;
  }
  kernels::Problem p = kernels::make_problem(*t, req);

  // The kernels of a run are found by name in the module's folder.
  std::map<std::string, rt::Manifest> here;
  for (const auto& entry : fs::directory_iterator(m.dir))
    if (entry.path().extension() == ".toml" && entry.path().filename().string().find(".kernel.") == std::string::npos) {
      rt::Manifest other = rt::read_manifest(entry.path());
      here.emplace(other.kernel, std::move(other));
    }
  auto source = [&](const tilec::ir::Function& fn, int, const std::vector<tilec::interp::Arg>&) {
    auto it = here.find(fn.name);
    if (it == here.end())
      throw rt::ManifestError(fmt::format("{}: no module of kernel '{}', which a run of {} launches", m.dir.string(),
                                          fn.name, m.kernel));
    return it->second;
  };
  std::unique_ptr<kernels::Launcher> launcher = kernels::make_module_launcher(source, gpu, gpu ? "cuda" : "emulate");

  Result r;
  r.shape = p.description;
  r.ideal_bytes = p.ideal_bytes;
  kernels::run_problem(*t, "", req.params, req.shape, p, *launcher);
  r.check = kernels::compare_outputs(p);
  const int warmup = 3;
  for (int i = 0; i < warmup; ++i) kernels::run_problem(*t, "", req.params, req.shape, p, *launcher);
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    launcher->reset_stats();
    kernels::run_problem(*t, "", req.params, req.shape, p, *launcher);
    ms.push_back(launcher->stats().time_ms);
  }
  r.timing = kernels::summarize_times(std::move(ms), warmup);
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

int run(const fs::path& modules, int repeats, const std::string& out_file, bool emulate) {
  std::string arch = "host", device = rt::host_device_name("emulate");
  if (!emulate) {
    const rt::DeviceProperties& dev = rt::LoadedModule::gpu_context().properties();
    arch = module_arch(dev);
    device = dev.name;
    fmt::print(stderr, "gpu_bench: {} ({}, {} SMs, {:.0f} GiB, driver {})\n", dev.name, dev.arch(), dev.sm_count,
               double(dev.total_memory) / double(1ull << 30), dev.driver_version);
  }
  fs::path dir = modules / arch;
  if (!fs::is_directory(dir))
    throw rt::ManifestError(fmt::format("{}: no such folder (build the modules with scripts/build_gpu_modules.sh)",
                                        dir.string()));
  // The first module of each run (a combine module is launched by its run's first).
  std::vector<rt::Manifest> manifests;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const fs::path& f = entry.path();
    if (f.extension() != ".toml" || f.filename().string().find(".kernel.") != std::string::npos) continue;
    rt::Manifest m = rt::read_manifest(f);
    if (m.run.empty() || m.run.front() == m.kernel) manifests.push_back(std::move(m));
  }
  std::sort(manifests.begin(), manifests.end(), [](const auto& a, const auto& b) { return a.dir < b.dir; });
  if (manifests.empty()) throw rt::ManifestError(fmt::format("{}: no module manifests (*.toml)", dir.string()));
  fmt::print(stderr, "gpu_bench: {} modules from {}\n", manifests.size(), dir.string());

  std::ofstream jsonl;
  if (!out_file.empty()) jsonl.open(out_file, std::ios::app);
  size_t failures = 0;
  for (const rt::Manifest& m : manifests) {
    std::string name = fs::relative(m.dir, dir).string();
    std::string line;
    try {
      Result r = bench_module(m, !emulate, repeats);
      std::optional<double> gbps;
      if (r.ideal_bytes && r.timing.median_ms > 0) gbps = double(*r.ideal_bytes) / (r.timing.median_ms * 1e-3) / 1e9;
      auto opt = [](const auto& v) { return v ? fmt::format("{}", *v) : std::string("null"); };
      line = fmt::format("{{\"module\":{},\"kernel\":{},\"device\":{},\"arch\":{},\"code\":{},\"ok\":{},"
                         "\"max_abs_err\":{:.3g},\"max_rel_err\":{:.3g},\"median_ms\":{:.5f},\"min_ms\":{:.5f},"
                         "\"max_ms\":{:.5f},\"repeats\":{},\"ideal_bytes\":{},\"gbps\":{},\"registers\":{},"
                         "\"shape\":{}{}}}",
                         json_string(name), json_string(m.kernel), json_string(device), json_string(arch),
                         json_string(emulate ? "emulator" : m.cubin.empty() ? "ptx" : "cubin"), r.check.ok,
                         r.check.max_abs_err, r.check.max_rel_err, r.timing.median_ms, r.timing.min_ms, r.timing.max_ms,
                         repeats, opt(r.ideal_bytes), gbps ? fmt::format("{:.1f}", *gbps) : "null",
                         m.ptxas ? std::to_string(m.ptxas->registers) : "null", json_string(r.shape),
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
      line = fmt::format("{{\"module\":{},\"ok\":false,\"error\":{}}}", json_string(name), json_string(e.what()));
      fmt::print(stderr, "  {:<40} FAILED: {}\n", name, e.what());
      ++failures;
    }
    std::cout << line << std::endl;
    if (jsonl) jsonl << line << "\n" << std::flush;
  }
  fmt::print(stderr, "gpu_bench: {} of {} modules ok\n", manifests.size() - failures, manifests.size());
  return failures ? 1 : 0;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (a.empty() || a[0] == "--help") {
    fmt::print(stderr, "usage: gpu_bench MODULES_DIR [--repeats N] [--out FILE.jsonl] [--emulate]\n");
    return 2;
  }
  int repeats = 50;
  std::string out_file;
  bool emulate = false;
  for (std::size_t i = 1; i < a.size(); ++i) {
    if (a[i] == "--repeats" && i + 1 < a.size()) {
      repeats = std::atoi(a[++i].c_str());
      if (repeats < 1) {
        fmt::print(stderr, "gpu_bench: --repeats must be a positive integer, got '{}'\n", a[i]);
        return 2;
      }
    } else if (a[i] == "--emulate") {
      emulate = true;
    } else if (a[i] == "--out" && i + 1 < a.size()) {
      out_file = a[++i];
    } else {
      fmt::print(stderr, "gpu_bench: unknown argument '{}' (usage: gpu_bench MODULES_DIR [--repeats N] [--out F] [--emulate])\n",
                 a[i]);
      return 2;
    }
  }
  try {
    return run(a[0], repeats, out_file, emulate);
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
