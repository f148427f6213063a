// Problems from a template: generated, or read from an --inputs folder of .npy files (sizes and
// dtypes taken from the arrays), and the output written back as .npy.
#include "templates/registry.h"

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

namespace {

// Each declared tensor's dims that name --shape fields (the others are numbers, or come from
// files) multiply to at most kMaxTensorElements; a product that would overflow is refused
// with the field values that make it.
void check_tensor_sizes(const KernelTemplate& t, const ParamMap& shape) {
  for (const TensorSpec& ts : t.tensors) {
    int64_t elements = 1;
    std::vector<std::string> named;
    for (const std::string& dim : ts.dims) {
      int64_t n = 0;
      if (auto it = shape.find(dim); it != shape.end()) n = it->second;
      else if (auto [ptr, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), n); ec != std::errc()) continue;
      named.push_back(fmt::format("{}={}", dim, n));
      if (n < 0) throw UserError(fmt::format("--shape {}: {} has a negative dim", dim, ts.name));
      if (n != 0 && elements > kMaxTensorElements / n) elements = kMaxTensorElements + 1;
      else elements *= n;
    }
    if (elements > kMaxTensorElements)
      throw UserError(fmt::format("--shape: {} would have more than 2^48 elements ({})", ts.name, fmt::join(named, " x ")));
  }
}

} // namespace

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
  check_tensor_sizes(t, r.shape);
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

} // namespace tilec::templates
