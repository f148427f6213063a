// Paged attention's C++ reference (in double, from the definitions), the tolerance a result is
// held to, and the ideal number of bytes a run moves.
#include "templates/attention/paged_attention.h"

#include <thread>
#include <atomic>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tilec::templates {

launch::Buffer paged_attention_reference(const PagedAttentionInputs& in, PagedAttentionMagnitudes* magnitudes) {
  const PagedAttentionShape& s = in.shape;
  const int64_t D = s.head_dim, DV = s.dv(), group = s.group(), window = s.effective_window(), chunk = s.chunk;
  // V's rows: v_cache's [.., DV], or in the latent form the first DV columns of k_cache's rows.
  const launch::Buffer& v_cache = s.latent ? in.k_cache : in.v_cache;
  const int64_t v_row = s.latent ? D : DV;
  // Chunked local attention by its definition: key j is in the query's chunk iff
  // floor(j / chunk) == floor(pos / chunk) (the `chunk` given, not the effective one).
  auto floor_div = [](int64_t a, int64_t c) { return a >= 0 ? a / c : -((-a + c - 1) / c); };
  // An fp8 cache is dequantized: its values times its scale.
  const double k_scale = s.kv_fp8 ? s.k_scale : 1.0, v_scale = s.kv_fp8 ? s.v_scale : 1.0;
  launch::Buffer out("out", ir::DType::f32, size_t(in.q_rows() * DV));
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
    auto key_row = [&](int64_t j, int64_t row = 0) {
      int64_t page = in.block_table.get_int(size_t(b * s.max_blocks + j / s.block_size));
      return size_t(((page * s.block_size + j % s.block_size) * s.hkv + kvh) * (row ? row : D));
    };
    auto qrow = [&](int64_t r) { return in.q_offset(b, kvh * group + r / sq, r % sq); }; // r = head in group * sq + row
    // q and out rows: out's are DV long (q_offset counts in D; out_row rescales it).
    auto out_row = [&](int64_t r) { return qrow(r) / size_t(D) * size_t(DV); };
    std::vector<double> q(static_cast<size_t>(rows * D)), kv(static_cast<size_t>(std::max(D, DV))) /* a K row, then a V row */, acc(static_cast<size_t>(rows * DV), 0.0);
    std::vector<double> scores(size_t(rows * len), -INFINITY), m(size_t(rows), -INFINITY), sum(size_t(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < D; ++d) q[size_t(r * D + d)] = in.q.get(qrow(r) + d);
    for (int64_t j = 0; j < len; ++j) {
      size_t krow = key_row(j);
      bool decoded = false;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t h = kvh * group + r / sq, i = r % sq, pos = len - sq + i; // this row's position
        if ((s.causal && j > pos) || (window > 0 && j < pos - window + 1)) continue; // not seen
        if (chunk > 0 && floor_div(j, chunk) != floor_div(pos, chunk)) continue;
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
    // A sink joins each row's softmax as one more logit with no value: in the max and the sum.
    auto sink_of = [&](int64_t r) { return s.sinks ? in.sinks.get(size_t(kvh * group + r / sq)) : -INFINITY; };
    for (int64_t r = 0; r < rows; ++r) {
      const double sink = sink_of(r);
      m[size_t(r)] = std::max(m[size_t(r)], sink);
      if (mags && sink != -INFINITY) mags->score = std::max(mags->score, std::abs(sink));
      for (int64_t j = 0; j < len; ++j) {
        double& sc = scores[size_t(r * len + j)];
        sum[size_t(r)] += (sc = sc == -INFINITY ? 0.0 : std::exp(sc - m[size_t(r)]));
      }
      if (sink != -INFINITY) sum[size_t(r)] += std::exp(sink - m[size_t(r)]);
    }
    for (int64_t j = 0; j < len; ++j) {
      size_t vrow = key_row(j, v_row);
      for (int64_t d = 0; d < DV; ++d) kv[size_t(d)] = v_cache.get(vrow + d);
      if (mags && key_seen[size_t(j)])
        for (int64_t d = 0; d < DV; ++d) mags->value = std::max(mags->value, std::abs(kv[size_t(d)]) * v_scale);
      for (int64_t r = 0; r < rows; ++r) {
        double p = scores[size_t(r * len + j)];
        for (int64_t d = 0; d < DV; ++d) acc[size_t(r * DV + d)] += p * kv[size_t(d)];
      }
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < DV; ++d)
        out.set(out_row(r) + d, sum[size_t(r)] > 0 ? acc[size_t(r * DV + d)] * v_scale / sum[size_t(r)] : 0.0);
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
  int64_t bytes = in.q_rows() * (s.head_dim + s.dv()) * elem; // q and out
  if (s.varlen) bytes += (s.batch + 1) * 4;             // query_start_loc
  for (int64_t b = 0; b < s.batch; ++b) {
    int64_t len = in.context_lens.get_int(size_t(b)), first = s.first_key(len, in.query_len(b));
    if (in.query_len(b) == 0) continue; // no row: no key to read
    // K and V of the keys some row sees (the latent form's one cache holds both, read once)
    bytes += (len - first) * s.hkv * (s.head_dim + (s.latent ? 0 : s.dv())) * kv_elem;
    if (len > first) bytes += (cdiv(len, s.block_size) - first / s.block_size) * 4; // their block-table entries
  }
  bytes += s.batch * 4;                            // context lengths
  if (s.alibi) bytes += s.hq * 4;
  if (s.sinks) bytes += s.hq * 4;
  return bytes;
}

} // namespace tilec::templates
