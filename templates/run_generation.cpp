// A template's run as data, generated from its declaration (templates/run_generation.h).
#include "templates/run_generation.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "abi/error.h"

namespace tilec::templates {

namespace {

std::string string_literal(std::string_view s) {
  return fmt::format("\"{}\"", s);
}

const Param* find_param(const std::vector<Param>& declared, const std::string& name) {
  auto it = std::find_if(declared.begin(), declared.end(),
                         [&](const Param& p) { return p.name == name; });
  return it == declared.end() ? nullptr : &*it;
}

rt::SizeExpr parse_expr(const KernelTemplate& t, const std::string& what, const std::string& text) {
  try {
    return rt::SizeExpr::parse(text);
  } catch (const rt::ExprError& e) {
    throw UserError(fmt::format("{}: {} '{}': {}", t.name, what, text, e.what()));
  }
}

// grid_expr with an empty y or z as 1.
std::array<std::string, 3> grid_texts(const KernelTemplate& t) {
  std::array<std::string, 3> g = t.grid_expr;
  for (size_t i = 1; i < 3; ++i)
    if (g[i].empty()) g[i] = "1";
  return g;
}

// Builds runs; every refusal names the template and what it lacks.
class RunGenerator {
public:
  explicit RunGenerator(const KernelTemplate& t) : t_(t) {}
  rt::OpRun generate();

private:
  [[noreturn]] void cannot(const std::string& why) const {
    throw UserError(fmt::format("{}: its run for hosts cannot be generated: {}", t_.name, why));
  }
  void add_sizes();
  void add_lets();
  void add_tensors();
  void bind_kernel(const ir::Function& k);
  void add_spec();
  // The expression a host evaluates to `p`'s value as a module's specialization records it.
  static std::string spec_value(const Param& p, bool config);

  const KernelTemplate& t_;
  rt::OpRun run_;
  ParamMap params_, shape_;     // the declared defaults
  std::set<std::string> names_; // sizes, lets, tensors, scalars: one namespace
};

rt::OpRun RunGenerator::generate() {
  if (t_.grid_expr[0].empty())
    cannot("it declares no grid expressions (KernelTemplate::grid_expr)");
  if (!t_.paths.empty())
    cannot("it has run paths of its own; declare its run (KernelTemplate::run, rt::OpRunBuilder)");
  if (t_.build_all)
    cannot("a run launches several kernels (build_all); declare its run (KernelTemplate::run, rt::OpRunBuilder)");
  if (!t_.module_variants.empty())
    cannot("its modules come in variants (module_variants); declare its run (KernelTemplate::run, rt::OpRunBuilder)");
  if (t_.tensors.empty()) cannot("it declares no tensors (KernelTemplate::tensors)");
  params_ = resolve_params(t_.params, {}, "--set");
  shape_ = resolve_params(t_.shape, {}, "--shape");
  add_sizes();
  add_lets();
  add_tensors();
  ir::Kernel k;
  try {
    k = t_.build(params_, shape_);
  } catch (const UserError& e) {
    cannot(fmt::format("its kernel does not build at the declared defaults: {}", e.what()));
  }
  bind_kernel(*k);
  add_spec();
  rt::OpLaunch launch;
  launch.kernel = k->name;
  std::array<std::string, 3> g = grid_texts(t_);
  for (size_t i = 0; i < 3; ++i)
    launch.grid[i] = parse_expr(t_, fmt::format("grid_expr[{}]", i), g[i]);
  run_.launches.push_back(std::move(launch));
  return std::move(run_);
}

// Each --shape field; one no tensor implies defaults to its declared value, as on the CLI.
void RunGenerator::add_sizes() {
  std::set<std::string> implied;
  for (const TensorSpec& ts : t_.tensors) {
    for (const std::string& d : ts.dims) {
      if (!d.empty() &&
          std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; }))
        continue;
      if (!find_param(t_.shape, d))
        cannot(fmt::format("tensor '{}' has the dim '{}', which is no size (--shape field)",
                           ts.name, d));
      implied.insert(d);
    }
    if (!ts.dtype_field.empty()) {
      const Param* f = find_param(t_.shape, ts.dtype_field);
      if (!f || f->choices.empty())
        cannot(fmt::format(
            "tensor '{}' takes its dtype from '{}', which is no choice field of --shape", ts.name,
            ts.dtype_field));
      implied.insert(ts.dtype_field);
    }
  }
  for (const Param& s : t_.shape) {
    rt::OpSize size;
    size.name = s.name;
    if (!implied.count(s.name))
      size.default_value =
          parse_expr(t_, fmt::format("size '{}' default", s.name),
                     s.choices.empty() ? std::to_string(s.value) : string_literal(s.value_str()));
    run_.sizes.push_back(std::move(size));
    names_.insert(s.name);
  }
}

void RunGenerator::add_lets() {
  for (const auto& [name, value] : t_.lets) {
    if (names_.count(name) || find_param(t_.params, name))
      cannot(fmt::format("let '{}' has the name of a size or a config parameter", name));
    run_.lets.push_back({name, parse_expr(t_, fmt::format("let '{}'", name), value)});
    names_.insert(name);
  }
}

void RunGenerator::add_tensors() {
  for (const TensorSpec& ts : t_.tensors) {
    if (!names_.insert(ts.name).second || find_param(t_.params, ts.name))
      cannot(fmt::format(
          "tensor '{}' has the name of a size, a let, another tensor or a config parameter",
          ts.name));
    rt::OpTensor o;
    o.name = ts.name;
    o.output = ts.output;
    for (size_t i = 0; i < ts.dims.size(); ++i)
      o.dims.push_back(parse_expr(t_, fmt::format("tensor '{}' dim {}", ts.name, i), ts.dims[i]));
    if (!ts.dtype_field.empty()) {
      o.dtype = parse_expr(t_, fmt::format("tensor '{}' dtype", ts.name), ts.dtype_field);
    } else if (!ts.dtype.empty()) {
      if (!ir::parse_dtype(ts.dtype))
        cannot(fmt::format("tensor '{}' has the dtype '{}', which is no element type", ts.name,
                           ts.dtype));
      o.dtype = parse_expr(t_, fmt::format("tensor '{}' dtype", ts.name), string_literal(ts.dtype));
    } else {
      cannot(fmt::format("tensor '{}' declares no dtype (TensorSpec::dtype, or dtype_field)",
                         ts.name));
    }
    run_.tensors.push_back(std::move(o));
  }
}

// Every kernel parameter binds by name to something the run declares: a pointer to a tensor
// of its element type, an integer to a size, config parameter or let, an f32 to a float
// option (a scalar the caller gives).
void RunGenerator::bind_kernel(const ir::Function& k) {
  for (const ir::Value* p : k.params) {
    const std::string& n = p->name;
    const std::string type = p->type.str();
    if (p->type.is_ptr()) {
      auto ts = std::find_if(t_.tensors.begin(), t_.tensors.end(),
                             [&](const TensorSpec& s) { return s.name == n; });
      if (ts == t_.tensors.end())
        cannot(fmt::format("kernel parameter '{}' ({}) is no tensor of KernelTemplate::tensors", n,
                           type));
      const std::string want =
          ts->dtype_field.empty()
              ? ts->dtype
              : find_param(t_.shape, ts->dtype_field)->value_str(shape_.at(ts->dtype_field));
      if (want != ir::dtype_name(p->type.dtype()))
        cannot(fmt::format("tensor '{}' is {} (at the defaults), but kernel parameter '{}' is {}",
                           n, want, n, type));
      continue;
    }
    if (ir::is_int(p->type.dtype())) {
      const bool bound =
          find_param(t_.shape, n) || find_param(t_.params, n) ||
          std::any_of(t_.lets.begin(), t_.lets.end(), [&](const auto& l) { return l.first == n; });
      if (!bound)
        cannot(fmt::format(
            "kernel parameter '{}' ({}) is no size, config parameter or let (KernelTemplate::lets)",
            n, type));
      continue;
    }
    // `--softmax-scale` is the kernel's softmax_scale.
    const bool option =
        std::any_of(t_.options.begin(), t_.options.end(), [&](const FloatOption& o) {
          std::string name = o.name;
          std::replace(name.begin(), name.end(), '-', '_');
          return name == n;
        });
    if (p->type.dtype() != ir::DType::f32 || !option)
      cannot(fmt::format("kernel parameter '{}' ({}) is no float option (KernelTemplate::options, "
                         "an f32 a host passes)",
                         n, type));
    if (!names_.insert(n).second)
      cannot(fmt::format("scalar '{}' has the name of a size, a let or a tensor", n));
    run_.scalars.push_back({n, rt::ScalarType::f32, {}});
  }
}

std::string RunGenerator::spec_value(const Param& p, bool config) {
  // A host's config holds a choice parameter's index; a module records its name.
  if (!config || p.choices.empty()) return p.name;
  std::string e = string_literal(p.choices.back());
  for (size_t i = p.choices.size() - 1; i-- > 0;)
    e = fmt::format("{} == {} ? {} : {}", p.name, i, string_literal(p.choices[i]), e);
  return e;
}

// The names a module is specialized on, in name order (how a [run.spec] table reads back).
void RunGenerator::add_spec() {
  std::map<std::string, std::string> spec;
  if (t_.module_spec) {
    for (const auto& [name, value] : t_.module_spec(params_, shape_)) {
      const Param* p = find_param(t_.params, name);
      const bool config = p;
      if (!p) p = find_param(t_.shape, name);
      if (!p)
        cannot(fmt::format(
            "its modules are specialized on '{}', which is no config parameter or size", name));
      const int64_t v = (config ? params_ : shape_).at(name);
      const rt::SpecValue own =
          p->choices.empty() ? rt::SpecValue(v) : rt::SpecValue(p->value_str(v));
      if (value != own)
        cannot(fmt::format(
            "module_spec gives {}={} at the defaults, not the value of the {} '{}' ({})", name,
            rt::format_value(value), config ? "config parameter" : "size", name,
            rt::format_value(own)));
      spec[name] = spec_value(*p, config);
    }
  } else {
    for (const Param& p : t_.params)
      spec[p.name] = spec_value(p, true);
    for (const Param& p : t_.shape)
      spec[p.name] = spec_value(p, false);
  }
  for (const auto& [name, text] : spec)
    run_.spec.emplace_back(name, parse_expr(t_, fmt::format("spec '{}'", name), text));
}

} // namespace

rt::OpRun generate_run(const KernelTemplate& t) {
  return RunGenerator(t).generate();
}

std::map<std::string, rt::SpecValue> run_values(const KernelTemplate& t, const ParamMap& params,
                                                const ParamMap& shape) {
  std::map<std::string, rt::SpecValue> v;
  for (const Param& p : t.params) {
    auto it = params.find(p.name);
    v[p.name] = it == params.end() ? p.value : it->second;
  }
  for (const Param& p : t.shape) {
    auto it = shape.find(p.name);
    const int64_t x = it == shape.end() ? p.value : it->second;
    v[p.name] = p.choices.empty() ? rt::SpecValue(x) : rt::SpecValue(p.value_str(x));
  }
  rt::ExprLookup lookup = [&](std::string_view n) -> std::optional<rt::SpecValue> {
    auto it = v.find(std::string(n));
    if (it == v.end()) return std::nullopt;
    return it->second;
  };
  for (const auto& [name, text] : t.lets) {
    try {
      v[name] = parse_expr(t, fmt::format("let '{}'", name), text).eval(lookup);
    } catch (const rt::ExprError& e) {
      throw UserError(fmt::format("{}: let {} = {}: {}", t.name, name, text, e.what()));
    }
  }
  return v;
}

launch::Grid run_grid(const KernelTemplate& t, const ParamMap& params, const ParamMap& shape) {
  if (t.grid_expr[0].empty())
    throw UserError(
        fmt::format("{} declares no grid expressions (KernelTemplate::grid_expr)", t.name));
  const std::map<std::string, rt::SpecValue> v = run_values(t, params, shape);
  rt::ExprLookup lookup = [&](std::string_view n) -> std::optional<rt::SpecValue> {
    auto it = v.find(std::string(n));
    if (it == v.end()) return std::nullopt;
    return it->second;
  };
  const std::array<std::string, 3> g = grid_texts(t);
  launch::Grid out{};
  for (size_t i = 0; i < 3; ++i) {
    try {
      out[i] = parse_expr(t, fmt::format("grid_expr[{}]", i), g[i]).eval_int(lookup);
    } catch (const rt::ExprError& e) {
      throw UserError(fmt::format("{}: grid_expr[{}] = {}: {}", t.name, i, g[i], e.what()));
    }
  }
  return out;
}

void derive_grid(KernelTemplate& t) {
  const bool any = std::any_of(t.grid_expr.begin(), t.grid_expr.end(),
                               [](const std::string& e) { return !e.empty(); });
  if (!any) return;
  if (t.grid_expr[0].empty())
    throw UserError(fmt::format("{}: grid_expr gives no x axis (grid_expr[0])", t.name));
  if (t.grid)
    throw UserError(fmt::format("{}: the grid is given twice, as grid and as grid_expr: keep "
                                "grid_expr (hosts launch on it too)",
                                t.name));
  if (!t.paths.empty() || t.build_all)
    throw UserError(fmt::format(
        "{}: grid_expr is the grid of one kernel's run; a template with paths or build_all "
        "launches its own grids (and declares its run, KernelTemplate::run)",
        t.name));
  const std::array<std::string, 3> g = grid_texts(t);
  for (size_t i = 0; i < 3; ++i)
    parse_expr(t, fmt::format("grid_expr[{}]", i), g[i]);
  for (const auto& [name, text] : t.lets)
    parse_expr(t, fmt::format("let '{}'", name), text);
  // A copy of what the grid reads: the registry moves `t`.
  KernelTemplate decl;
  decl.name = t.name;
  decl.params = t.params;
  decl.shape = t.shape;
  decl.grid_expr = t.grid_expr;
  decl.lets = t.lets;
  t.grid = [decl = std::move(decl)](const ParamMap& params, const ParamMap& shape) {
    return run_grid(decl, params, shape);
  };
}

} // namespace tilec::templates
