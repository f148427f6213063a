// The C ABI (runtime/tilec.h) over rt::OpStore: conversions, and every exception turned into
// a status and the calling thread's message.
#include "runtime/tilec.h"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "runtime/emulator/emulator.h"
#include "runtime/op_store.h"

struct tilec_store {
  std::shared_ptr<tilec::rt::OpStore> store;
  std::vector<std::string> op_names;
  std::map<std::string, std::unique_ptr<tilec_op>> ops;
};

struct tilec_op {
  const tilec::rt::Op* op;
};

struct tilec_call {
  const tilec::rt::Op* op;
  tilec::rt::OpCall call;
  std::vector<std::pair<std::string, int64_t>> params;
};

namespace {

using namespace tilec::rt;

thread_local std::string g_error;

constexpr std::array<ScalarType, 14> kDtypes = {
    ScalarType::f32, ScalarType::f16, ScalarType::bf16, ScalarType::f8e4m3, ScalarType::f8e5m2,
    ScalarType::i8,  ScalarType::i16, ScalarType::i32,  ScalarType::i64,    ScalarType::u8,
    ScalarType::u16, ScalarType::u32, ScalarType::u64,  ScalarType::i1};

tilec_status fail(tilec_status s, const std::string& msg) {
  g_error = msg;
  return s;
}

// Runs `f`, turning any exception into a status and the thread's message.
template <class F> tilec_status guard(F&& f) {
  try {
    f();
    return TILEC_OK;
  } catch (const OpNotFound& e) {
    return fail(TILEC_ERROR_NOT_FOUND, e.what());
  } catch (const ModuleNotFound& e) {
    return fail(TILEC_ERROR_NOT_FOUND, e.what());
  } catch (const LaunchArgumentError& e) {
    return fail(TILEC_ERROR_ARGUMENT, e.what());
  } catch (const ManifestError& e) {
    return fail(TILEC_ERROR_MODULE, e.what());
  } catch (const BackendUnavailable& e) {
    return fail(TILEC_ERROR_BACKEND, e.what());
  } catch (const CudaError& e) {
    return fail(TILEC_ERROR_DEVICE, e.what());
  } catch (const EmulationError& e) {
    return fail(TILEC_ERROR_DEVICE, e.what());
  } catch (const Error& e) {
    return fail(TILEC_ERROR_MODULE, e.what());
  } catch (const std::bad_alloc&) {
    return fail(TILEC_ERROR_DEVICE, "out of host memory");
  } catch (const std::exception& e) {
    return fail(TILEC_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(TILEC_ERROR_INTERNAL, "an unknown exception");
  }
}

#define TILEC_REQUIRE(cond, what)                                                                                      \
  do {                                                                                                                 \
    if (!(cond)) return fail(TILEC_ERROR_ARGUMENT, what);                                                              \
  } while (0)

// The most dims a tensor argument may have, and the most elements (2^48: past it a shape is a
// caller's mistake, and products of its dims could overflow).
constexpr int kMaxTensorDims = 8;
constexpr std::int64_t kMaxTensorElements = std::int64_t(1) << 48;

// A caller's tensor as the op store takes it, after the checks that keep a caller's mistake from
// reaching memory: a NULL or misaligned data pointer, a NULL shape, a negative or overflowing
// shape, too many dims. OpArgumentError names the tensor and the number.
OpTensorArg to_tensor(const tilec_tensor& t, const std::string& name) {
  OpTensorArg x;
  x.name = name;
  // Read as the int a C caller stored: any int may be there, and loading an enum object that
  // holds none of its enumerators is undefined in C++.
  static_assert(sizeof(tilec_dtype) == sizeof(int));
  int dtype;
  std::memcpy(&dtype, &t.dtype, sizeof dtype);
  if (dtype < 0 || size_t(dtype) >= kDtypes.size())
    throw OpArgumentError(fmt::format("tensor '{}': dtype {} is not a tilec_dtype", name, dtype));
  if (t.ndim < 0 || t.ndim > kMaxTensorDims || (t.ndim > 0 && !t.shape))
    throw OpArgumentError(fmt::format("tensor '{}': ndim {} with {} shape (0 to {} dims)", name, t.ndim,
                                      t.shape ? "a" : "a NULL", kMaxTensorDims));
  std::int64_t elements = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0) throw OpArgumentError(fmt::format("tensor '{}': dim {} is {}", name, d, t.shape[d]));
    if (t.shape[d] != 0 && elements > kMaxTensorElements / t.shape[d])
      throw OpArgumentError(fmt::format("tensor '{}': its shape has more than 2^48 elements (dim {} is {})", name, d,
                                        t.shape[d]));
    elements *= t.shape[d];
  }
  if (!t.data && elements > 0)
    throw OpArgumentError(fmt::format("tensor '{}': data is NULL for {} elements", name, elements));
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0)
    throw OpArgumentError(fmt::format("tensor '{}': data {} is not 16-byte aligned", name, t.data));
  x.address = reinterpret_cast<std::uintptr_t>(t.data);
  x.dtype = kDtypes[size_t(dtype)];
  x.shape.assign(t.shape, t.shape + t.ndim);
  if (t.strides) x.strides.assign(t.strides, t.strides + t.ndim);
  return x;
}

OpArgs to_args(const tilec_args* a) {
  OpArgs out;
  if (!a) return out;
  auto text = [](const char* s, const char* what) {
    if (!s) throw OpArgumentError(fmt::format("a {} has a NULL name", what));
    return std::string(s);
  };
  auto list = [](const void* items, size_t n, const char* what) {
    if (n > 0 && !items) throw OpArgumentError(fmt::format("tilec_args: {} {} with a NULL array", n, what));
  };
  list(a->tensors, a->num_tensors, "tensors");
  list(a->scalars, a->num_scalars, "scalars");
  list(a->sizes, a->num_sizes, "sizes");
  list(a->config, a->num_config, "config values");
  for (size_t i = 0; i < a->num_tensors; ++i) out.tensors.push_back(to_tensor(a->tensors[i], text(a->tensors[i].name, "tensor")));
  for (size_t i = 0; i < a->num_scalars; ++i) out.scalars.push_back({text(a->scalars[i].name, "scalar"), a->scalars[i].value});
  for (size_t i = 0; i < a->num_sizes; ++i) {
    const tilec_value& v = a->sizes[i];
    out.sizes[text(v.name, "size")] = v.string ? SpecValue(std::string(v.string)) : SpecValue(v.value);
  }
  for (size_t i = 0; i < a->num_config; ++i) {
    const tilec_value& v = a->config[i];
    if (v.string) throw OpArgumentError(fmt::format("config '{}' must be an integer", text(v.name, "config value")));
    out.config[text(v.name, "config value")] = v.value;
  }
  return out;
}

} // namespace

extern "C" {

int tilec_abi_version(void) { return TILEC_ABI_VERSION; }

const char* tilec_last_error(void) { return g_error.c_str(); }

tilec_status tilec_store_open(const char* dir, const char* backend, tilec_store** out) {
  TILEC_REQUIRE(dir && out, "tilec_store_open: dir and out must not be NULL");
  *out = nullptr;
  return guard([&] {
    auto s = std::make_unique<tilec_store>();
    s->store = OpStore::open(dir, backend ? backend : "auto");
    s->op_names = s->store->ops();
    for (const std::string& n : s->op_names) s->ops[n] = std::make_unique<tilec_op>(tilec_op{&s->store->op(n)});
    *out = s.release();
  });
}

void tilec_store_close(tilec_store* store) { delete store; }

const char* tilec_store_arch(const tilec_store* store) { return store ? store->store->arch().c_str() : ""; }
const char* tilec_store_device(const tilec_store* store) { return store ? store->store->device().c_str() : ""; }
size_t tilec_store_num_ops(const tilec_store* store) { return store ? store->op_names.size() : 0; }
const char* tilec_store_op_name(const tilec_store* store, size_t index) {
  return store && index < store->op_names.size() ? store->op_names[index].c_str() : nullptr;
}

tilec_status tilec_store_op(const tilec_store* store, const char* name, const tilec_op** out) {
  TILEC_REQUIRE(store && name && out, "tilec_store_op: store, name and out must not be NULL");
  *out = nullptr;
  return guard([&] {
    store->store->op(name); // OpNotFound naming the ops there are
    *out = store->ops.at(name).get();
  });
}

const char* tilec_op_tensor(const tilec_op* op, size_t index, int* is_output) {
  if (!op || index >= op->op->run().tensors.size()) return nullptr;
  const OpTensor& t = op->op->run().tensors[index];
  if (is_output) *is_output = t.inout ? 2 : t.output ? 1 : 0;
  return t.name.c_str();
}
const char* tilec_op_scalar(const tilec_op* op, size_t index) {
  return op && index < op->op->run().scalars.size() ? op->op->run().scalars[index].name.c_str() : nullptr;
}
const char* tilec_op_size(const tilec_op* op, size_t index) {
  return op && index < op->op->run().sizes.size() ? op->op->run().sizes[index].name.c_str() : nullptr;
}

tilec_status tilec_op_tensor_shape(const tilec_op* op, const tilec_args* args, const char* name, int64_t* shape,
                                   int capacity, int* ndim, tilec_dtype* dtype) {
  TILEC_REQUIRE(op && name && ndim, "tilec_op_tensor_shape: op, name and ndim must not be NULL");
  return guard([&] {
    auto [dims, type] = op->op->tensor_shape(to_args(args), name);
    *ndim = int(dims.size());
    for (int i = 0; i < capacity && i < int(dims.size()); ++i) shape[i] = dims[size_t(i)];
    if (dtype) *dtype = tilec_dtype(std::find(kDtypes.begin(), kDtypes.end(), type) - kDtypes.begin());
  });
}

tilec_status tilec_op_prepare(const tilec_op* op, const tilec_args* args, tilec_call** out) {
  TILEC_REQUIRE(op && out, "tilec_op_prepare: op and out must not be NULL");
  *out = nullptr;
  return guard([&] {
    auto c = std::make_unique<tilec_call>();
    c->op = op->op;
    c->call = op->op->prepare(to_args(args));
    for (const auto& [k, v] : c->call.config) c->params.emplace_back(k, v);
    *out = c.release();
  });
}

void tilec_call_destroy(tilec_call* call) { delete call; }

size_t tilec_call_workspace_bytes(const tilec_call* call) { return call ? call->call.workspace_bytes : 0; }

int tilec_call_num_params(const tilec_call* call) { return call ? int(call->params.size()) : 0; }

tilec_status tilec_call_param(const tilec_call* call, int index, const char** name, int64_t* value) {
  TILEC_REQUIRE(call && index >= 0 && size_t(index) < call->params.size(),
                "tilec_call_param: no call, or the index is past the config's parameters");
  if (name) *name = call->params[size_t(index)].first.c_str();
  if (value) *value = call->params[size_t(index)].second;
  return TILEC_OK;
}

tilec_status tilec_call_value(const tilec_call* call, const char* name, int64_t* value) {
  TILEC_REQUIRE(call && name && value, "tilec_call_value: call, name and value must not be NULL");
  auto it = call->call.values.find(name);
  if (it == call->call.values.end()) return fail(TILEC_ERROR_ARGUMENT, fmt::format("{}: no value '{}'", call->call.op, name));
  auto* i = std::get_if<std::int64_t>(&it->second);
  if (!i) return fail(TILEC_ERROR_ARGUMENT, fmt::format("{}: '{}' is the string {}", call->call.op, name, format_value(it->second)));
  *value = *i;
  return TILEC_OK;
}

const char* tilec_call_note(const tilec_call* call) { return call ? call->call.note.c_str() : ""; }

int tilec_call_num_launches(const tilec_call* call) { return call ? int(call->call.launches.size()) : 0; }

tilec_status tilec_call_launch(const tilec_call* call, int index, const char** kernel, uint32_t grid[3]) {
  TILEC_REQUIRE(call && index >= 0 && size_t(index) < call->call.launches.size(),
                "tilec_call_launch: no call, or the index is past its launches");
  const PreparedLaunch& l = call->call.launches[size_t(index)];
  if (kernel) *kernel = l.kernel.c_str();
  if (grid) grid[0] = l.grid.x, grid[1] = l.grid.y, grid[2] = l.grid.z;
  return TILEC_OK;
}

tilec_status tilec_call_run(const tilec_call* call, void* workspace, size_t workspace_bytes, void* stream) {
  TILEC_REQUIRE(call, "tilec_call_run: call must not be NULL");
  return guard([&] {
    call->op->run(call->call, reinterpret_cast<std::uintptr_t>(workspace), workspace_bytes,
                  static_cast<CUstream_st*>(stream));
  });
}

tilec_status tilec_op_run(const tilec_op* op, const tilec_args* args, void* workspace, size_t workspace_bytes,
                          void* stream) {
  tilec_call* call = nullptr;
  tilec_status s = tilec_op_prepare(op, args, &call);
  if (s != TILEC_OK) return s;
  s = tilec_call_run(call, workspace, workspace_bytes, stream);
  tilec_call_destroy(call);
  return s;
}

} // extern "C"
