// Interpreter throughput on the template kernels at their default shapes.
//   bench_interpreter [repeats=5]
#include <fmt/format.h>

#include <cstdlib>

#include "bench/bench_common.h"
#include "interp/interpreter.h"
#include "templates/registry.h"

using namespace tilec;

int main(int argc, char** argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 5;
  fmt::print("{:<12} {:>10} {:>10} {:>10}  (interpreter, {} runs)\n", "kernel", "median ms", "min ms", "max ms", repeats);
  for (const auto& t : templates::all_templates()) {
    if (!t.make_problem || !t.paths.empty()) continue; // one kernel on the problem's grid
    templates::ParamMap params, shape;
    for (const auto& p : t.params) params[p.name] = p.value;
    for (const auto& p : t.shape) shape[p.name] = p.value;
    ir::Kernel k = t.build(params, shape);
    templates::Problem p = templates::make_problem(t, {shape, 1, {}, {}});
    auto args = p.launch_args();
    launch::Grid grid = templates::launch_grid(t, params, p.shape);
    auto tm = bench::time_repeated(repeats, [&] { interp::interpret(*k, grid, args); });
    fmt::print("{:<12} {:>10.2f} {:>10.2f} {:>10.2f}\n", t.name, tm.median_ms, tm.min_ms, tm.max_ms);
  }
  return 0;
}
