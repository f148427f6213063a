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

OpCall Op::prepare(const OpArgs& args, bool values_only) const {
  const OpRun& run = *card_.run;
  auto fail = [&](const std::string& msg) { refuse(name(), msg); };
  OpCall call;
  call.op = name();
  std::map<std::string, SpecValue>& v = call.values;

  std::map<std::string, const OpTensorArg*> tensors;
  std::map<std::string, const OpScalarArg*> scalars;
  auto declared_tensors = [&] {
    std::vector<std::string> n;
    for (const OpTensor& t : run.tensors) n.push_back(t.name);
    return join(n);
  };
  for (const OpTensorArg& t : args.tensors) {
    if (std::none_of(run.tensors.begin(), run.tensors.end(), [&](const OpTensor& d) { return d.name == t.name; }))
      fail(fmt::format("no tensor argument '{}' (its tensors: {})", t.name, declared_tensors()));
    if (!tensors.emplace(t.name, &t).second) fail(fmt::format("tensor '{}' is given twice", t.name));
  }
  for (const OpScalarArg& s : args.scalars) {
    if (std::none_of(run.scalars.begin(), run.scalars.end(), [&](const OpScalar& d) { return d.name == s.name; })) {
      std::vector<std::string> n;
      for (const OpScalar& d : run.scalars) n.push_back(d.name);
      fail(fmt::format("no scalar argument '{}' (its scalars: {})", s.name, join(n)));
    }
    if (!scalars.emplace(s.name, &s).second) fail(fmt::format("scalar '{}' is given twice", s.name));
  }
  ExprLookup lookup = [&](std::string_view name) -> std::optional<SpecValue> {
    if (name.starts_with("present(")) {
      std::string n(name.substr(8, name.size() - 9));
      return std::int64_t(tensors.count(n) || scalars.count(n));
    }
    auto it = v.find(std::string(name));
    if (it == v.end()) return std::nullopt;
    return it->second;
  };
  auto is_size = [&](const std::string& n) {
    return std::any_of(run.sizes.begin(), run.sizes.end(), [&](const OpSize& s) { return s.name == n; });
  };

  // 1. Sizes: given, implied by a tensor, else defaulted.
  for (const auto& [name, value] : args.sizes) {
    if (!is_size(name)) {
      std::vector<std::string> n;
      for (const OpSize& s : run.sizes) n.push_back(s.name);
      fail(fmt::format("no size '{}' (its sizes: {})", name, join(n)));
    }
    v[name] = value;
  }
  std::map<std::string, std::string> implied_by; // size -> "q's dim 2" for messages
  for (const OpTensor& t : run.tensors) {
    auto it = tensors.find(t.name);
    if (it == tensors.end()) continue;
    const OpTensorArg& a = *it->second;
    if (a.shape.size() == t.dims.size())
      for (size_t i = 0; i < t.dims.size(); ++i)
        if (auto n = t.dims[i].as_name(); n && is_size(*n) && !v.count(*n)) {
          v[*n] = a.shape[i];
          implied_by[*n] = fmt::format("{}'s dimension {}", t.name, i);
        }
    if (auto n = t.dtype.as_name(); n && is_size(*n) && !v.count(*n)) {
      v[*n] = std::string(scalar_type_name(a.dtype));
      implied_by[*n] = fmt::format("{}'s dtype", t.name);
    }
  }
  for (const OpSize& s : run.sizes) {
    if (v.count(s.name)) continue;
    if (s.default_value.empty())
      fail(fmt::format("size '{}' is not given and no tensor argument implies it", s.name));
    try {
      v[s.name] = s.default_value.eval(lookup);
    } catch (const ExprError& e) {
      fail(fmt::format("size '{}' defaults to {}: {}", s.name, s.default_value.text(), e.what()));
    }
  }
  for (const OpSize& s : run.sizes)
    if (s.key) call.key[s.name] = v.at(s.name);

  // 2. The config: the nearest tuned key's, else the card's defaults; the caller's on top.
  call.config = card_.defaults;
  auto sel = select_config(store_->db(), name(), store_->device(), call.key, card_.size_fields, card_.size_buckets);
  if (sel) {
    for (const auto& [k, value] : sel->entry.config) call.config[k] = value;
    call.note = sel->note;
  } else {
    call.note = fmt::format("nothing tuned for {} on {}; using the defaults {}", format_key(call.key),
                            store_->device(), format_config(call.config));
  }
  for (const auto& [k, value] : args.config) {
    if (!card_.defaults.count(k)) fail(fmt::format("no config parameter '{}' (its config: {})", k, format_config(card_.defaults)));
    call.config[k] = value;
  }
  if (!args.config.empty()) call.note += fmt::format("; the caller set {}", format_config(args.config));
  for (const auto& [k, value] : call.config) v[k] = value;
  auto eval = [&](const SizeExpr& e, const std::string& what) {
    try {
      return e.eval(lookup);
    } catch (const ExprError& err) {
      refuse(name(), fmt::format("{}: {}", what, err.what()));
    }
  };
  auto eval_int = [&](const SizeExpr& e, const std::string& what) {
    SpecValue r = eval(e, what);
    if (auto* i = std::get_if<std::int64_t>(&r)) return *i;
    refuse(name(), fmt::format("{} = {} is not an integer", what, format_value(r)));
  };
  for (const OpLet& l : run.lets) v[l.name] = eval(l.value, "let " + l.name);
  if (values_only) return call;

  // 3. Tensors and scalars: present exactly when their condition holds, of the right dtype
  // and shape, contiguous, aligned.
  std::map<std::string, std::pair<const OpTensorArg*, std::size_t>> bytes_of; // name -> (arg, bytes)
  std::map<std::string, ScalarType> given_dtype;
  for (const OpTensor& t : run.tensors) {
    const bool want = t.when.empty() || eval_int(t.when, fmt::format("tensor '{}' when", t.name)) != 0;
    auto it = tensors.find(t.name);
    if (!want) {
      if (it != tensors.end())
        fail(fmt::format("tensor '{}' is given, but this op takes it only when {} (false here)", t.name, t.when.text()));
      continue;
    }
    if (it == tensors.end()) fail(fmt::format("tensor argument '{}' is missing{}", t.name,
                                              t.when.empty() ? "" : fmt::format(" (required when {})", t.when.text())));
    const OpTensorArg& a = *it->second;
    std::vector<std::int64_t> want_shape;
    for (size_t i = 0; i < t.dims.size(); ++i)
      want_shape.push_back(eval_int(t.dims[i], fmt::format("tensor '{}' dimension {}", t.name, i)));
    if (a.shape != want_shape) {
      std::string dims, why;
      for (size_t i = 0; i < t.dims.size(); ++i) {
        dims += (i ? ", " : "") + t.dims[i].text();
        if (i < a.shape.size() && a.shape[i] != want_shape[i]) {
          auto n = t.dims[i].as_name();
          auto by = n ? implied_by.find(*n) : implied_by.end();
          if (why.empty() && by != implied_by.end())
            why = fmt::format("; {} = {} comes from {}", *n, want_shape[i], by->second);
        }
      }
      fail(fmt::format("tensor '{}' has shape {}, expected [{}] = {}{}", t.name, shape_str(a.shape), dims,
                       shape_str(want_shape), why));
    }
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
    bytes_of[t.name] = {&a, bytes};
    given_dtype[t.name] = a.dtype;
  }
  for (const OpScalar& s : run.scalars) {
    const bool want = s.when.empty() || eval_int(s.when, fmt::format("scalar '{}' when", s.name)) != 0;
    const bool given = scalars.count(s.name);
    if (want && !given)
      fail(fmt::format("scalar argument '{}' is missing{}", s.name, s.when.empty() ? "" : fmt::format(" (required when {})", s.when.text())));
    if (!want && given)
      fail(fmt::format("scalar '{}' is given, but this op takes it only when {} (false here)", s.name, s.when.text()));
    if (given) {
      double x = scalars.at(s.name)->value;
      if (s.type == ScalarType::f32 && !(std::isfinite(x) && std::abs(x) <= std::numeric_limits<float>::max()))
        fail(fmt::format("scalar '{}' = {} is not a finite f32", s.name, x));
      if (s.type != ScalarType::f32 && (x != std::floor(x) || !integer_arg(s.type, std::int64_t(x))))
        fail(fmt::format("scalar '{}' = {} is not an {} value", s.name, x, scalar_type_name(s.type)));
    }
  }

  // The workspace: each buffer at a 256-byte aligned offset.
  std::map<std::string, std::pair<std::size_t, std::size_t>> ws; // name -> (offset, bytes)
  std::map<std::string, ScalarType> ws_type;
  for (const OpWorkspace& w : run.workspace) {
    if (!w.when.empty() && eval_int(w.when, fmt::format("workspace '{}' when", w.name)) == 0) continue;
    std::int64_t n = eval_int(w.elements, fmt::format("workspace '{}' elements", w.name));
    std::size_t bytes = 0;
    if (n < 0 || __builtin_mul_overflow(std::size_t(n), scalar_type_bytes(w.dtype), &bytes))
      fail(fmt::format("workspace '{}': {} = {} elements is not a size", w.name, w.elements.text(), n));
    std::size_t offset = (call.workspace_bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
    ws[w.name] = {offset, bytes};
    ws_type[w.name] = w.dtype;
    call.workspace_offsets[w.name] = offset;
    call.workspace_bytes = offset + bytes;
  }

  // 4. The modules, by the run's specialization.
  Spec spec;
  for (const auto& [k, e] : run.spec) spec[k] = eval(e, "spec " + k);
  std::string sets, shapes;
  for (const auto& [k, value] : call.config) sets += fmt::format(" {}={}", k, value);
  for (const auto& [k, value] : call.key) shapes += fmt::format(" {}={}", k, spec_text(value));
  for (const auto& [k, value] : card_.spec_defaults)
    if (!call.key.count(k)) shapes += fmt::format(" {}={}", k, spec_text(spec.count(k) ? spec.at(k) : value));
  for (const OpLaunch& l : run.launches) {
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
    p.module = store_->module(l.kernel, spec,
                              fmt::format("{} compile {} {} --set{} --shape{}", card_.compiler, name(),
                                          store_->on_gpu() ? "--arch " + store_->arch() : "--target emu", sets, shapes));
    const Manifest& m = p.module->manifest();
    for (const ModuleParam& param : m.params) {
      const std::string& n = param.name;
      auto bad = [&](const std::string& why) {
        throw ManifestError(fmt::format("{}: module '{}' ({}) parameter '{}' ({}): {}", name(), m.kernel, m.dir.string(),
                                        n, param.type.str(), why));
      };
      if (auto t = bytes_of.find(n); t != bytes_of.end()) {
        if (!param.type.is_pointer) bad("the op's run binds it to a tensor");
        ScalarType elem = t->second.first->dtype;
        // An accepted dtype of the same width goes as the parameter's (u32 block table for i32).
        if (elem != param.type.element && scalar_type_bytes(elem) == scalar_type_bytes(param.type.element)) elem = param.type.element;
        p.args.push_back(Arg::buffer(t->second.first->address, t->second.second, elem));
      } else if (auto w = ws.find(n); w != ws.end()) {
        if (!param.type.is_pointer) bad("the op's run binds it to a workspace buffer");
        p.workspace_args.push_back(p.args.size());
        p.args.push_back(Arg::buffer(w->second.first, w->second.second, ws_type.at(n)));
      } else if (auto s = scalars.find(n); s != scalars.end()) {
        if (param.type.is_pointer) bad("the op's run binds it to a scalar");
        if (param.type.element == ScalarType::f32) p.args.push_back(Arg(float(s->second->value)));
        else if (auto a = integer_arg(param.type.element, std::int64_t(s->second->value))) p.args.push_back(*a);
        else bad(fmt::format("the scalar {} does not fit it", s->second->value));
      } else if (auto x = v.find(n); x != v.end() && !param.type.is_pointer) {
        auto* i = std::get_if<std::int64_t>(&x->second);
        if (!i) bad(fmt::format("the op's value {} is not an integer", format_value(x->second)));
        auto a = integer_arg(param.type.element, *i);
        if (!a) bad(fmt::format("the op's value {} does not fit it", *i));
        p.args.push_back(*a);
      } else {
        bad(std::any_of(run.tensors.begin(), run.tensors.end(), [&](const OpTensor& t) { return t.name == n; })
                ? "the tensor is not given, but the module takes it"
                : "it binds to no tensor, workspace buffer, scalar or size of the op's run");
      }
    }
    check_launch_args(m, p.args); // what the module checks again at launch, now: before anything runs
    call.launches.push_back(std::move(p));
  }
  return call;
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
