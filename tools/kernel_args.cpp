#include "tools/kernel_args.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "abi/limits.h"
#include "ir/types.h"

namespace tilec::cli {

void KernelChoice::add_options(CLI::App& app) {
  app.add_option("kernel", name, "kernel name (see tilec list)")->required();
  app.add_option("--set", sets, "template parameter NAME=VALUE (repeatable)")->take_all();
  app.add_option("--shape", shapes, "problem size NAME=VALUE (repeatable)")->take_all();
}

const kernels::KernelTemplate& KernelChoice::kernel() const { return find_kernel(name); }

const kernels::KernelTemplate& find_kernel(const std::string& name) {
  if (const auto* t = kernels::find_template(name)) return *t;
  std::vector<std::string> names;
  for (const auto& t : kernels::all_templates()) names.push_back(t.name);
  throw UserError(fmt::format("unknown kernel '{}' (known: {})", name, fmt::join(names, ", ")));
}

kernels::ParamMap KernelChoice::params() const { return resolve_set(kernel(), sets); }

kernels::ParamMap resolve_set(const kernels::KernelTemplate& t, const std::vector<std::string>& sets) {
  kernels::ParamMap p = kernels::resolve_params(t.params, sets, "--set");
  // Checked here for every command, not only those that compile for a GPU.
  if (auto it = p.find("num_warps"); it != p.end())
    if (std::string why = num_warps_error(it->second); !why.empty()) throw UserError("--set " + why);
  return p;
}

void add_float_options(CLI::App& app, std::map<std::string, std::optional<double>>& values) {
  std::map<std::string, std::string> help; // name -> "kernel: help; kernel: help"
  for (const auto& t : kernels::all_templates())
    for (const kernels::FloatOption& o : t.options) {
      std::string& h = help[o.name];
      h += fmt::format("{}{}: {}", h.empty() ? "" : "; ", t.name, o.help);
    }
  for (const auto& [name, text] : help) app.add_option("--" + name, values[name], text);
}

kernels::ParamMap KernelChoice::shape() const {
  return kernels::resolve_params(kernel().shape, shapes, "--shape");
}

} // namespace tilec::cli
