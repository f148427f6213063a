#include "runtime/op_store.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <mutex>
#include <set>

#include "runtime/cuda.h"

namespace tilec::rt {

namespace fs = std::filesystem;

struct OpStore::Cache {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const LoadedModule>> modules;
};

namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// An integer argument of `type` holding `v`, or nullopt when `v` does not fit it.
std::optional<Arg> integer_arg(ScalarType type, std::int64_t v) {
  auto fits = [&](std::int64_t lo, std::int64_t hi) { return v >= lo && v <= hi; };
  switch (type) {
  case ScalarType::i8: return fits(INT8_MIN, INT8_MAX) ? std::optional<Arg>(Arg(std::int8_t(v))) : std::nullopt;
  case ScalarType::i16: return fits(INT16_MIN, INT16_MAX) ? std::optional<Arg>(Arg(std::int16_t(v))) : std::nullopt;
  case ScalarType::i32: return fits(INT32_MIN, INT32_MAX) ? std::optional<Arg>(Arg(std::int32_t(v))) : std::nullopt;
  case ScalarType::i64: return Arg(std::int64_t(v));
  case ScalarType::u8: return fits(0, UINT8_MAX) ? std::optional<Arg>(Arg(std::uint8_t(v))) : std::nullopt;
  case ScalarType::u16: return fits(0, UINT16_MAX) ? std::optional<Arg>(Arg(std::uint16_t(v))) : std::nullopt;
  case ScalarType::u32: return fits(0, UINT32_MAX) ? std::optional<Arg>(Arg(std::uint32_t(v))) : std::nullopt;
  case ScalarType::u64: return v >= 0 ? std::optional<Arg>(Arg(std::uint64_t(v))) : std::nullopt;
  default: return std::nullopt;
  }
}

[[noreturn]] void refuse(const std::string& op, const std::string& msg) {
  throw OpArgumentError(fmt::format("{}: {}", op, msg));
}

std::string spec_text(const SpecValue& v) {
  if (auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  return std::get<std::string>(v);
}

} // namespace

std::shared_ptr<OpStore> OpStore::open(const fs::path& dir, const std::string& backend) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw OpNotFound(fmt::format("{}: not a folder of exported modules", dir.string()));
  auto store = std::shared_ptr<OpStore>(new OpStore);
  store->dir_ = dir;
  store->cache_ = std::make_shared<Cache>();
  std::string b = backend.empty() ? "auto" : backend;
  if (b == "auto") b = cuda_available() ? "cuda" : "emulate";
  if (b == "emulate" || b == "host") {
    store->arch_ = "host";
    store->device_ = host_device_name("emulate");
  } else if (b == "cuda") {
    const Context& ctx = LoadedModule::gpu_context();
    store->arch_ = ctx.properties().arch();
    store->device_ = ctx.properties().name;
  } else {
    throw Error(fmt::format("backend '{}': expected auto, cuda or emulate", backend));
  }
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".toml" && e.is_regular_file(ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    const std::string name = f.filename().string();
    if (name.size() > 12 && name.ends_with(".kernel.toml")) {
      KernelCard card = read_kernel_card(f);
      if (card.run) {
        std::string kernel = card.kernel;
        store->ops_[kernel] = std::unique_ptr<Op>(new Op(store.get(), std::move(card)));
      }
      continue;
    }
    std::ifstream in(f, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find("[[entry]]") != std::string::npos) store->db_.merge(parse_tuning_db(text, f.string()));
  }
  return store;
}

std::vector<std::string> OpStore::ops() const {
  std::vector<std::string> out;
  for (const auto& [name, op] : ops_) out.push_back(name);
  return out;
}

const Op& OpStore::op(const std::string& name) const {
  auto it = ops_.find(name);
  if (it == ops_.end())
    throw OpNotFound(fmt::format("no op '{}' in {} (ops there: {}; an op is a <kernel>.kernel.toml with a [run] "
                                 "table, written by tilec autotune --export or tilec compile)",
                                 name, dir_.string(), ops_.empty() ? "none" : join(ops())));
  return *it->second;
}

std::shared_ptr<const LoadedModule> OpStore::module(const std::string& kernel, const Spec& values,
                                                    const std::string& build_command) const {
  ModuleQuery q;
  q.kernel = kernel;
  q.arch = arch_;
  q.values = values;
  q.build_command = build_command;
  const std::string id = describe(q);
  std::lock_guard lock(cache_->mutex);
  auto it = cache_->modules.find(id);
  if (it != cache_->modules.end()) return it->second;
  auto m = std::make_shared<const LoadedModule>(LoadedModule::load(load_module(q, {dir_})));
  cache_->modules.emplace(id, m);
  return m;
}

OpCall Op::prepare(const OpArgs& args) const { return prepare(args, false); }

std::pair<std::vector<std::int64_t>, ScalarType> Op::tensor_shape(const OpArgs& args, const std::string& tensor) const {
  auto t = std::find_if(run().tensors.begin(), run().tensors.end(), [&](const OpTensor& x) { return x.name == tensor; });
  if (t == run().tensors.end()) throw OpArgumentError(fmt::format("{}: no tensor '{}'", name(), tensor));
  OpCall call = prepare(args, true);
  ExprLookup lookup = [&](std::string_view n) -> std::optional<SpecValue> {
    auto it = call.values.find(std::string(n));
    if (it == call.values.end()) return std::nullopt;
    return it->second;
  };
  std::pair<std::vector<std::int64_t>, ScalarType> out;
  try {
    for (const SizeExpr& d : t->dims) out.first.push_back(d.eval_int(lookup));
    SpecValue dt = t->dtype.eval(lookup);
    auto type = std::holds_alternative<std::string>(dt) ? parse_scalar_type(std::get<std::string>(dt)) : std::nullopt;
    if (!type) throw ExprError(fmt::format("its dtype {} names no element type", format_value(dt)));
    out.second = *type;
  } catch (const ExprError& e) {
    throw OpArgumentError(fmt::format("{}: tensor '{}': {}", name(), tensor, e.what()));
  }
  return out;
}

namespace {

// One Op::prepare: the caller's arguments by name and every value the run's expressions
// read (call.values), which its steps fill in order; each step names what a caller gave
// wrong (OpArgumentError) or what a module does not fit (ManifestError).
class Preparation {
public:
  Preparation(const Op& op, const OpStore& store, const OpArgs& args);
  void resolve_sizes();      // 1. given, implied by a tensor, else defaulted; the tuning key
  void select_config();      // 2. the nearest tuned key's, else the card's defaults; the caller's on top
  void evaluate_lets();
  void check_values() const; //    the run's checks over the sizes, the config and the lets
  void check_tensors();      // 3. present when wanted, of the right shape and dtype, contiguous, aligned,
  void check_overlaps() const; //    and no output overlapping another tensor
  void check_scalars();
  void lay_out_workspace();  //    each buffer at a 256-byte aligned offset
  void prepare_launches();   // 4. the modules by the run's specialization, their parameters bound

  OpCall call;

  Preparation(const Preparation&) = delete;
  Preparation& operator=(const Preparation&) = delete;

private:
  [[noreturn]] void fail(const std::string& msg) const { refuse(op_.name(), msg); }
  SpecValue eval(const SizeExpr& e, const std::string& what) const;
  std::int64_t eval_int(const SizeExpr& e, const std::string& what) const;
  bool is_size(const std::string& n) const;
  void check_tensor_shape(const OpTensor& t, const OpTensorArg& a);
  void check_tensor_dtype(const OpTensor& t, const OpTensorArg& a);
  std::size_t tensor_bytes(const OpTensor& t, const OpTensorArg& a) const;
  std::string build_command() const;
  std::string caller_config_note() const;
  void bind_params(PreparedLaunch& p) const;

  const Op& op_;
  const OpRun& run_;
  const OpStore& store_;
  const OpArgs& args_;
  std::map<std::string, SpecValue>& v_ = call.values;
  std::map<std::string, const OpTensorArg*> tensors_;
  std::map<std::string, const OpScalarArg*> scalars_;
  ExprLookup lookup_;
  std::map<std::string, std::string> implied_by_; // size -> "q's dim 2" for messages
  std::map<std::string, std::pair<const OpTensorArg*, std::size_t>> bytes_of_; // name -> (arg, bytes)
  std::map<std::string, std::pair<std::size_t, std::size_t>> ws_; // name -> (offset, bytes)
  std::map<std::string, ScalarType> ws_type_;
  Spec spec_;
  TunedConfig chosen_;        // the config before the caller's: the tuned one, else the card's defaults
  bool chosen_is_tuned_ = false;
};

// Indexes the tensor and scalar arguments by name, refusing one the run does not declare or
// one given twice.
Preparation::Preparation(const Op& op, const OpStore& store, const OpArgs& args)
    : op_(op), run_(op.run()), store_(store), args_(args) {
  call.op = op.name();
  auto declared_tensors = [&] {
    std::vector<std::string> n;
    for (const OpTensor& t : run_.tensors) n.push_back(t.name);
    return join(n);
  };
  for (const OpTensorArg& t : args.tensors) {
    if (std::none_of(run_.tensors.begin(), run_.tensors.end(), [&](const OpTensor& d) { return d.name == t.name; }))
      fail(fmt::format("no tensor argument '{}' (its tensors: {})", t.name, declared_tensors()));
    if (!tensors_.emplace(t.name, &t).second) fail(fmt::format("tensor '{}' is given twice", t.name));
  }
  for (const OpScalarArg& s : args.scalars) {
    if (std::none_of(run_.scalars.begin(), run_.scalars.end(), [&](const OpScalar& d) { return d.name == s.name; })) {
      std::vector<std::string> n;
      for (const OpScalar& d : run_.scalars) n.push_back(d.name);
      fail(fmt::format("no scalar argument '{}' (its scalars: {})", s.name, join(n)));
    }
    if (!scalars_.emplace(s.name, &s).second) fail(fmt::format("scalar '{}' is given twice", s.name));
  }
  lookup_ = [this](std::string_view name) -> std::optional<SpecValue> {
    if (name.starts_with("present(")) {
      std::string n(name.substr(8, name.size() - 9));
      return std::int64_t(tensors_.count(n) || scalars_.count(n));
    }
    auto it = v_.find(std::string(name));
    if (it == v_.end()) return std::nullopt;
    return it->second;
  };
}

SpecValue Preparation::eval(const SizeExpr& e, const std::string& what) const {
  try {
    return e.eval(lookup_);
  } catch (const ExprError& err) {
    refuse(op_.name(), fmt::format("{}: {}", what, err.what()));
  }
}

std::int64_t Preparation::eval_int(const SizeExpr& e, const std::string& what) const {
  SpecValue r = eval(e, what);
  if (auto* i = std::get_if<std::int64_t>(&r)) return *i;
  refuse(op_.name(), fmt::format("{} = {} is not an integer", what, format_value(r)));
}

bool Preparation::is_size(const std::string& n) const {
  return std::any_of(run_.sizes.begin(), run_.sizes.end(), [&](const OpSize& s) { return s.name == n; });
}

void Preparation::resolve_sizes() {
  for (const auto& [name, value] : args_.sizes) {
    if (!is_size(name)) {
      std::vector<std::string> n;
      for (const OpSize& s : run_.sizes) n.push_back(s.name);
      fail(fmt::format("no size '{}' (its sizes: {})", name, join(n)));
    }
    v_[name] = value;
  }
  for (const OpTensor& t : run_.tensors) {
    auto it = tensors_.find(t.name);
    if (it == tensors_.end()) continue;
    const OpTensorArg& a = *it->second;
    if (a.shape.size() != t.dims.size()) {
      std::string dims;
      for (const SizeExpr& d : t.dims) dims += (dims.empty() ? "" : ", ") + d.text();
      fail(fmt::format("tensor '{}' has {} dimension{} (shape {}), expected {} ([{}])", t.name, a.shape.size(),
                       a.shape.size() == 1 ? "" : "s", shape_str(a.shape), t.dims.size(), dims));
    }
    for (size_t i = 0; i < t.dims.size(); ++i)
      if (auto n = t.dims[i].as_name(); n && is_size(*n) && !v_.count(*n)) {
        v_[*n] = a.shape[i];
        implied_by_[*n] = fmt::format("{}'s dimension {}", t.name, i);
      }
    if (auto n = t.dtype.as_name(); n && is_size(*n) && !v_.count(*n)) {
      v_[*n] = std::string(scalar_type_name(a.dtype));
      implied_by_[*n] = fmt::format("{}'s dtype", t.name);
    }
  }
  for (const OpSize& s : run_.sizes) {
    if (v_.count(s.name)) continue;
    if (s.default_value.empty())
      fail(fmt::format("size '{}' is not given and no tensor argument implies it", s.name));
    try {
      v_[s.name] = s.default_value.eval(lookup_);
    } catch (const ExprError& e) {
      fail(fmt::format("size '{}' defaults to {}: {}", s.name, s.default_value.text(), e.what()));
    }
  }
  for (const OpSize& s : run_.sizes)
    if (s.key) call.key[s.key_field()] = v_.at(s.name);
}

void Preparation::select_config() {
  const KernelCard& card = op_.card();
  call.config = card.defaults;
  auto sel = rt::select_config(store_.db(), op_.name(), store_.device(), call.key, card.size_fields, card.size_buckets);
  if (sel) {
    for (const auto& [k, value] : sel->entry.config) call.config[k] = value;
    call.note = sel->note;
    chosen_is_tuned_ = true;
  } else {
    call.note = fmt::format("nothing tuned for {} on {}; using the defaults {}", format_key(call.key),
                            store_.device(), format_config(call.config));
  }
  chosen_ = call.config;
  for (const auto& [k, value] : args_.config) {
    if (!card.defaults.count(k)) fail(fmt::format("no config parameter '{}' (its config: {})", k, format_config(card.defaults)));
    call.config[k] = value;
  }
  if (!args_.config.empty()) call.note += fmt::format("; the caller set {}", format_config(args_.config));
  for (const auto& [k, value] : call.config) v_[k] = value;
}

void Preparation::evaluate_lets() {
  for (const OpLet& l : run_.lets) v_[l.name] = eval(l.value, "let " + l.name);
}

void Preparation::check_values() const {
  for (const OpCheck& c : run_.checks)
    if (eval_int(c.what, "check " + c.what.text()) == 0)
      fail(fmt::format("{} ({} is false for {})", c.message, c.what.text(), format_key(call.key)));
}

// Present exactly when its condition holds, then its shape, dtype, size, contiguity and
// alignment; the bytes it spans are what a launch binds.
void Preparation::check_tensors() {
  for (const OpTensor& t : run_.tensors) {
    const bool want = t.when.empty() || eval_int(t.when, fmt::format("tensor '{}' when", t.name)) != 0;
    auto it = tensors_.find(t.name);
    if (!want) {
      if (it != tensors_.end())
        fail(fmt::format("tensor '{}' is given, but this op takes it only when {} (false here)", t.name, t.when.text()));
      continue;
    }
    if (it == tensors_.end()) fail(fmt::format("tensor argument '{}' is missing{}", t.name,
                                               t.when.empty() ? "" : fmt::format(" (required when {})", t.when.text())));
    const OpTensorArg& a = *it->second;
    check_tensor_shape(t, a);
    check_tensor_dtype(t, a);
    bytes_of_[t.name] = {&a, tensor_bytes(t, a)};
  }
  check_overlaps();
}

// An output (or inout) shares no byte with another tensor: tilec's kernels assume a written buffer
// overlaps no other (they read inputs through the non-coherent path, and would read what they
// wrote).
void Preparation::check_overlaps() const {
  for (const OpTensor& t : run_.tensors) {
    auto out = bytes_of_.find(t.name);
    if (!(t.output || t.inout) || out == bytes_of_.end() || out->second.second == 0) continue;
    const std::uint64_t lo = out->second.first->address, hi = lo + out->second.second;
    for (const auto& [name, other] : bytes_of_) {
      const std::uint64_t olo = other.first->address, ohi = olo + other.second;
      if (name != t.name && other.second > 0 && lo < ohi && olo < hi)
        fail(fmt::format("tensor '{}' [{:#x}, {:#x}) and tensor '{}' [{:#x}, {:#x}) overlap, and the op writes '{}': "
                         "pass separate arrays",
                         t.name, lo, hi, name, olo, ohi, t.name));
    }
  }
}

void Preparation::check_tensor_shape(const OpTensor& t, const OpTensorArg& a) {
  std::vector<std::int64_t> want_shape;
  for (size_t i = 0; i < t.dims.size(); ++i)
    want_shape.push_back(eval_int(t.dims[i], fmt::format("tensor '{}' dimension {}", t.name, i)));
  if (a.shape == want_shape) return;
  std::string dims, why;
  for (size_t i = 0; i < t.dims.size(); ++i) {
    dims += (i ? ", " : "") + t.dims[i].text();
    if (i < a.shape.size() && a.shape[i] != want_shape[i]) {
      auto n = t.dims[i].as_name();
      auto by = n ? implied_by_.find(*n) : implied_by_.end();
      if (why.empty() && by != implied_by_.end())
        why = fmt::format("; {} = {} comes from {}", *n, want_shape[i], by->second);
    }
  }
  fail(fmt::format("tensor '{}' has shape {}, expected [{}] = {}{}", t.name, shape_str(a.shape), dims,
                   shape_str(want_shape), why));
}

void Preparation::check_tensor_dtype(const OpTensor& t, const OpTensorArg& a) {
  SpecValue dt = eval(t.dtype, fmt::format("tensor '{}' dtype", t.name));
  auto* dt_name = std::get_if<std::string>(&dt);
  auto want_type = dt_name ? parse_scalar_type(*dt_name) : std::nullopt;
  if (!want_type) fail(fmt::format("tensor '{}': its dtype {} = {} names no element type", t.name, t.dtype.text(), format_value(dt)));
  if (a.dtype != *want_type && std::find(t.accept.begin(), t.accept.end(), a.dtype) == t.accept.end()) {
    std::string also;
    for (ScalarType x : t.accept) also += fmt::format(" or {}", scalar_type_name(x));
    fail(fmt::format("tensor '{}' has dtype {}, expected {}{}", t.name, scalar_type_name(a.dtype),
                     scalar_type_name(*want_type), also));
  }
}

// The bytes of a contiguous, 16-byte aligned tensor.
std::size_t Preparation::tensor_bytes(const OpTensor& t, const OpTensorArg& a) const {
  std::size_t count = 1;
  for (std::int64_t d : a.shape)
    if (d < 0 || __builtin_mul_overflow(count, std::size_t(d), &count))
      fail(fmt::format("tensor '{}' has shape {}: not a size", t.name, shape_str(a.shape)));
  if (!a.strides.empty()) {
    if (a.strides.size() != a.shape.size())
      fail(fmt::format("tensor '{}' gives {} strides for {} dimensions", t.name, a.strides.size(), a.shape.size()));
    std::int64_t expect = 1;
    for (size_t i = a.shape.size(); i-- > 0;) {
      if (a.shape[i] != 1 && a.strides[i] != expect)
        fail(fmt::format("tensor '{}' is not contiguous (strides {}, shape {}): pass a contiguous array", t.name,
                         shape_str(a.strides), shape_str(a.shape)));
      expect *= a.shape[i];
    }
  }
  const std::size_t bytes = count * scalar_type_bytes(a.dtype);
  if (bytes > 0 && a.address % 16 != 0)
    fail(fmt::format("tensor '{}' at address {:#x} is not 16-byte aligned, which tilec's kernels assume", t.name, a.address));
  return bytes;
}

// Present exactly when its condition holds, and a value of its type.
void Preparation::check_scalars() {
  for (const OpScalar& s : run_.scalars) {
    const bool want = s.when.empty() || eval_int(s.when, fmt::format("scalar '{}' when", s.name)) != 0;
    const bool given = scalars_.count(s.name);
    if (want && !given)
      fail(fmt::format("scalar argument '{}' is missing{}", s.name, s.when.empty() ? "" : fmt::format(" (required when {})", s.when.text())));
    if (!want && given)
      fail(fmt::format("scalar '{}' is given, but this op takes it only when {} (false here)", s.name, s.when.text()));
    if (given) {
      double x = scalars_.at(s.name)->value;
      if (s.type == ScalarType::f32 && !(std::isfinite(x) && std::abs(x) <= std::numeric_limits<float>::max()))
        fail(fmt::format("scalar '{}' = {} is not a finite f32", s.name, x));
      if (s.type != ScalarType::f32 && (x != std::floor(x) || !integer_arg(s.type, std::int64_t(x))))
        fail(fmt::format("scalar '{}' = {} is not an {} value", s.name, x, scalar_type_name(s.type)));
    }
  }
}

void Preparation::lay_out_workspace() {
  for (const OpWorkspace& w : run_.workspace) {
    if (!w.when.empty() && eval_int(w.when, fmt::format("workspace '{}' when", w.name)) == 0) continue;
    std::int64_t n = eval_int(w.elements, fmt::format("workspace '{}' elements", w.name));
    std::size_t bytes = 0;
    if (n < 0 || __builtin_mul_overflow(std::size_t(n), scalar_type_bytes(w.dtype), &bytes))
      fail(fmt::format("workspace '{}': {} = {} elements is not a size", w.name, w.elements.text(), n));
    std::size_t offset = (call.workspace_bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
    ws_[w.name] = {offset, bytes};
    ws_type_[w.name] = w.dtype;
    call.workspace_offsets[w.name] = offset;
    call.workspace_bytes = offset + bytes;
  }
}

void Preparation::prepare_launches() {
  for (const auto& [k, e] : run_.spec) spec_[k] = eval(e, "spec " + k);
  // A config the caller changed may be one the template refuses, which only the compiler knows:
  // the error then names the config this call would otherwise use, not a command for the caller's.
  const bool caller_changed = std::any_of(args_.config.begin(), args_.config.end(),
                                          [&](const auto& kv) { return chosen_.at(kv.first) != kv.second; });
  const std::string command = caller_changed ? "" : build_command();
  for (const OpLaunch& l : run_.launches) {
    if (!l.when.empty() && eval_int(l.when, fmt::format("launch '{}' when", l.kernel)) == 0) continue;
    PreparedLaunch p;
    p.kernel = l.kernel;
    std::array<unsigned, 3> g{};
    for (size_t i = 0; i < 3; ++i) {
      std::int64_t x = eval_int(l.grid[i], fmt::format("launch '{}' grid[{}]", l.kernel, i));
      if (x < 0 || x > std::int64_t(std::numeric_limits<std::int32_t>::max()))
        fail(fmt::format("launch '{}': grid[{}] = {} = {} is out of range", l.kernel, i, l.grid[i].text(), x));
      g[i] = unsigned(x);
    }
    p.grid = {g[0], g[1], g[2]};
    try {
      p.module = store_.module(l.kernel, spec_, command);
    } catch (const ModuleNotFound& e) {
      if (!caller_changed) throw;
      throw ModuleNotFound(e.what() + caller_config_note());
    }
    bind_params(p);
    check_launch_args(p.module->manifest(), p.args); // what the module checks again at launch, now: before anything runs
    call.launches.push_back(std::move(p));
  }
}

// The `tilec compile` command that builds the launches' modules, which a missing module's error names.
std::string Preparation::build_command() const {
  std::string sets, shapes;
  for (const auto& [k, value] : call.config) sets += fmt::format(" {}={}", k, value);
  for (const auto& [k, value] : call.key) shapes += fmt::format(" {}={}", k, spec_text(value));
  for (const auto& [k, value] : op_.card().spec_defaults)
    if (!call.key.count(k)) shapes += fmt::format(" {}={}", k, spec_text(spec_.count(k) ? spec_.at(k) : value));
  return fmt::format("{} compile {} {} --set{} --shape{}", op_.card().compiler, op_.name(),
                     store_.on_gpu() ? "--arch " + store_.arch() : "--target emu", sets, shapes);
}

// Why a module for the caller's config is missing, and what to pass instead.
std::string Preparation::caller_config_note() const {
  return fmt::format("\n  the caller set {}, and no module was exported for it; without that setting this call uses {} "
                     "({}); tilec compile --set (or autotune --export) builds a module only for values the template accepts",
                     format_config(args_.config), chosen_is_tuned_ ? "the tuned config" : "the kernel card's defaults",
                     format_config(chosen_));
}

// Each module parameter by name: a tensor, a workspace buffer, a scalar, else a size,
// config value or let.
void Preparation::bind_params(PreparedLaunch& p) const {
  const Manifest& m = p.module->manifest();
  for (const ModuleParam& param : m.params) {
    const std::string& n = param.name;
    auto bad = [&](const std::string& why) {
      throw ManifestError(fmt::format("{}: module '{}' ({}) parameter '{}' ({}): {}", op_.name(), m.kernel,
                                      m.dir.string(), n, param.type.str(), why));
    };
    if (auto t = bytes_of_.find(n); t != bytes_of_.end()) {
      if (!param.type.is_pointer) bad("the op's run binds it to a tensor");
      ScalarType elem = t->second.first->dtype;
      // An accepted dtype of the same width goes as the parameter's (u32 block table for i32).
      if (elem != param.type.element && scalar_type_bytes(elem) == scalar_type_bytes(param.type.element)) elem = param.type.element;
      p.args.push_back(Arg::buffer(t->second.first->address, t->second.second, elem));
    } else if (auto w = ws_.find(n); w != ws_.end()) {
      if (!param.type.is_pointer) bad("the op's run binds it to a workspace buffer");
      p.workspace_args.push_back(p.args.size());
      p.args.push_back(Arg::buffer(w->second.first, w->second.second, ws_type_.at(n)));
    } else if (auto s = scalars_.find(n); s != scalars_.end()) {
      if (param.type.is_pointer) bad("the op's run binds it to a scalar");
      if (param.type.element == ScalarType::f32) p.args.push_back(Arg(float(s->second->value)));
      else if (auto a = integer_arg(param.type.element, std::int64_t(s->second->value))) p.args.push_back(*a);
      else bad(fmt::format("the scalar {} does not fit it", s->second->value));
    } else if (auto x = v_.find(n); x != v_.end() && !param.type.is_pointer) {
      auto* i = std::get_if<std::int64_t>(&x->second);
      if (!i) bad(fmt::format("the op's value {} is not an integer", format_value(x->second)));
      auto a = integer_arg(param.type.element, *i);
      if (!a) bad(fmt::format("the op's value {} does not fit it", *i));
      p.args.push_back(*a);
    } else {
      bad(std::any_of(run_.tensors.begin(), run_.tensors.end(), [&](const OpTensor& t) { return t.name == n; })
              ? "the tensor is not given, but the module takes it"
              : "it binds to no tensor, workspace buffer, scalar or size of the op's run");
    }
  }
}

} // namespace

// The steps of the header's list, in order; values_only stops after the lets.
OpCall Op::prepare(const OpArgs& args, bool values_only) const {
  Preparation p(*this, *store_, args);
  p.resolve_sizes();
  p.select_config();
  p.evaluate_lets();
  if (values_only) return std::move(p.call);
  p.check_values();
  p.check_tensors();
  p.check_scalars();
  p.lay_out_workspace();
  p.prepare_launches();
  return std::move(p.call);
}

void Op::run(const OpCall& call, std::uint64_t workspace, std::size_t workspace_bytes, CUstream_st* stream) const {
  if (call.op != name()) throw OpArgumentError(fmt::format("{}: the call was prepared for op '{}'", name(), call.op));
  std::vector<std::byte> host_ws;
  if (call.workspace_bytes > 0) {
    if (workspace == 0 && !store_->on_gpu()) {
      host_ws.resize(call.workspace_bytes + kWorkspaceAlign);
      workspace = (reinterpret_cast<std::uintptr_t>(host_ws.data()) + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
    } else if (workspace == 0) {
      throw OpArgumentError(fmt::format("{}: this call needs {} bytes of device workspace and none was given",
                                        name(), call.workspace_bytes));
    } else if (workspace_bytes < call.workspace_bytes) {
      throw OpArgumentError(fmt::format("{}: the workspace holds {} bytes, this call needs {}", name(),
                                        workspace_bytes, call.workspace_bytes));
    } else if (workspace % kWorkspaceAlign != 0) {
      throw OpArgumentError(fmt::format("{}: the workspace at {:#x} is not {}-byte aligned", name(), workspace,
                                        kWorkspaceAlign));
    }
  }
  std::optional<Stream> borrowed;
  if (store_->on_gpu() && stream) borrowed.emplace(Stream::borrow(LoadedModule::gpu_context(), stream));
  for (const PreparedLaunch& l : call.launches) {
    std::vector<Arg> args = l.args;
    for (std::size_t i : l.workspace_args)
      args[i] = Arg::buffer(workspace + args[i].bits(), args[i].buffer_bytes(), *args[i].buffer_element());
    l.module->launch(l.grid, args, borrowed ? &*borrowed : nullptr);
  }
}

} // namespace tilec::rt
