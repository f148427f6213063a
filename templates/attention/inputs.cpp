// Paged attention's inputs: the shape's derived sizes, generated inputs, and the one check of
// inputs every path runs first (validate_paged_attention).
#include "templates/attention/paged_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <thread>
#include <cmath>
#include <random>
#include <set>
#include <tuple>

#include "abi/limits.h"

namespace tilec::templates {
std::string head_dim_error(int64_t head_dim) {
  if (head_dim % 8 == 0 && head_dim >= 16 && head_dim <= 576) return "";
  return fmt::format("head_dim={}: must be a multiple of 8 from 16 to 576", head_dim);
}

int64_t head_dim_first_tile(int64_t head_dim) {
  int64_t p = 1;
  while (p * 2 <= head_dim) p *= 2;
  return p;
}

std::string head_dim_v_error(int64_t head_dim, int64_t head_dim_v, bool latent) {
  if (head_dim_v == 0) return latent_error(head_dim, head_dim_v, latent); // head_dim's
  if (head_dim_v % 8 != 0 || head_dim_v < 16 || head_dim_v > 512)
    return fmt::format("head_dim_v={}: must be a multiple of 8 from 16 to 512 (0: head_dim's, or the latent form's)", head_dim_v);
  return latent_error(head_dim, head_dim_v, latent);
}

std::string latent_error(int64_t head_dim, int64_t head_dim_v, bool latent) {
  const int64_t dv = head_dim_v ? head_dim_v : latent ? head_dim_first_tile(head_dim) : head_dim;
  if (latent && dv != head_dim_first_tile(head_dim))
    return fmt::format("head_dim_v={} with latent=1: V is the K cache's first {} columns, the largest power of two up "
                       "to head_dim={} (MLA: 512 of 576)",
                       dv, head_dim_first_tile(head_dim), head_dim);
  return "";
}

std::vector<PagedAttentionColumns> paged_attention_qk_columns(const PagedAttentionShape& s) {
  const int64_t D = s.head_dim, P1 = head_dim_first_tile(D);
  if (!s.latent && D <= 256) return {{0, P1 == D ? D : P1 * 2, D}};
  std::vector<PagedAttentionColumns> cols = {{0, P1, P1}};
  if (D > P1) cols.push_back({P1, head_dim_first_tile(2 * (D - P1) - 1), D - P1});
  return cols;
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
  in.v_cache = launch::Buffer("v_cache", s.cache_dtype(), size_t(s.num_blocks ? s.v_cache_elements() : 0));
  in.block_table = launch::Buffer("block_table", ir::DType::i32, size_t(s.batch * s.max_blocks));
  in.context_lens = launch::Buffer("context_lens", ir::DType::i32, size_t(s.batch));
  // A large cache (a serving engine's, most of it free pages) is filled only where sequences
  // use it, with their pages taken from its end: the memory and time this takes follow the
  // live context, and offsets reach the far end of the cache.
  // (Elements of a page of each cache: V's rows are head_dim_v long, and the latent form has none.)
  const int64_t page_elems = s.block_size * s.hkv * s.head_dim, v_page_elems = s.latent ? 0 : s.block_size * s.hkv * s.dv();
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
    if (s.v_scale == 0) s.v_scale = s.latent ? s.k_scale : 1.0 / largest; // (the latent cache's one scale)
  }
  // Element range [lo, hi) of a cache quantized (fp8), as every filled element is. (The latent
  // form's one cache holds K and V: k_scale quantizes it, and v_scale must equal k_scale.)
  auto quantize = [&](launch::Buffer& buf, double scale, size_t lo, size_t hi) {
    if (!s.kv_fp8) return;
    for (size_t i = lo; i < hi; ++i) buf.set(i, std::clamp(buf.get(i) / scale, -largest, largest));
  };
  if (!sparse) {
    quantize(in.k_cache, s.k_scale, 0, in.k_cache.count());
    quantize(in.v_cache, s.v_scale, 0, in.v_cache.count());
  }

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
      for (auto [buf, stream, elems, scale] : {std::tuple{&in.k_cache, 1, page_elems, s.k_scale},
                                               std::tuple{&in.v_cache, 2, v_page_elems, s.v_scale}}) {
        const size_t lo = size_t(page * elems), hi = lo + size_t(elems);
        std::mt19937_64 page_rng(seed * 0x9E3779B97F4A7C15ull + uint64_t(page) * 4 + uint64_t(stream));
        std::uniform_real_distribution<double> dist(-1, 1);
        for (size_t i = lo; i < hi; ++i) buf->set(i, dist(page_rng));
        quantize(*buf, scale, lo, hi);
      }
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
  if (s.sinks) {
    // Sinks from -1 to 3, about the scores' range and above it: a row's sink takes a share of
    // its softmax a wrong sink would visibly change. With more than two heads the last one has
    // none (-inf).
    in.sinks = launch::Buffer("sinks", ir::DType::f32, size_t(s.hq));
    std::mt19937_64 sink_rng(seed + 5);
    std::uniform_real_distribution<double> dist(-1, 3);
    for (int64_t h = 0; h < s.hq; ++h) in.sinks.set(size_t(h), s.hq > 2 && h == s.hq - 1 ? -INFINITY : dist(sink_rng));
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
  if (std::string why = head_dim_v_error(s.head_dim, s.head_dim_v, s.latent); !why.empty())
    throw UserError("paged_attention: " + why);
  if (s.latent && s.kv_fp8 && s.k_scale != s.v_scale)
    throw UserError(fmt::format("paged_attention: the latent cache is one tensor with one scale: v_scale {} differs "
                                "from k_scale {} (give --k-scale alone)", s.v_scale, s.k_scale));
  if (s.block_size > 256)
    throw UserError(fmt::format("paged_attention: block_size {} exceeds 256", s.block_size));
  if (!ir::is_float(s.dtype) || ir::is_fp8(s.dtype))
    throw UserError(fmt::format("paged_attention: q dtype must be f32, f16 or bf16, not {}", ir::dtype_name(s.dtype)));
  if (s.kv_fp8 && !ir::is_fp8(*s.kv_fp8))
    throw UserError(fmt::format("paged_attention: an fp8 cache is f8e4m3 or f8e5m2, not {}", ir::dtype_name(*s.kv_fp8)));
  if (in.q.dtype != s.dtype)
    throw UserError(fmt::format("q: dtype {} differs from the problem's {}", ir::dtype_name(in.q.dtype), ir::dtype_name(s.dtype)));
  for (const launch::Buffer* b : {&in.k_cache, &in.v_cache})
    if (b->dtype != s.cache_dtype() && !(b == &in.v_cache && s.latent))
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
  if (s.latent) {
    if (in.v_cache.count() != 0)
      throw UserError("v_cache: given with latent=1, where V is the K cache's first head_dim_v columns (leave it out)");
  } else {
    expect_count(in.v_cache, s.v_cache_elements(),
                 fmt::format("[num_blocks={}, block_size={}, Hkv={}, Dv={}]", s.num_blocks, s.block_size, s.hkv, s.dv()));
  }
  expect_count(in.block_table, s.batch * s.max_blocks, fmt::format("[B={}, max_blocks={}]", s.batch, s.max_blocks));
  expect_count(in.context_lens, s.batch, fmt::format("[B={}]", s.batch));
  if (s.alibi) {
    if (in.alibi_slopes.dtype != ir::DType::f32)
      throw UserError(fmt::format("alibi_slopes: dtype must be f32, got {}", ir::dtype_name(in.alibi_slopes.dtype)));
    expect_count(in.alibi_slopes, s.hq, fmt::format("[Hq={}]", s.hq));
  }
  if (s.sinks) {
    if (in.sinks.dtype != ir::DType::f32)
      throw UserError(fmt::format("sinks: dtype must be f32, got {}", ir::dtype_name(in.sinks.dtype)));
    expect_count(in.sinks, s.hq, fmt::format("[Hq={}]", s.hq));
    // A sink is a logit: finite, or -inf for none. NaN and +inf have no softmax.
    for (int64_t h = 0; h < s.hq; ++h)
      if (double v = in.sinks.get(size_t(h)); std::isnan(v) || v == INFINITY)
        throw UserError(fmt::format("sinks[{}] = {}: a sink is a finite logit, or -inf for none", h, v));
  }
  if (double scale = s.scale(); !normal_f32(scale))
    throw UserError(fmt::format("paged_attention: softmax scale {} is not finite and nonzero in {}", scale, f32_range));
  if (s.softcap && !(*s.softcap > 0 && normal_f32(*s.softcap)))
    throw UserError(fmt::format("paged_attention: softcap {} is not a positive number in {}", *s.softcap, f32_range));
  if (s.window < 0)
    throw UserError(fmt::format("paged_attention: window {} must be positive (0: no window)", s.window));
  if (s.chunk < 0)
    throw UserError(fmt::format("paged_attention: chunk {} must be positive (0: no chunks)", s.chunk));
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

} // namespace tilec::templates
