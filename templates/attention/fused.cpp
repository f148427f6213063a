// Paged attention: inputs, validation, the C++ reference and the fused kernel.
#include "templates/attention/paged_attention.h"

#include <thread>
#include <atomic>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "abi/limits.h"
#include "dsl/dsl.h"
#include "templates/prim_detail.h"

namespace tilec::templates {

std::string head_dim_error(int64_t head_dim) {
  if (head_dim % 8 == 0 && head_dim >= 16 && head_dim <= 256) return "";
  return fmt::format("head_dim={}: must be a multiple of 8 from 16 to 256", head_dim);
}

bool PagedAttentionShape::sparse_cache() const {
  return cache_elements() * ir::dtype_bytes(cache_dtype()) > kSparseCacheBytes;
}

double PagedAttentionShape::scale() const {
  return softmax_scale != 0.0 ? softmax_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

int64_t PagedAttentionInputs::query_len(int64_t b) const {
  if (!shape.varlen) return shape.sq;
  return query_start_loc.get_int(size_t(b + 1)) - query_start_loc.get_int(size_t(b));
}

size_t PagedAttentionInputs::q_offset(int64_t b, int64_t h, int64_t i) const {
  const PagedAttentionShape& s = shape;
  if (s.varlen) return size_t(((query_start_loc.get_int(size_t(b)) + i) * s.hq + h) * s.head_dim);
  return size_t(((b * s.hq + h) * s.sq + i) * s.head_dim);
}

int64_t PagedAttentionInputs::q_rows() const {
  return shape.varlen ? query_start_loc.get_int(size_t(shape.batch)) * shape.hq : shape.batch * shape.hq * shape.sq;
}

PagedAttentionInputs make_paged_attention_inputs(const PagedAttentionShape& shape, uint64_t seed,
                                                 int64_t ctx, bool poison_unused) {
  PagedAttentionInputs in;
  in.shape = shape;
  PagedAttentionShape& s = in.shape;
  if (s.num_blocks == 0) s.num_blocks = s.batch * s.max_blocks;
  size_t cache = size_t(s.num_blocks * s.block_size * s.hkv * s.head_dim);
  std::mt19937_64 rng(seed + 3);
  // Mixed batches: the first sequence decodes one row, the last has the longest query (sq), the
  // others any length from 0 to sq.
  std::vector<int64_t> qlens(size_t(s.batch), s.sq);
  if (s.varlen) {
    in.query_start_loc = launch::Buffer("query_start_loc", ir::DType::i32, size_t(s.batch + 1));
    for (int64_t b = 0; b + 1 < s.batch; ++b) qlens[size_t(b)] = b == 0 ? 1 : int64_t(rng() % uint64_t(s.sq + 1));
    int64_t total = 0;
    for (int64_t b = 0; b < s.batch; ++b) {
      in.query_start_loc.set_int(size_t(b), total);
      total += qlens[size_t(b)];
    }
    in.query_start_loc.set_int(size_t(s.batch), total);
  }
  in.q = launch::Buffer("q", s.dtype,
                        size_t((s.varlen ? in.query_start_loc.get_int(size_t(s.batch)) : s.batch * s.sq) * s.hq * s.head_dim));
  in.k_cache = launch::Buffer("k_cache", s.cache_dtype(), cache);
  in.v_cache = launch::Buffer("v_cache", s.cache_dtype(), cache);
  in.block_table = launch::Buffer("block_table", ir::DType::i32, size_t(s.batch * s.max_blocks));
  in.context_lens = launch::Buffer("context_lens", ir::DType::i32, size_t(s.batch));
  // A large cache (a serving engine's, most of it free pages) is filled only where sequences
  // use it, with their pages taken from its end: the memory and time this takes follow the
  // live context, and offsets reach the far end of the cache.
  const int64_t page_elems = s.block_size * s.hkv * s.head_dim;
  const bool sparse = s.sparse_cache();
  fill_uniform(in.q, seed, -1, 1);
  if (!sparse) {
    fill_uniform(in.k_cache, seed + 1, -1, 1);
    fill_uniform(in.v_cache, seed + 2, -1, 1);
  }
  const double largest = !s.kv_fp8 ? 0.0 : *s.kv_fp8 == ir::DType::f8e4m3 ? 448.0 : 57344.0;
  if (s.kv_fp8) {
    // Per-tensor scales as a quantizer picks them, amax / largest finite (amax is 1 here),
    // unless given; the caches hold the values divided by them.
    if (s.k_scale == 0) s.k_scale = 1.0 / largest;
    if (s.v_scale == 0) s.v_scale = 1.0 / largest;
  }
  // Element range [lo, hi) of both caches quantized (fp8), as every filled element is.
  auto quantize = [&](size_t lo, size_t hi) {
    if (!s.kv_fp8) return;
    for (auto [buf, scale] : {std::pair{&in.k_cache, s.k_scale}, std::pair{&in.v_cache, s.v_scale}})
      for (size_t i = lo; i < hi; ++i) buf->set(i, std::clamp(buf->get(i) / scale, -largest, largest));
  };
  if (!sparse) quantize(0, in.k_cache.count());

  const int64_t used = sparse ? std::min(s.num_blocks, s.batch * s.max_blocks) : s.num_blocks;
  std::vector<int64_t> pages(static_cast<size_t>(used));
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = s.num_blocks - used + int64_t(i);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int64_t> lens(size_t(s.batch));
  for (int64_t& len : lens) len = ctx >= 0 ? ctx : int64_t(rng() % uint64_t(s.capacity() + 1));
  if (ctx < 0 && s.batch > 1) {
    // Ragged for sure: the first sequence ends inside a page, the second is shorter.
    int64_t cap = s.capacity();
    if (lens[0] % s.block_size == 0) lens[0] = cap > 1 ? std::max<int64_t>(1, lens[0] - 1 - s.block_size / 2) : lens[0];
    if (lens[1] == lens[0]) lens[1] = lens[0] / 2;
  }
  if (ctx < 0 && s.causal) // causal query rows are the last Sq positions: at least Sq of them
    for (size_t b = 0; b < lens.size(); ++b) lens[b] = std::clamp<int64_t>(lens[b], qlens[b], std::max(qlens[b], s.capacity()));
  std::set<int64_t> filled;        // pages of a sparse cache to fill
  std::vector<int64_t> fill_order; // the same, in the order they were met
  for (int64_t b = 0; b < s.batch; ++b) {
    int64_t len = lens[size_t(b)];
    in.context_lens.set_int(size_t(b), len);
    int64_t live_blocks = cdiv(len, s.block_size);
    for (int64_t k = 0; k < s.max_blocks; ++k) {
      // Sequences use distinct pages while there are enough; unused slots point at random
      // valid pages, or at none.
      int64_t page = pages[size_t((b * s.max_blocks + k) % used)];
      if (k >= live_blocks)
        page = !poison_unused ? int64_t(rng() % uint64_t(s.num_blocks)) : k % 2 ? -1 : s.num_blocks + int64_t(rng() % 1000);
      else if (sparse && filled.insert(page).second)
        fill_order.push_back(page);
      in.block_table.set_int(size_t(b * s.max_blocks + k), page);
    }
  }
  // Its own stream per page: the values do not depend on the order pages are filled, so they
  // are filled on every core (a GPU-sized cache's live pages took a minute on one).
  std::atomic<size_t> next{0};
  auto fill_pages = [&] {
    for (size_t n; (n = next++) < fill_order.size();) {
      const int64_t page = fill_order[n];
      const size_t lo = size_t(page * page_elems), hi = lo + size_t(page_elems);
      for (auto [buf, stream] : {std::pair{&in.k_cache, 1}, std::pair{&in.v_cache, 2}}) {
        std::mt19937_64 page_rng(seed * 0x9E3779B97F4A7C15ull + uint64_t(page) * 4 + uint64_t(stream));
        std::uniform_real_distribution<double> dist(-1, 1);
        for (size_t i = lo; i < hi; ++i) buf->set(i, dist(page_rng));
      }
      quantize(lo, hi);
    }
  };
  const size_t threads = fill_order.size() < 64 ? 1 : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(fill_pages);
  fill_pages();
  for (std::thread& th : pool) th.join();
  if (s.alibi) {
    in.alibi_slopes = launch::Buffer("alibi_slopes", ir::DType::f32, size_t(s.hq));
    for (int64_t h = 0; h < s.hq; ++h) in.alibi_slopes.set(size_t(h), std::exp2(-8.0 * double(h + 1) / double(s.hq)));
  }
  return in;
}

namespace {

void expect_count(const launch::Buffer& b, int64_t want, const std::string& dims) {
  if (static_cast<int64_t>(b.count()) != want)
    throw UserError(fmt::format("{}: has {} elements, expected {} ({})", b.name, b.count(), want, dims));
}

} // namespace

launch::Buffer block_table_unused_cleared(const PagedAttentionInputs& in) {
  launch::Buffer r = in.block_table;
  const PagedAttentionShape& s = in.shape;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t k = cdiv(in.context_lens.get_int(size_t(b)), s.block_size); k < s.max_blocks; ++k)
      r.set_int(size_t(b * s.max_blocks + k), 0);
  return r;
}

void validate_paged_attention(const PagedAttentionInputs& in, bool decompose) {
  const PagedAttentionShape& s = in.shape;
  auto positive = [](const char* name, int64_t v) {
    if (v <= 0) throw UserError(fmt::format("paged_attention: {} must be positive, got {}", name, v));
  };
  positive("batch", s.batch);
  positive("hq", s.hq);
  positive("hkv", s.hkv);
  positive("sq", s.sq);
  positive("block_size", s.block_size);
  positive("max_blocks", s.max_blocks);
  positive("num_blocks", s.num_blocks);
  if (s.hq % s.hkv != 0)
    throw UserError(fmt::format("paged_attention: Hq = {} is not a multiple of Hkv = {}", s.hq, s.hkv));
  if (std::string why = head_dim_error(s.head_dim); !why.empty()) throw UserError("paged_attention: " + why);
  if (s.block_size > 256)
    throw UserError(fmt::format("paged_attention: block_size {} exceeds 256", s.block_size));
  if (!ir::is_float(s.dtype) || ir::is_fp8(s.dtype))
    throw UserError(fmt::format("paged_attention: q dtype must be f32, f16 or bf16, not {}", ir::dtype_name(s.dtype)));
  if (s.kv_fp8 && !ir::is_fp8(*s.kv_fp8))
    throw UserError(fmt::format("paged_attention: an fp8 cache is f8e4m3 or f8e5m2, not {}", ir::dtype_name(*s.kv_fp8)));
  if (in.q.dtype != s.dtype)
    throw UserError(fmt::format("q: dtype {} differs from the problem's {}", ir::dtype_name(in.q.dtype), ir::dtype_name(s.dtype)));
  for (const launch::Buffer* b : {&in.k_cache, &in.v_cache})
    if (b->dtype != s.cache_dtype())
      throw UserError(fmt::format("{}: dtype {} differs from {}", b->name, ir::dtype_name(b->dtype),
                                  s.kv_fp8 ? fmt::format("the fp8 cache's {}", ir::dtype_name(*s.kv_fp8))
                                           : fmt::format("q's {}", ir::dtype_name(s.dtype))));
  // The kernels take the scales and the softcap as f32 arguments: each must be a normal f32
  // (a larger value is inf there, a smaller one 0 or a denormal a GPU flushes to 0).
  const double f32_min = std::numeric_limits<float>::min(), f32_max = std::numeric_limits<float>::max();
  auto normal_f32 = [&](double v) { return std::abs(v) >= f32_min && std::abs(v) <= f32_max; };
  const std::string f32_range = fmt::format("f32's normal range ({:g} to {:g})", f32_min, f32_max);
  if (s.kv_fp8) {
    for (auto [name, scale] : {std::pair{"k_scale", s.k_scale}, std::pair{"v_scale", s.v_scale}})
      if (!(scale > 0 && normal_f32(scale)))
        throw UserError(fmt::format("paged_attention: an {} cache needs {} as a positive number in {}, got {}",
                                    ir::dtype_name(*s.kv_fp8), name, f32_range, scale));
    // The fused kernel scores with their product, in f32.
    if (!normal_f32(s.scale() * s.k_scale))
      throw UserError(fmt::format("paged_attention: softmax scale {} times k_scale {} = {} is outside {}", s.scale(),
                                  s.k_scale, s.scale() * s.k_scale, f32_range));
  } else if (s.k_scale != 0 || s.v_scale != 0) {
    throw UserError(fmt::format("paged_attention: k_scale {} and v_scale {} are for fp8 caches; these are {}", s.k_scale,
                                s.v_scale, ir::dtype_name(s.cache_dtype())));
  }
  for (const launch::Buffer* b : {&in.block_table, &in.context_lens})
    if (b->dtype != ir::DType::i32)
      throw UserError(fmt::format("{}: dtype must be u32 or i32, got {}", b->name, ir::dtype_name(b->dtype)));
  if (s.varlen) {
    if (in.query_start_loc.dtype != ir::DType::i32)
      throw UserError(fmt::format("query_start_loc: dtype must be u32 or i32, got {}", ir::dtype_name(in.query_start_loc.dtype)));
    expect_count(in.query_start_loc, s.batch + 1, fmt::format("[B + 1 = {}]", s.batch + 1));
    if (in.query_start_loc.get_int(0) != 0)
      throw UserError(fmt::format("query_start_loc[0] = {}: the packed rows start at 0", in.query_start_loc.get_int(0)));
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t n = in.query_len(b);
      if (n < 0 || n > s.sq)
        throw UserError(fmt::format("query_start_loc[{}] - query_start_loc[{}] = {}: a sequence's query length must be "
                                    "from 0 to sq = {}", b + 1, b, n, s.sq));
    }
    const int64_t total = in.query_start_loc.get_int(size_t(s.batch));
    expect_count(in.q, total * s.hq * s.head_dim, fmt::format("[total_q={}, Hq={}, D={}]", total, s.hq, s.head_dim));
  } else {
    expect_count(in.q, s.batch * s.hq * s.sq * s.head_dim, fmt::format("[B={}, Hq={}, Sq={}, D={}]", s.batch, s.hq, s.sq, s.head_dim));
  }
  int64_t cache = s.num_blocks * s.block_size * s.hkv * s.head_dim;
  std::string cache_dims = fmt::format("[num_blocks={}, block_size={}, Hkv={}, D={}]", s.num_blocks, s.block_size, s.hkv, s.head_dim);
  expect_count(in.k_cache, cache, cache_dims);
  expect_count(in.v_cache, cache, cache_dims);
  expect_count(in.block_table, s.batch * s.max_blocks, fmt::format("[B={}, max_blocks={}]", s.batch, s.max_blocks));
  expect_count(in.context_lens, s.batch, fmt::format("[B={}]", s.batch));
  if (s.alibi) {
    if (in.alibi_slopes.dtype != ir::DType::f32)
      throw UserError(fmt::format("alibi_slopes: dtype must be f32, got {}", ir::dtype_name(in.alibi_slopes.dtype)));
    expect_count(in.alibi_slopes, s.hq, fmt::format("[Hq={}]", s.hq));
  }
  if (double scale = s.scale(); !normal_f32(scale))
    throw UserError(fmt::format("paged_attention: softmax scale {} is not finite and nonzero in {}", scale, f32_range));
  if (s.softcap && !(*s.softcap > 0 && normal_f32(*s.softcap)))
    throw UserError(fmt::format("paged_attention: softcap {} is not a positive number in {}", *s.softcap, f32_range));
  if (s.window < 0)
    throw UserError(fmt::format("paged_attention: window {} must be positive (0: no window)", s.window));
  for (int64_t b = 0; b < s.batch; ++b) {
    int64_t len = in.context_lens.get_int(size_t(b));
    if (len < 0 || len > s.capacity())
      throw UserError(fmt::format("context_lens[{}] = {} exceeds max_blocks * block_size = {} * {} = {}", b,
                                  static_cast<uint32_t>(len), s.max_blocks, s.block_size, s.capacity()));
    if (s.causal && len < in.query_len(b))
      throw UserError(fmt::format("paged_attention: causal=1 places the Sq = {} query rows at the last positions "
                                  "of the context, but context_lens[{}] = {} is shorter", in.query_len(b), b, len));
    int64_t used = decompose ? s.max_blocks : cdiv(len, s.block_size);
    for (int64_t k = 0; k < used; ++k) {
      int64_t page = in.block_table.get_int(size_t(b * s.max_blocks + k));
      if (page < 0 || page >= s.num_blocks)
        throw UserError(fmt::format("block_table[{}, {}] = {} is not below num_blocks = {}{}", b, k,
                                    static_cast<uint32_t>(page), s.num_blocks,
                                    decompose ? " (the decompose path reads every entry)" : ""));
    }
  }
}

launch::Buffer paged_attention_reference(const PagedAttentionInputs& in, PagedAttentionMagnitudes* magnitudes) {
  const PagedAttentionShape& s = in.shape;
  const int64_t D = s.head_dim, group = s.group(), window = s.effective_window();
  // An fp8 cache is dequantized: its values times its scale.
  const double k_scale = s.kv_fp8 ? s.k_scale : 1.0, v_scale = s.kv_fp8 ? s.v_scale : 1.0;
  launch::Buffer out("out", ir::DType::f32, in.q.count());
  const int64_t tasks = s.batch * s.hkv;
  std::vector<PagedAttentionMagnitudes> seen_by(size_t(magnitudes ? tasks : 0)); // per task: no races
  // One task per (sequence, KV head): the query rows of its heads share each K and V row,
  // decoded once. Every sum runs in the same order as one row at a time would (over d for a
  // dot, over the keys for the softmax and each output element), so the results do not
  // depend on the threads. Large problems (the GPU check's) take seconds, not minutes.
  auto task = [&](int64_t b, int64_t kvh) {
    const int64_t len = in.context_lens.get_int(size_t(b)), sq = in.query_len(b), rows = group * sq;
    PagedAttentionMagnitudes* mags = magnitudes ? &seen_by[size_t(b * s.hkv + kvh)] : nullptr;
    std::vector<char> key_seen(size_t(mags ? len : 0), 0);
    std::vector<int64_t> row_keys(size_t(mags ? rows : 0), 0);
    auto key_row = [&](int64_t j) {
      int64_t page = in.block_table.get_int(size_t(b * s.max_blocks + j / s.block_size));
      return size_t(((page * s.block_size + j % s.block_size) * s.hkv + kvh) * D);
    };
    auto qrow = [&](int64_t r) { return in.q_offset(b, kvh * group + r / sq, r % sq); }; // r = head in group * sq + row
    std::vector<double> q(static_cast<size_t>(rows * D)), kv(static_cast<size_t>(D)), acc(static_cast<size_t>(rows * D), 0.0);
    std::vector<double> scores(size_t(rows * len), -INFINITY), m(size_t(rows), -INFINITY), sum(size_t(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < D; ++d) q[size_t(r * D + d)] = in.q.get(qrow(r) + d);
    for (int64_t j = 0; j < len; ++j) {
      size_t krow = key_row(j);
      bool decoded = false;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t h = kvh * group + r / sq, i = r % sq, pos = len - sq + i; // this row's position
        if ((s.causal && j > pos) || (window > 0 && j < pos - window + 1)) continue; // not seen
        if (!decoded) {
          for (int64_t d = 0; d < D; ++d) kv[size_t(d)] = in.k_cache.get(krow + d);
          decoded = true;
        }
        double dotp = 0, dot_abs = 0;
        for (int64_t d = 0; d < D; ++d) dotp += q[size_t(r * D + d)] * kv[size_t(d)];
        if (mags)
          for (int64_t d = 0; d < D; ++d) dot_abs += std::abs(q[size_t(r * D + d)] * kv[size_t(d)]);
        double sc = dotp * s.scale() * k_scale, terms = dot_abs * std::abs(s.scale() * k_scale);
        if (s.softcap) {
          sc = *s.softcap * std::tanh(sc / *s.softcap);
          terms += std::abs(sc);
        }
        if (s.alibi) {
          const double bias = in.alibi_slopes.get(size_t(h)) * double(j - i);
          sc += bias;
          terms += std::abs(bias);
        }
        scores[size_t(r * len + j)] = sc;
        m[size_t(r)] = std::max(m[size_t(r)], sc);
        if (mags) {
          mags->score = std::max(mags->score, terms + std::abs(sc));
          key_seen[size_t(j)] = 1;
          ++row_keys[size_t(r)];
        }
      }
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < len; ++j) {
        double& sc = scores[size_t(r * len + j)];
        sum[size_t(r)] += (sc = sc == -INFINITY ? 0.0 : std::exp(sc - m[size_t(r)]));
      }
    for (int64_t j = 0; j < len; ++j) {
      size_t vrow = key_row(j);
      for (int64_t d = 0; d < D; ++d) kv[size_t(d)] = in.v_cache.get(vrow + d);
      if (mags && key_seen[size_t(j)])
        for (int64_t d = 0; d < D; ++d) mags->value = std::max(mags->value, std::abs(kv[size_t(d)]) * v_scale);
      for (int64_t r = 0; r < rows; ++r) {
        double p = scores[size_t(r * len + j)];
        for (int64_t d = 0; d < D; ++d) acc[size_t(r * D + d)] += p * kv[size_t(d)];
      }
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < D; ++d)
        out.set(qrow(r) + d, len > 0 ? acc[size_t(r * D + d)] * v_scale / sum[size_t(r)] : 0.0);
    if (mags)
      for (int64_t n : row_keys) mags->keys = std::max(mags->keys, n);
  };
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t t; (t = next++) < tasks;) task(t / s.hkv, t % s.hkv);
  };
  // Threads only where there is enough work to pay for them (each sees a whole K/V sequence).
  int64_t work = 0;
  for (int64_t b = 0; b < s.batch; ++b) work += in.context_lens.get_int(size_t(b));
  unsigned n = work * s.hkv * D * s.group() * s.sq < (int64_t(1) << 22)
                   ? 1u
                   : unsigned(std::min<int64_t>(tasks, std::max(1u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < n; ++i) pool.emplace_back(worker);
  worker();
  for (std::thread& th : pool) th.join();
  if (magnitudes) {
    *magnitudes = {};
    for (const PagedAttentionMagnitudes& t : seen_by) {
      magnitudes->score = std::max(magnitudes->score, t.score);
      magnitudes->value = std::max(magnitudes->value, t.value);
      magnitudes->keys = std::max(magnitudes->keys, t.keys);
    }
  }
  return out;
}

// Every path computes in f32 from the inputs the reference reads (f16, bf16 and fp8 widen
// exactly), so a result's error comes from f32 roundings and, for f16/bf16 q, from rounding p
// to q's dtype before the P.V product (the fused kernel) and the output to it:
// - a score is off by about half an f32 epsilon (eps32) times the magnitude of the terms that
//   formed it and of itself (`score`, S); exp turns that absolute error into the same relative
//   error of the key's weight (the row max subtracted is off as much), and the output, an
//   average of v under those weights, moves by at most about twice that times max |v| (V):
//   eps32 S V;
// - the sums over n keys (the softmax's denominator, P.V) add rounding that grows like
//   sqrt(n) eps32 V for data without a pattern (linearly only in contrived worst cases);
// - rounding p and the output to q's dtype costs half its epsilon (eps_io) each, relatively.
// Hence atol = V (4 eps_io + eps32 (1 + S + 2 sqrt(n))) and rtol = 4 eps_io, with eps the
// dtype's machine epsilon (2^-23 f32, 2^-10 f16, 2^-7 bf16). That is 10x and more above the
// largest error either path showed over random sweeps (ALiBi to scores of 5000, softcaps,
// fp8, contexts to 8000), and as tight as the data allow: a key dropped or counted twice, a
// wrong scale or mask still fails. For f16 and bf16 it is the fixed 4e-3 and 3e-2 it replaced
// (V = 1); for f32 it starts near 3e-6 and grows with the scores (ALiBi over long contexts,
// large softcaps), where a fixed 1e-5 failed correct results.
PagedAttentionTolerance paged_attention_tolerance(const PagedAttentionShape& s, const PagedAttentionMagnitudes& m) {
  auto epsilon = [](ir::DType t) { return std::ldexp(1.0, t == ir::DType::f16 ? -10 : t == ir::DType::bf16 ? -7 : -23); };
  const double eps32 = epsilon(ir::DType::f32), eps_io = epsilon(s.dtype);
  PagedAttentionTolerance t;
  t.atol = m.value * (4 * eps_io + eps32 * (1 + m.score + 2 * std::sqrt(double(m.keys))));
  t.rtol = 4 * eps_io;
  return t;
}

int64_t paged_attention_ideal_bytes(const PagedAttentionInputs& in) {
  const PagedAttentionShape& s = in.shape;
  int64_t elem = ir::dtype_bytes(s.dtype), kv_elem = ir::dtype_bytes(s.cache_dtype());
  int64_t bytes = 2 * in.q_rows() * s.head_dim * elem; // q and out
  if (s.varlen) bytes += (s.batch + 1) * 4;             // query_start_loc
  for (int64_t b = 0; b < s.batch; ++b) {
    int64_t len = in.context_lens.get_int(size_t(b)), first = s.first_key(len, in.query_len(b));
    if (in.query_len(b) == 0) continue; // no row: no key to read
    bytes += 2 * (len - first) * s.hkv * s.head_dim * kv_elem; // K and V of the keys some row sees
    if (len > first) bytes += (cdiv(len, s.block_size) - first / s.block_size) * 4; // their block-table entries
  }
  bytes += s.batch * 4;                            // context lengths
  if (s.alibi) bytes += s.hq * 4;
  return bytes;
}

// ---------------------------------------------------------------------------
// The fused kernel.

namespace {

using namespace dsl;

int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// Everything the fused kernel is specialized on.
struct FusedSpec {
  int64_t hq, hkv, sq, head_dim, block_size;
  DType dtype, cache; // q/out's, the caches' (dtype, or fp8)
  bool alibi, softcap;
  int64_t window;
  bool causal, varlen;
  PagedAttentionConfig cfg; // head_group resolved (never 0)
  int64_t block_m;          // query rows per program, resolved (paged_attention_block_m)

  // Names the specialization in the kernel cache: everything build_fused reads (the warps too:
  // they choose the products' orientation, the deferred sum and the register asks).
  std::string key() const {
    return fmt::format("paged_attention/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}", hq, hkv, sq, head_dim,
                       block_size, ir::dtype_name(dtype), ir::dtype_name(cache), alibi, softcap, cfg.block_n,
                       cfg.head_group, cfg.num_splits, cfg.num_stages, cfg.num_warps, window, causal, block_m,
                       varlen);
  }
};

// Whether a tile of `bm` query rows computes its products transposed (paged_attention_transposed):
// on the tensor cores, at most 8 rows, and both products lay their warps along their rows (the
// keys of a step, and D): 16 rows per warp.
bool transposed_tile(DType dtype, int64_t bm, int64_t block_n, int64_t head_dim, int64_t num_warps) {
  return dtype != DType::f32 && bm <= 8 && block_n % (16 * num_warps) == 0 &&
         next_pow2(head_dim) % (16 * num_warps) == 0;
}

// One program per (query tile, sequence b; KV head and head-group chunk; KV split). The query
// rows of a KV head's head group are packed position-major: packed row R = i * G + g for
// query position i and head g of the group (FlashAttention-3's PackGQA), so each K/V tile is
// loaded once for all heads of a position, and a tile of block_m packed rows covers a
// contiguous range of positions. It walks the block table block_n tokens at a time, from the
// first key its rows see to the last, with an online softmax in f32. With causal=1 a tile
// stops at its last row's position (work grows with the triangle) and masks only the steps
// past its first row's position; with a window it starts at its first row's first key.
ir::Kernel build_fused(const FusedSpec& sp) {
  const int64_t G = sp.cfg.head_group, group = sp.hq / sp.hkv, D = sp.head_dim, N = sp.cfg.block_n;
  // Tiles are powers of two: a head_dim between them (80, 96, 112, ...) masks the lanes past
  // it, which never touch memory; its rows in memory stay head_dim long.
  const int64_t DP = next_pow2(D);
  const bool pad_d = DP != D;
  const int64_t R = G * sp.sq, BM = sp.block_m, T = cdiv(R, BM), S = sp.cfg.num_splits;
  // Whether a tile's rows sit at one query position (decode, or tiles within one position's
  // heads): then no key a tile walks is hidden from any of its rows by causal or window.
  const bool one_position = sp.sq == 1 || G % BM == 0;
  const ElemType io{sp.dtype, false};
  // A tile of at most 8 rows on the tensor cores (decode) computes the transposed products,
  // S^T = K q^T [N, 8] and O^T = V^T P^T [D, 8] (transposed_tile): the query rows are the
  // MMA's 8 columns instead of 16 rows padded from 4, so each step runs half the MMAs and
  // holds half the fragment registers (q's as B operand, P's, and the accumulators). A tile
  // of fewer than 8 rows repeats them up to 8: row r is row r mod BM, whose q the repeat reads
  // as zeros and whose result it does not store.
  const bool swap = transposed_tile(sp.dtype, BM, N, D, sp.cfg.num_warps);
  const int64_t BMP = swap ? 8 : BM, warps = sp.cfg.num_warps;
  // A vector over the tile's rows against the keys or D (a column, or with `swap` a row), and
  // one over the keys or D against the rows.
  auto per_row = [&](const Tile& x) { return swap ? x.row() : x.col(); };
  auto per_key = [&](const Tile& x) { return swap ? x.col() : x.row(); };
  const int key_axis = swap ? 0 : 1;

  KernelBuilder k("paged_attention");
  auto q = k.arg(ptr_to(sp.dtype), "q");
  const bool fp8 = sp.cache != sp.dtype;
  auto k_cache = k.arg(ptr_to(sp.cache), "k_cache");
  auto v_cache = k.arg(ptr_to(sp.cache), "v_cache");
  auto block_table = k.arg<Ptr<i32>>("block_table");
  auto context_lens = k.arg<Ptr<i32>>("context_lens");
  // Mixed batches: sequence b's rows are query_start_loc[b] .. query_start_loc[b + 1] - 1 of
  // the packed q and out; sp.sq is the longest.
  Tile query_start_loc = sp.varlen ? k.arg<Ptr<i32>>("query_start_loc") : Tile();
  Tile alibi_slopes = sp.alibi ? k.arg<Ptr<f32>>("alibi_slopes") : Tile();
  // Without splits the kernel writes out; with them, f32 partials (o, m, l) per split.
  auto out = S == 1 ? k.arg(ptr_to(sp.dtype), "out") : k.arg<Ptr<f32>>("partial_o");
  Tile partial_m = S > 1 ? k.arg<Ptr<f32>>("partial_m") : Tile();
  Tile partial_l = S > 1 ? k.arg<Ptr<f32>>("partial_l") : Tile();
  Tile scale = k.arg<f32>("softmax_scale");
  Tile cap = sp.softcap ? k.arg<f32>("softcap") : Tile();
  Tile k_scale = fp8 ? k.arg<f32>("k_scale") : Tile(), v_scale = fp8 ? k.arg<f32>("v_scale") : Tile();
  auto max_blocks = k.arg<i32>("max_blocks");

  // An fp8 cache is widened to q's dtype (exactly: f16 and bf16 hold every fp8 value), so the
  // dots run as they do for that dtype; its scales apply to the scores and the output.
  if (fp8) scale = scale * k_scale;
  auto widen = [&](Tile t) { return fp8 ? t.to(io) : t; };
  // Grid (batch x query tiles, KV heads x head-group chunks, splits).
  auto b = T == 1 ? program_id(0) : program_id(0) / T, split = program_id(2);
  Tile row0 = T == 1 ? Tile() : program_id(0) % T * BM; // the tile's first packed row
  auto kvh = program_id(1) / (group / G);
  Tile lane_rows = BMP > BM ? arange(0, BMP) % BM : arange(0, BM);
  auto packed = T == 1 ? lane_rows : row0 + lane_rows;
  Tile g = sp.sq == 1 ? packed : G == 1 ? Tile() : packed % G;
  Tile i = sp.sq == 1 ? Tile() : G == 1 ? packed : packed / G; // query position within Sq
  Tile heads = kvh * group + (program_id(1) % (group / G)) * G;
  if (g) heads = heads + g;
  Tile q_start = sp.varlen ? load(query_start_loc + b) : Tile();
  Tile q_len = sp.varlen ? load(query_start_loc + b + 1) - q_start : Tile(); // this sequence's Sq_b
  auto row_ok = sp.varlen ? packed < q_len * G : packed < R;
  // The rows a tile reads and stores: each once. A swapped tile's repeats of its rows read
  // zeros for q (their columns of S^T and O^T are never stored) and store nothing.
  Tile own_ok = BMP > BM ? row_ok & (arange(0, BMP) < BM) : row_ok;
  // Row index into q and out: [B, Hq, Sq], or packed [total_q, Hq].
  Tile rows = sp.varlen ? (i ? q_start + i : q_start) * sp.hq + heads : (b * sp.hq + heads) * sp.sq;
  if (i && !sp.varlen) rows = rows + i;
  auto d = arange(0, DP);
  Tile d_ok = pad_d ? d < D : Tile();
  // A row mask [BM] as the [BM, DP] mask of its elements (and, padded, of the lanes below D).
  auto elems = [&](const Tile& row_mask) { return pad_d ? row_mask.col() & d_ok.row() : row_mask.col(); };
  auto qt = load(q + rows.col() * D + d.row(), elems(own_ok), 0); // [BMP, DP]
  // A swapped tile's B operand, q^T, made before the walk: the dots stage an operand defined
  // outside their loop once, and keep it in shared memory across the trips.
  Tile q_b = swap ? trans(qt) : Tile();
  Tile slope = sp.alibi ? load(alibi_slopes + heads, own_ok, 0) : Tile();

  auto ctx = load(context_lens + b);
  // The tile's query positions: p = ctx - Sq + i for i from i_lo to i_hi.
  const bool masks = sp.causal || sp.window > 0;
  Tile i_lo = T == 1 ? Tile() : row0 / G;
  Tile first_pos = sp.varlen ? ctx - q_len : ctx - sp.sq; // the position of row 0
  Tile p_lo = i_lo ? first_pos + i_lo : first_pos;
  Tile p_hi = T == 1 ? ctx - 1 : first_pos + min((row0 + (BM - 1)) / G, sp.varlen ? q_len - 1 : scalar(sp.sq - 1, i32));
  // This program's keys [lo, hi), split into S chunks of whole N-token steps. A sliding window
  // starts the walk at the first key the tile's first row sees, so the bytes read grow with the
  // window, not the context. The window W is below 2^31 - 1 (effective_window) and the first
  // key a row at position p sees is max(p + 1, W) - W: no i32 value on the way wraps, however
  // large W or small p is. Causal: the walk ends at the tile's last position.
  const int64_t W = sp.window;
  Tile lo = W > 0 ? max(p_lo + 1, W) - W : Tile();
  Tile hi = sp.causal && T > 1 ? p_hi + 1 : ctx;
  // A tile past a shorter sequence's rows (varlen) walks nothing.
  if (sp.varlen) hi = where(i_lo ? i_lo < q_len : q_len > 0, hi, W > 0 ? lo : scalar(0, i32));
  auto chunk = ((W > 0 ? hi - lo : hi) + (S - 1)) / S;
  chunk = (chunk + (N - 1)) / N * N;
  auto start = W > 0 ? lo + split * chunk : split * chunk;
  auto end = min(hi, start + chunk);
  // Each row's position and first key in the window, where masks apply.
  Tile pos = masks && !one_position ? first_pos + i : Tile();
  Tile first = W > 0 && !one_position ? max(pos + 1, W) - W : Tile();

  Var m = full({BMP}, -INFINITY), l = zeros({BMP});
  Var acc = swap ? zeros({DP, BMP}) : zeros({BM, DP});
  // A small tile (decode) keeps the softmax's denominator per key column, [BM, N], and sums
  // it across the columns once after the walk (FlashAttention-2's deferred row sum): the
  // columns are spread over the warps, so a sum per step would cross warps through shared
  // memory every trip. A large tile's rows sit within warps and sum with shuffles.
  const bool defer_sum = BM * N <= 4 * 32 * warps; // the tile's own rows (a transposed one holds 8)
  Var l_keys = defer_sum ? (swap ? zeros({N, BMP}) : zeros({BM, N})) : Tile();
  // Such a tile is memory-bound: up to 128 registers a thread are plenty, so it asks for the
  // blocks that budget allows (16 / num_warps), and the GPU compiler holds it to as many as
  // its shared memory lets share an SM (4 of 4 warps at D 128 on an H100/H200, K double- and
  // V single-buffered).
  if (const int64_t blocks = 16 / warps; defer_sum && sp.dtype != DType::f32 && blocks > 1)
    k.min_blocks_per_sm(int(blocks));
  // A transposed tile of 4 or more warps needs fewer still while its K and V steps hold at
  // most 64 elements a thread (the serving configuration's 64 keys x 128: no spills down to 88
  // registers): it asks for 96, five blocks' worth of 4 warps where shared memory lets five
  // share an SM (head_dim 64), and otherwise registers the SM keeps for other kernels. (With 2
  // warps each holds twice the product rows, and 96 spills.) tests/codegen/test_mma.cpp pins
  // every such configuration spill-free.
  if (swap && defer_sum && warps >= 4 && N * DP <= 64 * 32 * warps) k.max_registers(96);

  // One step of the walk over keys s0 .. s0 + N - 1: `live` masks the keys past `end` (null:
  // the whole step is below it), `causal` masks each row's keys past its position.
  auto step = [&](Scalar s0, bool tail, bool causal) {
    auto j = s0 + arange(0, N);
    Tile live = tail ? j < end : Tile();
    // Key positions are never negative: their page and slot are computed unsigned, so a
    // power-of-two block_size divides by a shift and a mask (a signed remainder costs five).
    auto ju = j.to(u32);
    auto page_of = (ju / sp.block_size).to(i32), in_page = (ju % sp.block_size).to(i32);
    auto page = tail ? load(block_table + b * max_blocks + page_of, live)
                     : load(block_table + b * max_blocks + page_of);
    auto slot = (page * sp.block_size + in_page) * sp.hkv + kvh;
    auto kv_rows = [&](const Tile& base) { // [N, DP]
      Tile addr = base + slot.col() * D + d.row();
      if (live) return widen(load(addr, elems(live), 0));
      return widen(pad_d ? load(addr, d_ok.row(), 0) : load(addr));
    };
    auto kt = kv_rows(k_cache);
    auto s = (swap ? dot(kt, q_b) : dot(qt, trans(kt))) * scale; // [BM, N], or [N, BM]
    if (sp.softcap) s = cap * tanh(s / cap);
    if (sp.alibi) s = s + per_row(slope) * (i ? per_key(j) - per_row(i) : per_key(j)).to(f32);
    Tile seen = live ? per_key(live) : Tile();
    auto both = [&](const Tile& a, const Tile& c) { return a ? a & c : c; };
    if (causal) seen = both(seen, per_key(j) <= per_row(pos));
    if (first) seen = both(seen, per_key(j) >= per_row(first));
    if (seen) s = where(seen, s, -INFINITY);
    auto m_new = max(m, reduce_max(s, key_axis));
    // A row may see none of this step's keys (causal, window): its max stays -inf, and the
    // exponentials use 0 for it (p = 0, alpha = 0) instead of -inf - -inf. (A tile at one
    // position sees every key of [lo, hi), at least one per step.)
    Tile m_use = causal || first ? where(m_new > -INFINITY, m_new, 0) : m_new;
    auto p = exp(s - per_row(m_use));
    auto alpha = exp(m - m_use);
    if (defer_sum) l_keys = l_keys * per_row(alpha) + p;
    else l = l * alpha + reduce_sum(p, key_axis);
    auto vt = kv_rows(v_cache);
    // f16/bf16 caches: p rounded to the cache's dtype, so both dots run on the tensor cores
    // (as Triton's and FlashInfer's decode kernels do); l sums the unrounded p.
    if (swap) acc = acc * alpha.row() + dot(trans(vt), p.to(io));
    else acc = acc * alpha.col() + (sp.dtype == DType::f32 ? dot(p, vt) : dot(p.to(io), vt));
    m = m_new;
  };
  // The K and V tiles of the next num_stages - 1 steps are copied while this one computes.
  const RangeOptions pipelined{sp.cfg.num_stages};
  if (sp.causal && !one_position) {
    // The steps every row of the tile sees whole (keys up to its first position p_lo) need no
    // mask; the rest, the diagonal, masks each row's keys past its position and past `end`.
    auto full_end = start + max(min(end, p_lo + 1) - start, 0) / N * N;
    for_range(start, full_end, N, pipelined, [&](Scalar s0) { step(s0, false, false); });
    for_range(full_end, end, N, pipelined, [&](Scalar s0) { step(s0, true, true); });
  } else {
    // Whole steps need no mask on keys past `end`; the last, partial one does.
    auto full_end = start + max(end - start, 0) / N * N;
    for_range(start, full_end, N, pipelined, [&](Scalar s0) { step(s0, false, false); });
    for_range(full_end, end, N, pipelined, [&](Scalar s0) { step(s0, true, false); });
  }
  if (defer_sum) l = reduce_sum(l_keys, key_axis);
  // A swapped tile's O^T goes back to rows, [BMP, DP], to be stored along D: as late as it
  // can, in q's dtype (half the shared memory the exchange takes in f32).
  auto rows_of = [&](Tile t) { return swap ? trans(t) : t; };

  if (S == 1) {
    // A sequence with no live tokens (l == 0) gets zeros, as the decomposition does. An fp8
    // cache's v_scale applies to the normalized sum, which is at most the cache's largest
    // value: l / v_scale would overflow f32 for a small scale.
    Tile o = where(per_row(l) > 0, acc / per_row(l), 0);
    if (fp8) o = o * v_scale;
    store(out + rows.col() * D + d.row(), rows_of(o.to(io)), elems(own_ok));
  } else {
    auto part = rows * S + split; // [B, Hq, Sq, S]
    store(out + part.col() * D + d.row(), rows_of(fp8 ? acc * v_scale : Tile(acc)), elems(own_ok));
    store(partial_m + part, m, own_ok);
    store(partial_l + part, l, own_ok);
  }
  return k.finish();
}

// Combines the splits of one query row: rescale each split's partial sums to
// the row's overall max and normalize.
ir::Kernel build_combine(int64_t splits, int64_t head_dim, DType dtype) {
  KernelBuilder k("paged_attention_combine");
  auto partial_o = k.arg<Ptr<f32>>("partial_o"), partial_m = k.arg<Ptr<f32>>("partial_m");
  auto partial_l = k.arg<Ptr<f32>>("partial_l");
  auto out = k.arg(ptr_to(dtype), "out");
  auto row = program_id(0);
  auto sidx = row * splits + arange(0, splits);
  // Tiles are powers of two: a head_dim between them masks the lanes past it.
  const int64_t DP = next_pow2(head_dim);
  auto d = arange(0, DP);
  Tile d_ok = DP != head_dim ? d < head_dim : Tile();
  auto m = load(partial_m + sidx);
  auto l = load(partial_l + sidx);
  Tile o = DP != head_dim ? load(partial_o + sidx.col() * head_dim + d.row(), d_ok.row(), 0)
                          : load(partial_o + sidx.col() * head_dim + d.row()); // [S, D]
  auto m_all = reduce_max(m, 0);
  auto w = where(m > -INFINITY, exp(m - m_all), 0);
  auto total = reduce_sum(l * w, 0);
  auto sum = reduce_sum(o * w.col(), 0);
  Tile res = where(total > 0, sum / total, 0).to(ElemType{dtype, false});
  if (DP != head_dim) store(out + row * head_dim + d, res, d_ok);
  else store(out + row * head_dim + d, res);
  return k.finish();
}

FusedSpec fused_spec(const PagedAttentionShape& s, PagedAttentionConfig cfg) {
  if (cfg.head_group == 0) cfg.head_group = s.group();
  if (!ir::is_pow2(cfg.block_n) || cfg.block_n < 1 || cfg.block_n > 256)
    throw UserError(fmt::format("paged_attention: block_n {} must be a power of two from 1 to 256", cfg.block_n));
  if (cfg.head_group < 1 || s.group() % cfg.head_group != 0)
    throw UserError(fmt::format("paged_attention: head_group {} does not divide Hq/Hkv = {}/{} = {}",
                                cfg.head_group, s.hq, s.hkv, s.group()));
  if (!ir::is_pow2(cfg.num_splits) || cfg.num_splits > 64)
    throw UserError(fmt::format("paged_attention: num_splits {} must be a power of two from 1 to 64", cfg.num_splits));
  if (std::string why = num_warps_error(cfg.num_warps); !why.empty()) throw UserError("paged_attention: " + why);
  if (cfg.num_stages < 1 || cfg.num_stages > ir::kMaxPipelineStages)
    throw UserError(fmt::format("paged_attention: num_stages {} must be from 1 to {}", cfg.num_stages,
                                ir::kMaxPipelineStages));
  return {s.hq, s.hkv, s.sq, s.head_dim, s.block_size, s.dtype, s.cache_dtype(), s.alibi, s.softcap.has_value(),
          s.effective_window(), s.causal, s.varlen, cfg, paged_attention_block_m(s, cfg)};
}

} // namespace

int64_t paged_attention_block_m(const PagedAttentionShape& s, const PagedAttentionConfig& cfg) {
  if (cfg.block_m != 0 && (!ir::is_pow2(cfg.block_m) || cfg.block_m > kMaxBlockM))
    throw UserError(fmt::format("paged_attention: block_m {} must be 0 (automatic) or a power of two from 1 to {}",
                                cfg.block_m, kMaxBlockM));
  const int64_t G = cfg.head_group ? cfg.head_group : s.group(), rows = next_pow2(G * s.sq);
  // The rows whose q tile and score tile fit the registers: rows x (head_dim + block_n) at most
  // kAutoTileElems per warp, rounded down to a power of two.
  const int64_t fit = kAutoTileElems * cfg.num_warps / (next_pow2(s.head_dim) + cfg.block_n);
  int64_t automatic = 1;
  while (automatic * 2 <= std::min(fit, kMaxBlockM)) automatic *= 2;
  return std::min(rows, cfg.block_m ? cfg.block_m : automatic);
}

bool paged_attention_transposed(const PagedAttentionShape& s, const PagedAttentionConfig& cfg) {
  const FusedSpec sp = fused_spec(s, cfg);
  return transposed_tile(sp.dtype, sp.block_m, sp.cfg.block_n, sp.head_dim, sp.cfg.num_warps);
}

int64_t paged_attention_query_tiles(const PagedAttentionShape& s, const PagedAttentionConfig& cfg) {
  const int64_t G = cfg.head_group ? cfg.head_group : s.group();
  return cdiv(G * s.sq, paged_attention_block_m(s, cfg));
}

ir::Kernel paged_attention_fused_kernel(const PagedAttentionShape& s, const PagedAttentionConfig& cfg) {
  return build_fused(fused_spec(s, cfg));
}

ir::Kernel paged_attention_combine_kernel(int64_t splits, int64_t head_dim, DType dtype) {
  return build_combine(splits, head_dim, dtype);
}

std::map<std::string, rt::SpecValue> paged_attention_module_spec(const PagedAttentionShape& s,
                                                                 const PagedAttentionConfig& cfg) {
  FusedSpec sp = fused_spec(s, cfg);
  return {{"hq", sp.hq},
          {"hkv", sp.hkv},
          {"sq", sp.sq},
          {"head_dim", sp.head_dim},
          {"block_size", sp.block_size},
          {"dtype", std::string(ir::dtype_name(sp.dtype))},
          {"kv_dtype", std::string(sp.cache == sp.dtype ? "same" : ir::dtype_name(sp.cache))},
          {"alibi", int64_t(sp.alibi)},
          {"softcap", int64_t(sp.softcap)},
          {"block_n", sp.cfg.block_n},
          {"head_group", cfg.head_group}, // as configured: 0 (all Hq/Hkv heads) stays 0
          {"block_m", cfg.block_m},       // as configured: 0 (automatic) stays 0
          {"num_warps", sp.cfg.num_warps},
          {"num_splits", sp.cfg.num_splits},
          {"num_stages", sp.cfg.num_stages},
          {"window", sp.window},
          {"causal", int64_t(sp.causal)},
          {"varlen", int64_t(sp.varlen)}};
}

launch::Buffer run_paged_attention_fused(const PagedAttentionInputs& in, const PagedAttentionConfig& config,
                                         launch::Launcher& launcher) {
  validate_paged_attention(in, false);
  const PagedAttentionShape& s = in.shape;
  FusedSpec sp = fused_spec(s, config);
  ir::Kernel kernel = prim::detail::cached_kernel(sp.key(), [&] { return build_fused(sp); });

  // The kernel only reads q, the caches, the tables and slopes; the buffers
  // are not modified, but Arg holds mutable pointers.
  auto& mut = const_cast<PagedAttentionInputs&>(in);
  launch::Buffer out("out", s.dtype, in.q.count());
  const int64_t S = sp.cfg.num_splits, rows = in.q_rows();
  launch::Buffer po("partial_o", ir::DType::f32, S > 1 ? size_t(rows * S * s.head_dim) : 0);
  launch::Buffer pm("partial_m", ir::DType::f32, S > 1 ? size_t(rows * S) : 0);
  launch::Buffer pl("partial_l", ir::DType::f32, S > 1 ? size_t(rows * S) : 0);

  std::vector<launch::Arg> args{launch::Arg::of(mut.q), launch::Arg::of(mut.k_cache),
                                launch::Arg::of(mut.v_cache), launch::Arg::of(mut.block_table),
                                launch::Arg::of(mut.context_lens)};
  if (s.varlen) args.push_back(launch::Arg::of(mut.query_start_loc));
  if (s.alibi) args.push_back(launch::Arg::of(mut.alibi_slopes));
  if (S == 1) {
    args.push_back(launch::Arg::of(out));
  } else {
    args.push_back(launch::Arg::of(po));
    args.push_back(launch::Arg::of(pm));
    args.push_back(launch::Arg::of(pl));
  }
  args.push_back(launch::Arg::of_float(s.scale()));
  if (s.softcap) args.push_back(launch::Arg::of_float(*s.softcap));
  if (s.kv_fp8) {
    args.push_back(launch::Arg::of_float(s.k_scale));
    args.push_back(launch::Arg::of_float(s.v_scale));
  }
  args.push_back(launch::Arg::of_int(s.max_blocks));
  launch::Grid grid{s.batch * paged_attention_query_tiles(s, config), s.hkv * (s.group() / sp.cfg.head_group), S};
  launcher.launch(kernel, int(sp.cfg.num_warps), grid, args);

  if (S > 1) {
    ir::Kernel combine =
        prim::detail::cached_kernel(fmt::format("paged_attention_combine/{}/{}/{}", S, s.head_dim, ir::dtype_name(s.dtype)),
                              [&] { return build_combine(S, s.head_dim, s.dtype); });
    launcher.launch(combine, int(sp.cfg.num_warps), {rows, 1, 1},
                    {launch::Arg::of(po), launch::Arg::of(pm), launch::Arg::of(pl), launch::Arg::of(out)});
  }
  return out;
}

} // namespace tilec::templates
