// Paged attention's fused kernel: the program that walks the block table with an online
// softmax (build_fused), the split-KV combine, and the run that launches them.
#include "templates/attention/paged_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <set>

#include "abi/limits.h"
#include "dsl/dsl.h"
#include "templates/attention/run_description.h"
#include "templates/prim_detail.h"

namespace tilec::templates {

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
  bool alibi, softcap, sinks;
  int64_t window;
  bool causal, varlen;
  PagedAttentionConfig cfg; // head_group resolved (never 0), num_splits the grid's (paged_attention_splits)
  int64_t block_m;          // query rows per program, resolved (paged_attention_block_m)
  int64_t chunk;            // chunked local attention (effective_chunk; 0: none)
  int64_t head_dim_v;       // V's and out's (resolved: never 0)
  int64_t split_tokens;     // keys per split (0: the walk cut into cfg.num_splits pieces)
  int64_t plan_programs;    // > 0: that many programs share the pieces a plan lists (split_tokens)
  bool latent;              // V is the first head_dim_v columns of k_cache
  std::vector<PagedAttentionColumns> cols; // q's and K's column tiles (paged_attention_qk_columns)

  // Names the specialization in the kernel cache: everything build_fused reads (the warps too:
  // they choose the products' orientation, the deferred sum and the register asks).
  std::string key() const {
    return fmt::format("paged_attention/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}", hq, hkv, sq,
                       head_dim, block_size, ir::dtype_name(dtype), ir::dtype_name(cache), alibi, softcap, cfg.block_n,
                       cfg.head_group, cfg.num_splits, cfg.num_stages, cfg.num_warps, window, causal, block_m,
                       varlen, chunk, sinks) +
           fmt::format("/{}/{}/{}/{}/{}", head_dim_v, latent, split_tokens, plan_programs, cfg.overlap) +
           (cfg.kv_tma ? "/kv_tma" : "");
  }
};

// Whether a tile of `bm` query rows computes its products transposed (paged_attention_transposed):
// on the tensor cores, at most 8 rows, and both products lay their warps along their rows (the
// keys of a step, and D): 16 rows per warp.
bool transposed_tile(DType dtype, int64_t bm, int64_t block_n, int64_t head_dim, int64_t num_warps) {
  return head_dim <= 256 && dtype != DType::f32 && bm <= 8 && block_n % (16 * num_warps) == 0 &&
         next_pow2(head_dim) % (16 * num_warps) == 0;
}

// Chunked local attention: a row at position p sees its chunk's keys, [p - p mod C, that + C)
// cut to the context, and none at a negative position (C is below 2^31: effective_chunk).
// Both ends are computed without wrapping: p mod C as a remainder made non-negative, the end
// as lo + min(C, ctx - lo) with lo in [0, ctx].
Tile chunk_start(const Tile& p, int64_t C) {
  Tile rem = p % C;
  return max(p - where(rem < 0, rem + C, rem), 0);
}
Tile chunk_end(const Tile& p, const Tile& lo_p, const Tile& ctx, int64_t C) {
  return where(p < 0, 0, lo_p + min(ctx - lo_p, C));
}

// The keys [lo, hi) a query tile walks (lo null: from 0), for a sequence of `ctx` keys and
// (varlen) `q_len` query rows, the tile from packed row `row0` (null: the only tile), with the
// positions of its rows: row 0's (first_pos) and its first row's (p_lo). A sliding window starts
// the walk at the first key the tile's first row sees, so the bytes read grow with the window,
// not the context. The window W is below 2^31 - 1 (effective_window) and the first key a row at
// position p sees is max(p + 1, W) - W: no i32 value on the way wraps, however large W or small p
// is. Causal: the walk ends at the tile's last position. Elementwise: the plan computes it for a
// vector of tiles at once, the kernel for its own.
struct Walk {
  Tile first_pos, p_lo, lo, hi;
};
// kv_tma: whether the walk's whole K/V steps may be gathered a page a box (build_fused): rows of
// one power-of-two column tile, no latent form, a power-of-two page that a step holds whole
// pages of or that holds whole steps. The steps must then start on a page (or on a step within
// one): a walk that starts elsewhere (window, chunk) starts at the key before it that does,
// when each row masks its own first key (a tile over several positions); otherwise the
// gathers are not used.
int64_t gather_align(const FusedSpec& sp) {
  const int64_t D = sp.head_dim, DP = next_pow2(D), N = sp.cfg.block_n, bs = sp.block_size;
  const bool fits = sp.cfg.kv_tma && sp.cols.size() == 1 && sp.cols[0].width == DP && !sp.latent &&
                    sp.head_dim_v == D && D == DP && ir::is_pow2(bs) && (N % bs == 0 || bs % N == 0);
  return fits ? std::min(N, bs) : 0;
}
bool one_position(const FusedSpec& sp) { return sp.sq == 1 || sp.cfg.head_group % sp.block_m == 0; }
Walk walk_range(const FusedSpec& sp, const Tile& ctx, const Tile& q_len, const Tile& row0) {
  const int64_t G = sp.cfg.head_group, BM = sp.block_m, T = cdiv(G * sp.sq, BM), W = sp.window, C = sp.chunk;
  // The tile's query positions: p = ctx - Sq + i for i from i_lo to i_hi.
  Tile i_lo = T == 1 ? Tile() : row0 / G;
  Walk w;
  w.first_pos = sp.varlen ? ctx - q_len : ctx - sp.sq; // the position of row 0
  w.p_lo = i_lo ? w.first_pos + i_lo : w.first_pos;
  Tile p_hi = T == 1 ? ctx - 1 : w.first_pos + min((row0 + (BM - 1)) / G, sp.varlen ? q_len - 1 : scalar(sp.sq - 1, i32));
  Tile lo = W > 0 ? max(w.p_lo + 1, W) - W : Tile();
  if (C > 0) lo = lo ? max(lo, chunk_start(w.p_lo, C)) : chunk_start(w.p_lo, C);
  if (const int64_t a = gather_align(sp); lo && a > 1 && !one_position(sp)) lo = lo / a * a;
  Tile hi = sp.causal && T > 1 ? p_hi + 1 : C > 0 ? chunk_end(p_hi, chunk_start(p_hi, C), ctx, C) : ctx;
  // A tile past a shorter sequence's rows (varlen) walks nothing.
  if (sp.varlen) hi = where(i_lo ? i_lo < q_len : q_len > 0, hi, lo ? lo : scalar(0, i32));
  // (A chunked tile whose rows sit before the context's start walks nothing either.)
  if (lo && C > 0) hi = max(hi, lo);
  w.lo = lo;
  w.hi = hi;
  return w;
}

// The plan's cost prefix (build_plan) starts at `at`, after the piece prefix and table, in
// units of kPlanCostUnitKeys keys (plan_piece_cost): of walks of up to 2^31 - 1 keys in all, it
// fits an i32. `whole` is a piece of split_tokens keys' cost; an item's is its whole pieces'
// and its last one's (item_cost).
struct PlanCosts {
  Tile at;
  int64_t whole;
};
PlanCosts plan_costs(const FusedSpec& sp, const Tile& items) {
  return {items * (sp.cfg.num_splits + 1) + 1, plan_piece_cost(sp.split_tokens)};
}
Tile item_cost(const FusedSpec& sp, const Tile& len, const Tile& pieces) {
  Tile last = max(len - (pieces - 1) * sp.split_tokens, 0);
  return (pieces - 1) * plan_piece_cost(sp.split_tokens) + (last + (kPlanCostUnitKeys - 1)) / kPlanCostUnitKeys +
         kPlanPieceCostUnits;
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
  // it, which never touch memory; its rows in memory stay head_dim long. Past 256 columns, or
  // in the latent form, q and K come in two column tiles (MLA's 576: 512 and 64), each product
  // the sum of theirs. V's columns (DV, out's too) are a tile of their own: the first of K's in
  // the latent form, already loaded.
  const int64_t DV = sp.head_dim_v, DP = next_pow2(DV);
  const bool pad_d = DP != DV, one_col = sp.cols.size() == 1 && sp.cols[0].width == DP && !sp.latent && DV == D;
  const int64_t R = G * sp.sq, BM = sp.block_m, T = cdiv(R, BM), S = sp.cfg.num_splits;
  // Whether a tile's rows sit at one query position (decode, or tiles within one position's
  // heads): then no key a tile walks is hidden from any of its rows by causal or window.
  const bool one_position = templates::one_position(sp);
  const ElemType io{sp.dtype, false};
  // A tile of at most 8 rows on the tensor cores (decode) computes the transposed products,
  // S^T = K q^T [N, 8] and O^T = V^T P^T [D, 8] (transposed_tile): the query rows are the
  // MMA's 8 columns instead of 16 rows padded from 4, so each step runs half the MMAs and
  // holds half the fragment registers (q's as B operand, P's, and the accumulators). A tile
  // of fewer than 8 rows repeats them up to 8: row r is row r mod BM, whose q the repeat reads
  // as zeros and whose result it does not store.
  const bool swap = one_col && transposed_tile(sp.dtype, BM, N, D, sp.cfg.num_warps);
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
  Tile v_cache = sp.latent ? Tile() : k.arg(ptr_to(sp.cache), "v_cache");
  auto block_table = k.arg<Ptr<i32>>("block_table");
  auto context_lens = k.arg<Ptr<i32>>("context_lens");
  // Mixed batches: sequence b's rows are query_start_loc[b] .. query_start_loc[b + 1] - 1 of
  // the packed q and out; sp.sq is the longest.
  Tile query_start_loc = sp.varlen ? k.arg<Ptr<i32>>("query_start_loc") : Tile();
  Tile alibi_slopes = sp.alibi ? k.arg<Ptr<f32>>("alibi_slopes") : Tile();
  // Attention sinks join the denominator once per row: here without splits, else in the combine.
  Tile sinks = sp.sinks && S == 1 ? k.arg<Ptr<f32>>("sinks") : Tile();
  // Without splits the kernel writes out; with them, f32 partials (o, m, l) per split.
  auto out = S == 1 ? k.arg(ptr_to(sp.dtype), "out") : k.arg<Ptr<f32>>("partial_o");
  Tile partial_m = S > 1 ? k.arg<Ptr<f32>>("partial_m") : Tile();
  Tile partial_l = S > 1 ? k.arg<Ptr<f32>>("partial_l") : Tile();
  Tile scale = k.arg<f32>("softmax_scale");
  Tile cap = sp.softcap ? k.arg<f32>("softcap") : Tile();
  Tile k_scale = fp8 ? k.arg<f32>("k_scale") : Tile(), v_scale = fp8 ? k.arg<f32>("v_scale") : Tile();
  auto max_blocks = k.arg<i32>("max_blocks");
  // kv_tma: the caches' rows, num_blocks x block_size (the run's let cache_rows).
  Tile cache_rows = sp.cfg.kv_tma ? k.arg<i32>("cache_rows") : Tile();
  // A plan (build_plan): the pieces of every (sequence, query tile), listed in a workspace.
  Tile plan = sp.plan_programs ? k.arg<Ptr<i32>>("plan") : Tile();
  Tile batch = sp.plan_programs ? k.arg<i32>("batch") : Tile();

  // An fp8 cache is widened to q's dtype (exactly: f16 and bf16 hold every fp8 value), so the
  // dots run as they do for that dtype; its scales apply to the scores and the output.
  if (fp8) scale = scale * k_scale;
  // Scores are kept in log2 units (times log2 e): every exponential is then an exp2, and a
  // score costs one multiply. The running max m is in those units, and so are the partials'
  // m that the combine reads; sinks are converted where they join.
  const double log2e = std::numbers::log2e;
  Tile scale_l2 = sp.softcap ? Tile() : scale * log2e;
  Tile scale_cap = sp.softcap ? scale / cap : Tile(), cap_l2 = sp.softcap ? cap * log2e : Tile();
  auto widen = [&](Tile t) { return fp8 ? t.to(io) : t; };
  // One work item: sequence b, the tile from packed row row0 (null: the only tile), head-group
  // chunk hc of the KV heads (KV head hc / (group / G)), KV split `split`: a program of the grid
  // (batch x query tiles, KV heads x head-group chunks, splits), or with a plan each piece of a
  // program's share in turn (below).
  auto work = [&](const Tile& b, const Tile& row0, const Tile& hc, const Tile& split) {
    auto kvh = hc / (group / G);
    Tile lane_rows = BMP > BM ? arange(0, BMP) % BM : arange(0, BM);
    auto packed = T == 1 ? lane_rows : row0 + lane_rows;
    Tile g = sp.sq == 1 ? packed : G == 1 ? Tile() : packed % G;
    Tile i = sp.sq == 1 ? Tile() : G == 1 ? packed : packed / G; // query position within Sq
    Tile heads = kvh * group + (hc % (group / G)) * G;
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
    // V's and out's columns.
    auto d = arange(0, DP);
    Tile d_ok = pad_d ? d < DV : Tile();
    // A row mask [BM] as the [BM, DP] mask of its elements (and, padded, of the lanes below DV).
    auto elems = [&](const Tile& row_mask) { return pad_d ? row_mask.col() & d_ok.row() : row_mask.col(); };
    // A column tile's lanes, and the mask of the ones past the row's columns (null: none).
    auto lanes = [&](const PagedAttentionColumns& c) { return c.at ? arange(0, c.width) + c.at : arange(0, c.width); };
    auto lanes_ok = [&](const PagedAttentionColumns& c) { return c.width > c.valid ? arange(0, c.width) < c.valid : Tile(); };
    std::vector<Tile> qts; // [BMP, width] each
    for (const PagedAttentionColumns& c : sp.cols) {
      Tile ok = lanes_ok(c);
      qts.push_back(load(q + rows.col() * D + lanes(c).row(), ok ? own_ok.col() & ok.row() : own_ok.col(), 0));
    }
    Tile qt = qts[0];
    // A swapped tile's B operand, q^T, made before the walk: the dots stage an operand defined
    // outside their loop once, and keep it in shared memory across the trips.
    Tile q_b = swap ? trans(qt) : Tile();
    Tile slope = sp.alibi ? load(alibi_slopes + heads, own_ok, 0) * log2e : Tile(); // per log2 unit

    auto ctx = load(context_lens + b);
    const bool masks = sp.causal || sp.window > 0 || sp.chunk > 0;
    const Walk walk = walk_range(sp, ctx, q_len, row0);
    Tile first_pos = walk.first_pos, p_lo = walk.p_lo, lo = walk.lo, hi = walk.hi;
    const int64_t W = sp.window, C = sp.chunk;
    auto chunk_lo = [&](const Tile& p) { return chunk_start(p, C); };
    auto chunk_hi = [&](const Tile& p, const Tile& lo_p) { return chunk_end(p, lo_p, ctx, C); };
    // Split by size: pieces of split_tokens keys (a multiple of N) from the walk's first key.
    Tile chunk = sp.split_tokens ? scalar(sp.split_tokens, i32) : ((lo ? hi - lo : hi) + (S - 1)) / S;
    if (!sp.split_tokens) chunk = (chunk + (N - 1)) / N * N;
    auto start = lo ? lo + split * chunk : split * chunk;
    auto end = min(hi, start + chunk);
    // Each row's position, first key (window, chunk) and with chunks and no causal mask its end,
    // where masks apply.
    Tile pos = masks && !one_position ? first_pos + i : Tile();
    Tile first = W > 0 && !one_position ? max(pos + 1, W) - W : Tile();
    Tile row_lo = C > 0 && !one_position ? chunk_lo(pos) : Tile();
    if (row_lo) first = first ? max(first, row_lo) : row_lo;
    Tile row_end = C > 0 && !one_position && !sp.causal ? chunk_hi(pos, row_lo) : Tile();

    Var m = full({BMP}, -INFINITY), l = zeros({BMP});
    Var acc = swap ? zeros({DP, BMP}) : zeros({BM, DP}); // over V's columns
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
    // (Not a tile of MLA's wide rows, 576 and 512 columns: its q, K and output tiles take more.)
    if (const int64_t blocks = 16 / warps; defer_sum && sp.dtype != DType::f32 && blocks > 1 && one_col && D <= 256)
      k.min_blocks_per_sm(int(blocks));
    // A transposed tile of 4 or more warps needs fewer still while its K and V steps hold at
    // most 64 elements a thread (the serving configuration's 64 keys x 128: no spills down to 88
    // registers): it asks for 96, five blocks' worth of 4 warps where shared memory lets five
    // share an SM (head_dim 64), and otherwise registers the SM keeps for other kernels. (With 2
    // warps each holds twice the product rows, and 96 spills.) tests/codegen/test_mma.cpp pins
    // every such configuration spill-free.
    if (swap && defer_sum && warps >= 4 && N * DP <= 64 * 32 * warps) k.max_registers(96);

    // The block-table slots of keys j, the entries read where `ok` (null: all of them). Key
    // positions are never negative where read: their page and slot are computed unsigned, so a
    // power-of-two block_size divides by a shift and a mask (a signed remainder costs five).
    auto slots_of = [&](const Tile& j, const Tile& ok) {
      auto ju = j.to(u32);
      auto page_of = (ju / sp.block_size).to(i32), in_page = (ju % sp.block_size).to(i32);
      auto page = ok ? load(block_table + b * max_blocks + page_of, ok) : load(block_table + b * max_blocks + page_of);
      return (page * sp.block_size + in_page) * sp.hkv + kvh;
    };
    // A column tile of the rows `slot` of a cache whose rows are `row_len` long, [N, width],
    // read where `live` (null: every row).
    auto kv_rows = [&](const Tile& base, int64_t row_len, const PagedAttentionColumns& c, const Tile& slot,
                       const Tile& live) {
      Tile addr = base + slot.col() * row_len + lanes(c).row();
      Tile ok = lanes_ok(c);
      Tile mask = live ? (ok ? live.col() & ok.row() : live.col()) : ok ? ok.row() : Tile();
      return widen(mask ? load(addr, mask, 0) : load(addr));
    };
    // kv_tma: a whole step's K or V tile (keys s0 .. s0 + N - 1, all below `end`) as one
    // tensor-descriptor gather over the cache viewed as [cache_rows, hkv x D]: N / block_size
    // boxes of a page each, or one box within a page when a page holds the step. The copy
    // engine moves each box on sm_90 (docs/PAGED_ATTENTION.md, "K/V by TMA"); elsewhere it is
    // the masked load it describes. Only where each step starts on a page (gather_align: a
    // walk from key 0, or from the page or step boundary before a window's or chunk's first key).
    const int64_t bs = sp.block_size;
    const bool gather = gather_align(sp) && (!lo.value() || !one_position);
    // The boxes' first rows (K's and V's: one read of the step's table entries serves both).
    auto page_rows = [&](const Tile& s0) {
      const int64_t boxes = std::max<int64_t>(N / bs, 1), h = N / boxes;
      std::vector<Operand> rows;
      for (int64_t i = 0; i < boxes; ++i) {
        Tile key = (i ? s0 + i * h : s0).to(u32);
        Tile page = load(block_table + b * max_blocks + (key / bs).to(i32)) * bs;
        rows.push_back(boxes > 1 ? page : page + (key % bs).to(i32));
      }
      return rows;
    };
    auto kv_gather = [&](const Tile& base, const std::vector<Operand>& rows) {
      TensorDesc desc = make_tensor_desc(base, {cache_rows, sp.hkv * D}, {sp.hkv * D, 1}, {N, D});
      return widen(load_gather(desc, rows, {kvh * D}));
    };
    // V's rows at `slot`: in the latent form K's first column tile.
    auto v_rows = [&](const Tile& slot, const Tile& live) {
      return sp.latent ? kv_rows(k_cache, D, sp.cols[0], slot, live)
             : one_col ? kv_rows(v_cache, D, sp.cols[0], slot, live)
                       : kv_rows(v_cache, DV, {0, DP, DV}, slot, live);
    };

    // The scores of the step over keys s0 .. s0 + N - 1, [BM, N] or [N, BM], in log2 units and
    // masked: `live` masks the keys past `end` (null: the whole step is below it), `causal` each
    // row's keys past its position. With them the step's slots, live mask and first K tile
    // (the latent form's V). `between`, when given, runs after the product Q.K^T and before
    // anything reads it.
    struct Scores {
      Tile s, slot, live, kt;
      std::vector<Operand> rows; // kv_tma: the step's boxes' first rows (page_rows)
    };
    auto scores = [&](Scalar s0, bool tail, bool causal, const std::function<void()>& between) {
      auto j = s0 + arange(0, N);
      Tile live = tail ? j < end : Tile();
      Tile slot = gather && !tail ? Tile() : slots_of(j, live);
      std::vector<Operand> rows = gather && !tail ? page_rows(s0) : std::vector<Operand>{};
      std::vector<Tile> kts;
      if (gather && !tail) kts.push_back(kv_gather(k_cache, rows));
      else
        for (const PagedAttentionColumns& c : sp.cols) kts.push_back(kv_rows(k_cache, D, c, slot, live));
      Tile kt = kts[0];
      Tile qk = swap ? dot(kt, q_b) : dot(qt, trans(kt));
      for (size_t c = 1; c < kts.size(); ++c) qk = qk + dot(qts[c], trans(kts[c]));
      if (between) between();
      Tile bias = sp.alibi ? per_row(slope) * (i ? per_key(j) - per_row(i) : per_key(j)).to(f32) : Tile();
      Tile s = sp.softcap ? cap_l2 * tanh(qk * scale_cap) : bias ? fma(qk, scale_l2, bias) : qk * scale_l2;
      if (sp.softcap && bias) s = s + bias;
      Tile seen = live ? per_key(live) : Tile();
      auto both = [&](const Tile& a, const Tile& c) { return a ? a & c : c; };
      if (causal) seen = both(seen, per_key(j) <= per_row(pos));
      if (first) seen = both(seen, per_key(j) >= per_row(first));
      if (row_end) seen = both(seen, per_key(j) < per_row(row_end));
      if (seen) s = where(seen, s, -INFINITY);
      return Scores{s, slot, live, kt, rows};
    };
    // The online softmax of a step's scores: m and l (or l_keys) take the step in; returns the
    // step's p and alpha, the rescale of what came before. `masked`: a row may see none of the
    // step's keys (causal, window, chunk): its max stays -inf, and the exponentials use 0 for it
    // (p = 0, alpha = 0) instead of -inf - -inf. (A tile at one position sees every key of
    // [lo, hi), at least one per step.)
    struct Softmax {
      Tile p, alpha;
    };
    auto softmax = [&](const Tile& s, bool masked) {
      auto m_new = max(m, reduce_max(s, key_axis));
      Tile m_use = masked ? where(m_new > -INFINITY, m_new, 0) : m_new;
      auto p = exp2(s - per_row(m_use));
      auto alpha = exp2(m - m_use);
      if (defer_sum) l_keys = l_keys * per_row(alpha) + p;
      else l = l * alpha + reduce_sum(p, key_axis);
      m = m_new;
      return Softmax{p, alpha};
    };
    // f16/bf16 caches: p rounded to the cache's dtype, so both dots run on the tensor cores (as
    // Triton's and FlashInfer's decode kernels do); l sums the unrounded p.
    auto p_operand = [&](const Tile& p) { return sp.dtype == DType::f32 ? p : p.to(io); };
    // overlap = 1 (FlashAttention-3's intra-warpgroup overlap): each trip computes its scores,
    // then the previous step's P.V (p_prev, carried over from the trip before), then its own
    // softmax, so that on Hopper the softmax runs while the tensor cores still do that product
    // (its wgmma group stays in flight until acc's next use, the rescale). p_prev is zeros
    // before the first step, whose "previous" V is masked to zeros (0 * NaN is NaN); the walk's
    // last P.V follows it.
    const ElemType p_type = sp.dtype == DType::f32 ? f32 : io;
    Var p_prev = !sp.cfg.overlap ? Tile() : swap ? zeros({N, BMP}, p_type) : zeros({BM, N}, p_type);
    auto add_pv = [&](const Tile& p, const Tile& vt) { acc = acc + (swap ? dot(trans(vt), p) : dot(p, vt)); };

    // One step of the walk over keys s0 .. s0 + N - 1 (`tail`, `causal`: as for its scores).
    auto step = [&](Scalar s0, bool tail, bool causal) {
      const bool masked = causal || first || row_end;
      if (!sp.cfg.overlap) {
        const Scores sc = scores(s0, tail, causal, {});
        const Softmax sm = softmax(sc.s, masked);
        // The latent form's V is K's first column tile, loaded above: one read serves both
        // products. The product accumulates into the rescaled O (ir::fuse_dot_accumulate), but
        // a transposed tile's.
        Tile vt = sp.latent ? sc.kt : gather && !tail ? kv_gather(v_cache, sc.rows) : v_rows(sc.slot, sc.live);
        if (swap) acc = acc * sm.alpha.row() + dot(trans(vt), p_operand(sm.p));
        else acc = acc * sm.alpha.col() + dot(p_operand(sm.p), vt);
        return;
      }
      // The previous step's P.V, issued right after Q.K^T and before anything reads S (as
      // FlashAttention-3 does), so that on Hopper both products are in flight while the first
      // finishes and the softmax runs behind the second. Its keys are all below s0 <= end: none
      // before the walk's (or split's) first step. Its V is read again through the block table
      // (the latent form's from K): an address affine in s0, which the pipeline copies ahead
      // like K's. acc_j = alpha_j (acc_{j-1} + P_{j-1} V_{j-1}).
      const Scores sc = scores(s0, tail, causal, [&] {
        if (gather && !tail) {
          // kv_tma: the previous step's V gathered whole. Before the walk's first step P_prev is
          // zeros, and the tile gathered is this step's own (its keys live, so no NaN meets them).
          add_pv(p_prev, kv_gather(v_cache, page_rows(where(s0 > start, s0 - N, s0))));
          return;
        }
        auto j_prev = s0 - N + arange(0, N);
        Tile had = j_prev >= start;
        add_pv(p_prev, v_rows(slots_of(j_prev, had), had));
      });
      const Softmax sm = softmax(sc.s, masked);
      acc = acc * per_row(sm.alpha);
      p_prev = p_operand(sm.p);
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
    if (sp.cfg.overlap) {
      // The walk's last P.V: of the step walked last (start's when none was: p_prev is then
      // zeros), its keys from `end` on masked (a tail step's may be NaN in the cache).
      auto j = start + max(end - start - 1, 0) / N * N + arange(0, N);
      Tile ok = j < end;
      add_pv(p_prev, v_rows(slots_of(j, ok), ok));
    }
    if (defer_sum) l = reduce_sum(l_keys, key_axis);
    // A swapped tile's O^T goes back to rows, [BMP, DP], to be stored along D: as late as it
    // can, in q's dtype (half the shared memory the exchange takes in f32).
    auto rows_of = [&](Tile t) { return swap ? trans(t) : t; };

    if (S == 1) {
      // The row's sink joins the denominator: the sums so far are rescaled to the max of m and
      // the sink (a row that saw no key has m = -inf: its rescale is 0), and e^(sink - max) adds
      // to l (0 for a sink of -inf, no sink).
      Tile l_all = l, acc_all = acc;
      if (sinks) {
        Tile sink = load(sinks + heads, own_ok, -INFINITY) * log2e;
        Tile m_all = max(m, sink);
        Tile m_use = where(m_all > -INFINITY, m_all, 0);
        Tile rescale = exp2(m - m_use);
        l_all = l * rescale + exp2(sink - m_use);
        acc_all = acc * per_row(rescale);
      }
      // A sequence with no live tokens (l == 0) gets zeros, as the decomposition does (with a
      // sink, l > 0 and acc = 0: zeros too). An fp8 cache's v_scale applies to the normalized
      // sum, which is at most the cache's largest value: l / v_scale would overflow f32 for a
      // small scale.
      Tile o = where(per_row(l_all) > 0, acc_all / per_row(l_all), 0);
      if (fp8) o = o * v_scale;
      store(out + rows.col() * DV + d.row(), rows_of(o.to(io)), elems(own_ok));
    } else {
      auto part = rows * S + split; // [B, Hq, Sq, S]
      // A split past its walk's end (a short sequence's, or by size past its last piece) stores
      // only m = -inf and l = 0, which the combine reads as "nothing here": not its output rows.
      store(out + part.col() * DV + d.row(), rows_of(fp8 ? acc * v_scale : Tile(acc)), elems(own_ok & (start < end)));
      store(partial_m + part, m, own_ok);
      store(partial_l + part, l, own_ok);
    }
  };
  if (!sp.plan_programs) {
    work(T == 1 ? program_id(0) : program_id(0) / T, T == 1 ? Tile() : program_id(0) % T * BM, program_id(1),
         program_id(2));
    return k.finish();
  }
  // Planned: the pieces (split_tokens keys of one tile's walk, for one head-group chunk) in the
  // plan's order, items (b, tile) by piece count, the same list for each of the H head-group
  // chunks, each piece costing its keys plus a fixed cost (its q tile, partials and set-up:
  // plan_piece_cost). Program p of P takes the pieces whose cost midpoint (over all chunks)
  // falls in [p C / P, (p + 1) C / P), C the total: every program's cost is its share within
  // half a piece's at either end.
  const int64_t H = sp.hkv * (group / G), P = sp.plan_programs;
  Tile items = batch * T;
  const PlanCosts pc = plan_costs(sp, items);
  const int64_t W = pc.whole;
  Tile per_chunk = load(plan + items); // the plan's prefix ends with the pieces of one chunk
  Tile chunk_cost2 = load(plan + pc.at + items).to(i64) * 2, total2 = chunk_cost2 * H;
  // The first piece (over all chunks) whose doubled midpoint 2 start + cost is at least `t2`
  // (i64, at most twice the total): in chunk t2 / 2 C_chunk, the last item whose doubled cost
  // prefix is at most the rest (a binary search over the prefix), then its first whole piece
  // (piece k starts k W in) or its last one that reaches the rest, else the next item's first.
  auto first_piece = [&](const Tile& t2) {
    Tile hc = (t2 / chunk_cost2).to(i32), rest = (t2 % chunk_cost2).to(i32);
    // 2 [lo] <= rest < 2 [hi] ([items]: the chunk's whole cost); a probe once the interval is
    // one item reads nothing.
    Var lo = scalar(0, i32), hi = Tile(items);
    for_range(0, 32, 1, [&](Scalar) {
      Tile go = hi - lo > 1, mid = (lo + hi) / 2;
      Tile below = load(plan + pc.at + mid, go, 0) * 2 <= rest;
      lo = where(go & below, mid, lo);
      hi = where(go, where(below, hi, mid), hi);
    });
    Tile c_lo = load(plan + pc.at + lo), c_hi = load(plan + pc.at + lo + 1);
    Tile first_j = load(plan + lo), next_j = load(plan + lo + 1), n = next_j - first_j;
    Tile k = (max(rest - 2 * c_lo - W, 0) + (2 * W - 1)) / (2 * W);
    Tile here = (k < n - 1) | (c_lo + (n - 1) * W + c_hi >= rest); // the last piece's doubled midpoint
    return hc * per_chunk + where(here, first_j + min(k, n - 1), next_j);
  };
  Tile first = first_piece(program_id(0).to(i64) * total2 / P);
  Tile last = first_piece((program_id(0) + 1).to(i64) * total2 / P);
  for_range(first, last, 1, [&](Scalar j) {
    Tile hc = j / per_chunk, jj = j % per_chunk;
    Tile item = load(plan + items + 1 + jj); // the table of pieces after the prefix
    Tile piece = jj - load(plan + item);
    work(T == 1 ? item : item / T, T == 1 ? Tile() : item % T * BM, hc, piece);
  });
  return k.finish();
}

// The plan of split_tokens pieces (planned paged attention): one program lists, for each item
// (sequence b, query tile) in order, its pieces, cdiv of its walk by split_tokens and at least
// one (an empty walk still writes its zeros or empty partials): plan[0 .. items] the prefix
// (plan[i] the pieces before item i, plan[items] all of them), then plan[items + 1 + j] the
// item of piece j, then from plan[plan_costs().at] the cost prefix: the cost of the items before
// item i (plan_piece_cost of each of its pieces). With splits it also sets
// every row's partial m to -inf and l to 0 first: the splits no piece covers are "nothing here"
// to the combine. It reads context_lens (and query_start_loc) on the device, so a captured call
// plans each replay's batch.
ir::Kernel build_plan(const FusedSpec& sp) {
  const int64_t G = sp.cfg.head_group, BM = sp.block_m, T = cdiv(G * sp.sq, BM), S = sp.cfg.num_splits;
  const int64_t U = sp.split_tokens, L = 128;
  KernelBuilder k("paged_attention_plan");
  auto context_lens = k.arg<Ptr<i32>>("context_lens");
  Tile query_start_loc = sp.varlen ? k.arg<Ptr<i32>>("query_start_loc") : Tile();
  auto plan = k.arg<Ptr<i32>>("plan");
  Tile partial_m = S > 1 ? k.arg<Ptr<f32>>("partial_m") : Tile();
  Tile partial_l = S > 1 ? k.arg<Ptr<f32>>("partial_l") : Tile();
  auto batch = k.arg<i32>("batch");
  auto rows = k.arg<i32>("rows");
  if (S > 1)
    for_range(0, cdiv(rows * S, L), 1, [&](Scalar c) {
      auto idx = c * L + arange(0, L);
      store(partial_m + idx, full({L}, -INFINITY), idx < rows * S);
      store(partial_l + idx, zeros({L}), idx < rows * S);
    });
  auto items = batch * T;
  auto lane = arange(0, L);
  store(plan + arange(0, 1), zeros({1}, i32));
  const PlanCosts pc = plan_costs(sp, items);
  store(plan + pc.at + arange(0, 1), zeros({1}, i32));
  Var before = scalar(0, i32); // the pieces of the items of earlier chunks
  Var cost_before = scalar(0, i32); // and their cost
  for_range(0, cdiv(items, L), 1, [&](Scalar c) {
    auto item = c * L + lane;
    auto ok = item < items;
    Tile b = T == 1 ? Tile(item) : item / T;
    Tile row0 = T == 1 ? Tile() : item % T * BM;
    Tile ctx = load(context_lens + b, ok, 0);
    Tile q_len = sp.varlen ? load(query_start_loc + b + 1, ok, 0) - load(query_start_loc + b, ok, 0) : Tile();
    const Walk w = walk_range(sp, ctx, q_len, row0);
    Tile len = w.lo ? w.hi - w.lo : w.hi;
    auto n = where(ok, max((len + (U - 1)) / U, 1), 0);
    // The inclusive prefix over the chunk's lanes: lane i sums the pieces of lanes 0 .. i.
    auto upto = reduce_sum(where(lane.row() <= lane.col(), n.row(), 0), 1);
    store(plan + item + 1, before + upto, ok);
    // Item i's pieces go to table entries plan[i] .. plan[i] + n_i - 1.
    auto at = before + upto - n;
    for_range(0, S, 1, [&](Scalar piece) { store(plan + items + 1 + at + piece, item, ok & (piece < n)); });
    before = before + reduce_sum(n, 0);
    // The same prefix over the items' costs.
    auto cost = where(ok, item_cost(sp, max(len, 0), max(n, 1)), 0);
    store(plan + pc.at + item + 1, cost_before + reduce_sum(where(lane.row() <= lane.col(), cost.row(), 0), 1), ok);
    cost_before = cost_before + reduce_sum(cost, 0);
  });
  return k.finish();
}

// What the combine kernel is specialized on: the splits, the row's size and dtype, and with
// sinks the layout of the rows (which head a row belongs to).
struct CombineSpec {
  int64_t splits, head_dim;
  DType dtype;
  bool sinks;
  int64_t hq, sq;
  bool varlen;

  std::string key() const {
    return fmt::format("paged_attention_combine/{}/{}/{}/{}/{}/{}/{}", splits, head_dim, ir::dtype_name(dtype), sinks,
                       sinks ? hq : 0, sinks ? sq : 0, sinks && varlen);
  }
};

// Combines the splits of one query row: rescale each split's partial sums to
// the row's overall max (and its sink's) and normalize. The sink counts once, here.
ir::Kernel build_combine(const CombineSpec& c) {
  const int64_t splits = c.splits, head_dim = c.head_dim;
  KernelBuilder k("paged_attention_combine");
  auto partial_o = k.arg<Ptr<f32>>("partial_o"), partial_m = k.arg<Ptr<f32>>("partial_m");
  auto partial_l = k.arg<Ptr<f32>>("partial_l");
  Tile sinks = c.sinks ? k.arg<Ptr<f32>>("sinks") : Tile();
  auto out = k.arg(ptr_to(c.dtype), "out");
  auto row = program_id(0);
  auto sidx = row * splits + arange(0, splits);
  // Tiles are powers of two: a head_dim between them masks the lanes past it.
  const int64_t DP = next_pow2(head_dim);
  auto d = arange(0, DP);
  Tile d_ok = DP != head_dim ? d < head_dim : Tile();
  auto m = load(partial_m + sidx);
  auto l = load(partial_l + sidx);
  // A split whose row saw no key (m = -inf; an empty split stored no o) weighs 0: its o is not
  // read. (A NaN m is read, and carries its NaN into the row as before.)
  Tile seen = m != -INFINITY;
  Tile o = load(partial_o + sidx.col() * head_dim + d.row(), DP != head_dim ? seen.col() & d_ok.row() : seen.col(), 0); // [S, D]
  Tile m_all = reduce_max(m, 0);
  // The row's head: rows are [B, Hq, Sq], or packed [total_q, Hq].
  // The partials' m are in log2 units (build_fused); the sink joins in them.
  Tile sink = c.sinks ? load(sinks + (c.varlen ? row % c.hq : row / c.sq % c.hq)) * std::numbers::log2e : Tile();
  if (sink) m_all = max(m_all, sink);
  auto w = where(m > -INFINITY, exp2(m - m_all), 0);
  Tile total = reduce_sum(l * w, 0);
  if (sink) total = total + where(sink > -INFINITY, exp2(sink - m_all), 0);
  auto sum = reduce_sum(o * w.col(), 0);
  Tile res = where(total > 0, sum / total, 0).to(ElemType{c.dtype, false});
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
  // Resolved: num_splits is the grid's splits; the size of a split by size is the spec's own.
  const int64_t split_tokens = cfg.split_tokens;
  if (cfg.plan_programs < 0 || cfg.plan_programs > kMaxPlanPrograms || (cfg.plan_programs && !split_tokens))
    throw UserError(fmt::format("paged_attention: plan_programs {} must be 0, or with split_tokens from 1 to {}",
                                cfg.plan_programs, kMaxPlanPrograms));
  cfg.num_splits = paged_attention_splits(s, cfg);
  cfg.split_tokens = 0;
  if (std::string why = num_warps_error(cfg.num_warps); !why.empty()) throw UserError("paged_attention: " + why);
  if (cfg.overlap != 0 && cfg.overlap != 1)
    throw UserError(fmt::format("paged_attention: overlap {} must be 0 or 1", cfg.overlap));
  if (cfg.kv_tma != 0 && cfg.kv_tma != 1)
    throw UserError(fmt::format("paged_attention: kv_tma {} must be 0 or 1", cfg.kv_tma));
  if (cfg.num_stages < 1 || cfg.num_stages > ir::kMaxPipelineStages)
    throw UserError(fmt::format("paged_attention: num_stages {} must be from 1 to {}", cfg.num_stages,
                                ir::kMaxPipelineStages));
  return {s.hq, s.hkv, s.sq, s.head_dim, s.block_size, s.dtype, s.cache_dtype(), s.alibi, s.softcap.has_value(),
          s.sinks, s.effective_window(), s.causal, s.varlen, cfg, paged_attention_block_m(s, cfg), s.effective_chunk(),
          s.dv(), split_tokens, cfg.plan_programs, s.latent, paged_attention_qk_columns(s)};
}

} // namespace

int64_t paged_attention_splits(const PagedAttentionShape& s, const PagedAttentionConfig& cfg) {
  if (!ir::is_pow2(cfg.num_splits) || cfg.num_splits > kMaxSplits)
    throw UserError(fmt::format("paged_attention: num_splits {} must be a power of two from 1 to {}", cfg.num_splits,
                                kMaxSplits));
  if (cfg.split_tokens == 0) return cfg.num_splits;
  if (cfg.split_tokens < 0 || cfg.split_tokens % cfg.block_n != 0)
    throw UserError(fmt::format("paged_attention: split_tokens {} must be 0 or a multiple of block_n {}", cfg.split_tokens,
                                cfg.block_n));
  if (cfg.num_splits != 1)
    throw UserError(fmt::format("paged_attention: split_tokens {} sets the splits by size; num_splits must be 1, not {}",
                                cfg.split_tokens, cfg.num_splits));
  const int64_t splits = next_pow2(cdiv(std::max<int64_t>(s.capacity(), 1), cfg.split_tokens));
  if (splits > kMaxSplits)
    throw UserError(fmt::format("paged_attention: split_tokens {} cuts the cache's {} keys (max_blocks {} x block_size "
                                "{}) into {} splits, more than {}: take a larger split_tokens",
                                cfg.split_tokens, s.capacity(), s.max_blocks, s.block_size, splits, kMaxSplits));
  return splits;
}

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
  return !sp.latent && sp.head_dim_v == sp.head_dim &&
         transposed_tile(sp.dtype, sp.block_m, sp.cfg.block_n, sp.head_dim, sp.cfg.num_warps);
}

int64_t paged_attention_query_tiles(const PagedAttentionShape& s, const PagedAttentionConfig& cfg) {
  const int64_t G = cfg.head_group ? cfg.head_group : s.group();
  return cdiv(G * s.sq, paged_attention_block_m(s, cfg));
}

ir::Kernel paged_attention_fused_kernel(const PagedAttentionShape& s, const PagedAttentionConfig& cfg) {
  return build_fused(fused_spec(s, cfg));
}

namespace {
CombineSpec combine_spec(const PagedAttentionShape& s, const PagedAttentionConfig& cfg) {
  return {paged_attention_splits(s, cfg), s.dv(), s.dtype, s.sinks, s.hq, s.sq, s.varlen};
}
} // namespace

ir::Kernel paged_attention_plan_kernel(const PagedAttentionShape& s, const PagedAttentionConfig& cfg) {
  return build_plan(fused_spec(s, cfg));
}

ir::Kernel paged_attention_combine_kernel(const PagedAttentionShape& s, const PagedAttentionConfig& cfg) {
  return build_combine(combine_spec(s, cfg));
}

rt::RunValues paged_attention_run_values(const PagedAttentionShape& s, const PagedAttentionConfig& cfg,
                                         int64_t total_q) {
  std::map<std::string, rt::SpecValue> sizes{
      {"batch", s.batch}, {"hq", s.hq}, {"hkv", s.hkv}, {"sq", s.sq}, {"head_dim", s.head_dim},
      {"head_dim_v", s.dv()}, {"block_size", s.block_size}, {"max_blocks", s.max_blocks},
      {"num_blocks", s.cache_elements() / (s.block_size * s.hkv * s.head_dim)},
      {"dtype", std::string(ir::dtype_name(s.dtype))}, {"cache_dtype", std::string(ir::dtype_name(s.cache_dtype()))},
      {"window", s.window}, {"causal", int64_t(s.causal)}, {"chunk", s.chunk}, {"varlen", int64_t(s.varlen)}};
  if (total_q) sizes["total_q"] = total_q;
  std::set<std::string> present;
  if (!s.latent) present.insert("v_cache");
  if (s.alibi) present.insert("alibi_slopes");
  if (s.sinks) present.insert("sinks");
  if (s.softcap) present.insert("softcap");
  return rt::RunValues(paged_attention_run(), sizes, std::move(present),
                       {{"block_n", cfg.block_n}, {"head_group", cfg.head_group}, {"num_warps", cfg.num_warps},
                        {"num_splits", cfg.num_splits}, {"num_stages", cfg.num_stages}, {"block_m", cfg.block_m},
                        {"split_tokens", cfg.split_tokens}, {"plan_programs", cfg.plan_programs},
                        {"overlap", cfg.overlap}, {"kv_tma", cfg.kv_tma}});
}

std::map<std::string, rt::SpecValue> paged_attention_module_spec(const PagedAttentionShape& s,
                                                                 const PagedAttentionConfig& cfg) {
  fused_spec(s, cfg); // refuses a config the kernels cannot be built for
  return paged_attention_run_values(s, cfg).spec();
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
  // The grids and the split partials are the declared run's (run_description.cpp), which hosts
  // execute too.
  const rt::RunValues run = paged_attention_run_values(s, config, in.q_rows() / s.hq);
  const int64_t S = sp.cfg.num_splits, rows = in.q_rows();
  launch::Buffer out("out", s.dtype, size_t(rows * s.dv()));
  launch::Buffer po("partial_o", ir::DType::f32, size_t(run.workspace_elements("partial_o")));
  launch::Buffer pm("partial_m", ir::DType::f32, size_t(run.workspace_elements("partial_m")));
  launch::Buffer pl("partial_l", ir::DType::f32, size_t(run.workspace_elements("partial_l")));

  std::vector<launch::Arg> args{launch::Arg::of(mut.q), launch::Arg::of(mut.k_cache)};
  if (!s.latent) args.push_back(launch::Arg::of(mut.v_cache));
  args.push_back(launch::Arg::of(mut.block_table));
  args.push_back(launch::Arg::of(mut.context_lens));
  if (s.varlen) args.push_back(launch::Arg::of(mut.query_start_loc));
  if (s.alibi) args.push_back(launch::Arg::of(mut.alibi_slopes));
  if (s.sinks && S == 1) args.push_back(launch::Arg::of(mut.sinks));
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
  if (sp.cfg.kv_tma) args.push_back(launch::Arg::of_int(run.value_int("cache_rows")));
  launch::Buffer plan("plan", ir::DType::i32, size_t(run.workspace_elements("plan")));
  if (run.launched("paged_attention_plan")) {
    ir::Kernel planner = prim::detail::cached_kernel("plan/" + sp.key(), [&] { return build_plan(sp); });
    std::vector<launch::Arg> plan_args{launch::Arg::of(mut.context_lens)};
    if (s.varlen) plan_args.push_back(launch::Arg::of(mut.query_start_loc));
    plan_args.push_back(launch::Arg::of(plan));
    if (S > 1) {
      plan_args.push_back(launch::Arg::of(pm));
      plan_args.push_back(launch::Arg::of(pl));
    }
    plan_args.push_back(launch::Arg::of_int(s.batch));
    plan_args.push_back(launch::Arg::of_int(run.value_int("rows")));
    launcher.launch(planner, int(sp.cfg.num_warps), run.grid("paged_attention_plan"), plan_args);
    args.push_back(launch::Arg::of(plan));
    args.push_back(launch::Arg::of_int(s.batch));
  }
  launcher.launch(kernel, int(sp.cfg.num_warps), run.grid("paged_attention"), args);

  if (run.launched("paged_attention_combine")) {
    const CombineSpec cs = combine_spec(s, sp.cfg);
    ir::Kernel combine = prim::detail::cached_kernel(cs.key(), [&] { return build_combine(cs); });
    std::vector<launch::Arg> combine_args{launch::Arg::of(po), launch::Arg::of(pm), launch::Arg::of(pl)};
    if (s.sinks) combine_args.push_back(launch::Arg::of(mut.sinks));
    combine_args.push_back(launch::Arg::of(out));
    launcher.launch(combine, int(sp.cfg.num_warps), run.grid("paged_attention_combine"), combine_args);
  }
  return out;
}

} // namespace tilec::templates
