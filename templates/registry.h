#pragma once
// Kernels written in the DSL, each with the problem it solves and a plain C++
// reference, in one registry that the CLI and the tests share.
#include <any>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launch/args.h"
#include "launch/launcher.h"
#include "ir/ir.h"
#include "abi/manifest.h"
#include "runtime/module_store.h"
#include "runtime/op_run.h"

namespace tilec::templates {

// A named integer knob with its default: a template parameter (`--set`) or a
// problem size (`--shape`).
struct Param {
  std::string name;
  int64_t value = 0;
  std::string help;
  // When set, the value is an index into these names and `k=name` is accepted.
  std::vector<std::string> choices = {};
  // The smallest value `--set`/`--shape` accepts (a size: 0; paged attention's ctx: -1, "random
  // per sequence"). Every value is at most kMaxParamValue. resolve_params refuses the rest.
  int64_t min = 0;

  std::string value_str() const { return value_str(value); }
  std::string value_str(int64_t v) const;
};
using ParamMap = std::map<std::string, int64_t>;
// The largest value of any --set or --shape field, 2^40, and the most elements any tensor a
// template declares may have from its sizes, 2^48: past them a size is a typo or an overflow,
// refused before a template's code sees it.
inline constexpr int64_t kMaxParamValue = int64_t(1) << 40;
inline constexpr int64_t kMaxTensorElements = int64_t(1) << 48;

// One kernel argument: a buffer of the problem, or a scalar.
struct ArgSpec {
  int buffer = -1; // index into Problem::buffers, or -1 for a scalar
  int64_t i = 0;
  double f = 0.0;
  bool is_float = false;
};

// Inputs and expected outputs of one run of a kernel: what does not depend on the config.
// The launch grid does (KernelTemplate::grid), so a problem is made once per set of sizes and
// every config of a search runs on it with its own grid.
struct Problem {
  std::vector<launch::Buffer> buffers;
  std::vector<ArgSpec> args;
  std::vector<int> outputs;              // buffers the kernel writes
  std::vector<launch::Buffer> expected;  // the reference's values of `outputs`
  double atol = 1e-6;                    // |got - want| <= atol + rtol * |want|
  double rtol = 1e-5;
  std::optional<int64_t> ideal_bytes;    // the least a run must move (for GB/s); empty: unknown
  std::string description;               // one line naming the problem (default: the --shape values)
  // Every --shape value of this problem, defaults included (make_problem fills it from the
  // request; a template that reads files sets the sizes it found there): the sizes its kernels
  // are built and launched for, and its tuning key.
  ParamMap shape;
  // The template's own view of the problem, for its run paths (paged attention keeps its
  // PagedAttentionInputs here); empty for kernels that launch `args` on `grid`.
  std::any context;

  int add_buffer(launch::Buffer b);
  void arg_buffer(int index) { args.push_back({index}); }
  void arg_int(int64_t v) { args.push_back({-1, v, static_cast<double>(v), false}); }
  void arg_float(double v) { args.push_back({-1, static_cast<int64_t>(v), v, true}); }
  // The interpreter's view of `args`, pointing into `buffers`.
  std::vector<launch::Arg> launch_args();
};

struct Comparison {
  bool ok = true;
  double max_abs_err = 0.0;
  double max_rel_err = 0.0;
  std::string first_mismatch; // where the first element out of tolerance is
};

// Compares the problem's output buffers with its expected values.
Comparison compare_outputs(const Problem& p);

// What one problem is made from: the --shape values, the seed of generated inputs, the
// template's float options that were given (`--NAME X`), and a folder to read the inputs
// from instead (`--inputs DIR`). No config: a problem serves every config (a size limit that
// depends on one, such as cols <= block, belongs in `build`, which sees both).
struct ProblemRequest {
  ParamMap shape;
  uint64_t seed = 1;
  std::map<std::string, double> options;
  std::string inputs_dir;
};

// One way to compute a problem's outputs on a launcher (paged attention: "fused", the
// block-table walk, and "decompose", the seed's primitive recipe).
struct RunPath {
  std::string name, help;
  std::function<void(Problem& p, const ParamMap& params, const ParamMap& shape, launch::Launcher& l)> run;
};

// One array of a problem as files and hosts see it: `NAME.npy` under `--inputs DIR`, the file
// `--out` writes, and a tensor of the run hosts execute (run_generation.h). `dims` are --shape
// field names or decimal numbers, outermost first. Its element type: with `dtype_field`, the
// dtype named by that --shape choice field's value (choices such as "f16", "bf16", "f32"), read
// from the file; else `dtype`, a fixed one ("f32"), which is the problem's buffer NAME's (the CLI
// reads the buffer's; a host's run needs it written here).
struct TensorSpec {
  std::string name;
  std::vector<std::string> dims;
  bool output = false;
  std::string dtype_field = {};
  std::string dtype = {};
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
  // Inputs, arguments and reference of one problem (run, autotune, bench need it). With
  // `reference`, it may leave p.expected empty: the reference is computed from the inputs.
  std::function<Problem(const ProblemRequest& request)> make_problem;
  // The launch grid of the default path for a config and the problem's sizes: every command
  // (run, --tuned, bench, autotune, --prepare, tilec-measure) launches each config on its own
  // grid. Required to run a template that declares no `paths`: as `grid_expr`, or as a function
  // here for a grid no expression states.
  std::function<launch::Grid(const ParamMap& params, const ParamMap& shape)> grid = {};
  // The grid as expressions (x, y, z) in the runtime's language (runtime/size_expr.h) over the
  // config, the --shape sizes (a choice field by its name: dtype == "f16") and `lets`:
  // {"cdiv(n, block)", "1", "1"}; an empty y or z is 1. Stated once: the registry derives `grid`
  // from it, and the run hosts execute (run_generation.h) launches on it. Empty: none.
  std::array<std::string, 3> grid_expr = {};
  // Integer kernel parameters that are neither a config value nor a size, as expressions over
  // them, in order: softmax's row stride {"stride", "cols"}. A host's run binds them by name;
  // grid_expr may use them. Empty: none.
  std::vector<std::pair<std::string, std::string>> lets = {};
  // Fills p.expected (one buffer per p.outputs) from p's input buffers; may also set atol/rtol
  // and ideal_bytes. With `tensors`, `--inputs DIR` reads the inputs from .npy files and
  // `--out` writes the output with its shape, with no I/O code of the template's own.
  std::function<void(Problem& p)> reference = {};
  // The problem's arrays (inputs and outputs) with their dims in --shape fields.
  std::vector<TensorSpec> tensors = {};
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
  // make_problem reads request.inputs_dir itself (`--inputs DIR`; the help names the files).
  // Templates with `tensors` and `reference` take --inputs without it.
  bool reads_inputs = false;
  std::string inputs_help = {};
  // Writes output 0 of a run as .npy (`--out F.npy`). Empty: shaped by its TensorSpec, else a
  // 1-d array of its dtype.
  std::function<void(const std::string& path, const Problem& p)> write_output = {};
  // The --shape values that only size a problem: a config tuned for a key that differs from
  // the asked one only in these serves it as the nearest key (`--tuned`, rt::select_config),
  // closest in the first field first. Empty: only an exactly tuned key is used.
  std::vector<std::string> size_fields = {};
  // Size fields a nearer key must match in bucket (upper bounds, rt::SizeBuckets): paged
  // attention's sq, so decode and prefill problems never take each other's winners.
  rt::SizeBuckets size_buckets = {};
  // Rewrites --shape values (defaults filled in) that name one problem two ways into one form,
  // so that its tuning key (problem_key) is the same whichever way a user wrote it, and the
  // same as a host's run description computes (paged attention: a head_dim_v that is the
  // form's default becomes 0). Empty: the values as given.
  std::function<void(ParamMap& shape)> canonical_key = {};
  // Values a search space's constraints may use beyond the config and the shape, computed from
  // a full config (the defaults under a candidate's values) and the shape (autotune::Derive):
  // their names, and the function. Empty: none.
  std::vector<std::string> derived = {};
  std::function<ParamMap(const ParamMap& params, const ParamMap& shape)> derive = {};
  // The most a correct run of the default path may move, in bytes of warp-wide requests (what
  // the emulator counts: LaunchStats::request_bytes), for a problem and config. A run that
  // moves more is an over-wide access or a load the kernel should not make: a deterministic
  // performance bug. `tilec run` and `bench` warn (and fail with --strict-traffic); the tests
  // and the fuzzer fail. Empty, or nullopt: not checked.
  std::function<std::optional<int64_t>(const Problem& p, const ParamMap& params)> traffic_budget = {};
  // Values a module is specialized on beyond the tuning key and config (merged into the
  // --shape values): `autotune --export` writes the winner's modules once per variant
  // (paged attention: softcap=0 and softcap=1). Empty: one set of modules.
  std::vector<ParamMap> module_variants = {};
  // The whole run as data (runtime/op_run.h), declared in code with rt::OpRunBuilder, for a
  // run that generate_run cannot describe (paged attention's several launches and workspace);
  // the template's own C++ launches then evaluate their grids, workspace buffers and
  // specialization from it (rt::RunValues), so the card and the CLI cannot disagree. Empty:
  // kernel_card writes the run generated from the declaration above when the template has
  // `grid_expr` (run_generation.h), else none (a host launches the modules itself). Hosts in any
  // language run an op whose card has a run through the C ABI (runtime/tilec.h).
  std::function<const rt::OpRun&()> run = {};
};

// The --shape values of a problem, choices by name: its key in the tuning database, and what
// a module records as the problem it was compiled for.
rt::ProblemKey problem_key(const KernelTemplate& t, const ParamMap& shape);

// What a host needs of `t` beyond its modules (runtime/module_store.h): its declared defaults,
// its size fields, the first module variant as specialization defaults, and its run (t.run,
// else generate_run's when t has grid_expr; UserError when that cannot be generated).
rt::KernelCard kernel_card(const KernelTemplate& t);

// The default path's name ("kernel" when the template declares none).
std::string default_path(const KernelTemplate& t);
// Within 2% of the problem's ideal bytes: the usual traffic_budget of a kernel that should
// move each byte once (nullopt without ideal_bytes).
std::optional<int64_t> ideal_traffic_budget(const Problem& p, double tolerance = 0.02);
// Why the run of `path` (empty: the default) moved more than t.traffic_budget allows; empty
// when it did not, or when the budget, the path or the launcher's counts do not apply.
std::string traffic_error(const KernelTemplate& t, const std::string& path, const ParamMap& params, const Problem& p,
                          const launch::LaunchStats& stats);
// Runs `path` (empty: the default) of `t` on `p` with config `params`, at p.shape's sizes and
// on the config's own grid (t.grid); UserError naming the template's paths when there is no
// such path. The outputs land in p.buffers.
void run_problem(const KernelTemplate& t, const std::string& path, const ParamMap& params, Problem& p,
                 launch::Launcher& launcher);
// The problem of `request`; UserError when it gives options or inputs the template does not
// take. request.shape may leave out sizes (their defaults); p.shape holds all of them. With
// --inputs and `tensors`, the sizes and dtypes come from the files.
Problem make_problem(const KernelTemplate& t, const ProblemRequest& request);
// The grid of the default path for a config at these sizes (t.grid, derived from t.grid_expr
// where given); UserError when the template has none.
launch::Grid launch_grid(const KernelTemplate& t, const ParamMap& params, const ParamMap& shape);
// Writes output 0 of a run as .npy: t.write_output, else shaped by its TensorSpec at p.shape's
// sizes, else a 1-d array of its dtype.
void write_output(const KernelTemplate& t, const std::string& path, const Problem& p);
// Whether `--inputs DIR` works for `t` (its own reader, or tensors + reference), and the help
// line naming its files.
bool takes_inputs(const KernelTemplate& t);
std::string inputs_help(const KernelTemplate& t);

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
// A name that is already registered is an error (UserError at start-up), as are a grid given
// both as `grid` and `grid_expr`, a grid expression or let that does not parse, and
// `grid_expr` beside `paths` or `build_all` (a run of several kernels states its grids in
// `run`). Returns true, so it can initialize a static: see TILEC_REGISTER_KERNEL.
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
void fill_uniform(launch::Buffer& b, uint64_t seed, double lo, double hi);

// Integer ceil(a / b).
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

} // namespace tilec::templates

// Registers a kernel from a function returning its KernelTemplate, at static initialization:
//   KernelTemplate rmsnorm_template() { ... }
//   TILEC_REGISTER_KERNEL(rmsnorm_template);
#define TILEC_REGISTER_KERNEL(make_template) \
  [[maybe_unused]] static const bool tilec_registered_##make_template = ::tilec::templates::register_kernel(make_template)

namespace tilec::templates {
// Throws a UserError unless values[name] is a power of two in [lo, hi]; the message names the
// flag the value came from (pass "--shape" for a problem size).
void require_pow2(const ParamMap& values, const std::string& name, int64_t lo, int64_t hi,
                  std::string_view flag = "--set");
// Throws a UserError unless values[name] is in [lo, hi] (a problem size by default).
void require_range(const ParamMap& values, const std::string& name, int64_t lo, int64_t hi,
                   std::string_view flag = "--shape");
} // namespace tilec::templates
