#include "templates/kernels.h"

namespace tilec::templates {

using namespace dsl;

ir::Kernel vector_add(int64_t block) {
  KernelBuilder k("vector_add");
  auto x = k.arg<Ptr<f32>>("x"), y = k.arg<Ptr<f32>>("y"), out = k.arg<Ptr<f32>>("out");
  auto n = k.arg<i32>("n");
  auto offs = program_id(0) * block + arange(0, block);
  auto mask = offs < n;
  store(out + offs, load(x + offs, mask) + load(y + offs, mask), mask);
  return k.finish();
}

KernelTemplate vector_add_template() {
  KernelTemplate t;
  t.name = "vector_add";
  t.summary = "out = x + y over n f32 elements, one block of elements per program";
  t.params = {{"block", 1024, "elements per program (power of two)"},
              {"num_warps", 4, "warps per program on the GPU"}};
  t.shape = {{"n", 100003, "number of elements"}};
  t.build = [](const ParamMap& p, const ParamMap&) {
    require_pow2(p, "block", 1, 1 << 16);
    return vector_add(p.at("block"));
  };
  t.make_problem = [](const ProblemRequest& r) {
    const ParamMap& s = r.shape;
    require_range(s, "n", 0, int64_t(1) << 30);
    int64_t n = s.at("n");
    Problem pr;
    int x = pr.add_buffer({"x", ir::DType::f32, size_t(n)});
    int y = pr.add_buffer({"y", ir::DType::f32, size_t(n)});
    int out = pr.add_buffer({"out", ir::DType::f32, size_t(n)});
    fill_uniform(pr.buffers[x], r.seed, -1, 1);
    fill_uniform(pr.buffers[y], r.seed + 1, -1, 1);
    pr.arg_buffer(x);
    pr.arg_buffer(y);
    pr.arg_buffer(out);
    pr.arg_int(n);
    pr.outputs = {out};
    pr.ideal_bytes = 12 * n; // x and y read, out written
    pr.atol = 0;
    pr.rtol = 0;
    return pr;
  };
  t.grid_expr = {"cdiv(n, block)", "1", "1"};
  t.reference = [](Problem& pr) {
    const launch::Buffer &x = pr.buffers[0], &y = pr.buffers[1];
    launch::Buffer want("out", ir::DType::f32, x.count());
    for (size_t i = 0; i < x.count(); ++i) want.set(i, float(x.get(i)) + float(y.get(i)));
    pr.expected = {std::move(want)};
  };
  t.tensors = {{.name = "x", .dims = {"n"}, .dtype = "f32"},
               {.name = "y", .dims = {"n"}, .dtype = "f32"},
               {.name = "out", .dims = {"n"}, .output = true, .dtype = "f32"}};
  t.size_fields = {"n"};
  t.traffic_budget = [](const Problem& p, const ParamMap&) { return ideal_traffic_budget(p); };
  return t;
}

} // namespace tilec::templates
