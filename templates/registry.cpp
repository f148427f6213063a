// The registry of kernel templates and what every command asks of one: its kernels, module
// specialization, problem key, kernel card, launch grid and resolved parameters.
#include "templates/registry.h"
#include "templates/run_generation.h"

#include <thread>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <random>

#include "ir/printer.h"
#include "launch/launcher.h"
#include "runtime/npy.h"
#include <filesystem>
#include <utility>

namespace tilec::templates {

#define TILEC_BUILTIN_KERNEL(make) KernelTemplate make();
#include "templates/builtin_kernels.def"
#undef TILEC_BUILTIN_KERNEL

std::string Param::value_str(int64_t v) const {
  if (!choices.empty() && v >= 0 && v < static_cast<int64_t>(choices.size())) return choices[v];
  return std::to_string(v);
}

namespace {

// The registry: tilec's kernels first (templates/builtin_kernels.def), then the registered ones.
// A function-local static, so registrations from other translation units' static initializers
// find it constructed.
std::vector<KernelTemplate>& registry() {
  static std::vector<KernelTemplate> all = [] {
    std::vector<KernelTemplate> builtin = {
#define TILEC_BUILTIN_KERNEL(make) make(),
#include "templates/builtin_kernels.def"
#undef TILEC_BUILTIN_KERNEL
    };
    for (KernelTemplate& t : builtin) derive_grid(t);
    return builtin;
  }();
  return all;
}

} // namespace

const std::vector<KernelTemplate>& all_templates() { return registry(); }

bool register_kernel(KernelTemplate (*make)()) {
  KernelTemplate t = make();
  if (t.name.empty() || !t.build)
    throw UserError(fmt::format("register_kernel: a kernel needs a name and a build function (got name '{}')", t.name));
  try {
    derive_grid(t);
  } catch (const UserError& e) {
    throw UserError(fmt::format("register_kernel: {}", e.what()));
  }
  if (t.make_problem && t.paths.empty() && !t.grid)
    throw UserError(fmt::format("register_kernel: {} has a problem but no launch grid: set KernelTemplate::grid_expr, "
                                "expressions of the config and the sizes such as {{\"cdiv(n, block)\", \"1\", \"1\"}} "
                                "(every config runs on its own grid)",
                                t.name));
  if (!t.tensors.empty() && !t.reference)
    throw UserError(fmt::format("register_kernel: {} declares tensors but no reference from its inputs "
                                "(KernelTemplate::reference), which --inputs needs",
                                t.name));
  if (find_template(t.name))
    throw UserError(fmt::format("register_kernel: a kernel named '{}' is already registered", t.name));
  registry().push_back(std::move(t));
  return true;
}

std::vector<ir::Kernel> build_kernels(const KernelTemplate& t, const ParamMap& params, const ParamMap& shape) {
  if (t.build_all) return t.build_all(params, shape);
  std::vector<ir::Kernel> ks;
  ks.push_back(t.build(params, shape));
  return ks;
}

std::set<std::string> large_buffers(const KernelTemplate& t, const ParamMap& params, const ParamMap& shape,
                                    const ir::Function& kernel) {
  std::set<std::string> r;
  if (!t.large_buffers) return r;
  ParamMap full_shape = resolve_params(t.shape, {}, "--shape");
  for (const auto& [name, v] : shape) full_shape[name] = v;
  for (const std::string& name : t.large_buffers(params, full_shape))
    for (const ir::Value* p : kernel.params)
      if (p->name == name && p->type.is_ptr()) r.insert(name);
  return r;
}

std::map<std::string, rt::SpecValue> module_spec(const KernelTemplate& t, const ParamMap& params,
                                                 const ParamMap& shape) {
  if (t.module_spec) return t.module_spec(params, shape);
  std::map<std::string, rt::SpecValue> spec;
  ParamMap full_shape = resolve_params(t.shape, {}, "--shape");
  for (const auto& [name, v] : shape) full_shape[name] = v;
  std::string base = ir::print(*build_kernels(t, params, full_shape).front());
  // A size is baked in when another value of it builds a different kernel; one the builder
  // never reads leaves the IR alone and does not specialize the module (a module tuned at
  // rows=256 serves rows=300). When no other value builds, it is kept, to be safe.
  auto baked_in = [&](const Param& p, int64_t v) {
    std::vector<int64_t> others;
    if (!p.choices.empty())
      for (int64_t c = 0; c < int64_t(p.choices.size()); ++c) others.push_back(c);
    else
      others = {v + 1, v * 2, v - 1};
    bool any_built = false;
    for (int64_t other : others) {
      if (other == v) continue;
      ParamMap s = full_shape;
      s[p.name] = other;
      try {
        if (ir::print(*build_kernels(t, params, s).front()) != base) return true;
        any_built = true;
      } catch (const UserError&) {
      }
    }
    return !any_built;
  };
  for (const std::vector<Param>* declared : {&t.params, &t.shape})
    for (const Param& p : *declared) {
      const ParamMap& given = declared == &t.params ? params : full_shape;
      auto it = given.find(p.name);
      int64_t v = it == given.end() ? p.value : it->second;
      if (declared == &t.shape && !baked_in(p, v)) continue;
      if (p.choices.empty()) spec[p.name] = v;
      else spec[p.name] = p.value_str(v);
    }
  return spec;
}

rt::ProblemKey problem_key(const KernelTemplate& t, const ParamMap& given) {
  ParamMap shape = given;
  for (const Param& p : t.shape) shape.emplace(p.name, p.value);
  if (t.canonical_key) t.canonical_key(shape);
  rt::ProblemKey key;
  for (const Param& p : t.shape) {
    int64_t v = shape.at(p.name);
    if (p.choices.empty()) key[p.name] = v;
    else key[p.name] = p.value_str(v);
  }
  return key;
}

rt::KernelCard kernel_card(const KernelTemplate& t) {
  rt::KernelCard card;
  card.kernel = t.name;
  for (const Param& p : t.params) card.defaults[p.name] = p.value;
  card.size_fields = t.size_fields;
  card.size_buckets = t.size_buckets;
  if (!t.module_variants.empty())
    for (const auto& [name, v] : t.module_variants.front()) card.spec_defaults[name] = v;
  if (t.run) card.run = t.run();
  else if (!t.grid_expr[0].empty()) card.run = generate_run(t);
  return card;
}

std::string default_path(const KernelTemplate& t) { return t.paths.empty() ? "kernel" : t.paths.front().name; }

void run_problem(const KernelTemplate& t, const std::string& path, const ParamMap& params, Problem& p,
                 launch::Launcher& launcher) {
  if (!path.empty() && path != default_path(t)) {
    auto it = std::find_if(t.paths.begin(), t.paths.end(), [&](const RunPath& r) { return r.name == path; });
    if (it == t.paths.end()) {
      std::vector<std::string> names{default_path(t)};
      for (size_t i = 1; i < t.paths.size(); ++i) names.push_back(t.paths[i].name);
      throw UserError(fmt::format("--path {}: {} has the paths {}", path, t.name, fmt::join(names, ", ")));
    }
    return it->run(p, params, p.shape, launcher);
  }
  if (!t.paths.empty()) return t.paths.front().run(p, params, p.shape, launcher);
  auto warps = params.find("num_warps");
  launcher.launch(t.build(params, p.shape), warps == params.end() ? 4 : int(warps->second),
                  launch_grid(t, params, p.shape), p.launch_args());
}

launch::Grid launch_grid(const KernelTemplate& t, const ParamMap& params, const ParamMap& shape) {
  if (!t.grid)
    throw UserError(fmt::format("{} declares no launch grid (KernelTemplate::grid_expr, expressions of the config and "
                                "the sizes), so it cannot be run",
                                t.name));
  launch::Grid g = t.grid(params, shape);
  for (int64_t d : g)
    if (d < 0 || d > int64_t(UINT32_MAX))
      throw UserError(fmt::format("{}: grid ({}, {}, {}) for this config and these sizes: each axis must be from 0 to "
                                  "2^32 - 1",
                                  t.name, g[0], g[1], g[2]));
  return g;
}

bool takes_inputs(const KernelTemplate& t) { return t.reads_inputs || (t.reference && !t.tensors.empty()); }

const KernelTemplate* find_template(std::string_view name) {
  for (const auto& t : all_templates())
    if (t.name == name) return &t;
  return nullptr;
}

ParamMap resolve_params(const std::vector<Param>& declared, const std::vector<std::string>& overrides,
                        std::string_view flag) {
  ParamMap out;
  for (const Param& p : declared) out[p.name] = p.value;
  std::map<std::string, std::string> given; // name -> the NAME=VALUE that set it
  for (const std::string& kv : overrides) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UserError(fmt::format("{} '{}': expected NAME=VALUE", flag, kv));
    std::string name = kv.substr(0, eq), text = kv.substr(eq + 1);
    if (auto [it, fresh] = given.emplace(name, kv); !fresh)
      throw UserError(fmt::format("{} '{}': {} is given twice (first as '{}')", flag, kv, name, it->second));
    if (!out.count(name)) {
      std::vector<std::string> names;
      for (const Param& p : declared) names.push_back(p.name);
      throw UserError(fmt::format("{} '{}': unknown name '{}' (known: {})", flag, kv, name,
                                  names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))));
    }
    const Param& decl = *std::find_if(declared.begin(), declared.end(),
                                      [&](const Param& p) { return p.name == name; });
    if (!decl.choices.empty()) {
      auto it = std::find(decl.choices.begin(), decl.choices.end(), text);
      if (it == decl.choices.end())
        throw UserError(fmt::format("{} '{}': '{}' is not one of {}", flag, kv, text,
                                    fmt::join(decl.choices, ", ")));
      out[name] = it - decl.choices.begin();
      continue;
    }
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc::result_out_of_range)
      throw UserError(fmt::format("{} '{}': {} is out of range", flag, kv, text));
    if (ec != std::errc() || ptr != text.data() + text.size() || text.empty())
      throw UserError(fmt::format("{} '{}': '{}' is not an integer", flag, kv, text));
    if (v < decl.min || v > kMaxParamValue)
      throw UserError(fmt::format("{} '{}': {} must be from {} to {} (2^40), got {}", flag, kv, name, decl.min,
                                  kMaxParamValue, v));
    out[name] = v;
  }
  return out;
}

void require_pow2(const ParamMap& values, const std::string& name, int64_t lo, int64_t hi, std::string_view flag) {
  int64_t v = values.at(name);
  if (!ir::is_pow2(v) || v < lo || v > hi)
    throw UserError(fmt::format("{} {}={}: must be a power of two from {} to {}", flag, name, v, lo, hi));
}

void require_range(const ParamMap& values, const std::string& name, int64_t lo, int64_t hi, std::string_view flag) {
  int64_t v = values.at(name);
  if (v < lo || v > hi)
    throw UserError(fmt::format("{} {}={}: must be from {} to {}", flag, name, v, lo, hi));
}

} // namespace tilec::templates
