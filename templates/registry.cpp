#include "templates/registry.h"

#include <thread>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <random>

#include "templates/kernels.h"
#include "ir/printer.h"
#include "launch/launcher.h"
#include "templates/attention/paged_attention.h"
#include "templates/attention/run_description.h"
#include "runtime/npy.h"
#include <filesystem>
#include <utility>

namespace tilec::templates {

std::string Param::value_str(int64_t v) const {
  if (!choices.empty() && v >= 0 && v < static_cast<int64_t>(choices.size())) return choices[v];
  return std::to_string(v);
}

int Problem::add_buffer(launch::Buffer b) {
  buffers.push_back(std::move(b));
  return static_cast<int>(buffers.size()) - 1;
}

std::vector<launch::Arg> Problem::launch_args() {
  std::vector<launch::Arg> out;
  for (const ArgSpec& a : args) {
    if (a.buffer >= 0) out.push_back(launch::Arg::of(buffers.at(a.buffer)));
    else out.push_back(a.is_float ? launch::Arg::of_float(a.f) : launch::Arg::of_int(a.i));
  }
  return out;
}

std::optional<int64_t> ideal_traffic_budget(const Problem& p, double tolerance) {
  if (!p.ideal_bytes) return std::nullopt;
  return static_cast<int64_t>(std::ceil(double(*p.ideal_bytes) * (1.0 + tolerance)));
}

std::string traffic_error(const KernelTemplate& t, const std::string& path, const ParamMap& params, const Problem& p,
                          const launch::LaunchStats& stats) {
  if (!t.traffic_budget || !stats.request_bytes) return "";
  if (!path.empty() && path != default_path(t)) return "";
  std::optional<int64_t> budget = t.traffic_budget(p, params);
  if (!budget || *stats.request_bytes <= *budget) return "";
  return fmt::format("{} moved {} bytes in warp-wide requests, more than the {} a correct run may ({}{}): an "
                     "access wider than it needs, or one that a mask should have stopped",
                     t.name, *stats.request_bytes, *budget,
                     p.ideal_bytes ? fmt::format("ideal {}, ", *p.ideal_bytes) : std::string(),
                     p.ideal_bytes ? fmt::format("{:+.1f}%", 100.0 * (double(*stats.request_bytes) / double(*p.ideal_bytes) - 1.0))
                                   : std::string("over budget"));
}

Comparison compare_outputs(const Problem& p) {
  Comparison c;
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const launch::Buffer& got = p.buffers.at(p.outputs[k]);
    const launch::Buffer& want = p.expected.at(k);
    for (size_t i = 0; i < want.count(); ++i) {
      double g = got.get(i), w = want.get(i);
      double err = std::abs(g - w);
      if (std::isnan(g) != std::isnan(w) || (std::isinf(w) && g != w)) err = INFINITY;
      else if (std::isnan(w) || std::isinf(w)) err = 0.0;
      double rel = err / std::max(std::abs(w), 1e-30);
      c.max_abs_err = std::max(c.max_abs_err, err);
      if (std::abs(w) > p.atol) c.max_rel_err = std::max(c.max_rel_err, rel);
      if (!(err <= p.atol + p.rtol * std::abs(w)) && c.ok) {
        c.ok = false;
        c.first_mismatch = fmt::format("{}[{}]: got {}, expected {}", got.name, i, g, w);
      }
    }
  }
  return c;
}

namespace {

// The registry: tilec's kernels first, then the registered ones. A function-local static, so
// registrations from other translation units' static initializers find it constructed.
std::vector<KernelTemplate>& registry() {
  static std::vector<KernelTemplate> all = [] {
    std::vector<KernelTemplate> t = {paged_attention_template(), vector_add_template(), softmax_template(),
                                     matmul_template()};
    t.front().run = std::string(paged_attention_run()); // templates/attention/run_description.cpp
    return t;
  }();
  return all;
}

} // namespace

const std::vector<KernelTemplate>& all_templates() { return registry(); }

bool register_kernel(KernelTemplate (*make)()) {
  KernelTemplate t = make();
  if (t.name.empty() || !t.build)
    throw UserError(fmt::format("register_kernel: a kernel needs a name and a build function (got name '{}')", t.name));
  if (t.make_problem && t.paths.empty() && !t.grid)
    throw UserError(fmt::format("register_kernel: {} has a problem but no launch grid: set KernelTemplate::grid, a "
                                "function of the config and the sizes (every config runs on its own grid)",
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

rt::ProblemKey problem_key(const KernelTemplate& t, const ParamMap& shape) {
  rt::ProblemKey key;
  for (const Param& p : t.shape) {
    auto it = shape.find(p.name);
    int64_t v = it == shape.end() ? p.value : it->second;
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
  if (!t.run.empty()) card.run = rt::parse_op_run(t.run, t.name + " (KernelTemplate::run)");
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
    throw UserError(fmt::format("{} declares no launch grid (KernelTemplate::grid, a function of the config and the "
                                "sizes), so it cannot be run",
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

std::string inputs_help(const KernelTemplate& t) {
  if (t.reads_inputs || t.tensors.empty()) return t.inputs_help;
  std::vector<std::string> files;
  for (const TensorSpec& s : t.tensors)
    if (!s.output) files.push_back(fmt::format("{}.npy [{}]", s.name, fmt::join(s.dims, ", ")));
  return fmt::format("{}", fmt::join(files, " "));
}

namespace {

// A dim of a TensorSpec: a number, or the --shape field's value.
int64_t dim_value(const std::string& dim, const ParamMap& shape, const KernelTemplate& t) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), v);
  if (ec == std::errc() && ptr == dim.data() + dim.size()) return v;
  auto it = shape.find(dim);
  if (it == shape.end())
    throw InternalError(fmt::format("{}: a tensor dim '{}' is neither a number nor a --shape field", t.name, dim));
  return it->second;
}

const Param* shape_param(const KernelTemplate& t, const std::string& name) {
  for (const Param& p : t.shape)
    if (p.name == name) return &p;
  return nullptr;
}

// Reads the input arrays of `t` from `dir`, and sets in `shape` every size and dtype field they
// determine; a field two files disagree on is a UserError naming both.
std::map<std::string, rt::NpyArray> read_tensor_inputs(const KernelTemplate& t, const std::string& dir,
                                                       ParamMap& shape) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw UserError(fmt::format("--inputs {}: not a folder", dir));
  std::map<std::string, rt::NpyArray> arrays;
  std::map<std::string, std::string> source; // field -> the file that set it
  auto set_field = [&](const std::string& field, int64_t v, const std::string& file) {
    auto [it, fresh] = source.emplace(field, file);
    if (fresh) {
      shape[field] = v;
      return;
    }
    if (shape[field] != v) {
      const Param* p = shape_param(t, field);
      throw UserError(fmt::format("--inputs {}: {} gives {}={}, but {} gives {}={}", dir, file, field,
                                  p ? p->value_str(v) : std::to_string(v), it->second, field,
                                  p ? p->value_str(shape[field]) : std::to_string(shape[field])));
    }
  };
  for (const TensorSpec& spec : t.tensors) {
    if (spec.output) continue;
    const std::string file = spec.name + ".npy", path = (fs::path(dir) / file).string();
    if (!fs::exists(path))
      throw UserError(fmt::format("--inputs {}: {} is missing ({} reads {})", dir, file, t.name, inputs_help(t)));
    rt::NpyArray a = rt::read_npy(path);
    if (a.shape.size() != spec.dims.size())
      throw UserError(fmt::format("{}: a {}-d array of shape ({}); {} takes {} as [{}]", path, a.shape.size(),
                                  fmt::join(a.shape, ", "), t.name, spec.name, fmt::join(spec.dims, ", ")));
    for (size_t i = 0; i < spec.dims.size(); ++i) {
      const std::string& dim = spec.dims[i];
      if (shape_param(t, dim)) {
        set_field(dim, a.shape[i], file);
      } else if (dim_value(dim, shape, t) != a.shape[i]) {
        throw UserError(fmt::format("{}: dim {} is {}; {} takes {} as [{}]", path, i, a.shape[i], t.name, spec.name,
                                    fmt::join(spec.dims, ", ")));
      }
    }
    if (!spec.dtype_field.empty()) {
      const Param* field = shape_param(t, spec.dtype_field);
      if (!field || field->choices.empty())
        throw InternalError(fmt::format("{}: tensor {}'s dtype_field '{}' is not a --shape choice field", t.name,
                                        spec.name, spec.dtype_field));
      std::vector<int64_t> matches;
      std::vector<std::string> descrs;
      for (size_t c = 0; c < field->choices.size(); ++c) {
        std::optional<ir::DType> dt = ir::parse_dtype(field->choices[c]);
        if (!dt) throw InternalError(fmt::format("{}: choice {} of {} is not a dtype", t.name, field->choices[c], spec.dtype_field));
        std::string d = npy_descr(*dt);
        descrs.push_back(field->choices[c] + " " + d);
        if (d == a.descr) matches.push_back(int64_t(c));
      }
      if (matches.empty())
        throw UserError(fmt::format("{}: holds {}; {} takes {} as one of: {}", path, a.descr, t.name, spec.name,
                                    fmt::join(descrs, ", ")));
      // Two dtypes with one .npy spelling (bf16 and u16 bits): the given or default value when it is one of them.
      int64_t pick = std::find(matches.begin(), matches.end(), shape[spec.dtype_field]) != matches.end()
                         ? shape[spec.dtype_field]
                         : matches.front();
      set_field(spec.dtype_field, pick, file);
    }
    arrays.emplace(spec.name, std::move(a));
  }
  return arrays;
}

// Puts the files' arrays into the problem's buffers of the same names, each checked for its
// dtype and element count.
void fill_from_files(const KernelTemplate& t, const std::string& dir, Problem& p,
                     std::map<std::string, rt::NpyArray>& arrays) {
  for (auto& [name, a] : arrays) {
    auto it = std::find_if(p.buffers.begin(), p.buffers.end(), [&](const launch::Buffer& b) { return b.name == name; });
    if (it == p.buffers.end())
      throw InternalError(fmt::format("{}: declares the tensor {} but its problem has no buffer of that name", t.name,
                                      name));
    const std::string path = (std::filesystem::path(dir) / (name + ".npy")).string();
    if (a.descr != npy_descr(it->dtype))
      throw UserError(fmt::format("{}: holds {}, but {}'s {} is {} ({}) at these sizes", path, a.descr, t.name, name,
                                  ir::dtype_name(it->dtype), npy_descr(it->dtype)));
    if (size_t(a.count()) != it->count())
      throw UserError(fmt::format("{}: {} elements, but {}'s {} has {} at these sizes", path, a.count(), t.name, name,
                                  it->count()));
    it->bytes = ByteArray(a.data);
  }
}

} // namespace

void write_output(const KernelTemplate& t, const std::string& path, const Problem& p) {
  if (t.write_output) return t.write_output(path, p);
  const launch::Buffer& out = p.buffers.at(size_t(p.outputs.at(0)));
  std::vector<int64_t> dims{int64_t(out.count())};
  for (const TensorSpec& s : t.tensors)
    if (s.output && s.name == out.name) {
      dims.clear();
      for (const std::string& d : s.dims) dims.push_back(dim_value(d, p.shape, t));
    }
  rt::write_npy(path, {npy_descr(out.dtype), dims, out.bytes.to_vector()});
}

Problem make_problem(const KernelTemplate& t, const ProblemRequest& request) {
  if (!t.make_problem)
    throw UserError(fmt::format("{} has no problem generator with a reference (KernelTemplate::make_problem), so it "
                                "cannot be run, checked, benchmarked or tuned",
                                t.name));
  for (const auto& [name, value] : request.options)
    if (std::none_of(t.options.begin(), t.options.end(), [&](const FloatOption& o) { return o.name == name; }))
      throw UserError(fmt::format("--{}: {} has no such option{}", name, t.name,
                                  t.options.empty() ? "" : fmt::format(" (its options: --{})", t.options.front().name)));
  if (!request.inputs_dir.empty() && !takes_inputs(t))
    throw UserError(fmt::format("--inputs: {} does not read its inputs from files (a kernel declares its arrays, "
                                "KernelTemplate::tensors, and a reference from its inputs to take them)",
                                t.name));
  ProblemRequest r = request;
  for (const Param& s : t.shape) r.shape.emplace(s.name, s.value); // the sizes not given: their defaults
  Problem p;
  if (!r.inputs_dir.empty() && !t.reads_inputs) {
    std::map<std::string, rt::NpyArray> arrays = read_tensor_inputs(t, r.inputs_dir, r.shape);
    const std::string dir = std::exchange(r.inputs_dir, "");
    p = t.make_problem(r);
    for (const auto& [name, v] : r.shape) p.shape.emplace(name, v);
    fill_from_files(t, dir, p, arrays);
    p.expected.clear();
    t.reference(p);
    p.description = dir;
  } else {
    p = t.make_problem(r);
    for (const auto& [name, v] : r.shape) p.shape.emplace(name, v); // a template's own (from files) first
    if (p.expected.empty() && t.reference) t.reference(p);
  }
  if (p.expected.size() != p.outputs.size())
    throw InternalError(fmt::format("{}: its problem has {} outputs but {} expected buffers", t.name, p.outputs.size(),
                                    p.expected.size()));
  std::string sizes;
  for (const Param& s : t.shape)
    if (p.shape.count(s.name)) sizes += fmt::format("{}{}={}", sizes.empty() ? "" : " ", s.name, s.value_str(p.shape.at(s.name)));
  if (p.description.empty()) p.description = sizes;
  // Inputs from files: what is printed is what ran, the sizes the files gave included.
  else if (!request.inputs_dir.empty() && p.description == request.inputs_dir)
    p.description = fmt::format("{}: {}", request.inputs_dir, sizes);
  return p;
}

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
    out[name] = v;
  }
  return out;
}

std::string npy_descr(ir::DType t) {
  switch (t) {
  case ir::DType::f32: return "<f4";
  case ir::DType::f16: return "<f2";
  case ir::DType::bf16: return "<u2"; // raw bfloat16 bits
  case ir::DType::i32: return "<i4";
  case ir::DType::i8: return "|i1";
  case ir::DType::i16: return "<i2";
  case ir::DType::i64: return "<i8";
  case ir::DType::i1: return "|b1";
  case ir::DType::u8: return "|u1";
  case ir::DType::u16: return "<u2"; // as bf16's bits: a reader tells them apart by the dtype it expects
  case ir::DType::u32: return "<u4";
  case ir::DType::u64: return "<u8";
  case ir::DType::f8e4m3:
  case ir::DType::f8e5m2: return "|u1"; // raw fp8 bits; the dtype is declared elsewhere
  default: throw UserError(fmt::format("no .npy dtype for {}", ir::dtype_name(t)));
  }
}

void fill_uniform(launch::Buffer& b, uint64_t seed, double lo, double hi) {
  const bool is_float = ir::is_float(b.dtype);
  if (b.count() < kParallelFillElements) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    for (size_t i = 0; i < b.count(); ++i) {
      double v = dist(rng);
      b.set(i, is_float ? v : std::floor(v));
    }
    return;
  }
  // A large buffer (a KV cache of the GPU check's sizes: hundreds of millions of elements) is
  // filled on every core: element i is a function of (seed, i) alone (SplitMix64 of the two),
  // so the values do not depend on the threads. One sequential stream took minutes.
  auto fill = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      uint64_t z = seed * 0x9e3779b97f4a7c15ull + (i + 1) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      double v = lo + (hi - lo) * double(z >> 11) * 0x1.0p-53;
      b.set(i, is_float ? v : std::floor(v));
    }
  };
  const size_t n = b.count(), threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(fill, n * t / threads, n * (t + 1) / threads);
  fill(0, n / threads);
  for (std::thread& th : pool) th.join();
}

} // namespace tilec::templates

namespace tilec::templates {

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
