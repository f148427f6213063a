// Every primitive against a plain C++ reference, on random shapes, strides
// (permuted, gapped, offset, broadcast) and dtypes, run on the interpreter.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <optional>
#include <random>

#include "interp/launcher.h"
#include "launch/launcher.h"
#include "templates/primitives.h"

using namespace tilec;
using namespace tilec::templates;
using ir::DType;
using ir::Shape;
using prim::Tensor;

namespace {

using Index = std::vector<int64_t>;

void for_each_index(const Shape& shape, const std::function<void(const Index&)>& f) {
  if (ir::num_elements(shape) == 0) return;
  Index i(shape.size(), 0);
  while (true) {
    f(i);
    int d = static_cast<int>(shape.size()) - 1;
    while (d >= 0 && ++i[d] == shape[d])
      i[d--] = 0;
    if (d < 0) return;
  }
}

double random_value(std::mt19937_64& rng, DType t) {
  switch (t) {
  case DType::i1:
    return double(rng() % 2);
  case DType::i8:
  case DType::i16:
  case DType::i32:
  case DType::i64:
    return double(int64_t(rng() % 101) - 50);
  default:
    return std::uniform_real_distribution<double>(-2.0, 2.0)(rng);
  }
}

Shape random_shape(std::mt19937_64& rng, int rank, int64_t max_dim) {
  Shape s;
  for (int d = 0; d < rank; ++d)
    s.push_back(1 + int64_t(rng() % uint64_t(max_dim)));
  return s;
}

// A view of `shape` over a fresh random buffer: dims laid out in a random
// order, with gaps between them, a random offset and (if `broadcast`) some
// stride-0 dims, so kernels see every kind of stride.
Tensor random_view(std::mt19937_64& rng, DType t, const Shape& shape, bool broadcast = false) {
  std::vector<int64_t> order(shape.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int64_t> strides(shape.size());
  int64_t next = 1 + int64_t(rng() % 2);
  for (size_t k = order.size(); k-- > 0;) {
    int64_t d = order[k];
    strides[d] = next;
    next *= shape[d] + int64_t(rng() % 2);
  }
  if (broadcast)
    for (size_t d = 0; d < shape.size(); ++d)
      if (rng() % 4 == 0) strides[d] = 0;
  int64_t offset = int64_t(rng() % 4), last = offset;
  for (size_t d = 0; d < shape.size(); ++d)
    last += (shape[d] - 1) * strides[d];
  Tensor v = prim::empty(t, {last + 1}, "random");
  for (int64_t i = 0; i <= last; ++i)
    v.buffer->set(size_t(i), random_value(rng, t));
  v.shape = shape;
  v.strides = strides;
  v.offset = offset;
  return v;
}

// The result of computing `v` in double and storing it as `t`.
double as_dtype(double v, DType t) {
  launch::Buffer b("r", t, 1);
  b.set(0, v);
  return b.get(0);
}

// Relative tolerance for one rounding to `t` after f32 arithmetic.
double rtol_of(DType t) {
  switch (t) {
  case DType::f16:
    return 2e-3;
  case DType::bf16:
    return 1.6e-2;
  case DType::f32:
    return 4e-6;
  default:
    return 0.0;
  }
}

// Checks got[i] against want(i) for every index of got's shape.
void check_tensor(const Tensor& got, const Shape& shape, DType dtype,
                  const std::function<double(const Index&)>& want, double atol, double rtol) {
  REQUIRE(got.shape == shape);
  REQUIRE(got.dtype() == dtype);
  int bad = 0;
  for_each_index(shape, [&](const Index& i) {
    double g = got.at(i), w = want(i);
    bool ok =
        (std::isnan(w) && std::isnan(g)) || g == w || std::abs(g - w) <= atol + rtol * std::abs(w);
    if (!ok && bad++ < 5)
      FAIL_CHECK(fmt::format("at [{}]: got {}, want {}", fmt::join(i, ", "), g, w));
  });
  CHECK(bad == 0);
}

const DType kAll[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i1};
const DType kFloats[] = {DType::f32, DType::f16, DType::bf16};
const DType kNumbers[] = {DType::f32, DType::f16, DType::bf16, DType::i32};

Index permuted(const Index& i, const std::vector<int64_t>& perm) {
  Index r(perm.size());
  for (size_t k = 0; k < perm.size(); ++k)
    r[perm[k]] = i[k];
  return r;
}

std::vector<int64_t> random_perm(std::mt19937_64& rng, int rank) {
  std::vector<int64_t> p(rank);
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), rng);
  return p;
}

} // namespace

TEST_CASE("views relabel strides without copying", "[templates][primitives]") {
  Tensor x = prim::empty(DType::f32, {2, 3, 4}, "x");
  for (size_t i = 0; i < 24; ++i)
    x.buffer->set(i, double(i));

  Tensor p = prim::permute(x, {2, 0, 1});
  CHECK(p.buffer == x.buffer);
  CHECK(p.shape == Shape{4, 2, 3});
  CHECK(p.strides == std::vector<int64_t>{1, 12, 4});
  CHECK(p.at({3, 1, 2}) == x.at({1, 2, 3}));

  Tensor b = prim::broadcast_to(prim::reshape_view(x, {2, 1, 3, 4}).value(), {5, 2, 7, 3, 4});
  CHECK(b.buffer == x.buffer);
  CHECK(b.strides == std::vector<int64_t>{0, 12, 0, 4, 1});
  CHECK(b.at({4, 1, 6, 2, 3}) == 23);

  // Splitting and merging dims within a contiguous chunk is a view ...
  auto split = prim::reshape_view(p, {2, 2, 2, 3});
  REQUIRE(split);
  CHECK(split->strides == std::vector<int64_t>{2, 1, 12, 4});
  auto merged = prim::reshape_view(p, {4, 6});
  REQUIRE(merged);
  CHECK(merged->strides == std::vector<int64_t>{1, 4});
  // ... but merging dims that are not adjacent in memory needs a copy, as
  // does merging a broadcast dim with a real one (the GQA repeat).
  CHECK_FALSE(prim::reshape_view(p, {8, 3}));
  CHECK_FALSE(prim::reshape_view(b, {10, 7, 12}));
  CHECK(prim::reshape_view(b, {5, 2, 7, 12}));

  CHECK_THROWS_WITH(prim::permute(x, {0, 0, 1}), Catch::Contains("not a permutation"));
  CHECK_THROWS_WITH(prim::broadcast_to(x, {2, 5, 4}),
                    Catch::Contains("cannot broadcast [2, 3, 4] to [2, 5, 4]"));
  CHECK_THROWS_WITH(prim::reshape_view(x, {5, 5}), Catch::Contains("24 elements"));
}

TEST_CASE("copies: contiguous, permute, broadcast_to, reshape and cast",
          "[templates][primitives]") {
  auto launcher = interp::make_interpret_launcher();
  std::mt19937_64 rng(11);
  for (int rank = 1; rank <= prim::kMaxRank; ++rank) {
    for (DType t : kAll) {
      INFO("rank " << rank << " " << ir::dtype_name(t));
      Shape shape = random_shape(rng, rank, rank > 3 ? 4 : 9);
      Tensor x = random_view(rng, t, shape, /*broadcast=*/true);

      Tensor c = prim::contiguous(*launcher, x);
      CHECK(c.is_contiguous());
      check_tensor(
          c, shape, t, [&](const Index& i) { return x.at(i); }, 0, 0);

      auto perm = random_perm(rng, rank);
      Tensor p = prim::permute_copy(*launcher, x, perm);
      CHECK(p.is_contiguous());
      check_tensor(
          p, prim::permute(x, perm).shape, t,
          [&](const Index& i) { return x.at(permuted(i, perm)); }, 0, 0);

      Shape wide = shape;
      wide.insert(wide.begin(), 3);
      if (rank < prim::kMaxRank) {
        Tensor b = prim::broadcast_to_copy(*launcher, x, wide);
        check_tensor(
            b, wide, t, [&](const Index& i) { return x.at(Index(i.begin() + 1, i.end())); }, 0, 0);
      }

      // Reshape to the flat row-major order and back.
      int64_t n = x.numel();
      Tensor flat = prim::reshape(*launcher, x, {n});
      Index strides = prim::row_major_strides(shape);
      check_tensor(
          flat, {n}, t,
          [&](const Index& i) {
            Index at(shape.size());
            for (size_t d = 0; d < shape.size(); ++d)
              at[d] = (i[0] / strides[d]) % shape[d];
            return x.at(at);
          },
          0, 0);

      for (DType to : kAll) {
        Tensor y = prim::cast(*launcher, x, to);
        check_tensor(
            y, shape, to,
            [&](const Index& i) {
              double v = x.at(i);
              if (to == DType::i1) return double(v != 0);
              if (ir::is_int(to)) return std::trunc(v);
              return as_dtype(v, to);
            },
            0, 0);
      }
    }
  }
}

TEST_CASE("reshape is a view when it can be and a copy when not", "[templates][primitives]") {
  auto launcher = interp::make_interpret_launcher();
  std::mt19937_64 rng(5);
  Tensor x = random_view(rng, DType::f32, {3, 4, 5});
  x = prim::contiguous(*launcher, x);
  launcher->reset_stats();
  Tensor v = prim::reshape(*launcher, x, {12, 5});
  CHECK(v.buffer == x.buffer);
  CHECK(launcher->stats().launches == 0);
  Tensor t = prim::permute(x, {1, 0, 2});
  Tensor c = prim::reshape(*launcher, t, {12, 5});
  CHECK(c.buffer != x.buffer);
  CHECK(launcher->stats().launches == 1);
  check_tensor(
      c, {12, 5}, DType::f32,
      [&](const Index& i) {
        return t.at({i[0] / 3, i[0] % 3, i[1]});
      },
      0, 0);
}

TEST_CASE("index_select gathers rows of dim 0 through an i32 index", "[templates][primitives]") {
  auto launcher = interp::make_interpret_launcher();
  std::mt19937_64 rng(7);
  for (int rank = 1; rank <= prim::kMaxRank; ++rank) {
    for (DType t : kAll) {
      INFO("rank " << rank << " " << ir::dtype_name(t));
      Shape shape = random_shape(rng, rank, rank > 3 ? 4 : 7);
      Tensor x = random_view(rng, t, shape);
      int64_t n = 1 + int64_t(rng() % 9);
      // A strided index view (every other element of a bigger buffer).
      Tensor idx = prim::empty(DType::i32, {2 * n + 1}, "idx");
      for (int64_t k = 0; k < 2 * n + 1; ++k)
        idx.buffer->set_int(size_t(k), int64_t(rng() % uint64_t(shape[0])));
      idx.shape = {n};
      idx.strides = {2};
      idx.offset = 1;
      Tensor out = prim::index_select(*launcher, x, idx);
      Shape want = shape;
      want[0] = n;
      check_tensor(
          out, want, t,
          [&](const Index& i) {
            Index at = i;
            at[0] = int64_t(idx.at({i[0]}));
            return x.at(at);
          },
          0, 0);
    }
  }
  Tensor x = prim::empty(DType::f32, {4, 2}, "x");
  Tensor bad = prim::empty(DType::i32, {3}, "idx");
  bad.buffer->set_int(1, 4);
  CHECK_THROWS_WITH(prim::index_select(*launcher, x, bad),
                    Catch::Contains("index[1] = 4 is outside [0, 4)"));
  CHECK_THROWS_WITH(prim::index_select(*launcher, x, bad, 1), Catch::Contains("only dim 0"));
}

TEST_CASE("matmul: batched, strided, broadcast batch dims, f32 accumulation",
          "[templates][primitives]") {
  auto launcher = interp::make_interpret_launcher();
  std::mt19937_64 rng(3);
  for (int batch_rank = 0; batch_rank <= 3; ++batch_rank) {
    for (DType t : kFloats) {
      for (int trial = 0; trial < 2; ++trial) {
        int64_t m = 1 + int64_t(rng() % 20), n = 1 + int64_t(rng() % 40),
                k = 1 + int64_t(rng() % 40);
        if (trial == 1) m = 17 + int64_t(rng() % 60); // more than one block of rows
        Shape batch = random_shape(rng, batch_rank, 3);
        Shape a_batch = batch, b_batch = batch;
        if (batch_rank > 0 && trial == 1) b_batch[0] = 1; // broadcast over batch dim 0
        Shape a_shape = a_batch, b_shape = b_batch;
        a_shape.insert(a_shape.end(), {m, k});
        b_shape.insert(b_shape.end(), {k, n});
        Tensor a = random_view(rng, t, a_shape);
        Tensor b = random_view(rng, t, b_shape); // random strides: often transposed
        std::optional<DType> out = trial == 0 ? std::optional<DType>(DType::f32) : std::nullopt;
        DType out_t = out ? *out : t;
        INFO(fmt::format("a {} b {} {} -> {}", ir::shape_str(a_shape), ir::shape_str(b_shape),
                         ir::dtype_name(t), ir::dtype_name(out_t)));
        Tensor c = prim::matmul(*launcher, a, b, out);
        Shape c_shape = batch;
        c_shape.insert(c_shape.end(), {m, n});
        check_tensor(
            c, c_shape, out_t,
            [&](const Index& i) {
              Index ai(i.begin(), i.end() - 2), bi = ai;
              if (batch_rank > 0 && b_batch[0] == 1) bi[0] = 0;
              double acc = 0;
              for (int64_t q = 0; q < k; ++q) {
                Index x = ai, y = bi;
                x.insert(x.end(), {i[batch_rank], q});
                y.insert(y.end(), {q, i[batch_rank + 1]});
                acc += a.at(x) * b.at(y);
              }
              return acc;
            },
            1e-5 * double(k), rtol_of(out_t));
      }
    }
  }
  Tensor a = prim::empty(DType::f32, {2, 3}, "a"), b = prim::empty(DType::f32, {4, 2}, "b");
  CHECK_THROWS_WITH(prim::matmul(*launcher, a, b), Catch::Contains("[2, 3] and [4, 2]"));
}

TEST_CASE("mul_scalar and tanh", "[templates][primitives]") {
  auto launcher = interp::make_interpret_launcher();
  std::mt19937_64 rng(13);
  for (int rank = 1; rank <= prim::kMaxRank; ++rank) {
    for (DType t : kNumbers) {
      INFO("rank " << rank << " " << ir::dtype_name(t));
      Shape shape = random_shape(rng, rank, rank > 3 ? 4 : 8);
      Tensor x = random_view(rng, t, shape, true);
      double s = ir::is_float(t) ? -0.37 : -3;
      check_tensor(
          prim::mul_scalar(*launcher, x, s), shape, t,
          [&](const Index& i) { return as_dtype(x.at(i) * s, t); }, 1e-6, rtol_of(t));
      if (ir::is_float(t))
        check_tensor(
            prim::tanh(*launcher, x), shape, t,
            [&](const Index& i) { return as_dtype(std::tanh(x.at(i)), t); }, 1e-6, rtol_of(t));
    }
  }
  Tensor i = prim::empty(DType::i32, {3}, "i");
  CHECK_THROWS_WITH(prim::tanh(*launcher, i), Catch::Contains("float"));
  CHECK_THROWS_WITH(prim::mul_scalar(*launcher, i, 0.5), Catch::Contains("not an integer"));
}

TEST_CASE("add, sub, mul and ge with broadcasting", "[templates][primitives]") {
  auto launcher = interp::make_interpret_launcher();
  std::mt19937_64 rng(17);
  for (int rank = 1; rank <= prim::kMaxRank; ++rank) {
    for (DType t : kNumbers) {
      INFO("rank " << rank << " " << ir::dtype_name(t));
      Shape shape = random_shape(rng, rank, rank > 3 ? 4 : 8);
      Shape narrow = shape; // some dims 1, and one fewer leading dim
      for (auto& d : narrow)
        if (rng() % 2) d = 1;
      narrow.erase(narrow.begin());
      Tensor a = random_view(rng, t, shape, true), b = random_view(rng, t, narrow, true);
      auto b_at = [&](const Index& i) {
        Index j(i.begin() + 1, i.end());
        for (size_t d = 0; d < j.size(); ++d)
          if (narrow[d] == 1) j[d] = 0;
        return b.at(j);
      };
      double atol = ir::is_float(t) ? 1e-6 : 0;
      check_tensor(
          prim::add(*launcher, a, b), shape, t,
          [&](const Index& i) { return as_dtype(a.at(i) + b_at(i), t); }, atol, rtol_of(t));
      check_tensor(
          prim::sub(*launcher, b, a), shape, t,
          [&](const Index& i) { return as_dtype(b_at(i) - a.at(i), t); }, atol, rtol_of(t));
      check_tensor(
          prim::mul(*launcher, a, b), shape, t,
          [&](const Index& i) { return as_dtype(a.at(i) * b_at(i), t); }, atol, rtol_of(t));
      check_tensor(
          prim::ge(*launcher, a, b), shape, DType::i1,
          [&](const Index& i) { return double(a.at(i) >= b_at(i)); }, 0, 0);
      // Equal values compare >= too.
      check_tensor(
          prim::ge(*launcher, a, a), shape, DType::i1, [&](const Index&) { return 1.0; }, 0, 0);
    }
  }
  Tensor f = prim::empty(DType::f32, {3}, "f"), h = prim::empty(DType::f16, {3}, "h");
  CHECK_THROWS_WITH(prim::add(*launcher, f, h), Catch::Contains("f32 and f16"));
  CHECK_THROWS_WITH(prim::add(*launcher, f, prim::empty(DType::f32, {4}, "g")),
                    Catch::Contains("[3] and [4] do not broadcast"));
}

TEST_CASE("masked_fill and iota", "[templates][primitives]") {
  auto launcher = interp::make_interpret_launcher();
  std::mt19937_64 rng(19);
  for (int rank = 1; rank <= prim::kMaxRank; ++rank) {
    for (DType t : kNumbers) {
      INFO("rank " << rank << " " << ir::dtype_name(t));
      Shape shape = random_shape(rng, rank, rank > 3 ? 4 : 8);
      Shape mshape = shape;
      mshape[0] = 1; // broadcast the mask over dim 0
      Tensor x = random_view(rng, t, shape, true), mask = random_view(rng, DType::i1, mshape, true);
      double value = ir::is_float(t) ? -INFINITY : 7;
      check_tensor(
          prim::masked_fill(*launcher, x, mask, value), shape, t,
          [&](const Index& i) {
            Index mi = i;
            mi[0] = 0;
            return mask.at(mi) != 0 ? value : x.at(i);
          },
          0, 0);

      Tensor io = prim::iota(*launcher, t, shape);
      Index strides = prim::row_major_strides(shape);
      check_tensor(
          io, shape, t,
          [&](const Index& i) {
            double flat = std::inner_product(i.begin(), i.end(), strides.begin(), 0.0);
            return as_dtype(flat, t);
          },
          0, 0);
    }
  }
  CHECK_THROWS_WITH(prim::masked_fill(*launcher, prim::empty(DType::f32, {3}, "x"),
                                      prim::empty(DType::f32, {3}, "m"), 0),
                    Catch::Contains("mask must be i1"));
}

TEST_CASE("softmax_last_dim: any row length, strided rows, all -inf rows give zeros",
          "[templates][primitives]") {
  auto launcher = interp::make_interpret_launcher();
  std::mt19937_64 rng(23);
  auto reference = [](const Tensor& x, const Index& i) {
    Index j = i;
    double m = -INFINITY;
    for (j.back() = 0; j.back() < x.shape.back(); ++j.back())
      m = std::max(m, x.at(j));
    if (m == -INFINITY) return 0.0;
    double sum = 0;
    for (j.back() = 0; j.back() < x.shape.back(); ++j.back())
      sum += std::exp(x.at(j) - m);
    return std::exp(x.at(i) - m) / sum;
  };
  for (int rank = 1; rank <= prim::kMaxRank; ++rank) {
    for (DType t : kFloats) {
      for (int64_t block : {int64_t(0), int64_t(16)}) {
        Shape shape = random_shape(rng, rank, rank > 3 ? 3 : 5);
        shape.back() = 1 + int64_t(rng() % (block ? 70 : 300));
        INFO(fmt::format("{} {} block {}", ir::shape_str(shape), ir::dtype_name(t), block));
        Tensor x = random_view(rng, t, shape);
        // Mask some elements and, in rows whose first index is 0, all of them.
        for_each_index(shape, [&](const Index& i) {
          int64_t e = x.offset;
          for (size_t d = 0; d < i.size(); ++d)
            e += i[d] * x.strides[d];
          if ((rank > 1 && i[0] == 0) || rng() % 5 == 0) x.buffer->set(size_t(e), -INFINITY);
        });
        for (DType out : {t, DType::f32}) {
          Tensor y = prim::softmax_last_dim(*launcher, x, out, block);
          check_tensor(
              y, shape, out, [&](const Index& i) { return reference(x, i); }, 1e-6,
              rtol_of(out) + 2e-6);
        }
      }
    }
  }
}

TEST_CASE("primitive kernels are built once per specialization", "[templates][primitives]") {
  auto launcher = interp::make_interpret_launcher();
  auto has = [](const std::string& key) {
    auto keys = prim::built_kernel_keys();
    return std::count(keys.begin(), keys.end(), key) == 1;
  };
  Tensor a = prim::empty(DType::f32, {3, 5}, "a"), b = prim::empty(DType::f32, {3, 5}, "b");
  prim::add(*launcher, a, b);
  CHECK(has("prim_add_r1_f32_f32_to_f32_b256")); // contiguous dims coalesce to one
  size_t before = prim::built_kernel_keys().size();
  prim::add(*launcher, prim::empty(DType::f32, {7, 2, 2}, "c"),
            prim::empty(DType::f32, {7, 2, 2}, "d"));
  CHECK(prim::built_kernel_keys().size() == before);

  prim::add(*launcher, prim::permute(a, {1, 0}), prim::permute(b, {1, 0}));
  CHECK(has("prim_add_r2_f32_f32_to_f32_b256")); // a transposed walk keeps two dims
  size_t after = prim::built_kernel_keys().size();
  prim::add(*launcher, prim::permute(b, {1, 0}), prim::permute(a, {1, 0}));
  CHECK(prim::built_kernel_keys().size() == after);
}
