#include "tools/kernel_args.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/types.h"

namespace tilec::cli {

void KernelChoice::add_options(CLI::App& app) {
  app.add_option("kernel", name, "kernel name (see tilec list)")->required();
  app.add_option("--set", sets, "template parameter NAME=VALUE (repeatable)")->take_all();
  app.add_option("--shape", shapes, "problem size NAME=VALUE (repeatable)")->take_all();
}

const kernels::KernelTemplate& KernelChoice::kernel() const {
  if (const auto* t = kernels::find_template(name)) return *t;
  std::vector<std::string> names;
  for (const auto& t : kernels::all_templates()) names.push_back(t.name);
  throw UserError(fmt::format("unknown kernel '{}' (known: {})", name, fmt::join(names, ", ")));
}

kernels::ParamMap KernelChoice::params() const { return resolve_set(kernel(), sets); }

kernels::ParamMap resolve_set(const kernels::KernelTemplate& t, const std::vector<std::string>& sets) {
  kernels::ParamMap p = kernels::resolve_params(t.params, sets, "--set");
  // Checked here for every command, not only those that compile for a GPU.
  if (auto it = p.find("num_warps"); it != p.end() && (!ir::is_pow2(it->second) || it->second > 32))
    throw UserError(fmt::format("--set num_warps={}: must be a power of two from 1 to 32", it->second));
  return p;
}

kernels::ParamMap KernelChoice::shape() const {
  return kernels::resolve_params(kernel().shape, shapes, "--shape");
}

} // namespace tilec::cli
