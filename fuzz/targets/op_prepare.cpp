// Fuzzing the C ABI's argument checks (runtime/tilec.h): tilec_op_prepare, and
// tilec_op_tensor_shape, with argument structs decoded from the input (any number of tensors,
// their names, NULL, misaligned or shared data pointers, any dtype value, any rank over a shape
// array of exactly that many dims or none, strides, scalars, sizes and config values), over
// the runs paged_attention and reshape_and_cache declare (templates/attention/run_description.cpp,
// compiled in) in a folder without modules. Every call must return a status, and a refusal a message; a crash, a
// read past what the caller gave (AddressSanitizer) or undefined behaviour (UBSan) is a
// finding. Nothing is launched: a prepared call only holds the caller's addresses.
#include "fuzz/targets/fuzz_target.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "runtime/module_store.h"
#include "runtime/op_run.h"
#include "runtime/tilec.h"
#include "templates/attention/run_description.h"

using namespace tilec;
using namespace tilec::fuzz_targets;

namespace {

// The folder of kernel cards, made once per process and removed at exit.
struct Store {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("tilec-fuzz-ops-" + std::to_string(::getpid()));
  tilec_store* store = nullptr;
  std::vector<const tilec_op*> ops;
  std::vector<std::vector<std::string>> tensors; // each op's tensor names

  Store() {
    std::filesystem::create_directories(dir);
    struct Card {
      const char* kernel;
      const rt::OpRun& run;
      rt::TunedConfig defaults;
    };
    // The runs the templates declare (templates/attention/run_description.cpp, built in).
    const Card cards[] = {
        {"paged_attention", templates::paged_attention_run(),
         {{"block_n", 32}, {"head_group", 0}, {"num_warps", 4}, {"num_splits", 1}, {"num_stages", 2}, {"block_m", 0}}},
        {"reshape_and_cache", templates::reshape_and_cache_run(), {{"block_t", 2}, {"block_hd", 0}, {"num_warps", 4}}}};
    for (const Card& c : cards) {
      rt::KernelCard card;
      card.kernel = c.kernel;
      card.defaults = c.defaults;
      card.run = c.run;
      rt::write_kernel_card(card, dir);
    }
    if (tilec_store_open(dir.c_str(), "emulate", &store) != TILEC_OK) finding("tilec_store_open", tilec_last_error());
    for (const Card& c : cards) {
      const tilec_op* op = nullptr;
      if (tilec_store_op(store, c.kernel, &op) != TILEC_OK) finding("tilec_store_op", tilec_last_error());
      ops.push_back(op);
      tensors.emplace_back();
      int flag = 0;
      for (size_t i = 0; const char* n = tilec_op_tensor(op, i, &flag); ++i) tensors.back().push_back(n);
    }
  }
  ~Store() {
    tilec_store_close(store);
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

// The input as a stream of choices; past its end every read is 0.
struct Bytes {
  const uint8_t* p;
  size_t n;
  uint8_t byte() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  int64_t i64() { // mostly small (a size, an index), sometimes any 64-bit value
    const uint8_t kind = byte();
    if (kind < 192) return int64_t(kind % 70) - 3;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | byte();
    return int64_t(v);
  }
  double f64() {
    const uint8_t kind = byte();
    if (kind < 200) return double(int(kind) - 100) / 16;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | byte();
    double d;
    std::memcpy(&d, &v, sizeof d);
    return d;
  }
};

// A caller's memory: distinct 16-byte aligned regions (the runtime never reads them here).
alignas(256) unsigned char pool[16][256];

const char* pick_name(Bytes& in, const std::vector<std::string>& known, std::vector<std::string>& keep) {
  const uint8_t c = in.byte();
  if (c < 200 && !known.empty()) return known[c % known.size()].c_str();
  if (c < 215) return nullptr;
  if (c < 230) return "";
  std::string s;
  for (uint8_t len = in.byte() % 12; len > 0; --len) s.push_back(char(in.byte()));
  keep.push_back(s);
  return keep.back().c_str();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Store st;
  Bytes in{data, size};
  const size_t which = in.byte() % st.ops.size();
  const tilec_op* op = st.ops[which];
  std::vector<std::string> keep; // names made up from the input
  keep.reserve(64);              // (their c_str() pointers must stay put)

  const size_t num_tensors = in.byte() % 9;
  std::vector<std::vector<int64_t>> shapes(num_tensors), strides(num_tensors);
  std::vector<tilec_tensor> tensors(num_tensors);
  for (size_t i = 0; i < num_tensors; ++i) {
    tilec_tensor& t = tensors[i];
    t.name = pick_name(in, st.tensors[which], keep);
    const uint8_t where = in.byte();
    t.data = where < 20 ? nullptr : where < 40 ? static_cast<void*>(&pool[where % 16][4]) : &pool[where % 16][0];
    // Any value a C caller could store in the enum, out of range included.
    const int dtype = int(in.byte() % 24) - 2;
    std::memcpy(&t.dtype, &dtype, sizeof dtype);
    t.ndim = int(in.byte() % 12) - 1;
    const uint8_t s = in.byte();
    if (s >= 16 && t.ndim > 0) {
      for (int d = 0; d < t.ndim; ++d) shapes[i].push_back(in.i64());
      t.shape = shapes[i].data();
    }
    if (in.byte() >= 224 && t.ndim > 0) {
      for (int d = 0; d < t.ndim; ++d) strides[i].push_back(in.i64());
      t.strides = strides[i].data();
    }
  }
  std::vector<tilec_scalar> scalars(in.byte() % 4);
  const std::vector<std::string> scalar_names = {"softmax_scale", "softcap", "k_scale", "v_scale"};
  for (tilec_scalar& s : scalars) s = {pick_name(in, scalar_names, keep), in.f64()};
  const std::vector<std::string> size_names = {"ctx", "window", "causal", "chunk", "kv_dtype", "num_tokens", "latent"};
  const std::vector<std::string> strings = {"same", "f8e4m3", "f8e5m2", "i32", "bogus"};
  std::vector<tilec_value> sizes(in.byte() % 4);
  for (tilec_value& v : sizes) {
    v.name = pick_name(in, size_names, keep);
    v.value = in.i64();
    const uint8_t s = in.byte();
    v.string = s < 200 ? nullptr : strings[s % strings.size()].c_str();
  }
  const std::vector<std::string> config_names = {"block_n", "head_group", "num_splits", "num_warps", "block_m",
                                                 "block_t", "block_hd"};
  std::vector<tilec_value> config(in.byte() % 4);
  for (tilec_value& v : config) {
    v.name = pick_name(in, config_names, keep);
    v.value = in.i64();
    v.string = in.byte() < 240 ? nullptr : "32";
  }
  tilec_args args{tensors.data(), tensors.size(), scalars.data(), scalars.size(),
                  sizes.data(),   sizes.size(),   config.data(),  config.size()};
  const uint8_t nulls = in.byte(); // arrays left NULL with a count
  if (nulls == 1) args.tensors = nullptr;
  if (nulls == 2) args.scalars = nullptr;
  if (nulls == 3) args.sizes = nullptr;
  if (nulls == 4) args.config = nullptr;

  auto refused_with_message = [](const char* what, tilec_status status) {
    const char* message = tilec_last_error();
    require(message != nullptr && message[0] != '\0', what, std::to_string(int(status)) + ": no message");
  };
  tilec_call* call = nullptr;
  const tilec_status status = tilec_op_prepare(op, &args, &call);
  if (status == TILEC_OK) {
    require(call != nullptr, "tilec_op_prepare: TILEC_OK without a call");
    tilec_call_destroy(call);
  } else {
    require(call == nullptr, "tilec_op_prepare: a refusal left a call");
    refused_with_message("tilec_op_prepare", status);
  }
  int64_t dims[8];
  int ndim = 0;
  tilec_dtype dtype;
  const std::vector<std::string>& names = st.tensors[which];
  const char* asked = names[in.byte() % names.size()].c_str();
  const tilec_status shape_status = tilec_op_tensor_shape(op, &args, asked, dims, int(in.byte() % 9), &ndim, &dtype);
  if (shape_status != TILEC_OK) refused_with_message("tilec_op_tensor_shape", shape_status);
  return 0;
}
