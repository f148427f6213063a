#include "templates/kernels.h"

#include <array>
#include <string_view>

#include <fmt/format.h>

#include "abi/error.h"

namespace tilec::templates {

using namespace dsl;

namespace {
constexpr std::array<std::string_view, 3> kDtypes = {"f32", "f16", "bf16"};
} // namespace

// C[M, N] = A[M, K] . B[K, N], row-major, A and B of `dt` (f32, f16 or bf16), C f32; one
// [block_m, block_n] tile of C per program, walking K in steps of block_k, the loads of the
// next num_stages - 1 steps in flight (f16/bf16, whose dot takes the tensor cores).
// `n_multiple`, `k_multiple`: powers of two the launches promise divide n and k (1: none), so
// the row strides keep 16-byte chunks aligned and the masks whole per chunk: what copying the
// tiles asynchronously (num_stages > 1) needs. `warp_specialize`: on sm_90, a producer
// warpgroup of its own issues the K loop's TMA copies (the block has num_warps + 4 warps).
ir::Kernel matmul(int64_t block_m, int64_t block_n, int64_t block_k, ir::DType dt, int64_t num_stages,
                  int64_t n_multiple, int64_t k_multiple, bool warp_specialize) {
  KernelBuilder k("matmul");
  auto a = k.arg(ptr_to(dt), "a"), b = k.arg(ptr_to(dt), "b");
  auto c = k.arg<Ptr<f32>>("c");
  Tile m = k.arg<i32>("m"), n = k.arg<i32>("n"), kk = k.arg<i32>("k");
  if (n_multiple > 1) n = multiple_of(n, n_multiple);
  if (k_multiple > 1) kk = multiple_of(kk, k_multiple);
  // A and B as tensor descriptors: on sm_90 their tiles are TMA copies feeding wgmma; elsewhere
  // the masked loads they describe.
  TensorDesc da = make_tensor_desc(a, {m, kk}, {kk, 1}, {block_m, block_k});
  TensorDesc db = make_tensor_desc(b, {kk, n}, {n, 1}, {block_k, block_n});
  // C's tile too: on sm_90 staged in shared memory and written by a TMA store (where n keeps
  // its rows 16-byte aligned); elsewhere the masked store it describes.
  TensorDesc dc = make_tensor_desc(c, {m, n}, {n, 1}, {block_m, block_n});
  auto m0 = program_id(0) * block_m, n0 = program_id(1) * block_n;
  Var acc = zeros({block_m, block_n});
  for_range(0, kk, block_k, RangeOptions{num_stages, warp_specialize}, [&](Scalar k0) {
    acc = dot(load(da, {m0, k0}), load(db, {k0, n0}), acc);
  });
  store(dc, {m0, n0}, acc);
  return k.finish();
}

ir::Kernel matmul(int64_t block_m, int64_t block_n, int64_t block_k) {
  return matmul(block_m, block_n, block_k, ir::DType::f32, 1, 1, 1, false);
}

KernelTemplate matmul_template() {
  KernelTemplate t;
  t.name = "matmul";
  t.summary = "C = A . B for row-major matrices (f32, f16 or bf16; C in f32), tiled, f32 accumulation";
  t.params = {{"block_m", 32, "rows of C per program (power of two)"},
              {"block_n", 32, "columns of C per program (power of two)"},
              {"block_k", 16, "K step of the inner loop (power of two)"},
              {"num_warps", 4, "warps per program on the GPU"},
              {"num_stages", 1, "K steps whose A and B tiles are in flight: software-pipeline stages (1: none; "
                                "f16/bf16 on tensor cores)"},
              {"warp_specialize", 0, "1: on sm_90, a producer warpgroup of its own issues the K loop's TMA copies, "
                                     "the num_warps warps only compute (the block has num_warps + 4 warps)"}};
  t.shape = {{"m", 100, "rows of A and C"}, {"n", 75, "columns of B and C"}, {"k", 50, "columns of A, rows of B"},
             {"dtype", 0, "A and B dtype (C is f32)", {kDtypes.begin(), kDtypes.end()}}};
  t.build = [](const ParamMap& p, const ParamMap& s) {
    for (const char* name : {"block_m", "block_n", "block_k"}) require_pow2(p, name, 1, 256);
    const int64_t stages = p.count("num_stages") ? p.at("num_stages") : 1;
    if (stages < 1 || stages > ir::kMaxPipelineStages)
      throw UserError(fmt::format("matmul: num_stages {} must be from 1 to {}", stages, ir::kMaxPipelineStages));
    // A module is built for one problem size (every size specializes it): the largest power of
    // two up to 16 that divides n and k is a promise its launches keep.
    auto multiple = [&](const char* name) {
      const int64_t v = s.count(name) ? s.at(name) : 0;
      return v > 0 ? std::min<int64_t>(16, v & -v) : 1;
    };
    const int64_t ws = p.count("warp_specialize") ? p.at("warp_specialize") : 0;
    if (ws != 0 && ws != 1) throw UserError(fmt::format("matmul: warp_specialize {} must be 0 or 1", ws));
    return matmul(p.at("block_m"), p.at("block_n"), p.at("block_k"),
                  *ir::parse_dtype(kDtypes.at(size_t(s.count("dtype") ? s.at("dtype") : 0))), stages, multiple("n"),
                  multiple("k"), ws == 1);
  };
  t.make_problem = [](const ProblemRequest& r) {
    const ParamMap& s = r.shape;
    const uint64_t seed = r.seed;
    for (const char* name : {"m", "n", "k"}) require_range(s, name, 1, 1 << 14);
    int64_t m = s.at("m"), n = s.at("n"), k = s.at("k");
    const ir::DType dt = *ir::parse_dtype(kDtypes.at(size_t(s.at("dtype"))));
    Problem pr;
    int a = pr.add_buffer({"a", dt, size_t(m * k)});
    int b = pr.add_buffer({"b", dt, size_t(k * n)});
    int c = pr.add_buffer({"c", ir::DType::f32, size_t(m * n)});
    fill_uniform(pr.buffers[a], seed, -1, 1);
    fill_uniform(pr.buffers[b], seed + 1, -1, 1);
    for (int i : {a, b, c}) pr.arg_buffer(i);
    pr.arg_int(m);
    pr.arg_int(n);
    pr.arg_int(k);
    pr.outputs = {c};
    pr.ideal_bytes = ir::dtype_bytes(dt) * (m * k + k * n) + 4 * m * n;
    pr.atol = 1e-5 * double(k);
    pr.rtol = 1e-5;
    return pr;
  };
  t.grid_expr = {"cdiv(m, block_m)", "cdiv(n, block_n)", "1"};
  t.reference = [](Problem& pr) {
    const int64_t m = pr.shape.at("m"), n = pr.shape.at("n"), k = pr.shape.at("k");
    const launch::Buffer &a = pr.buffers[0], &b = pr.buffers[1];
    launch::Buffer want("c", ir::DType::f32, size_t(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < k; ++q) acc += a.get(i * k + q) * b.get(q * n + j);
        want.set(i * n + j, acc);
      }
    pr.expected = {std::move(want)};
  };
  t.tensors = {{"a", {"m", "k"}, false, "dtype"},
               {"b", {"k", "n"}, false, "dtype"},
               {.name = "c", .dims = {"m", "n"}, .output = true, .dtype = "f32"}};
  t.size_fields = {"m", "n", "k"};
  return t;
}

} // namespace tilec::templates
