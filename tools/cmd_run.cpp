#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <unistd.h>

#include "backends/launchers.h"
#include "interp/launcher.h"
#include "ir/verifier.h"
#include "runtime/cuda.h"
#include "abi/error.h"
#include "runtime/npy.h"
#include "tools/commands.h"
#include "tools/json.h"
#include "tools/kernel_args.h"

namespace tilec::cli {

namespace {

struct RunOptions {
  KernelChoice choice;
  std::string backend = "auto";
  uint64_t seed = 1;
  std::string path;                                   // empty: the template's default
  std::map<std::string, std::optional<double>> options; // --NAME X of the templates' float options
  std::string inputs_dir, out_file;
  bool out_given = false; // --out "" too
  std::string tuned; // tuning database to take the config from
  bool strict_traffic = false; // a run over its traffic budget fails instead of warning
};

// What one launch on a backend measured; figures a backend cannot know stay empty.
struct RunResult {
  double time_ms = 0.0;
  std::optional<int64_t> bytes_loaded, bytes_stored, unique_bytes, ideal_bytes;
  std::optional<int64_t> requests, sectors, request_bytes, ideal_sectors;
  std::string traffic_error; // the run moved more than the kernel's traffic budget
  std::vector<launch::LaunchStats::ProgramWork> programs; // each emulated launch's spread over its programs
};

std::string resolve_backend(const std::string& requested) {
  if (requested != "auto") return requested;
  return rt::cuda_available() ? "cuda" : "emulate";
}

// The launcher for a backend; BackendUnavailable (exit 3) when this machine or
// build cannot run it.
std::unique_ptr<launch::Launcher> make_launcher(const std::string& backend) {
  if (backend == "interpret") return interp::make_interpret_launcher();
  if (backend == "emulate") return backends::make_emulate_launcher();
  if (backend == "cuda") return backends::make_cuda_launcher();
  throw rt::BackendUnavailable(fmt::format("unknown backend '{}'", backend));
}

RunResult stats_of(const launch::Launcher& l) {
  const auto& st = l.stats();
  RunResult r;
  r.time_ms = st.time_ms;
  r.bytes_loaded = st.bytes_loaded;
  r.bytes_stored = st.bytes_stored;
  r.unique_bytes = st.unique_bytes;
  r.requests = st.requests;
  r.sectors = st.sectors;
  r.request_bytes = st.request_bytes;
  r.ideal_sectors = st.ideal_sectors;
  r.programs = st.program_work;
  return r;
}

void print_result(const Common& common, const std::string& kernel, const std::string& backend,
                  std::optional<std::string> path, const std::string& what,
                  const templates::Comparison& c, const RunResult& r, bool strict_traffic) {
  const char* verdict = !c.ok ? "MISMATCH" : !r.traffic_error.empty() && strict_traffic ? "TOO MUCH TRAFFIC" : "ok";
  say(common, fmt::format("{} [{}] on {}: {}  max_abs_err {:.3g}  max_rel_err {:.3g}  {:.3f} ms", kernel,
                          what, backend, verdict, c.max_abs_err, c.max_rel_err, r.time_ms));
  if (r.bytes_loaded)
    say(common, fmt::format("    bytes loaded {}  stored {}  unique {}{}", *r.bytes_loaded, r.bytes_stored.value_or(0),
                            r.unique_bytes.value_or(0),
                            r.ideal_bytes ? fmt::format("  ideal {}", *r.ideal_bytes) : std::string()));
  if (r.requests && *r.requests > 0)
    say(common, fmt::format("    warp requests {}  moving {} bytes  sectors {} ({:.2f} per request, {:.0f}% of them needed)",
                            *r.requests, r.request_bytes.value_or(0), r.sectors.value_or(0),
                            double(r.sectors.value_or(0)) / double(*r.requests),
                            100.0 * double(r.ideal_sectors.value_or(0)) / double(std::max<int64_t>(1, r.sectors.value_or(0)))));
  auto uneven = [](const launch::LaunchStats::ProgramWork& w) {
    return w.mean_bytes > 0 ? double(w.max_bytes) / w.mean_bytes : 0.0;
  };
  // How evenly each launch spread its work: the busiest program against the mean; of a run of
  // many launches (the decomposition's primitives), the most uneven alone.
  std::vector<launch::LaunchStats::ProgramWork> shown;
  for (const auto& w : r.programs)
    if (w.programs > 1) shown.push_back(w);
  if (shown.size() > 3) {
    auto most = *std::max_element(shown.begin(), shown.end(), [&](const auto& a, const auto& b) { return uneven(a) < uneven(b); });
    say(common, fmt::format("    {} launches; the most uneven:", shown.size()));
    shown = {most};
  }
  for (const auto& w : shown)
    say(common, fmt::format("    {} programs of {}: {} moved more than the least ({} bytes); the most {} bytes, "
                            "{:.2f}x the mean {:.0f} ({:.2f}x the busy ones' {:.0f})",
                            w.programs, w.kernel, w.busy, w.min_bytes, w.max_bytes, uneven(w), w.mean_bytes,
                            w.busy_mean_bytes > 0 ? double(w.max_bytes) / w.busy_mean_bytes : 0.0, w.busy_mean_bytes));
  if (!c.ok) std::cerr << program_name() << ": first mismatch: " << c.first_mismatch << "\n";
  if (!r.traffic_error.empty())
    std::cerr << program_name() << (strict_traffic ? ": " : ": warning: ") << r.traffic_error
              << (strict_traffic ? "" : " (the result is right; --strict-traffic makes this an error)") << "\n";
  if (common.json) {
    JsonObject j;
    j.str("kernel", kernel).str("backend", backend);
    if (path) j.str("path", *path);
    else j.null("path");
    j.boolean("ok", c.ok && (r.traffic_error.empty() || !strict_traffic)).number("max_abs_err", c.max_abs_err).number("max_rel_err", c.max_rel_err);
    j.number("time_ms", r.time_ms);
    j.maybe("bytes_loaded", r.bytes_loaded).maybe("bytes_stored", r.bytes_stored);
    j.maybe("unique_bytes", r.unique_bytes).maybe("ideal_bytes", r.ideal_bytes);
    j.maybe("requests", r.requests).maybe("request_bytes", r.request_bytes);
    j.maybe("sectors", r.sectors).maybe("ideal_sectors", r.ideal_sectors);
    std::string programs;
    for (const auto& w : r.programs) {
      JsonObject p;
      p.str("kernel", w.kernel).integer("programs", w.programs).integer("busy", w.busy);
      p.integer("min_bytes", w.min_bytes).integer("max_bytes", w.max_bytes).number("mean_bytes", w.mean_bytes);
      p.number("max_over_mean", uneven(w));
      p.number("busy_mean_bytes", w.busy_mean_bytes);
      programs += (programs.empty() ? "" : ", ") + p.str();
    }
    j.raw("programs", "[" + programs + "]"); // [] where the backend counts none
    if (r.traffic_error.empty()) j.null("traffic_error");
    else j.str("traffic_error", r.traffic_error);
    std::cout << j.str() << std::endl;
  }
}

// Rejects an --out file that could not be written, before the run: a failed command writes
// nothing (write_npy itself writes beside the file and renames it into place).
void check_out_file(const std::string& file) {
  namespace fs = std::filesystem;
  if (file.empty()) throw UserError("--out: the file name is empty");
  std::error_code ec;
  fs::path path(file), folder = path.parent_path();
  if (folder.empty()) folder = ".";
  if (fs::is_directory(path, ec)) throw UserError(fmt::format("--out {}: is a folder", file));
  if (!fs::exists(folder, ec)) throw UserError(fmt::format("--out {}: folder {} does not exist", file, folder.string()));
  if (!fs::is_directory(folder, ec)) throw UserError(fmt::format("--out {}: {} is not a folder", file, folder.string()));
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    throw UserError(fmt::format("--out {}: cannot write in {}: {}", file, folder.string(), std::strerror(errno)));
}

// A kernel with several outputs (reshape_and_cache's two caches) writes each as NAME.npy into
// the folder --out names, made when missing: it may be a folder, or a name in one that exists.
bool out_is_folder(const templates::KernelTemplate& t) {
  return std::count_if(t.tensors.begin(), t.tensors.end(), [](const templates::TensorSpec& s) { return s.output; }) > 1;
}

void check_out_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  if (dir.empty()) throw UserError("--out: the folder name is empty");
  std::error_code ec;
  fs::path path(dir), where = path;
  if (fs::exists(path, ec) && !fs::is_directory(path, ec))
    throw UserError(fmt::format("--out {}: is not a folder (this kernel writes several outputs into one)", dir));
  if (!fs::exists(path, ec)) {
    where = path.parent_path().empty() ? fs::path(".") : path.parent_path();
    if (!fs::is_directory(where, ec))
      throw UserError(fmt::format("--out {}: folder {} does not exist", dir, where.string()));
  }
  if (::access(where.c_str(), W_OK | X_OK) != 0)
    throw UserError(fmt::format("--out {}: cannot write in {}: {}", dir, where.string(), std::strerror(errno)));
}

// A tuning database given with --tuned must exist: a missing one is a mistyped name, not an
// empty database.
void check_tuned_db(const std::string& db) {
  std::error_code ec;
  if (!std::filesystem::exists(db, ec))
    throw UserError(fmt::format("--tuned {}: no such file (tilec autotune -o writes one)", db));
  if (!std::filesystem::is_regular_file(db, ec)) throw UserError(fmt::format("--tuned {}: not a file", db));
}

int run_kernel(const Common& common, const RunOptions& o) {
  const templates::KernelTemplate& t = o.choice.kernel();
  if (!o.out_file.empty() || o.out_given) out_is_folder(t) ? check_out_folder(o.out_file) : check_out_file(o.out_file);
  if (!o.tuned.empty()) check_tuned_db(o.tuned);
  templates::ProblemRequest req{o.choice.shape(), o.seed, {}, o.inputs_dir};
  for (const auto& [name, value] : o.options)
    if (value) req.options[name] = *value;
  templates::ParamMap params = o.choice.params();
  // A bad --set is named before the problem is made (with --inputs, once the files give the sizes).
  if (o.inputs_dir.empty()) templates::build_kernels(t, params, req.shape);
  templates::Problem p = templates::make_problem(t, req);
  if (!o.inputs_dir.empty()) {
    // The files give the sizes: a --shape value is a check on them, an error where it differs.
    for (const std::string& given : o.choice.shapes) {
      std::string name = given.substr(0, given.find('='));
      auto it = p.shape.find(name);
      if (it != p.shape.end() && it->second != req.shape.at(name)) {
        const auto& decl = *std::find_if(t.shape.begin(), t.shape.end(), [&](const templates::Param& q) { return q.name == name; });
        throw UserError(fmt::format("--shape {} contradicts the inputs in {}, which give {}={}", given, o.inputs_dir,
                                    name, decl.value_str(it->second)));
      }
    }
  }
  std::string backend = resolve_backend(o.backend);
  if (!o.tuned.empty()) params = tuned_params(common, t, o.tuned, p.shape, backend, params);
  if (!o.inputs_dir.empty()) templates::build_kernels(t, params, p.shape); // the config against the files' sizes
  auto launcher = make_launcher(backend);
  templates::run_problem(t, o.path, params, p, *launcher);
  if (!o.out_file.empty()) templates::write_output(t, o.out_file, p);
  templates::Comparison c = templates::compare_outputs(p);
  RunResult r = stats_of(*launcher);
  r.ideal_bytes = p.ideal_bytes;
  r.traffic_error = templates::traffic_error(t, o.path, params, p, launcher->stats());
  std::optional<std::string> path;
  if (!t.paths.empty()) path = o.path.empty() ? templates::default_path(t) : o.path;
  print_result(common, t.name, backend, path, p.description, c, r, o.strict_traffic);
  return c.ok && (r.traffic_error.empty() || !o.strict_traffic) ? kOk : kFailed;
}

} // namespace

std::unique_ptr<launch::Launcher> backend_launcher(const std::string& requested, std::string& backend) {
  backend = resolve_backend(requested);
  return make_launcher(backend);
}

Action add_run(CLI::App& app, Common& common) {
  auto o = std::make_shared<RunOptions>();
  o->choice.add_options(app);
  app.add_option("--backend", o->backend, "where to run: auto, interpret, emulate or cuda")
      ->check(CLI::IsMember({"auto", "interpret", "emulate", "cuda"}))
      ->capture_default_str();
  app.add_option("--seed", o->seed, "seed of the generated inputs")
      ->check(kSeedCheck)
      ->capture_default_str();
  app.add_option("--path", o->path, "how to compute it, for kernels with several ways (tilec list shows them)");
  add_float_options(app, o->options);
  app.add_option("--inputs", o->inputs_dir, "read the inputs from this folder of .npy files (kernels that take "
                                            "files; see tilec list)");
  app.add_option("--tuned", o->tuned, "take the config from this tuning database (tilec autotune)");
  app.add_option("--out", o->out_file, "write the output here (.npy; a folder of NAME.npy files for a kernel with "
                                       "several outputs)");
  app.add_flag("--strict-traffic", o->strict_traffic,
               "fail (exit 1) when the run moves more bytes than the kernel's traffic budget allows (default: a "
               "warning)");
  return [&common, o, &app]() -> int {
    o->out_given = app.count("--out") > 0;
    return run_kernel(common, *o);
  };
}

} // namespace tilec::cli
