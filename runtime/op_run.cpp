#include "runtime/op_run.h"

#include "abi/toml_reader.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <set>

namespace tilec::rt {
namespace {

using Reader = TomlReader<ManifestError>;

// An expression: a TOML string, or an integer written as one.
SizeExpr expr(const Reader& r, const toml::node& n, const std::string& path) {
  std::string text;
  if (n.is_string()) text = n.as_string()->get();
  else if (n.is_integer()) text = std::to_string(n.as_integer()->get());
  else r.fail(n, fmt::format("key '{}' must be an expression (a string) or an integer, got {}", path, toml_kind(n)));
  try {
    return SizeExpr::parse(text);
  } catch (const ExprError& e) {
    r.fail(n, fmt::format("key '{}': {}", path, e.what()));
  }
}

SizeExpr optional_expr(const Reader& r, const toml::table& t, std::string_view key, const std::string& path) {
  const toml::node* n = t.get(key);
  return n ? expr(r, *n, path + "." + std::string(key)) : SizeExpr();
}

ScalarType scalar_type(const Reader& r, const toml::table& t, std::string_view key, const std::string& path) {
  std::string name = r.string(t, key, path + "." + std::string(key), &t);
  auto type = parse_scalar_type(name);
  if (!type) r.fail(t.get(key), fmt::format("key '{}.{}' is '{}', not an element type", path, key, name));
  return *type;
}

// Each entry of the array of tables `run.<name>`, with its path ("run.tensor[2]").
template <class F> void each(const Reader& r, const toml::table& run, const char* name, F&& f) {
  const toml::node* n = run.get(name);
  if (!n) return;
  if (!n->is_array()) r.fail(n, fmt::format("key 'run.{}' must be an array of tables ([[run.{}]])", name, name));
  const toml::array& a = *n->as_array();
  for (size_t i = 0; i < a.size(); ++i) {
    std::string path = fmt::format("run.{}[{}]", name, i);
    f(r.table(a[i], path), path);
  }
}

OpRun read_run(const Reader& r, const toml::table& run) {
  OpRun out;
  std::set<std::string> names; // one namespace: a module parameter binds to a name
  auto name_of = [&](const toml::table& t, const std::string& path) {
    std::string name = r.string(t, "name", path + ".name", &t);
    if (!names.insert(name).second) r.fail(t.get("name"), fmt::format("key '{}.name': '{}' is declared twice", path, name));
    return name;
  };
  each(r, run, "size", [&](const toml::table& t, const std::string& path) {
    OpSize s{name_of(t, path), optional_expr(r, t, "default", path)};
    if (const toml::node* k = t.get("key")) {
      if (k->is_string()) s.key_name = k->as_string()->get();
      else if (k->is_boolean()) s.key = k->as_boolean()->get();
      else r.fail(k, fmt::format("key '{}.key' must be true, false or the tuning key's name for it", path));
    }
    out.sizes.push_back(std::move(s));
  });
  each(r, run, "let", [&](const toml::table& t, const std::string& path) {
    std::string name = name_of(t, path);
    out.lets.push_back({name, expr(r, r.need(t, "value"), path + ".value")});
  });
  each(r, run, "tensor", [&](const toml::table& t, const std::string& path) {
    OpTensor x;
    x.name = name_of(t, path);
    std::string role = r.string(t, "role", path + ".role", &t);
    if (role != "input" && role != "output" && role != "inout")
      r.fail(t.get("role"), fmt::format("key '{}.role' is '{}', not \"input\", \"output\" or \"inout\"", path, role));
    x.output = role == "output";
    x.inout = role == "inout";
    const toml::node& dims = r.need(t, "dims");
    if (!dims.is_array()) r.fail(dims, fmt::format("key '{}.dims' must be an array of expressions", path));
    for (size_t i = 0; i < dims.as_array()->size(); ++i)
      x.dims.push_back(expr(r, *dims.as_array()->get(i), fmt::format("{}.dims[{}]", path, i)));
    x.dtype = expr(r, r.need(t, "dtype"), path + ".dtype");
    if (const toml::node* a = t.get("accept")) {
      if (!a->is_array()) r.fail(a, fmt::format("key '{}.accept' must be an array of element types", path));
      for (const toml::node& e : *a->as_array()) {
        auto type = e.is_string() ? parse_scalar_type(e.as_string()->get()) : std::nullopt;
        if (!type) r.fail(e, fmt::format("key '{}.accept' holds something that is not an element type", path));
        x.accept.push_back(*type);
      }
    }
    x.when = optional_expr(r, t, "when", path);
    out.tensors.push_back(std::move(x));
  });
  each(r, run, "scalar", [&](const toml::table& t, const std::string& path) {
    OpScalar s{name_of(t, path), scalar_type(r, t, "type", path), optional_expr(r, t, "when", path)};
    if (s.type != ScalarType::f32 && !is_integer(s.type))
      r.fail(t.get("type"), fmt::format("key '{}.type': a scalar is f32 or an integer type", path));
    out.scalars.push_back(std::move(s));
  });
  each(r, run, "check", [&](const toml::table& t, const std::string& path) {
    out.checks.push_back({expr(r, r.need(t, "what"), path + ".what"), r.string(t, "message", path + ".message", &t)});
  });
  each(r, run, "workspace", [&](const toml::table& t, const std::string& path) {
    OpWorkspace w{name_of(t, path), scalar_type(r, t, "dtype", path), expr(r, r.need(t, "elements"), path + ".elements"),
                  optional_expr(r, t, "when", path)};
    out.workspace.push_back(std::move(w));
  });
  if (const toml::node* spec = run.get("spec")) {
    const toml::table& t = r.table(*spec, "run.spec");
    for (auto&& [k, v] : t) out.spec.emplace_back(std::string(k.str()), expr(r, v, "run.spec." + std::string(k.str())));
  }
  each(r, run, "launch", [&](const toml::table& t, const std::string& path) {
    OpLaunch l;
    l.kernel = r.string(t, "kernel", path + ".kernel", &t);
    const toml::node& grid = r.need(t, "grid");
    if (!grid.is_array() || grid.as_array()->size() != 3)
      r.fail(grid, fmt::format("key '{}.grid' must be an array of three expressions (x, y, z)", path));
    for (size_t i = 0; i < 3; ++i) l.grid[i] = expr(r, *grid.as_array()->get(i), fmt::format("{}.grid[{}]", path, i));
    l.when = optional_expr(r, t, "when", path);
    out.launches.push_back(std::move(l));
  });
  if (out.launches.empty()) r.fail(&run, "the [run] table has no [[run.launch]]");
  return out;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string expr_text(const SizeExpr& e) { return quote(e.text()); }

} // namespace

std::optional<OpRun> parse_op_run(std::string_view text, const std::string& source) {
  Reader r(source);
  toml::table doc = parse_toml<ManifestError>(text, source);
  const toml::node* run = doc.get("run");
  if (!run) return std::nullopt;
  return read_run(r, r.table(*run, "run"));
}

std::string format_op_run(const OpRun& run) {
  std::string out = "\n# the run as data: each launch in order, its grid and buffers (runtime/op_run.h)\n";
  auto when = [](const SizeExpr& w) { return w.empty() ? std::string() : fmt::format("when = {}\n", expr_text(w)); };
  for (const OpSize& s : run.sizes)
    out += fmt::format("\n[[run.size]]\nname = {}\n{}{}", quote(s.name),
                       s.default_value.empty() ? "" : fmt::format("default = {}\n", expr_text(s.default_value)),
                       !s.key ? "key = false\n" : s.key_name.empty() ? "" : fmt::format("key = {}\n", quote(s.key_name)));
  for (const OpLet& l : run.lets) out += fmt::format("\n[[run.let]]\nname = {}\nvalue = {}\n", quote(l.name), expr_text(l.value));
  for (const OpTensor& t : run.tensors) {
    std::string dims, accept;
    for (const SizeExpr& d : t.dims) dims += (dims.empty() ? "" : ", ") + expr_text(d);
    for (ScalarType a : t.accept) accept += (accept.empty() ? "" : ", ") + quote(std::string(scalar_type_name(a)));
    out += fmt::format("\n[[run.tensor]]\nname = {}\nrole = \"{}\"\ndims = [{}]\ndtype = {}\n{}{}", quote(t.name),
                       t.inout ? "inout" : t.output ? "output" : "input", dims, expr_text(t.dtype),
                       accept.empty() ? "" : fmt::format("accept = [{}]\n", accept), when(t.when));
  }
  for (const OpScalar& s : run.scalars)
    out += fmt::format("\n[[run.scalar]]\nname = {}\ntype = \"{}\"\n{}", quote(s.name), scalar_type_name(s.type), when(s.when));
  for (const OpCheck& c : run.checks)
    out += fmt::format("\n[[run.check]]\nwhat = {}\nmessage = {}\n", expr_text(c.what), quote(c.message));
  for (const OpWorkspace& w : run.workspace)
    out += fmt::format("\n[[run.workspace]]\nname = {}\ndtype = \"{}\"\nelements = {}\n{}", quote(w.name),
                       scalar_type_name(w.dtype), expr_text(w.elements), when(w.when));
  if (!run.spec.empty()) {
    out += "\n[run.spec]\n";
    for (const auto& [name, e] : run.spec) out += fmt::format("{} = {}\n", name, expr_text(e));
  }
  for (const OpLaunch& l : run.launches)
    out += fmt::format("\n[[run.launch]]\nkernel = {}\ngrid = [{}, {}, {}]\n{}", quote(l.kernel), expr_text(l.grid[0]),
                       expr_text(l.grid[1]), expr_text(l.grid[2]), when(l.when));
  return out;
}

SizeExpr OpRunBuilder::parse(const std::string& what, std::string_view text) const {
  try {
    return SizeExpr::parse(text);
  } catch (const ExprError& e) {
    throw ExprError(fmt::format("{}'s run: {} '{}': {}", op_, what, text, e.what()));
  }
}

void OpRunBuilder::declare(const std::string& name) {
  if (std::find(names_.begin(), names_.end(), name) != names_.end())
    throw ExprError(fmt::format("{}'s run: '{}' is declared twice", op_, name));
  names_.push_back(name);
}

OpRunBuilder& OpRunBuilder::size(const std::string& name, const Size& s) {
  declare(name);
  OpSize out{name, s.default_value.empty() ? SizeExpr() : parse("size " + name, s.default_value), s.key,
             std::string(s.key_name)};
  run_.sizes.push_back(std::move(out));
  return *this;
}

OpRunBuilder& OpRunBuilder::size(const std::string& name) { return size(name, Size{}); }

OpRunBuilder& OpRunBuilder::let(const std::string& name, std::string_view value) {
  declare(name);
  run_.lets.push_back({name, parse("let " + name, value)});
  return *this;
}

OpRunBuilder& OpRunBuilder::tensor(const std::string& name, const Tensor& t, bool output, bool inout) {
  declare(name);
  OpTensor x;
  x.name = name;
  x.output = output;
  x.inout = inout;
  for (size_t i = 0; i < t.dims.size(); ++i) x.dims.push_back(parse(fmt::format("tensor {} dim {}", name, i), t.dims[i]));
  x.dtype = parse("tensor " + name + " dtype", t.dtype);
  x.accept = t.accept;
  if (!t.when.empty()) x.when = parse("tensor " + name + " when", t.when);
  run_.tensors.push_back(std::move(x));
  return *this;
}

OpRunBuilder& OpRunBuilder::scalar(const std::string& name, std::string_view when, ScalarType type) {
  declare(name);
  run_.scalars.push_back({name, type, when.empty() ? SizeExpr() : parse("scalar " + name + " when", when)});
  return *this;
}

OpRunBuilder& OpRunBuilder::check(std::string_view what, const std::string& message) {
  run_.checks.push_back({parse("check", what), message});
  return *this;
}

OpRunBuilder& OpRunBuilder::workspace(const std::string& name, ScalarType dtype, std::string_view elements,
                                      std::string_view when) {
  declare(name);
  run_.workspace.push_back({name, dtype, parse("workspace " + name, elements),
                            when.empty() ? SizeExpr() : parse("workspace " + name + " when", when)});
  return *this;
}

OpRunBuilder& OpRunBuilder::spec(const std::string& name, std::string_view value) {
  for (const auto& [n, e] : run_.spec)
    if (n == name) throw ExprError(fmt::format("{}'s run: spec '{}' is declared twice", op_, name));
  run_.spec.emplace_back(name, parse("spec " + name, value));
  return *this;
}

OpRunBuilder& OpRunBuilder::launch(const std::string& kernel, const std::array<std::string_view, 3>& grid,
                                   std::string_view when) {
  OpLaunch l;
  l.kernel = kernel;
  for (size_t i = 0; i < 3; ++i) l.grid[i] = parse(fmt::format("launch {} grid[{}]", kernel, i), grid[i]);
  if (!when.empty()) l.when = parse("launch " + kernel + " when", when);
  run_.launches.push_back(std::move(l));
  return *this;
}

OpRun OpRunBuilder::finish() {
  if (run_.launches.empty()) throw ExprError(fmt::format("{}'s run has no launch", op_));
  std::sort(run_.spec.begin(), run_.spec.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return std::move(run_);
}

RunValues::RunValues(const OpRun& run, const std::map<std::string, SpecValue>& sizes, std::set<std::string> present,
                     const std::map<std::string, std::int64_t>& config)
    : run_(run), present_(std::move(present)) {
  lookup_ = [this](std::string_view name) -> std::optional<SpecValue> {
    if (name.starts_with("present(")) return std::int64_t(present_.count(std::string(name.substr(8, name.size() - 9))));
    auto it = values_.find(std::string(name));
    if (it == values_.end()) return std::nullopt;
    return it->second;
  };
  for (const auto& [name, v] : sizes) {
    if (std::none_of(run.sizes.begin(), run.sizes.end(), [&](const OpSize& s) { return s.name == name; }))
      throw ExprError(fmt::format("no size '{}' in the run", name));
    values_[name] = v;
  }
  for (const OpSize& s : run.sizes) {
    if (values_.count(s.name)) continue;
    if (s.default_value.empty()) throw ExprError(fmt::format("size '{}' is not given and has no default", s.name));
    values_[s.name] = eval(s.default_value, "size " + s.name);
  }
  for (const auto& [k, v] : config) values_[k] = v;
  for (const OpLet& l : run.lets) values_[l.name] = eval(l.value, "let " + l.name);
}

SpecValue RunValues::eval(const SizeExpr& e, std::string_view what) const {
  try {
    return e.eval(lookup_);
  } catch (const ExprError& err) {
    throw ExprError(fmt::format("{} = {}: {}", what, e.text(), err.what()));
  }
}

std::int64_t RunValues::eval_int(const SizeExpr& e, std::string_view what) const {
  SpecValue v = eval(e, what);
  if (auto* i = std::get_if<std::int64_t>(&v)) return *i;
  throw ExprError(fmt::format("{} = {} is {}, not an integer", what, e.text(), format_value(v)));
}

const OpLaunch& RunValues::launch(std::string_view kernel) const {
  for (const OpLaunch& l : run_.launches)
    if (l.kernel == kernel) return l;
  throw ExprError(fmt::format("the run launches no kernel '{}'", kernel));
}

bool RunValues::launched(std::string_view kernel) const {
  return wanted(launch(kernel).when, fmt::format("launch {} when", kernel));
}

std::array<std::int64_t, 3> RunValues::grid(std::string_view kernel) const {
  const OpLaunch& l = launch(kernel);
  std::array<std::int64_t, 3> g{};
  for (size_t i = 0; i < 3; ++i) g[i] = eval_int(l.grid[i], fmt::format("launch {} grid[{}]", kernel, i));
  return g;
}

std::int64_t RunValues::workspace_elements(std::string_view name) const {
  for (const OpWorkspace& w : run_.workspace)
    if (w.name == name)
      return wanted(w.when, fmt::format("workspace {} when", name)) ? eval_int(w.elements, fmt::format("workspace {}", name)) : 0;
  throw ExprError(fmt::format("the run has no workspace buffer '{}'", name));
}

std::int64_t RunValues::value_int(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw ExprError(fmt::format("the run has no size, config value or let '{}'", name));
  if (auto* i = std::get_if<std::int64_t>(&it->second)) return *i;
  throw ExprError(fmt::format("'{}' is {}, not an integer", name, format_value(it->second)));
}

std::map<std::string, SpecValue> RunValues::spec() const {
  std::map<std::string, SpecValue> out;
  for (const auto& [name, e] : run_.spec) out[name] = eval(e, "spec " + name);
  return out;
}

} // namespace tilec::rt
