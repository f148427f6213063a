#include <fmt/format.h>

#include <chrono>
#include <iostream>

#include "interp/interpreter.h"
#include "ir/verifier.h"
#include "runtime/cuda.h"
#include "runtime/error.h"
#include "tools/commands.h"
#include "tools/json.h"
#include "tools/kernel_args.h"

namespace tilec::cli {

namespace {

struct RunOptions {
  KernelChoice choice;
  std::vector<std::string> shape;
  std::string backend = "auto";
  uint64_t seed = 1;
};

// What one launch on a backend measured; figures a backend cannot know stay empty.
struct RunResult {
  double time_ms = 0.0;
  std::optional<int64_t> bytes_loaded, bytes_stored, unique_bytes, ideal_bytes;
};

std::string resolve_backend(const std::string& requested) {
  if (requested != "auto") return requested;
  // The code generator is not wired to the GPU and emulator backends yet, so
  // auto falls back to the interpreter.
  return "interpret";
}

RunResult run_on(const std::string& backend, const ir::Function& k, templates::Problem& p) {
  RunResult r;
  if (backend == "interpret") {
    auto args = p.interp_args();
    auto t0 = std::chrono::steady_clock::now();
    interp::interpret(k, p.grid, args);
    r.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  if (backend == "cuda") {
    std::string reason;
    if (!rt::cuda_available(&reason)) throw rt::BackendUnavailable(reason);
    throw rt::BackendUnavailable("the cuda backend needs the code generator, which is not in this build yet");
  }
  throw rt::BackendUnavailable(
      "the emulate backend is not in this build yet; use --backend interpret");
}

} // namespace

Action add_run(CLI::App& app, Common& common) {
  auto o = std::make_shared<RunOptions>();
  o->choice.add_options(app);
  app.add_option("--shape", o->shape, "problem size NAME=VALUE (repeatable)")->take_all();
  app.add_option("--backend", o->backend, "where to run: auto, interpret, emulate or cuda")
      ->check(CLI::IsMember({"auto", "interpret", "emulate", "cuda"}))
      ->capture_default_str();
  app.add_option("--seed", o->seed, "seed of the generated inputs")->capture_default_str();
  return [&common, o] {
    const auto& t = o->choice.kernel();
    auto params = o->choice.params();
    auto shape = templates::resolve_params(t.shape, o->shape, "--shape");
    std::string backend = resolve_backend(o->backend);
    ir::Kernel k = t.build(params);
    ir::verify(*k);
    templates::Problem p = t.make_problem(params, shape, o->seed);
    RunResult r = run_on(backend, *k, p);
    templates::Comparison c = templates::compare_outputs(p);

    std::string sizes;
    for (auto& [name, v] : shape) sizes += fmt::format("{}{}={}", sizes.empty() ? "" : " ", name, v);
    say(common, fmt::format("{} [{}] on {}: {}  max_abs_err {:.3g}  max_rel_err {:.3g}  {:.3f} ms",
                            t.name, sizes, backend, c.ok ? "ok" : "MISMATCH", c.max_abs_err,
                            c.max_rel_err, r.time_ms));
    if (!c.ok) std::cerr << "tilec: first mismatch: " << c.first_mismatch << "\n";
    if (common.json) {
      JsonObject j;
      j.str("kernel", t.name).str("backend", backend).null("path").boolean("ok", c.ok);
      j.number("max_abs_err", c.max_abs_err).number("max_rel_err", c.max_rel_err);
      j.number("time_ms", r.time_ms);
      j.maybe("bytes_loaded", r.bytes_loaded).maybe("bytes_stored", r.bytes_stored);
      j.maybe("unique_bytes", r.unique_bytes).maybe("ideal_bytes", r.ideal_bytes);
      std::cout << j.str() << std::endl;
    }
    return c.ok ? kOk : kFailed;
  };
}

} // namespace tilec::cli
