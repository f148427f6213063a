#include <cmath>

#include <fmt/format.h>

#include "templates/kernels.h"

namespace tilec::templates {

using namespace dsl;

// One program per row; the row fits one tile of `block` columns.
ir::Kernel softmax(int64_t block) {
  KernelBuilder k("softmax");
  auto x = k.arg<Ptr<f32>>("x"), out = k.arg<Ptr<f32>>("out");
  auto n_cols = k.arg<i32>("n_cols"), stride = k.arg<i32>("stride");
  auto row = program_id(0);
  auto cols = arange(0, block);
  auto mask = cols < n_cols;
  auto v = load(x + row * stride + cols, mask, -INFINITY);
  auto e = exp(v - reduce_max(v, 0));
  store(out + row * stride + cols, e / reduce_sum(e, 0), mask);
  return k.finish();
}

KernelTemplate softmax_template() {
  KernelTemplate t;
  t.name = "softmax";
  t.summary = "row softmax of a [rows, cols] f32 matrix, one row per program";
  t.params = {{"block", 1024, "columns per program, at least cols (power of two)"},
              {"num_warps", 4, "warps per program on the GPU"}};
  t.shape = {{"rows", 37, "number of rows"}, {"cols", 1000, "number of columns"}};
  // A row fits one tile of `block` columns: a config with a smaller block cannot serve the
  // problem (checked here, where both the config and the sizes are known).
  t.build = [](const ParamMap& p, const ParamMap& s) {
    require_pow2(p, "block", 1, 1 << 16);
    if (s.count("cols") && s.at("cols") > p.at("block"))
      throw UserError(fmt::format("--set block={}: a row of cols={} does not fit (block must be at least cols)",
                                  p.at("block"), s.at("cols")));
    return softmax(p.at("block"));
  };
  t.make_problem = [](const ProblemRequest& r) {
    const ParamMap& s = r.shape;
    const uint64_t seed = r.seed;
    require_range(s, "rows", 0, 1 << 24);
    require_range(s, "cols", 1, 1 << 16);
    int64_t rows = s.at("rows"), cols = s.at("cols");
    Problem pr;
    int x = pr.add_buffer({"x", ir::DType::f32, size_t(rows * cols)});
    int out = pr.add_buffer({"out", ir::DType::f32, size_t(rows * cols)});
    fill_uniform(pr.buffers[x], seed, -4, 4);
    pr.arg_buffer(x);
    pr.arg_buffer(out);
    pr.arg_int(cols);
    pr.arg_int(cols);
    pr.outputs = {out};
    pr.ideal_bytes = 8 * rows * cols;
    pr.atol = 1e-6;
    pr.rtol = 1e-5;
    return pr;
  };
  t.grid_expr = {"rows", "1", "1"};
  t.lets = {{"n_cols", "cols"}, {"stride", "cols"}}; // the kernel's names for what the problem passes
  t.reference = [](Problem& pr) {
    const int64_t rows = pr.shape.at("rows"), cols = pr.shape.at("cols");
    const launch::Buffer& x = pr.buffers[0];
    launch::Buffer want("out", ir::DType::f32, size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      double m = -INFINITY, sum = 0;
      for (int64_t c = 0; c < cols; ++c) m = std::max(m, x.get(r * cols + c));
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(x.get(r * cols + c) - m);
      for (int64_t c = 0; c < cols; ++c) want.set(r * cols + c, std::exp(x.get(r * cols + c) - m) / sum);
    }
    pr.expected = {std::move(want)};
  };
  t.tensors = {{.name = "x", .dims = {"rows", "cols"}, .dtype = "f32"},
               {.name = "out", .dims = {"rows", "cols"}, .output = true, .dtype = "f32"}};
  t.size_fields = {"rows"};
  t.traffic_budget = [](const Problem& p, const ParamMap&) { return ideal_traffic_budget(p); };
  return t;
}

} // namespace tilec::templates
