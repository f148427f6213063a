// Paged attention's traffic model: the bytes the fused kernel moves in warp-wide requests, from a
// replay of its programs on the host (the emulator's counts are held to it).
#include <array>
#include <string_view>
#include <fmt/format.h>

#include <cmath>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <vector>
#include <filesystem>

#include <unistd.h>

#include "abi/limits.h"
#include "runtime/npy.h"
#include "templates/attention/paged_attention.h"

namespace tilec::templates {

// The emulator counts each warp-wide request's distinct bytes (runtime/emulator/emulator.h), so this
// replays the fused kernel's programs (templates/attention/fused.cpp, build_fused) on the host:
// which tokens each one walks, in which steps, and how many warps hold each tile it loads.
PagedAttentionTraffic paged_attention_traffic(const PagedAttentionInputs& in, const PagedAttentionConfig& config) {
  const PagedAttentionShape& s = in.shape;
  PagedAttentionConfig cfg = config;
  if (cfg.head_group == 0) cfg.head_group = s.group();
  auto pow2 = [](int64_t v) {
    int64_t p = 1;
    while (p < v) p *= 2;
    return p;
  };
  const int64_t w = cfg.num_warps, N = cfg.block_n, G = cfg.head_group, S = paged_attention_splits(s, cfg);
  const int64_t DV = s.dv(), DP = pow2(DV), BM = paged_attention_block_m(s, cfg), tiles = cdiv(G * s.sq, BM);
  // q's and K's column tiles; V's is one more unless it is K's first (the latent form).
  const std::vector<PagedAttentionColumns> cols = paged_attention_qk_columns(s);
  const int64_t chunks = s.group() / G, W = s.effective_window();
  const int64_t e_io = ir::dtype_bytes(s.dtype), e_kv = ir::dtype_bytes(s.cache_dtype());
  // A loaded tile of fewer elements than the block has threads (32 per warp) is held whole by
  // several warps, each of which reads it with requests of its own: the copies of a tile of
  // `elems` elements. (Stores of such tiles are made by one owner: written once.)
  auto copies = [&](int64_t elems) { return std::min(w, std::max<int64_t>(1, 32 * w / elems)); };
  // The request a warp makes for an index tile covers 32 consecutive tokens (fewer when the
  // tile is smaller): the page entries one request reads are the distinct pages of its tokens.
  const int64_t segment = std::min<int64_t>(N, 32);
  auto pages_of = [&](int64_t lo, int64_t hi) { return hi > lo ? (hi - 1) / s.block_size - lo / s.block_size + 1 : 0; };

  PagedAttentionTraffic t;
  // Split-KV's partials: the o rows the splits that walk store, and the o rows the combine
  // reads (those of a split in which the row saw a key: m > -inf).
  int64_t o_stored_rows = 0, o_read_rows = 0;
  // Planned (plan_programs): the grid is the programs sharing the plan's pieces.
  const bool planned = cfg.plan_programs > 0;
  int64_t plan_pieces = 0; // of one head-group chunk
  std::vector<int64_t> item_costs; // the plan's cost of each item (b, tile), in its order
  const int64_t programs_per_tile = s.hkv * chunks * S; // grid (B x tiles, Hkv x chunks, S)
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t len = in.context_lens.get_int(size_t(b)), sq = in.query_len(b), R = G * sq;
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t row0 = tile * BM, rows = std::clamp<int64_t>(R - row0, 0, BM);
      // The walk (build_fused): from the first key the window lets the tile's first row see
      // (0 without one) to the context's end, or with causal=1 and several tiles to the tile's
      // last position, in S chunks of whole N-token steps; splits past the end walk nothing
      // but still read q and write their (empty) partials. Each step loads the page entries of
      // its live tokens and their K and V rows (head_dim elements each; the lanes past it are
      // masked).
      // With chunks, from the first row's chunk start (after the window's first key) to the
      // last row's chunk end.
      const int64_t p_lo = len - sq + row0 / G, p_hi = len - sq + std::min((row0 + BM - 1) / G, sq - 1);
      const int64_t lo = std::max(W > 0 ? std::max(p_lo + 1, W) - W : 0, s.chunk_keys(p_lo, len).first);
      // A tile past a shorter sequence's rows (varlen) walks nothing.
      const int64_t hi = rows == 0 ? lo : s.causal && tiles > 1 ? p_hi + 1 : std::max(lo, s.chunk_keys(p_hi, len).second);
      // (Split by size: pieces of split_tokens keys.)
      const int64_t chunk = cfg.split_tokens ? cfg.split_tokens : cdiv(cdiv(hi - lo, S), N) * N;
      // The programs that run this tile: one per split of each head-group chunk, or planned one
      // per piece (at least one) of each chunk, each also reading its table entry and the
      // item's first piece (4-byte warp-uniform requests per warp).
      const int64_t pieces = planned ? std::max<int64_t>(1, cdiv(hi - lo, cfg.split_tokens)) : 0;
      const int64_t units = planned ? s.hkv * chunks * pieces : programs_per_tile;
      if (planned) {
        t.plan += units * w * 8;
        if (S > 1) t.partials += units * rows * 2 * 4 - programs_per_tile * rows * 2 * 4; // m and l per piece, not per split
        plan_pieces += pieces;
        item_costs.push_back((pieces - 1) * plan_piece_cost(cfg.split_tokens) +
                             plan_piece_cost(std::max<int64_t>(hi - lo - (pieces - 1) * cfg.split_tokens, 0)));
      }
      // Every program reads q's rows of its tile (each split again), the slopes of their heads
      // (every warp: each holds at least a head group's worth of rows or the whole tile), and
      // the context length: one 4-byte warp-uniform request per warp.
      // (A transposed tile holds 8 rows, its repeats reading nothing.)
      const int64_t q_rows = paged_attention_transposed(s, cfg) ? 8 : BM;
      for (const PagedAttentionColumns& c : cols) t.q += units * rows * c.valid * e_io * copies(q_rows * c.width);
      if (s.alibi) t.alibi_slopes += units * std::min(G, rows) * 4 * w;
      // Without splits, the sinks of its rows' heads too, as the slopes (with splits, the
      // combine reads them).
      if (s.sinks && S == 1) t.sinks += units * std::min(G, rows) * 4 * w;
      t.context_lens += units * w * 4;
      if (s.varlen) t.query_start_loc += units * w * 8; // its two entries, warp-uniform
      int64_t tokens = 0, entries = 0;
      for (int64_t split = 0; split < S && chunk > 0 && hi > lo; ++split) {
        const int64_t start = lo + split * chunk, end = std::min(hi, start + chunk);
        if (S > 1 && start < end) {
          o_stored_rows += s.hkv * chunks * rows;
          // A packed row r of the tile is position r / G of its sequence; it sees the keys of
          // its window and chunk, and with causal=1 those up to its position.
          for (int64_t r = row0; r < row0 + rows; ++r) {
            const int64_t p = len - sq + r / G;
            const auto [c_lo, c_hi] = s.chunk_keys(p, len);
            const int64_t a = std::max(W > 0 ? std::max(p + 1, W) - W : 0, c_lo);
            const int64_t z = s.causal ? std::min(p + 1, c_hi) : c_hi;
            if (std::max(a, start) < std::min(z, end)) o_read_rows += s.hkv * chunks;
          }
        }
        for (int64_t s0 = start; s0 < end; s0 += N) {
          const int64_t step_end = std::min(end, s0 + N);
          tokens += step_end - s0;
          for (int64_t g0 = s0; g0 < step_end; g0 += segment) entries += pages_of(g0, std::min(step_end, g0 + segment));
        }
      }
      // Each KV head's head-group chunks walk the same tokens. With overlap each step's V is read
      // a trip later (or after the walk) through its page entries again; in the latent form that
      // V is K's first column tile, read again.
      t.block_table += s.hkv * chunks * entries * 4 * copies(N) * (cfg.overlap ? 2 : 1);
      for (const PagedAttentionColumns& c : cols) t.k_cache += s.hkv * chunks * tokens * c.valid * e_kv * copies(N * c.width);
      if (cfg.overlap && s.latent) t.k_cache += s.hkv * chunks * tokens * cols[0].valid * e_kv * copies(N * cols[0].width);
      if (!s.latent) t.v_cache += s.hkv * chunks * tokens * DV * e_kv * copies(N * DP);
    }
  }
  const int64_t rows = in.q_rows();
  if (planned) {
    // The plan: every row's partial m and l set (with splits), the prefix of the items' pieces
    // and the table of pieces stored, each item's context length (and query rows) read, the
    // distinct sequences of 32 consecutive items per request; then each program reads the
    // pieces of a chunk (a 4-byte warp-uniform request per warp).
    const int64_t items = s.batch * tiles;
    if (S > 1) t.plan += rows * S * 2 * 4;
    t.plan += (items + 1 + plan_pieces) * 4;
    for (int64_t i0 = 0; i0 < items; i0 += 32) {
      const int64_t seqs = (std::min(items, i0 + 32) - 1) / tiles - i0 / tiles + 1;
      t.plan += seqs * 4 * (s.varlen ? 3 : 1);
    }
    t.plan += cfg.plan_programs * w * 4;
    // Its cost prefix stored; then each program reads a chunk's cost and finds its first
    // and last piece (build_fused's first_piece): a probe of the prefix per halving of
    // [0, items] until one item is left, then that item's and the next one's cost so far and
    // piece prefix, each a 4-byte warp-uniform request per warp.
    t.plan += (items + 1) * 4;
    std::vector<int64_t> prefix{0};
    for (int64_t c : item_costs) prefix.push_back(prefix.back() + c);
    const int64_t chunk_cost2 = 2 * prefix.back(), total2 = chunk_cost2 * s.hkv * chunks;
    auto reads = [&](int64_t t2) {
      const int64_t rest = t2 % chunk_cost2;
      int64_t lo = 0, hi = items, n = 4;
      for (; hi - lo > 1; ++n) {
        const int64_t mid = (lo + hi) / 2;
        (2 * prefix[size_t(mid)] <= rest ? lo : hi) = mid;
      }
      return n;
    };
    for (int64_t p = 0; p < cfg.plan_programs; ++p)
      t.plan += (1 + reads(p * total2 / cfg.plan_programs) + reads((p + 1) * total2 / cfg.plan_programs)) * w * 4;
  }
  t.out = rows * DV * e_io;
  if (S > 1) {
    // Each split stores its f32 m and l for its rows, and o (head_dim) where it walked; the
    // combine kernel (one program per row) reads m and l [S] back, and o of the splits in
    // which the row saw a key.
    t.partials += (rows * S * 2 + o_stored_rows * DV) * 4 + rows * 2 * S * 4 * copies(S) + o_read_rows * DV * 4 * copies(S * DP);
    // With sinks, each combine program reads its row's: one 4-byte warp-uniform request per warp.
    if (s.sinks) t.sinks += rows * w * 4;
  }
  return t;
}

} // namespace tilec::templates
