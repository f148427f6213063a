#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <unistd.h>

#include "backends/launchers.h"
#include "interp/interpreter.h"
#include "ir/verifier.h"
#include "runtime/cuda.h"
#include "abi/error.h"
#include "tools/commands.h"
#include "tools/json.h"
#include "kernels/paged_attention.h"
#include "tools/kernel_args.h"

namespace tilec::cli {

namespace {

struct RunOptions {
  KernelChoice choice;
  std::string backend = "auto";
  uint64_t seed = 1;
  // paged_attention only
  std::string path = "fused";
  std::optional<double> softmax_scale, softcap;
  std::string inputs_dir, out_file;
  bool out_given = false; // --out "" too
  std::string tuned; // tuning database to take the config from
};

// What one launch on a backend measured; figures a backend cannot know stay empty.
struct RunResult {
  double time_ms = 0.0;
  std::optional<int64_t> bytes_loaded, bytes_stored, unique_bytes, ideal_bytes;
};

std::string resolve_backend(const std::string& requested) {
  if (requested != "auto") return requested;
  return rt::cuda_available() ? "cuda" : "emulate";
}

// The launcher for a backend; BackendUnavailable (exit 3) when this machine or
// build cannot run it.
std::unique_ptr<kernels::Launcher> make_launcher(const std::string& backend) {
  if (backend == "interpret") return kernels::make_interpret_launcher();
  if (backend == "emulate") return backends::make_emulate_launcher();
  if (backend == "cuda") return backends::make_cuda_launcher();
  throw rt::BackendUnavailable(fmt::format("unknown backend '{}'", backend));
}

RunResult stats_of(const kernels::Launcher& l) {
  const auto& st = l.stats();
  RunResult r;
  r.time_ms = st.time_ms;
  r.bytes_loaded = st.bytes_loaded;
  r.bytes_stored = st.bytes_stored;
  r.unique_bytes = st.unique_bytes;
  return r;
}

void print_result(const Common& common, const std::string& kernel, const std::string& backend,
                  std::optional<std::string> path, const std::string& what,
                  const kernels::Comparison& c, const RunResult& r) {
  say(common, fmt::format("{} [{}] on {}: {}  max_abs_err {:.3g}  max_rel_err {:.3g}  {:.3f} ms", kernel,
                          what, backend, c.ok ? "ok" : "MISMATCH", c.max_abs_err, c.max_rel_err, r.time_ms));
  if (r.bytes_loaded)
    say(common, fmt::format("    bytes loaded {}  stored {}  unique {}{}", *r.bytes_loaded, r.bytes_stored.value_or(0),
                            r.unique_bytes.value_or(0),
                            r.ideal_bytes ? fmt::format("  ideal {}", *r.ideal_bytes) : std::string()));
  if (!c.ok) std::cerr << "tilec: first mismatch: " << c.first_mismatch << "\n";
  if (common.json) {
    JsonObject j;
    j.str("kernel", kernel).str("backend", backend);
    if (path) j.str("path", *path);
    else j.null("path");
    j.boolean("ok", c.ok).number("max_abs_err", c.max_abs_err).number("max_rel_err", c.max_rel_err);
    j.number("time_ms", r.time_ms);
    j.maybe("bytes_loaded", r.bytes_loaded).maybe("bytes_stored", r.bytes_stored);
    j.maybe("unique_bytes", r.unique_bytes).maybe("ideal_bytes", r.ideal_bytes);
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

int run_paged_attention(const Common& common, const RunOptions& o) {
  using namespace kernels;
  if (!o.out_file.empty() || o.out_given) check_out_file(o.out_file);
  if (!o.tuned.empty()) {
    // A database that is not there is a mistyped name, not an empty database.
    std::error_code ec;
    if (!std::filesystem::exists(o.tuned, ec))
      throw UserError(fmt::format("--tuned {}: no such file (tilec autotune -o writes one)", o.tuned));
    if (!std::filesystem::is_regular_file(o.tuned, ec))
      throw UserError(fmt::format("--tuned {}: not a file", o.tuned));
  }
  auto shape_params = o.choice.shape();
  auto cfg = paged_attention_config(o.choice.params());
  PagedAttentionInputs in;
  std::string what;
  if (!o.inputs_dir.empty()) {
    if (!o.choice.shapes.empty()) throw UserError("--shape and --inputs exclude each other: the files give the shapes");
    in = read_paged_attention_inputs(o.inputs_dir, o.softmax_scale.value_or(0.0), o.softcap);
    what = o.inputs_dir;
  } else {
    PagedAttentionShape s = paged_attention_shape(shape_params);
    s.softmax_scale = o.softmax_scale.value_or(0.0);
    s.softcap = o.softcap;
    in = make_paged_attention_inputs(s, o.seed, shape_params.at("ctx"));
  }
  const PagedAttentionShape& s = in.shape;
  if (what.empty())
    what = fmt::format("batch={} hq={} hkv={} sq={} head_dim={} block_size={} max_blocks={} {}{}", s.batch, s.hq,
                       s.hkv, s.sq, s.head_dim, s.block_size, s.max_blocks, ir::dtype_name(s.dtype),
                       s.alibi ? " alibi" : "");
  validate_paged_attention(in, o.path == "decompose");
  std::string backend = resolve_backend(o.backend);
  if (!o.tuned.empty()) cfg = tuned_paged_attention_config(common, o.tuned, shape_params, in, !o.inputs_dir.empty(), backend, cfg);
  auto launcher = make_launcher(backend);
  interp::Buffer out = o.path == "fused" ? run_paged_attention_fused(in, cfg, *launcher)
                                         : run_paged_attention_decomposed(in, *launcher);
  if (!o.out_file.empty()) write_paged_attention_output(o.out_file, in, out);

  Problem p;
  p.outputs = {p.add_buffer(std::move(out))};
  p.expected = {paged_attention_reference(in)};
  p.atol = s.dtype == ir::DType::f32 ? 1e-5 : s.dtype == ir::DType::f16 ? 4e-3 : 3e-2;
  p.rtol = s.dtype == ir::DType::f32 ? 1e-4 : 1e-2;
  kernels::Comparison c = compare_outputs(p);
  RunResult r = stats_of(*launcher);
  r.ideal_bytes = paged_attention_ideal_bytes(in);
  print_result(common, "paged_attention", backend, o.path, what, c, r);
  return c.ok ? kOk : kFailed;
}

} // namespace

std::unique_ptr<kernels::Launcher> backend_launcher(const std::string& requested, std::string& backend) {
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
  app.add_option("--path", o->path, "paged_attention: fused (block-table walk) or decompose (primitive ops)")
      ->check(CLI::IsMember({"fused", "decompose"}))
      ->capture_default_str();
  app.add_option("--softmax-scale", o->softmax_scale, "paged_attention: scale of q.k (default 1/sqrt(head_dim))");
  app.add_option("--softcap", o->softcap, "paged_attention: cap * tanh(s / cap) on the scores (default none)");
  app.add_option("--inputs", o->inputs_dir, "paged_attention: folder of q.npy k_cache.npy v_cache.npy "
                                            "block_table.npy context_lens.npy [alibi_slopes.npy]");
  app.add_option("--tuned", o->tuned, "paged_attention: take the config from this tuning database (tilec autotune)");
  app.add_option("--out", o->out_file, "paged_attention: write the output here (.npy, q's dtype)");
  return [&common, o, &app]() -> int {
    o->out_given = app.count("--out") > 0;
    const auto& t = o->choice.kernel();
    if (t.name == "paged_attention") return run_paged_attention(common, *o);
    for (const char* flag : {"--path", "--softmax-scale", "--softcap", "--inputs", "--out", "--tuned"})
      if (app.count(flag) > 0)
        throw UserError(fmt::format("{} applies to paged_attention only, not {}", flag, t.name));
    auto params = o->choice.params();
    auto shape = o->choice.shape();
    std::string backend = resolve_backend(o->backend);
    ir::Kernel k = t.build(params, shape);
    ir::verify(*k);
    kernels::Problem p = t.make_problem(params, shape, o->seed);
    auto launcher = make_launcher(backend);
    launcher->launch(k, int(params.count("num_warps") ? params.at("num_warps") : 4), p.grid, p.interp_args());
    RunResult r = stats_of(*launcher);
    kernels::Comparison c = kernels::compare_outputs(p);

    std::string sizes;
    for (auto& [name, v] : shape) sizes += fmt::format("{}{}={}", sizes.empty() ? "" : " ", name, v);
    print_result(common, t.name, backend, std::nullopt, sizes, c, r);
    return c.ok ? kOk : kFailed;
  };
}

} // namespace tilec::cli
