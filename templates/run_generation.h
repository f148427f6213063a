#pragma once
// A template's run as data (runtime/op_run.h), generated from what it declares, so no template
// writes it again by hand: the kernel card carries it (kernel_card) and hosts in any language
// run the op through rt::OpStore and the C ABI (runtime/tilec.h).
//
//   sizes    t.shape in order: implied by a tensor (a dim that is the size's name, the dtype
//            of a tensor whose dtype_field names it), else defaulting to the declared value
//   lets     t.lets
//   tensors  t.tensors: inputs and outputs, their dims, dtype_field or the fixed dtype
//   scalars  the kernel's f32 parameters, each a float option of the template (t.options;
//            the option `softmax-scale` is the parameter softmax_scale)
//   spec     the names t.module_spec gives (each a config parameter or size of that value),
//            else every config parameter and size: a module's recorded specialization is
//            then a part of the query, which is how rt::find_module matches
//   launch   one, of the kernel t.build makes, on t.grid_expr
//
// The grid the C++ commands launch on is derived from the same expressions (run_grid), so
// the CLI and every host launch one grid.
#include <map>
#include <string>

#include "runtime/op_run.h"
#include "templates/registry.h"

namespace tilec::templates {

// The run of `t`, generated. UserError naming what `t` lacks when it cannot be: no grid_expr,
// several paths or kernels (their run is declared, KernelTemplate::run), module
// variants, no tensors or one without a dtype, a dim that is no size, a kernel parameter that
// binds to no tensor, size, config parameter, let or float option, or a module_spec that is
// not its config parameters' and sizes' own values. Builds the kernel at the declared defaults.
rt::OpRun generate_run(const KernelTemplate& t);

// The values the run's expressions see for a config and sizes, as a host's run sees them:
// every config parameter (given, else its default), every size (a choice field by its name),
// then the lets in order. UserError naming the let that cannot be evaluated.
std::map<std::string, rt::SpecValue> run_values(const KernelTemplate& t, const ParamMap& params,
                                                const ParamMap& shape);

// t.grid_expr evaluated at a config and sizes (run_values): what KernelTemplate::grid is
// derived as. UserError naming the axis and the expression that cannot be evaluated.
launch::Grid run_grid(const KernelTemplate& t, const ParamMap& params, const ParamMap& shape);

// Checks what the registry derives `grid` from (the registration's errors, register_kernel)
// and derives it: t.grid = run_grid over a copy of t's declaration. No-op without grid_expr.
void derive_grid(KernelTemplate& t);

} // namespace tilec::templates
