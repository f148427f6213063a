#pragma once
// Paged attention for LLM decoding (docs/ARCHITECTURE.md "Paged attention"): the
// problem, its inputs, validation, a plain C++ reference, and the two ways to
// compute it — the fused block-table-walking kernel and the seed's
// decomposition into primitive tensor ops.
#include <algorithm>
#include <limits>
#include <utility>
#include <optional>
#include <string>

#include "launch/args.h"
#include "launch/launcher.h"
#include "runtime/op_run.h"
#include "templates/registry.h"

namespace tilec::templates {

// Why `head_dim` cannot be served ("" when it can): the one rule for --shape and .npy inputs.
std::string head_dim_error(int64_t head_dim);
// The same for V's head dim, and in the latent form for how it sits in the K cache's rows.
std::string head_dim_v_error(int64_t head_dim, int64_t head_dim_v, bool latent);
// The largest power of two at most head_dim: the first of the (at most two) column tiles the
// fused kernel splits q and K into past 256 columns or in the latent form, whose V is that tile.
int64_t head_dim_first_tile(int64_t head_dim);
std::string latent_error(int64_t head_dim, int64_t head_dim_v, bool latent);

// Sizes and runtime parameters of one paged-attention call.
struct PagedAttentionShape {
  int64_t batch = 2, hq = 8, hkv = 2, sq = 1, head_dim = 64;
  // V's head dim, and out's (0: head_dim, or in the latent form K's first column tile). MLA (DeepSeek-V3, Kimi-K2) attends with q and K of
  // 576 (512 latent + 64 RoPE) and V of 512; its prefill form with 192 and 128.
  int64_t head_dim_v = 0;
  // One latent cache (MLA's absorbed form): no v_cache; V is the first head_dim_v columns of
  // k_cache, read once with K.
  bool latent = false;
  int64_t block_size = 16;  // tokens per page
  int64_t max_blocks = 16;  // block-table columns per sequence
  int64_t num_blocks = 0;   // pages in the cache (0: batch * max_blocks)
  ir::DType dtype = ir::DType::f32; // of q and out, and of k_cache and v_cache unless kv_fp8
  // An fp8 KV cache (f8e4m3 or f8e5m2, as vLLM's kv_cache_dtype=fp8): its elements are
  // value / scale, so attention runs on k_cache * k_scale and v_cache * v_scale.
  std::optional<ir::DType> kv_fp8;
  double k_scale = 0.0, v_scale = 0.0; // 0: chosen by make_paged_attention_inputs
  bool alibi = false;
  // Attention sinks (gpt-oss): one logit per query head, sinks[h], in the units of the scaled
  // (and capped) score, that joins each row's softmax denominator and adds no value:
  // out = sum_j e^(s_j - m) v_j / (e^(sinks[h] - m) + sum_j e^(s_j - m)), m the max of the
  // sink and the scores. -inf is no sink. It is never capped, biased or masked.
  bool sinks = false;
  double softmax_scale = 0.0;         // 0: 1/sqrt(head_dim)
  std::optional<double> softcap;      // none: no softcap
  // Query row i (0 <= i < Sq) of sequence b sits at position p_i = context_lens[b] - Sq + i.
  int64_t window = 0;  // > 0: row i sees only keys j >= p_i - window + 1 (sliding window)
  bool causal = false; // row i sees only keys j <= p_i (needs context_lens[b] >= Sq)
  // > 0: chunked local attention (Llama-4): row i sees only keys j in its own chunk of `chunk`
  // positions, j // chunk == p_i // chunk (floor division: a row at a negative position, which
  // only a non-causal row of a context shorter than Sq has, sees no key).
  int64_t chunk = 0;
  // Mixed batches (vLLM's query_start_loc, FlashInfer's qo_indptr): q and out are packed
  // [total_q, Hq, D], sequence b's Sq_b = query_start_loc[b + 1] - query_start_loc[b] rows
  // starting at row query_start_loc[b], and `sq` is the longest Sq_b (the kernel's tiles are
  // sized for it). Row i of b sits at position context_lens[b] - Sq_b + i.
  bool varlen = false;

  int64_t group() const { return hq / hkv; }
  // V's head dim when head_dim_v is 0: head_dim's, or in the latent form K's first column tile
  // (MLA: 512 of 576).
  int64_t default_dv() const { return latent ? head_dim_first_tile(head_dim) : head_dim; }
  int64_t dv() const { return head_dim_v ? head_dim_v : default_dv(); }
  // head_dim_v as the tuning key and the modules' specialization name it: 0 when it is the
  // default, so a key written with and one without it agree (the declared run's head_dim_v_key).
  int64_t head_dim_v_key() const { return dv() == default_dv() ? 0 : dv(); }
  // Elements of the V cache: none in the latent form.
  int64_t v_cache_elements() const { return latent ? 0 : cache_elements() / head_dim * dv(); }
  ir::DType cache_dtype() const { return kv_fp8 ? *kv_fp8 : dtype; }
  // The window every computation applies (the kernels, the decomposition, the reference):
  // `window`, or 0 (none) when it is at least as long as any context can be — the capacity,
  // or 2^31 - 1, the longest context_lens holds — where it hides no key. What remains is below
  // 2^31 - 1, so the fused kernel's 32-bit arithmetic holds it exactly (a window of 2^32 + 1
  // once wrapped to 1 there).
  int64_t effective_window() const {
    return window >= std::min<int64_t>(capacity(), std::numeric_limits<int32_t>::max()) ? 0 : window;
  }
  // The chunk every computation applies: `chunk`, or the capacity (or 2^31 - 1) when it is
  // longer, which puts every position a context can hold in chunk 0 just as `chunk` does: the
  // fused kernel's 32-bit arithmetic holds what remains. 0: none.
  int64_t effective_chunk() const {
    return chunk <= 0 ? 0 : std::min({chunk, std::max<int64_t>(capacity(), 1), int64_t(std::numeric_limits<int32_t>::max())});
  }
  // The keys [lo, hi) within [0, len) that a row at position p sees through the chunk alone
  // (all of [0, len) without one): its chunk, cut to the context; none at a negative position.
  std::pair<int64_t, int64_t> chunk_keys(int64_t p, int64_t len) const {
    const int64_t c = effective_chunk();
    if (c == 0) return {0, len};
    if (p < 0) return {0, 0};
    const int64_t lo = p - p % c;
    return {lo, std::min(len, lo + c)};
  }
  // The keys of sequence b (with context length len) that some query row sees: [first, len).
  // (Sequence b's query length is sq, or with varlen its own.) Rows sit at consecutive
  // positions, so what they see together is one range, from the first row's first key.
  int64_t first_key(int64_t len) const { return first_key(len, sq); }
  int64_t first_key(int64_t len, int64_t query_len) const {
    const int64_t w = effective_window(), c = effective_chunk(), p0 = len - query_len;
    const int64_t by_window = w > 0 ? std::max<int64_t>(0, p0 - w + 1) : 0;
    const int64_t by_chunk = c > 0 && p0 > 0 ? p0 - p0 % c : 0; // (rows before 0 see nothing; 0 starts chunk 0)
    return std::max(by_window, by_chunk);
  }
  int64_t capacity() const { return max_blocks * block_size; }
  // Elements of each cache (num_blocks 0: batch * max_blocks pages).
  int64_t cache_elements() const { return (num_blocks ? num_blocks : batch * max_blocks) * block_size * hkv * head_dim; }
  // Whether generated inputs fill only the pages sequences use (make_paged_attention_inputs):
  // caches of more than kSparseCacheBytes each.
  static constexpr int64_t kSparseCacheBytes = int64_t(1) << 28;
  bool sparse_cache() const;
  double scale() const;
};

// The op's inputs as host buffers, named as their .npy files (docs/ARCHITECTURE.md):
// q [B, Hq, Sq, D], k_cache/v_cache [num_blocks, block_size, Hkv, D],
// block_table [B, max_blocks] and context_lens [B] (u32 data held as i32),
// alibi_slopes [Hq] f32 when shape.alibi, sinks [Hq] f32 when shape.sinks. The caches are in shape.cache_dtype().
// With shape.varlen, q is [total_q, Hq, D] and query_start_loc [B + 1] (u32 data held as i32).
struct PagedAttentionInputs {
  PagedAttentionShape shape;
  launch::Buffer q, k_cache, v_cache, block_table, context_lens, alibi_slopes, query_start_loc, sinks;

  // Sequence b's query rows (Sq_b), and the element offset of its row i of head h in q and out.
  int64_t query_len(int64_t b) const;
  size_t q_offset(int64_t b, int64_t h, int64_t i) const;
  // Rows of q over all heads: B * Hq * Sq, or total_q * Hq.
  int64_t q_rows() const;
};

// Random inputs (values in [-1, 1]; an fp8 cache holds them divided by its scale, which is
// amax / the format's largest finite value unless the shape sets one): context lengths ragged in [0, capacity] (`ctx` >= 0 fixes them all; with
// ctx = -1 and more than one sequence, the lengths differ and at least one ends inside a
// page), block tables pointing at distinct pages in random order. The unused block-table
// slots past each sequence's live pages point at random valid pages, or with
// `poison_unused` hold values no kernel may follow (-1 and num_blocks and beyond), as the
// default problem of `tilec run` has them: a kernel that reads a page it should not fails
// the emulator's bounds check. A cache of more than kSparseCacheBytes (sparse_cache()) is
// filled only on the pages live block-table entries name, which are its last ones; the rest
// stay zero and, in a lazily mapped buffer, take no memory.
PagedAttentionInputs make_paged_attention_inputs(const PagedAttentionShape& s, uint64_t seed, int64_t ctx = -1,
                                                 bool poison_unused = false);
// `in`'s block table with the entries past each sequence's live pages set to 0, for the
// decomposition, which gathers every entry (what they point at is masked out).
launch::Buffer block_table_unused_cleared(const PagedAttentionInputs& in);

// Checks shapes, dtypes and values before any launch; UserError naming the
// input and the numbers. `decompose` additionally requires every block-table
// entry (not just the live ones) to be < num_blocks, since it reads them all.
void validate_paged_attention(const PagedAttentionInputs& in, bool decompose);

// The magnitudes a run's rounding errors scale with (paged_attention_tolerance), over every
// (query row, key) pair the masks let through. `score`: the largest sum of the magnitudes of
// the terms that form a score and of the score itself, each of which the kernels round in f32:
// scale * k_scale * sum_d |q_d k_d| (the dot product's terms), |softcap(x)| (tanh's error is
// relative, as the GPU computes it too), |alibi term| and |score|. `value`: the largest
// dequantized |v| of a key some row sees. `keys`: the most keys one query row sees.
struct PagedAttentionMagnitudes {
  double score = 0.0, value = 0.0;
  int64_t keys = 0;
};

// out [B, Hq, Sq, D] in f32, computed in double. `magnitudes`, when given, receives what the
// computation saw.
launch::Buffer paged_attention_reference(const PagedAttentionInputs& in,
                                         PagedAttentionMagnitudes* magnitudes = nullptr);

// The comparison tolerance |got - want| <= atol + rtol * |want| of a run against the
// reference, from q's dtype and the magnitudes the reference saw (the rule is in
// paged_attention.cpp; docs/PAGED_ATTENTION.md).
struct PagedAttentionTolerance {
  double atol = 0.0, rtol = 0.0;
};
PagedAttentionTolerance paged_attention_tolerance(const PagedAttentionShape& s, const PagedAttentionMagnitudes& m);

// The column tiles the fused kernel reads q's and K's rows in: from column `at`, a power of two
// `width` wide of which the first `valid` are the row's (the lanes past them masked). One tile
// of the next power of two up to head_dim 256; past it, or in the latent form, the largest
// power of two at most head_dim and a tile for the rest (MLA's 576: 512 and 64), so the first
// is V's in the latent form and no tile pads 576 to 1024.
struct PagedAttentionColumns {
  int64_t at, width, valid;
};
std::vector<PagedAttentionColumns> paged_attention_qk_columns(const PagedAttentionShape& s);

// The fused kernel's tunables (docs/ARCHITECTURE.md / configs/paged_attention.toml).
struct PagedAttentionConfig {
  int64_t block_n = 32;    // tokens per step of the block-table walk
  int64_t head_group = 0;  // query heads per program (0: all Hq/Hkv heads of a KV head)
  int64_t num_warps = 4;
  int64_t num_splits = 1;  // split-KV partitions (flash-decoding), combined by a second kernel
  int64_t num_stages = 2;  // software-pipeline stages of the K/V copies (f16/bf16 caches)
  int64_t block_m = 0;     // query rows per program over head_group x Sq packed rows (0: automatic)
  // > 0: split-KV by size instead of count. Every walk is cut into pieces of split_tokens keys
  // (a multiple of block_n) from its first key, each its own program, so no program walks more
  // than split_tokens keys however long one sequence is, and a sequence's cuts depend on its own
  // length alone (batch-invariant). The grid's splits are as many as the longest walk the cache
  // holds needs (paged_attention_splits), fixed by the maximum sizes; num_splits must be 1.
  int64_t split_tokens = 0;
  // > 0 (with split_tokens): a plan lists every sequence's pieces on the device, and this many
  // programs share them, each the same number within one: the grid is plan_programs, not one
  // program per piece the capacity allows.
  int64_t plan_programs = 0;
  // 1: the walk in FlashAttention-3's order (docs/PAGED_ATTENTION.md "Overlap"): each trip
  // computes its scores, then the previous step's P.V, then its softmax, so that on Hopper the
  // softmax runs while the tensor cores do that product; the last P.V follows the walk. 0: each
  // trip's P.V after its own softmax.
  int64_t overlap = 0;
  // 1: on sm_90, the walk's whole K and V tiles come through tensor descriptors, each tile
  // block_n / block_size boxes of its pages' rows (one box when block_size is a multiple of
  // block_n), copied by TMA into the wgmma's staging (docs/PAGED_ATTENTION.md "K/V by TMA").
  // The kernel then takes `cache_rows` (num_blocks x block_size) after max_blocks. Elsewhere the
  // same gathers run as masked loads. 0: the K/V tiles are gathered loads (cp.async on the GPU).
  int64_t kv_tma = 0;
};
constexpr int64_t kMaxPlanPrograms = int64_t(1) << 20;
// What a planned piece costs, by which the plan shares the pieces among the programs
// (docs/PAGED_ATTENTION.md): its keys in units of kPlanCostUnitKeys, rounded up, and a fixed
// kPlanPieceCostUnits (its q tile, its partials and the combine's read of them, the walk's
// set-up: 32 keys' worth, half a step of 64). A model, not a measurement.
constexpr int64_t kPlanCostUnitKeys = 16;
constexpr int64_t kPlanPieceCostUnits = 2;
constexpr int64_t plan_piece_cost(int64_t keys) {
  return (keys + kPlanCostUnitKeys - 1) / kPlanCostUnitKeys + kPlanPieceCostUnits;
}

// The KV splits of the grid: num_splits, or with split_tokens the pieces of the longest walk
// the cache holds (max_blocks x block_size keys) rounded up to a power of two. UserError for
// split_tokens that is not a multiple of block_n, beside num_splits > 1, or past 256 splits.
constexpr int64_t kMaxSplits = 256;
int64_t paged_attention_splits(const PagedAttentionShape& s, const PagedAttentionConfig& cfg);

// A program's query rows: the head_group x Sq rows of a KV head's head group, packed
// position-major (row i * head_group + g for position i, head g), in tiles of block_m. block_m
// 0 chooses the most rows, a power of two, with rows x (head_dim rounded up to a power of two
// + block_n) at most kAutoTileElems per warp: the q and score tiles stay in registers (with 4
// warps and block_n 32: 64 rows for head_dim 64, 32 for 128, 16 for 256), which compile
// without spills on sm_80 and sm_90 (tests/codegen/test_prefill.cpp). Any block_m is cut to
// the packed rows rounded up to a power of two. UserError for a block_m that is not 0 or a
// power of two up to kMaxBlockM.
constexpr int64_t kMaxBlockM = 256, kAutoTileElems = 2048;
int64_t paged_attention_block_m(const PagedAttentionShape& s, const PagedAttentionConfig& cfg);
// Whether the fused kernel computes a tile's products transposed, S^T = K q^T and
// O^T = V^T P^T, its query rows being the tensor cores' 8 columns instead of 16 rows padded
// from a few: a tile of at most 8 rows in f16/bf16 whose block_n and padded head_dim give
// every warp 16 rows of each product. Its rows are repeated up to 8 (each read and stored
// once).
bool paged_attention_transposed(const PagedAttentionShape& s, const PagedAttentionConfig& cfg);
// Query tiles per (sequence, head-group chunk): the fused kernel's grid is
// (batch x query tiles, Hkv x Hq / Hkv / head_group, num_splits).
int64_t paged_attention_query_tiles(const PagedAttentionShape& s, const PagedAttentionConfig& cfg);

// out [B, Hq, Sq, D] in q's dtype.
launch::Buffer run_paged_attention_fused(const PagedAttentionInputs& in,
                                         const PagedAttentionConfig& cfg, launch::Launcher& launcher);
// `block_table`, when given, replaces in.block_table (block_table_unused_cleared(in)): the
// caches are used in place, never copied.
launch::Buffer run_paged_attention_decomposed(const PagedAttentionInputs& in, launch::Launcher& launcher,
                                              const launch::Buffer* block_table = nullptr);

// Bytes the op must move at least: q + out + K and V of the live tokens + the
// block-table entries and context lengths it reads (+ alibi slopes).
int64_t paged_attention_ideal_bytes(const PagedAttentionInputs& in);

// What a correct run of the fused kernel (and its combine kernel) moves, in bytes of
// warp-wide requests as the emulator counts them (LaunchStats::request_bytes), buffer by
// buffer: the walk of every program replayed on the host (paged_attention_io.cpp explains
// each term). The template's traffic budget is its total plus 2%.
struct PagedAttentionTraffic {
  int64_t q = 0, alibi_slopes = 0, sinks = 0, context_lens = 0, query_start_loc = 0, block_table = 0, k_cache = 0,
          v_cache = 0, out = 0;
  int64_t partials = 0; // num_splits > 1: partial_o, partial_m, partial_l written and read back
  int64_t plan = 0;     // plan_programs > 0: the plan written and read
  int64_t total() const {
    return q + alibi_slopes + sinks + context_lens + query_start_loc + block_table + k_cache + v_cache + out + partials +
           plan;
  }
};
PagedAttentionTraffic paged_attention_traffic(const PagedAttentionInputs& in, const PagedAttentionConfig& cfg);

} // namespace tilec::templates

namespace tilec::templates {
// The fused kernel for a problem shape and config (for `tilec ir`, codegen tests).
ir::Kernel paged_attention_fused_kernel(const PagedAttentionShape& s, const PagedAttentionConfig& cfg);
// The plan of planned split-KV (plan_programs > 0): every sequence's pieces, listed on the device.
ir::Kernel paged_attention_plan_kernel(const PagedAttentionShape& s, const PagedAttentionConfig& cfg);
// The kernel that combines num_splits f32 partials per row (num_splits > 1); with sinks, it
// adds each row's sink to the denominator once.
ir::Kernel paged_attention_combine_kernel(const PagedAttentionShape& s, const PagedAttentionConfig& cfg);
// The values of the op's declared run (run_description.h) for a problem and a config: the
// fused path's grids and split partials and the modules' specialization come from there.
// total_q: the packed query rows of a mixed batch (0: batch * sq).
rt::RunValues paged_attention_run_values(const PagedAttentionShape& s, const PagedAttentionConfig& cfg,
                                         int64_t total_q = 0);
// What the fused kernel (and its combine kernel) is specialized on, by the names of the
// template's --shape and --set values plus softcap (0/1): the manifest's [specialization], the
// declared run's spec. UserError for a config the kernels cannot be built for.
std::map<std::string, rt::SpecValue> paged_attention_module_spec(const PagedAttentionShape& s,
                                                                 const PagedAttentionConfig& cfg);
} // namespace tilec::templates

namespace tilec::templates {

KernelTemplate paged_attention_template();

// The problem described by `tilec run paged_attention --shape ...` values
// (max_blocks 0: just enough pages for ctx; ctx -1: random lengths). A "softcap" entry
// (not a --shape name; module builders pass it) set to 1 specializes for a softcap.
PagedAttentionShape paged_attention_shape(const ParamMap& shape);
PagedAttentionConfig paged_attention_config(const ParamMap& params);

// Reads q.npy k_cache.npy v_cache.npy block_table.npy context_lens.npy
// [alibi_slopes.npy] from `dir` (the op's input names). q/k/v may be <f4, <f2, or
// <u2 holding bfloat16 bits; the caches also |u1 holding fp8 bits when `kv_fp8` names their
// format (and only then); the tables <u4 or <i4. Shapes come from the files; the fp8 scales
// are the caller's to set.
PagedAttentionInputs read_paged_attention_inputs(const std::string& dir, double softmax_scale,
                                                 std::optional<double> softcap,
                                                 std::optional<ir::DType> kv_fp8 = std::nullopt);
// Writes the inputs as .npy files into `dir` (creating it).
void write_paged_attention_inputs(const std::string& dir, const PagedAttentionInputs& in);
// Writes `out` ([B, Hq, Sq, D], in q's dtype) as a .npy file.
void write_paged_attention_output(const std::string& path, const PagedAttentionInputs& in,
                                  const launch::Buffer& out);

} // namespace tilec::templates
