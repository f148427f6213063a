#include "templates/kernels.h"

namespace tilec::templates {

using namespace dsl;

// C[M, N] = A[M, K] . B[K, N], row-major, one [block_m, block_n] tile of C per
// program, walking K in steps of block_k.
ir::Kernel matmul(int64_t block_m, int64_t block_n, int64_t block_k) {
  KernelBuilder k("matmul");
  auto a = k.arg<Ptr<f32>>("a"), b = k.arg<Ptr<f32>>("b"), c = k.arg<Ptr<f32>>("c");
  auto m = k.arg<i32>("m"), n = k.arg<i32>("n"), kk = k.arg<i32>("k");
  auto rm = program_id(0) * block_m + arange(0, block_m);
  auto rn = program_id(1) * block_n + arange(0, block_n);
  Var acc = zeros({block_m, block_n});
  for_range(0, kk, block_k, [&](Scalar k0) {
    auto rk = k0 + arange(0, block_k);
    auto at = load(a + rm.col() * kk + rk.row(), (rm.col() < m) & (rk.row() < kk), 0.0f);
    auto bt = load(b + rk.col() * n + rn.row(), (rk.col() < kk) & (rn.row() < n), 0.0f);
    acc = dot(at, bt, acc);
  });
  store(c + rm.col() * n + rn.row(), acc, (rm.col() < m) & (rn.row() < n));
  return k.finish();
}

KernelTemplate matmul_template() {
  KernelTemplate t;
  t.name = "matmul";
  t.summary = "C = A . B for row-major f32 matrices, tiled, f32 accumulation";
  t.params = {{"block_m", 32, "rows of C per program (power of two)"},
              {"block_n", 32, "columns of C per program (power of two)"},
              {"block_k", 16, "K step of the inner loop (power of two)"},
              {"num_warps", 4, "warps per program on the GPU"}};
  t.shape = {{"m", 100, "rows of A and C"}, {"n", 75, "columns of B and C"}, {"k", 50, "columns of A, rows of B"}};
  t.build = [](const ParamMap& p, const ParamMap&) {
    for (const char* name : {"block_m", "block_n", "block_k"}) require_pow2(p, name, 1, 256);
    return matmul(p.at("block_m"), p.at("block_n"), p.at("block_k"));
  };
  t.make_problem = [](const ProblemRequest& r) {
    const ParamMap& s = r.shape;
    const uint64_t seed = r.seed;
    for (const char* name : {"m", "n", "k"}) require_range(s, name, 1, 1 << 14);
    int64_t m = s.at("m"), n = s.at("n"), k = s.at("k");
    Problem pr;
    int a = pr.add_buffer({"a", ir::DType::f32, size_t(m * k)});
    int b = pr.add_buffer({"b", ir::DType::f32, size_t(k * n)});
    int c = pr.add_buffer({"c", ir::DType::f32, size_t(m * n)});
    fill_uniform(pr.buffers[a], seed, -1, 1);
    fill_uniform(pr.buffers[b], seed + 1, -1, 1);
    for (int i : {a, b, c}) pr.arg_buffer(i);
    pr.arg_int(m);
    pr.arg_int(n);
    pr.arg_int(k);
    pr.outputs = {c};
    pr.ideal_bytes = 4 * (m * k + k * n + m * n);
    pr.atol = 1e-5 * double(k);
    pr.rtol = 1e-5;
    return pr;
  };
  t.grid = [](const ParamMap& p, const ParamMap& s) {
    return launch::Grid{cdiv(s.at("m"), p.at("block_m")), cdiv(s.at("n"), p.at("block_n")), 1};
  };
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
  t.tensors = {{"a", {"m", "k"}}, {"b", {"k", "n"}}, {"c", {"m", "n"}, true}};
  t.size_fields = {"m", "n", "k"};
  return t;
}

} // namespace tilec::templates
