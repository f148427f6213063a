#pragma once
// Options shared by the commands that take a template kernel: KERNEL and --set.
#include <CLI/CLI.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "templates/registry.h"

namespace tilec::cli {

// The registered kernel named `name`; a UserError listing the known ones if none.
const templates::KernelTemplate& find_kernel(const std::string& name);

// `t`'s --set values with the checks every command applies (num_warps a power of two to 32).
templates::ParamMap resolve_set(const templates::KernelTemplate& t, const std::vector<std::string>& sets);

// Adds `--NAME X` for each float option a registered kernel declares (KernelTemplate::options;
// paged_attention's --softmax-scale and --softcap), once per name, bound to values[NAME].
void add_float_options(CLI::App& app, std::map<std::string, std::optional<double>>& values);

struct KernelChoice {
  std::string name;
  std::vector<std::string> sets;
  std::vector<std::string> shapes;

  void add_options(CLI::App& app);
  // The template named by `name`; a UserError listing the known ones if none.
  const templates::KernelTemplate& kernel() const;
  templates::ParamMap params() const;
  templates::ParamMap shape() const;
};

} // namespace tilec::cli
