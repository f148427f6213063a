// A run a CUDA graph can capture (docs/HOST_C.md, "Capturing a call in a CUDA graph"): given its
// workspace, tilec_call_run makes no allocation, no copy to the host and no synchronization, and
// queues every launch on the stream given. Checked against the stand-in driver
// (fake_libcuda.c), which appends each driver call to the file FAKE_CUDA_RECORD names. A child
// process (a hidden case of this binary) opens a folder of paged attention's sm_90 modules with
// backend "cuda" (split-KV: the attention kernel, its combine and a workspace for the partials),
// prepares a call, and writes a line before and after each run into the same file; the parent
// reads the calls between them.
#include "abi/error.h"
#include "runtime/cuda.h"
#include "runtime/loaded_module.h"
#include "runtime/tilec.h"

#include "tests/runtime/helpers.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace fs = std::filesystem;
using namespace tilec;
using namespace tilec::rt::test;

namespace {

// The problem: paged attention's default module shape (tilec compile paged_attention: hq 8,
// hkv 2, sq 1, head_dim 64, block_size 16, f32) at a batch and cache of the test's own.
constexpr std::int64_t kBatch = 3, kHq = 8, kHkv = 2, kHeadDim = 64, kBlockSize = 16, kMaxBlocks = 4,
                       kNumBlocks = 12;

// A C ABI call that must succeed; its message when it does not.
#define REQUIRE_OK(call)                                                                                               \
  do {                                                                                                                 \
    const tilec_status status_ = (call);                                                                               \
    INFO(#call << ": " << tilec_last_error());                                                                         \
    REQUIRE(status_ == TILEC_OK);                                                                                      \
  } while (0)

void append_line(const std::string& file, const std::string& line) {
  std::ofstream out(file, std::ios::app);
  out << line << "\n";
}

// One marked span of the record: the stream its run was given and the driver calls made in it.
struct Span {
  std::string stream;              // as the fake writes it: hex, no prefix; "0" is the default stream
  std::vector<std::string> calls;  // whole lines: "cuLaunchKernel paged_attention stream 5612..."
};

// The record's lines outside any span (before, between and after them) and its spans, in order.
struct Record {
  std::vector<std::string> outside;
  std::vector<Span> spans;
};

Record read_record(const fs::path& file) {
  Record r;
  std::ifstream in(file);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.starts_with("run begin stream ")) {
      r.spans.push_back({line.substr(17), {}});
      inside = true;
    } else if (line == "run end") {
      inside = false;
    } else {
      (inside ? r.spans.back().calls : r.outside).push_back(line);
    }
  }
  return r;
}

// What a span's calls do that a captured run may not: anything but a launch on the span's
// stream, a context made current and back (host state only) or a tensor map encoded on the host.
// The kernels launched are in `launches`.
std::vector<std::string> violations(const Span& span, std::vector<std::string>& launches) {
  std::vector<std::string> out;
  for (const std::string& call : span.calls) {
    std::istringstream words(call);
    std::string name, kernel, stream_word, stream;
    words >> name;
    if (name == "cuCtxPushCurrent" || name == "cuCtxPopCurrent" || name == "cuTensorMapEncodeTiled") continue;
    if (name == "cuLaunchKernel") {
      words >> kernel >> stream_word >> stream;
      launches.push_back(kernel);
      if (stream_word != "stream" || stream != span.stream)
        out.push_back(fmt::format("{} (not on the stream given, {})", call, span.stream));
      continue;
    }
    out.push_back(call);
  }
  return out;
}

std::string lines(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += "  " + x + "\n";
  return s;
}

// The tensors of the call, at the device addresses of `buffers` (q, k_cache, v_cache, block_table,
// context_lens, out).
struct Tensors {
  std::int64_t q_shape[4] = {kBatch, kHq, 1, kHeadDim};
  std::int64_t kv_shape[4] = {kNumBlocks, kBlockSize, kHkv, kHeadDim};
  std::int64_t bt_shape[2] = {kBatch, kMaxBlocks};
  std::int64_t cl_shape[1] = {kBatch};
  std::vector<tilec_tensor> list;
  explicit Tensors(const std::vector<rt::Buffer>& b) {
    auto at = [](const rt::Buffer& x) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(x.address())); };
    list = {{"q", at(b[0]), TILEC_F32, 4, q_shape, nullptr},          {"k_cache", at(b[1]), TILEC_F32, 4, kv_shape, nullptr},
            {"v_cache", at(b[2]), TILEC_F32, 4, kv_shape, nullptr},   {"block_table", at(b[3]), TILEC_I32, 2, bt_shape, nullptr},
            {"context_lens", at(b[4]), TILEC_I32, 1, cl_shape, nullptr}, {"out", at(b[5]), TILEC_F32, 4, q_shape, nullptr}};
  }
};

} // namespace

// The child: the modules' folder in TILEC_TEST_MODULES, the record in FAKE_CUDA_RECORD. Two runs
// of one prepared call, each between a "run begin stream S" line and a "run end" line: on a stream
// of its own with the workspace, then given no stream (NULL: the legacy default stream) while the
// span names the same stream, so the parent's check must find launches off the stream.
TEST_CASE("fake cuda child: a prepared paged attention call runs twice", "[.][fake_cuda_child]") {
  const char* modules = std::getenv("TILEC_TEST_MODULES");
  const char* record = std::getenv("FAKE_CUDA_RECORD");
  REQUIRE(modules);
  REQUIRE(record);
  tilec_store* store = nullptr;
  REQUIRE_OK(tilec_store_open(modules, "cuda", &store));
  REQUIRE(std::string(tilec_store_device(store)) == "Fake CUDA Device");
  const tilec_op* op = nullptr;
  REQUIRE_OK(tilec_store_op(store, "paged_attention", &op));

  const rt::Context& ctx = rt::LoadedModule::gpu_context();
  std::vector<rt::Buffer> buffers;
  const std::size_t f = sizeof(float);
  for (std::size_t bytes : {kBatch * kHq * kHeadDim * f, kNumBlocks * kBlockSize * kHkv * kHeadDim * f,
                            kNumBlocks * kBlockSize * kHkv * kHeadDim * f, kBatch * kMaxBlocks * sizeof(std::int32_t),
                            kBatch * sizeof(std::int32_t), kBatch * kHq * kHeadDim * f})
    buffers.emplace_back(ctx, bytes);
  buffers[4].upload(std::vector<std::int32_t>{5, 64, 17});
  Tensors tensors(buffers);
  tilec_scalar scalars[1] = {{"softmax_scale", 0.125}};
  tilec_value config[1] = {{"num_splits", 2, nullptr}}; // the card's default is 1: no tuning database here
  tilec_args args = {tensors.list.data(), tensors.list.size(), scalars, 1, nullptr, 0, config, 1};
  tilec_call* call = nullptr;
  REQUIRE_OK(tilec_op_prepare(op, &args, &call));
  REQUIRE(tilec_call_num_launches(call) == 2);
  const std::size_t ws_bytes = tilec_call_workspace_bytes(call);
  REQUIRE(ws_bytes > 0);
  rt::Buffer workspace(ctx, ws_bytes);
  void* ws = reinterpret_cast<void*>(static_cast<std::uintptr_t>(workspace.address()));
  rt::Stream stream(ctx);

  append_line(record, fmt::format("run begin stream {:x}", reinterpret_cast<std::uintptr_t>(stream.handle())));
  const tilec_status on_stream = tilec_call_run(call, ws, ws_bytes, stream.handle());
  append_line(record, "run end");
  REQUIRE_OK(on_stream);

  // The same capturing stream, but the run is given none: its launches go elsewhere.
  append_line(record, fmt::format("run begin stream {:x}", reinterpret_cast<std::uintptr_t>(stream.handle())));
  const tilec_status on_default = tilec_call_run(call, ws, ws_bytes, nullptr);
  append_line(record, "run end");
  REQUIRE_OK(on_default);

  tilec_call_destroy(call);
  tilec_store_close(store);
}

TEST_CASE("a run through the C ABI makes only launches on the given stream", "[runtime][graph]") {
  REQUIRE(fs::exists(kFakeCudaDir / "libcuda.so.1"));
  TempDir dir;
  const fs::path modules = dir.path / "modules", record = dir.path / "record.txt", cache = dir.path / "cache";
  const std::string env = "env TILEC_CACHE_DIR=" + quoted(cache) + " ";
  {
    Output compiled = run_command(env + quoted(::tilec::test::tilec_binary()) +
                                  " compile paged_attention --arch sm_90 --set num_splits=2 -o " + quoted(modules));
    INFO(compiled.text);
    REQUIRE(compiled.status == 0);
  }
  {
    const fs::path self = fs::read_symlink("/proc/self/exe");
    Output child = run_command(env + "LD_LIBRARY_PATH=" + quoted(kFakeCudaDir) + " FAKE_CUDA_RECORD=" + quoted(record) +
                               " TILEC_TEST_MODULES=" + quoted(modules) + " " + quoted(self) +
                               " 'fake cuda child: a prepared paged attention call runs twice'");
    INFO(child.text);
    REQUIRE(child.status == 0);
  }
  Record r = read_record(record);
  REQUIRE(r.spans.size() == 2);
  {
    // The record sees what the run must not do: prepare loaded the modules, the test allocated
    // and copied.
    INFO("outside the runs:\n" << lines(r.outside));
    auto made = [&](const std::string& name) {
      return std::any_of(r.outside.begin(), r.outside.end(), [&](const std::string& c) { return c.starts_with(name + " "); });
    };
    CHECK(made("cuModuleLoadDataEx"));
    CHECK(made("cuMemAlloc"));
    CHECK(made("cuMemcpyHtoD"));
  }

  const Span& run = r.spans[0];
  INFO("the run's calls:\n" << lines(run.calls));
  std::vector<std::string> launches;
  CHECK(lines(violations(run, launches)) == ""); // each call a captured run may not make
  CHECK(launches == std::vector<std::string>{"paged_attention", "paged_attention_combine"});

  // A run given no stream queues on the default stream, outside a capture on the other: the check
  // finds each launch.
  std::vector<std::string> default_launches;
  std::vector<std::string> off = violations(r.spans[1], default_launches);
  CHECK(default_launches == launches);
  REQUIRE(off.size() == 2);
  CHECK_THAT(off[0], Catch::StartsWith("cuLaunchKernel paged_attention stream 0 (not on the stream given"));
}
