// Every template kernel through the GPU pipeline (sm_80 and sm_90, ptxas with
// zero spills) and, on the emu target, against its reference.
#include "backends/launchers.h"
#include "templates/registry.h"
#include "tests/codegen/codegen_test_util.h"
#include "tests/codegen/emu_harness.h"

using namespace tilec;
using namespace tilec::codegen;
using namespace tilec::codegen::test;

TEST_CASE("every template kernel compiles for the GPU and runs correctly emulated", "[codegen][templates]") {
  for (const templates::KernelTemplate& t : templates::all_templates()) {
    INFO("template " << t.name);
    templates::ParamMap params = templates::resolve_params(t.params, {}, "--set");
    templates::ParamMap shape = templates::resolve_params(t.shape, {}, "--shape");
    ir::Kernel fn = t.build(params, shape);
    int num_warps = params.count("num_warps") ? static_cast<int>(params.at("num_warps")) : 4;
    for (auto& [arch, k] : compile_all_archs(*fn, num_warps))
      if (k.ptxas)
        WARN(t.name << " " << arch << ": " << k.ptxas->registers << " registers, " << k.stats.conversions
                    << " conversions, " << k.stats.barriers << " barriers, " << k.shared_bytes << " B shared");
    templates::Problem p = templates::make_problem(t, {shape, 7, {}, {}});
    templates::run_problem(t, "", params, p, *backends::make_emulate_launcher());
    templates::Comparison c = templates::compare_outputs(p);
    INFO(c.first_mismatch);
    CHECK(c.ok);
  }
}
