#pragma once
// Kernels written in the DSL, each with the problem it solves and a plain C++
// reference, in one registry that the CLI and the tests share.
#include <any>
#include <cstdint>
#include <functional>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "interp/interpreter.h"
#include "ir/ir.h"
#include "abi/manifest.h"
#include "runtime/module_store.h"

namespace tilec::kernels {

// A named integer knob with its default: a template parameter (`--set`) or a
// problem size (`--shape`).
struct Param {
  std::string name;
  int64_t value = 0;
  std::string help;
  // When set, the value is an index into these names and `k=name` is accepted.
  std::vector<std::string> choices = {};

  std::string value_str() const { return value_str(value); }
  std::string value_str(int64_t v) const;
};
using ParamMap = std::map<std::string, int64_t>;

// One kernel argument: a buffer of the problem, or a scalar.
struct ArgSpec {
  int buffer = -1; // index into Problem::buffers, or -1 for a scalar
  int64_t i = 0;
  double f = 0.0;
  bool is_float = false;
};

// Inputs, launch grid and expected outputs for one run of a kernel.
struct Problem {
  std::vector<interp::Buffer> buffers;
  std::vector<ArgSpec> args;
  interp::Grid grid{1, 1, 1};
  std::vector<int> outputs;              // buffers the kernel writes
  std::vector<interp::Buffer> expected;  // the reference's values of `outputs`
  double atol = 1e-6;                    // |got - want| <= atol + rtol * |want|
  double rtol = 1e-5;
  std::optional<int64_t> ideal_bytes;    // the least a run must move (for GB/s); empty: unknown
  std::string description;               // one line naming the problem (default: the --shape values)
  // The --shape values this problem has, when they come from elsewhere than the request
  // (files read with --inputs): what its tuning key is made of. Empty: the request's.
  ParamMap shape;
  // The template's own view of the problem, for its run paths (paged attention keeps its
  // PagedAttentionInputs here); empty for kernels that launch `args` on `grid`.
  std::any context;

  int add_buffer(interp::Buffer b);
  void arg_buffer(int index) { args.push_back({index}); }
  void arg_int(int64_t v) { args.push_back({-1, v, static_cast<double>(v), false}); }
  void arg_float(double v) { args.push_back({-1, static_cast<int64_t>(v), v, true}); }
  // The interpreter's view of `args`, pointing into `buffers`.
  std::vector<interp::Arg> interp_args();
};

struct Comparison {
  bool ok = true;
  double max_abs_err = 0.0;
  double max_rel_err = 0.0;
  std::string first_mismatch; // where the first element out of tolerance is
};

// Compares the problem's output buffers with its expected values.
Comparison compare_outputs(const Problem& p);

// What one problem is made from: the --set and --shape values, the seed of generated inputs,
// the template's float options that were given (`--NAME X`), and a folder to read the inputs
// from instead (`--inputs DIR`, for templates with `reads_inputs`).
struct ProblemRequest {
  ParamMap params, shape;
  uint64_t seed = 1;
  std::map<std::string, double> options;
  std::string inputs_dir;
};

class Launcher;
struct LaunchStats;

// One way to compute a problem's outputs on a launcher (paged attention: "fused", the
// block-table walk, and "decompose", the seed's primitive recipe).
struct RunPath {
  std::string name, help;
  std::function<void(Problem& p, const ParamMap& params, const ParamMap& shape, Launcher& l)> run;
};

// A float value of a problem that is not a size: `tilec run/bench --NAME X`.
struct FloatOption {
  std::string name, help;
};

// A kernel as every command sees it: its parameters and sizes, a builder, and a problem with
// a reference. The other fields are optional; each says which command needs it.
struct KernelTemplate {
  std::string name;
  std::string summary;
  std::vector<Param> params; // compile-time (--set)
  std::vector<Param> shape;  // problem sizes (--shape)
  // Builds the kernel; specializations may depend on problem sizes too.
  std::function<ir::Kernel(const ParamMap& params, const ParamMap& shape)> build;
  // Inputs, launches and reference of one problem (run, autotune, bench need it).
  std::function<Problem(const ProblemRequest& request)> make_problem;
  // Every kernel one run launches, in order, when there is more than `build`'s (paged
  // attention with num_splits > 1 adds its combine kernel). Empty: {build(params, shape)}.
  std::function<std::vector<ir::Kernel>(const ParamMap& params, const ParamMap& shape)> build_all = {};
  // What a compiled module of this template is specialized on: recorded in its manifest and
  // matched by rt::find_module. Empty: every parameter and problem size (choices by name).
  std::function<std::map<std::string, rt::SpecValue>(const ParamMap& params, const ParamMap& shape)>
      module_spec = {};
  // The pointer parameters whose buffers pass 2^31 elements at these sizes: compiled modules
  // compute offsets into them in 64 bits (CompileOptions::large_buffers). Empty: none ever
  // do (a launcher still widens from the buffers it is given).
  std::function<std::set<std::string>(const ParamMap& params, const ParamMap& shape)> large_buffers = {};
  // How a run computes the outputs; the first path is the default (`--path`). Empty: one path
  // that launches build(params, shape) on the problem's grid with its args.
  std::vector<RunPath> paths = {};
  std::vector<FloatOption> options = {};
  // make_problem reads request.inputs_dir (`--inputs DIR`; the help names the files).
  bool reads_inputs = false;
  std::string inputs_help = {};
  // --shape names that stay parameters of the op when the inputs come from files (paged
  // attention: window, causal); the files give every other size.
  std::vector<std::string> shape_with_inputs = {};
  // Writes output `index` of a run as .npy (`--out F.npy`). Empty: a 1-d array of its dtype.
  std::function<void(const std::string& path, const Problem& p)> write_output = {};
  // The --shape values that only size a problem: a config tuned for a key that differs from
  // the asked one only in these serves it as the nearest key (`--tuned`, rt::select_config),
  // closest in the first field first. Empty: only an exactly tuned key is used.
  std::vector<std::string> size_fields = {};
  // The most a correct run of the default path may move, in bytes of warp-wide requests (what
  // the emulator counts: LaunchStats::request_bytes), for a problem and config. A run that
  // moves more fails (`tilec run` exits 1): an over-wide access or a load the kernel should
  // not make is a deterministic performance bug. Empty, or nullopt: not checked.
  std::function<std::optional<int64_t>(const Problem& p, const ParamMap& params)> traffic_budget = {};
  // Values a module is specialized on beyond the tuning key and config (merged into the
  // --shape values): `autotune --export` writes the winner's modules once per variant
  // (paged attention: softcap=0 and softcap=1). Empty: one set of modules.
  std::vector<ParamMap> module_variants = {};
};

// The --shape values of a problem, choices by name: its key in the tuning database, and what
// a module records as the problem it was compiled for.
rt::ProblemKey problem_key(const KernelTemplate& t, const ParamMap& shape);

// What a host needs of `t` beyond its modules (runtime/module_store.h): its declared defaults,
// its size fields and the first module variant as specialization defaults.
rt::KernelCard kernel_card(const KernelTemplate& t);

// The default path's name ("kernel" when the template declares none).
std::string default_path(const KernelTemplate& t);
// Within 2% of the problem's ideal bytes: the usual traffic_budget of a kernel that should
// move each byte once (nullopt without ideal_bytes).
std::optional<int64_t> ideal_traffic_budget(const Problem& p, double tolerance = 0.02);
// Why the run of `path` (empty: the default) moved more than t.traffic_budget allows; empty
// when it did not, or when the budget, the path or the launcher's counts do not apply.
std::string traffic_error(const KernelTemplate& t, const std::string& path, const ParamMap& params, const Problem& p,
                          const LaunchStats& stats);
// Runs `path` (empty: the default) of `t` on `p` with `launcher`; UserError naming the
// template's paths when there is no such path. The outputs land in p.buffers.
void run_problem(const KernelTemplate& t, const std::string& path, const ParamMap& params, const ParamMap& shape,
                 Problem& p, Launcher& launcher);
// The problem of `request`; UserError when it gives options or inputs the template does not take.
Problem make_problem(const KernelTemplate& t, const ProblemRequest& request);

// The kernels of one run of `t` (build_all, else build).
std::vector<ir::Kernel> build_kernels(const KernelTemplate& t, const ParamMap& params, const ParamMap& shape);
// What a module of `t` is specialized on: t.module_spec, else every --set value and the
// --shape values the builder bakes into the kernel (another value builds other IR), choices
// by name.
std::map<std::string, rt::SpecValue> module_spec(const KernelTemplate& t, const ParamMap& params,
                                                 const ParamMap& shape);

// t.large_buffers(params, shape) among `kernel`'s pointer parameters (one kernel of a run).
std::set<std::string> large_buffers(const KernelTemplate& t, const ParamMap& params, const ParamMap& shape,
                                    const ir::Function& kernel);

// Every kernel the registry knows: tilec's own, then those registered from the user's code,
// in registration order.
const std::vector<KernelTemplate>& all_templates();
const KernelTemplate* find_template(std::string_view name);

// Adds the kernel `make()` returns to the registry, for kernels in a user's own source files:
// the whole tilec CLI (tilec_add_kernels in CMake) then serves them beside tilec's own.
// A name that is already registered is an error (UserError at start-up). Returns true, so
// it can initialize a static: see TILEC_REGISTER_KERNEL.
bool register_kernel(KernelTemplate (*make)());

// Starts from the declared defaults and applies `k=v` overrides. Unknown
// names and non-integer values are UserErrors naming `flag` and the pair.
ParamMap resolve_params(const std::vector<Param>& declared,
                        const std::vector<std::string>& overrides, std::string_view flag);

// The .npy descr of a buffer of `t` (bf16 as "<u2", its raw bits); UserError for a dtype .npy cannot hold.
std::string npy_descr(ir::DType t);

// Deterministic random fill (uniform in [lo, hi)) used by every template.
// Uniform values in [lo, hi) (integers: their floor), a function of `seed` alone: a stream
// of std::mt19937_64 below kParallelFillElements elements, a per-element hash on every core
// from there up.
inline constexpr size_t kParallelFillElements = size_t(1) << 24;
void fill_uniform(interp::Buffer& b, uint64_t seed, double lo, double hi);

// Integer ceil(a / b).
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

} // namespace tilec::kernels

// Registers a kernel from a function returning its KernelTemplate, at static initialization:
//   KernelTemplate rmsnorm_template() { ... }
//   TILEC_REGISTER_KERNEL(rmsnorm_template);
#define TILEC_REGISTER_KERNEL(make_template) \
  [[maybe_unused]] static const bool tilec_registered_##make_template = ::tilec::kernels::register_kernel(make_template)

namespace tilec::kernels {
// Throws a UserError unless params[name] is a power of two in [lo, hi].
void require_pow2(const ParamMap& params, const std::string& name, int64_t lo, int64_t hi);
// Throws a UserError unless shape[name] is in [lo, hi].
void require_range(const ParamMap& shape, const std::string& name, int64_t lo, int64_t hi);
} // namespace tilec::kernels
