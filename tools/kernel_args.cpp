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

const templates::KernelTemplate& KernelChoice::kernel() const { return find_kernel(name); }

const templates::KernelTemplate& find_kernel(const std::string& name) {
  if (const auto* t = templates::find_template(name)) return *t;
  std::vector<std::string> names;
  for (const auto& t : templates::all_templates()) names.push_back(t.name);
  throw UserError(fmt::format("unknown kernel '{}' (known: {})", name, fmt::join(names, ", ")));
}

templates::ParamMap KernelChoice::params() const { return resolve_set(kernel(), sets); }

templates::ParamMap resolve_set(const templates::KernelTemplate& t, const std::vector<std::string>& sets) {
  templates::ParamMap p = templates::resolve_params(t.params, sets, "--set");
  // Checked here for every command, not only those that compile for a GPU.
  if (auto it = p.find("num_warps"); it != p.end())
    if (std::string why = num_warps_error(it->second); !why.empty()) throw UserError("--set " + why);
  return p;
}

void add_float_options(CLI::App& app, std::map<std::string, std::optional<double>>& values) {
  std::map<std::string, std::string> help; // name -> "kernel: help; kernel: help"
  for (const auto& t : templates::all_templates())
    for (const templates::FloatOption& o : t.options) {
      std::string& h = help[o.name];
      h += fmt::format("{}{}: {}", h.empty() ? "" : "; ", t.name, o.help);
    }
  for (const auto& [name, text] : help) app.add_option("--" + name, values[name], text);
}

templates::ParamMap KernelChoice::shape() const {
  return templates::resolve_params(kernel().shape, shapes, "--shape");
}

} // namespace tilec::cli
