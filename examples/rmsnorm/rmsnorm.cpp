// RMSNorm, a kernel written outside tilec and served by the whole tilec CLI:
//
//   y[r, c] = x[r, c] / sqrt(mean_c(x[r, :]^2) + eps) * w[c]
//
// over the rows of a [rows, cols] f16 matrix, with an f16 weight of cols values and f16
// output; the math is in f32. One program per row; the row fits one tile of `block` columns.
//
// CMakeLists.txt builds this file into `rmsnorm_tilec` with tilec_add_kernels(), so
// `rmsnorm_tilec list | ir | compile | run | bench | autotune` know "rmsnorm" beside tilec's
// own kernels. The registration at the bottom runs when the executable starts.
#include <cmath>
#include <cstdint>
#include <string>

#include "dsl/dsl.h"
#include "templates/registry.h"

namespace rmsnorm_example {

using namespace tilec::dsl;
using tilec::templates::KernelTemplate;
using tilec::templates::ParamMap;
using tilec::templates::Problem;
using tilec::templates::ProblemRequest;

// The kernel's parameters, in order: what a host program passes to the compiled module.
//   rmsnorm(x: ptr<f16>, w: ptr<f16>, out: ptr<f16>, n_cols: i32, stride: i32, eps: f32)
Kernel rmsnorm(int64_t block) {
  KernelBuilder k("rmsnorm");
  auto x = k.arg<Ptr<f16>>("x"), w = k.arg<Ptr<f16>>("w"), out = k.arg<Ptr<f16>>("out");
  auto n_cols = k.arg<i32>("n_cols"), stride = k.arg<i32>("stride");
  auto eps = k.arg<f32>("eps");
  auto row = program_id(0);
  auto cols = arange(0, block);
  auto mask = cols < n_cols;                                   // the columns past n_cols
  auto v = load(x + row * stride + cols, mask, 0).to(f32);     // masked lanes read 0: no effect on the sum
  auto mean_sq = reduce_sum(v * v, 0) / n_cols.to(f32);
  auto inv_rms = rsqrt(mean_sq + eps);
  auto weight = load(w + cols, mask, 0).to(f32);
  store(out + row * stride + cols, (v * inv_rms * weight).to(f16), mask);
  return k.finish();
}

constexpr double kEps = 1e-5;

KernelTemplate rmsnorm_template() {
  using namespace tilec::templates; // require_pow2, require_range, fill_uniform, Problem
  KernelTemplate t;
  t.name = "rmsnorm";
  t.summary = "RMSNorm of the rows of a [rows, cols] f16 matrix times an f16 weight (f32 math), one row per program";
  t.params = {{"block", 1024, "columns per program, at least cols (power of two)"},
              {"num_warps", 4, "warps per program on the GPU"}};
  t.shape = {{"rows", 64, "number of rows"}, {"cols", 1000, "number of columns"}};
  // A row fits one tile of `block` columns: the config and the sizes meet here.
  t.build = [](const ParamMap& p, const ParamMap& s) {
    require_pow2(p, "block", 1, 1 << 16);
    if (s.count("cols") && s.at("cols") > p.at("block"))
      throw tilec::UserError("--set block=" + std::to_string(p.at("block")) + ": a row of cols=" +
                             std::to_string(s.at("cols")) + " does not fit (block must be at least cols)");
    return rmsnorm(p.at("block"));
  };
  // One program per row, whatever the config: the grid is expressions of the config and the
  // sizes (runtime/size_expr.h; a block of elements per program would be "cdiv(n, block)").
  // Every command (run, autotune, bench, --tuned) launches each config on its own, and the
  // kernel card written beside exported modules carries them, so hosts launch the same grid.
  t.grid_expr = {"rows", "1", "1"};
  // The kernel's integer parameters that are neither a config value nor a size, as expressions
  // over them: a host's run binds them by name (make_problem passes the same values).
  t.lets = {{"n_cols", "cols"}, {"stride", "cols"}};
  // A float the caller gives (`--eps X` on the CLI, a scalar from a host): the kernel's eps.
  t.options = {{"eps", "the epsilon under the square root (default 1e-5)"}};
  // A compiled module serves any rows and any cols up to its block: it is specialized on the
  // parameters only, so `autotune --export` writes one module per config, not per shape.
  t.module_spec = [](const ParamMap& p, const ParamMap&) {
    return std::map<std::string, tilec::rt::SpecValue>{{"block", p.at("block")}, {"num_warps", p.at("num_warps")}};
  };
  // A config tuned for some row count serves others (the nearest tuned one).
  t.size_fields = {"rows"};
  // The arrays, with their dims in --shape fields and their dtypes: `--inputs DIR` reads x.npy
  // and w.npy (and takes rows and cols from them), `--out` writes out as [rows, cols], a host
  // passes them by name; no I/O code here.
  t.tensors = {{.name = "x", .dims = {"rows", "cols"}, .dtype = "f16"},
               {.name = "w", .dims = {"cols"}, .dtype = "f16"},
               {.name = "out", .dims = {"rows", "cols"}, .output = true, .dtype = "f16"}};
  // Buffers, arguments and generated inputs; no config (a problem serves every config).
  t.make_problem = [](const ProblemRequest& r) {
    const ParamMap& s = r.shape;
    require_range(s, "rows", 0, 1 << 24);
    require_range(s, "cols", 1, 1 << 16);
    const int64_t rows = s.at("rows"), cols = s.at("cols");
    const size_t n = size_t(rows * cols);
    Problem pr;
    int x = pr.add_buffer({"x", DType::f16, n});
    int w = pr.add_buffer({"w", DType::f16, size_t(cols)});
    int out = pr.add_buffer({"out", DType::f16, n});
    fill_uniform(pr.buffers[x], r.seed, -2, 2);
    fill_uniform(pr.buffers[w], r.seed + 1, 0.5, 1.5);
    pr.arg_buffer(x);
    pr.arg_buffer(w);
    pr.arg_buffer(out);
    pr.arg_int(cols);  // n_cols
    pr.arg_int(cols);  // stride
    pr.arg_float(r.options.count("eps") ? r.options.at("eps") : kEps);
    pr.outputs = {out};
    // The output is rounded to f16 (a relative step of 2^-11) after f32 math: allow a few
    // f16 steps relative to the value, and an absolute floor for values near zero.
    pr.atol = 1e-3;
    pr.rtol = 4e-3;
    pr.ideal_bytes = int64_t(n) * 2 * 2 + cols * 2; // read x and w, write out, once each
    return pr;
  };
  // The reference, in double, from the f16 values the kernel reads (generated or from files).
  t.reference = [](Problem& pr) {
    const int64_t rows = pr.shape.at("rows"), cols = pr.shape.at("cols");
    const tilec::launch::Buffer &xb = pr.buffers[0], &wb = pr.buffers[1];
    const double eps = pr.args.back().f; // the kernel's last argument
    tilec::launch::Buffer want("out", DType::f32, size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
      double sum_sq = 0;
      for (int64_t c = 0; c < cols; ++c) sum_sq += xb.get(i * cols + c) * xb.get(i * cols + c);
      const double inv_rms = 1.0 / std::sqrt(sum_sq / double(cols) + eps);
      for (int64_t c = 0; c < cols; ++c) want.set(i * cols + c, xb.get(i * cols + c) * inv_rms * wb.get(c));
    }
    pr.expected = {std::move(want)};
  };
  return t;
}

// Adds "rmsnorm" to the registry when the program starts (a static initializer).
TILEC_REGISTER_KERNEL(rmsnorm_template);

} // namespace rmsnorm_example
