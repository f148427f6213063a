// Paged attention's registry entry: its parameters, sizes, float options, tensors, paths and
// the rest of the contract every command uses, and how its sizes and config are read.
#include <array>
#include <string_view>
#include <fmt/format.h>

#include <cmath>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <filesystem>

#include <unistd.h>

#include "abi/limits.h"
#include "runtime/npy.h"
#include "templates/attention/paged_attention.h"
#include "templates/attention/run_description.h"

namespace tilec::templates {

namespace {

// constexpr, not std::vector: the registry builds the templates during static initialization
// when a user's kernel registers itself (TILEC_REGISTER_KERNEL), possibly before this file's
// dynamic initializers have run.
constexpr std::array<std::string_view, 3> kDtypes = {"f32", "f16", "bf16"};
constexpr std::array<std::string_view, 3> kKvDtypes = {"same", "f8e4m3", "f8e5m2"}; // "same": q's dtype

// The float options as the kernels take them: f32 arguments. A value f32 cannot hold (1e39)
// would become inf there and one below its normal range 0 (or a denormal a GPU flushes to 0),
// so each is refused with its name: the fp8 scales and the softcap must be positive, the
// softmax scale nonzero (0 is not "the default": leave it out for 1/sqrt(head_dim)). The
// scales belong to fp8 caches only.
void check_float_options(const std::map<std::string, double>& options, std::optional<ir::DType> kv_fp8) {
  const double lo = std::numeric_limits<float>::min(), hi = std::numeric_limits<float>::max();
  const std::string range = fmt::format("f32's normal range, {:g} to {:g}: the kernels take it as an f32", lo, hi);
  auto normal = [&](double v) { return std::abs(v) >= lo && std::abs(v) <= hi; };
  for (const char* name : {"k-scale", "v-scale"}) {
    auto it = options.find(name);
    if (it == options.end()) continue;
    const std::string field = name[0] == 'k' ? "k_scale" : "v_scale";
    if (!kv_fp8)
      throw UserError(fmt::format("--{} {}: the caches are not fp8, so there is no {} to apply (set --shape "
                                  "kv_dtype=f8e4m3 or f8e5m2 for fp8 caches)", name, it->second, field));
    if (!(it->second > 0 && normal(it->second)))
      throw UserError(fmt::format("--{} {}: the {} caches' {} must be a positive number in {}", name, it->second,
                                  ir::dtype_name(*kv_fp8), field, range));
  }
  if (auto it = options.find("softcap"); it != options.end() && !(it->second > 0 && normal(it->second)))
    throw UserError(fmt::format("--softcap {}: the softcap must be a positive number in {}", it->second, range));
  if (auto it = options.find("softmax-scale"); it != options.end() && !normal(it->second))
    throw UserError(fmt::format("--softmax-scale {}: the softmax scale must be a nonzero number with a magnitude in {} "
                                "(leave it out for 1/sqrt(head_dim))", it->second, range));
}

} // namespace

PagedAttentionShape paged_attention_shape(const ParamMap& p) {
  // Each size is bounded before any product of them is formed or allocated: a product of
  // wild values would overflow, or ask for more memory than any machine has.
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  auto in_range = [&](const char* name, int64_t lo, int64_t hi) {
    int64_t v = p.at(name);
    if (v < lo || v > hi) throw UserError(fmt::format("--shape {}={}: must be from {} to {}", name, v, lo, hi));
    return v;
  };
  PagedAttentionShape s;
  s.batch = in_range("batch", 1, kMaxDim);
  s.hq = in_range("hq", 1, kMaxDim);
  s.hkv = in_range("hkv", 1, kMaxDim);
  s.sq = in_range("sq", 1, kMaxDim);
  s.head_dim = p.at("head_dim");
  if (std::string why = head_dim_error(s.head_dim); !why.empty()) throw UserError("--shape " + why);
  s.head_dim_v = p.count("head_dim_v") ? p.at("head_dim_v") : 0;
  s.latent = p.count("latent") && in_range("latent", 0, 1) != 0;
  if (std::string why = head_dim_v_error(s.head_dim, s.head_dim_v, s.latent); !why.empty())
    throw UserError("--shape " + why);
  s.block_size = in_range("block_size", 1, 256);
  s.dtype = *ir::parse_dtype(kDtypes.at(size_t(p.at("dtype"))));
  if (int64_t kv = p.count("kv_dtype") ? p.at("kv_dtype") : 0; kv != 0) s.kv_fp8 = ir::parse_dtype(kKvDtypes.at(size_t(kv)));
  s.alibi = in_range("alibi", 0, 1) != 0;
  s.sinks = p.count("sinks") && in_range("sinks", 0, 1) != 0;
  int64_t ctx = in_range("ctx", -1, int64_t(1) << 31);
  s.max_blocks = in_range("max_blocks", 0, kMaxDim);
  s.num_blocks = in_range("num_blocks", 0, kMaxDim);
  if (auto cap = p.find("softcap"); cap != p.end() && cap->second) s.softcap = 1.0;
  s.window = p.count("window") ? p.at("window") : 0;
  if (s.window < 0) throw UserError(fmt::format("--shape window={}: must be positive (0: no window)", s.window));
  s.causal = p.count("causal") && in_range("causal", 0, 1) != 0;
  s.chunk = p.count("chunk") ? p.at("chunk") : 0;
  if (s.chunk < 0) throw UserError(fmt::format("--shape chunk={}: must be positive (0: no chunks)", s.chunk));
  s.varlen = p.count("varlen") && in_range("varlen", 0, 1) != 0;
  if (s.causal && ctx >= 0 && ctx < s.sq)
    throw UserError(fmt::format("--shape causal=1 sq={} ctx={}: the query rows are the last Sq positions of the "
                                "context, so ctx must be at least sq", s.sq, ctx));
  if (s.hq % s.hkv != 0)
    throw UserError(fmt::format("--shape hq={} hkv={}: Hq is not a multiple of Hkv", s.hq, s.hkv));
  // Enough pages for ctx; without one, 16 or enough for the query rows (a prefill's context
  // holds at least its own rows), whichever is more.
  if (s.max_blocks == 0) s.max_blocks = ctx > 0 ? cdiv(ctx, s.block_size) : std::max<int64_t>(16, cdiv(s.sq, s.block_size));
  if (ctx > s.capacity())
    throw UserError(fmt::format("--shape ctx={} exceeds max_blocks * block_size = {} * {} = {}", ctx,
                                s.max_blocks, s.block_size, s.capacity()));
  if (s.causal && s.capacity() < s.sq)
    throw UserError(fmt::format("--shape causal=1 sq={}: the query rows are the last Sq positions of each context, "
                                "so max_blocks * block_size = {} * {} = {} must be at least sq", s.sq, s.max_blocks,
                                s.block_size, s.capacity()));
  // Tensors past 2^31 elements are fine (offsets into them are 64-bit, ir::widen_offsets);
  // one past a process's address space is not. Products in double: no overflow.
  auto fits = [](const std::string& what, double elements, int elem_bytes) {
    if (elements * elem_bytes > double(kMaxTensorBytes))
      throw UserError(fmt::format("--shape: {} has {:.0f} elements ({:.0f} bytes); a tensor takes at most 2^44 bytes "
                                  "(16 TiB)", what, elements, elements * elem_bytes));
  };
  double num_blocks = double(s.num_blocks ? s.num_blocks : s.batch * s.max_blocks);
  fits(fmt::format("q [batch={}, hq={}, sq={}, head_dim={}]", s.batch, s.hq, s.sq, s.head_dim),
       double(s.batch) * double(s.hq) * double(s.sq) * double(s.head_dim), ir::dtype_bytes(s.dtype));
  fits(fmt::format("the KV cache [num_blocks={}{}, block_size={}, hkv={}, head_dim={}]", num_blocks,
                   s.num_blocks ? "" : " (batch * max_blocks)", s.block_size, s.hkv, s.head_dim),
       num_blocks * double(s.block_size) * double(s.hkv) * double(s.head_dim), ir::dtype_bytes(s.cache_dtype()));
  fits(fmt::format("the block table [batch={}, max_blocks={}]", s.batch, s.max_blocks),
       double(s.batch) * double(s.max_blocks), 4);
  return s;
}

// Generated inputs live in host memory: q, out and its f32 reference, the block table, and
// the caches (only their live pages when sparse). UserError when they cannot fit.
void check_host_memory(const PagedAttentionShape& s) {
  const double q = double(s.batch) * double(s.hq) * double(s.sq) * double(s.head_dim);
  const double pages = s.sparse_cache() ? std::min(double(s.num_blocks ? s.num_blocks : s.batch * s.max_blocks),
                                                   double(s.batch) * double(s.max_blocks))
                                        : double(s.num_blocks ? s.num_blocks : s.batch * s.max_blocks);
  const double need = q * (2 * ir::dtype_bytes(s.dtype) + 4) + double(s.batch) * double(s.max_blocks) * 4 +
                      pages * double(s.block_size * s.hkv * (s.head_dim + (s.latent ? 0 : s.dv()))) * ir::dtype_bytes(s.cache_dtype());
  const double have = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  if (have > 0 && need > have)
    throw UserError(fmt::format("--shape: the problem's inputs and outputs need {:.1f} GiB of host memory (q, out, "
                                "the block table and the caches' {}pages); this machine has {:.1f} GiB",
                                need / double(1 << 30), s.sparse_cache() ? "live " : "", have / double(1 << 30)));
}

PagedAttentionConfig paged_attention_config(const ParamMap& p) {
  return {p.at("block_n"), p.at("head_group"), p.at("num_warps"), p.at("num_splits"), p.at("num_stages"),
          p.count("block_m") ? p.at("block_m") : 0, p.count("split_tokens") ? p.at("split_tokens") : 0,
          p.count("plan_programs") ? p.at("plan_programs") : 0, p.count("overlap") ? p.at("overlap") : 0,
          p.count("kv_tma") ? p.at("kv_tma") : 0};
}

KernelTemplate paged_attention_template() {
  KernelTemplate t;
  t.name = "paged_attention";
  t.summary = "paged-KV-cache attention for decoding: fused block-table walk (--path fused) or the "
              "seed's primitive decomposition (--path decompose)";
  t.params = {{"block_n", 32, "tokens per step of the block-table walk (power of two)"},
              {"head_group", 0, "query heads per program sharing one KV head (0: all Hq/Hkv)"},
              {"num_warps", 4, "warps per program on the GPU"},
              {"num_splits", 1, "split-KV partitions combined by a second kernel (power of two)"},
              {"num_stages", 2, "K/V copies in flight: software-pipeline stages (1: none; f16/bf16 on tensor cores)"},
              {"block_m", 0, "query rows per program over head_group x sq packed rows (power of two; 0: automatic)"},
              {"split_tokens", 0, "split-KV by size: keys per split (a multiple of block_n; num_splits 1), as many "
                                  "splits as the cache's capacity needs; 0: num_splits"},
              {"plan_programs", 0, "with split_tokens: this many programs share the pieces a plan on the device lists "
                                   "(0: a program per piece the capacity allows)"},
              {"overlap", 0, "1: each trip of the K/V walk does its scores, the previous step's P.V, then its "
                             "softmax (FlashAttention-3's order: on Hopper the softmax overlaps the P.V wgmma)"},
              {"kv_tma", 0, "1: the walk's whole K/V tiles are tensor-descriptor gathers of block_n / block_size page "
                            "boxes (TMA copies on sm_90 with wgmma, a box of 8 rows or more)"}};
  t.shape = {{"batch", 2, "sequences"},
             {"hq", 8, "query heads"},
             {"hkv", 2, "KV heads (Hq % Hkv == 0)"},
             {"sq", 1, "query rows per sequence"},
             {"head_dim", 64, "head dimension of q and K (multiple of 8, 16..576)"},
             {"head_dim_v", 0, "head dimension of V and out (multiple of 8, 16..512; 0: head_dim, latent: its first power-of-two tile)"},
             {"latent", 0, "1: one latent cache (MLA): no v_cache, V is k_cache's first head_dim_v columns"},
             {"block_size", 16, "tokens per cache page (1..256)"},
             {"max_blocks", 0, "block-table columns (0: enough for ctx, else for sq and at least 16)"},
             {"num_blocks", 0, "pages in the cache (0: batch * max_blocks)"},
             {"ctx", -1, "context length of every sequence (-1: random per sequence)", {}, -1},
             {"dtype", 0, "q/k/v dtype", {kDtypes.begin(), kDtypes.end()}},
             {"alibi", 0, "1: add ALiBi slopes"},
             {"sinks", 0, "1: attention sinks, one logit per query head in each row's softmax denominator (gpt-oss)"},
             {"window", 0, "sliding window: query row i sees keys j > p_i - window (0: none)"},
             {"causal", 0, "1: query row i sees keys j <= p_i (p_i = ctx - sq + i)"},
             {"chunk", 0, "chunked local attention: query row i sees keys j with j // chunk == p_i // chunk (0: none)"},
             {"varlen", 0, "1: mixed batch: q and out packed [total_q, hq, head_dim] with query_start_loc [batch+1], "
                           "query lengths from 0 to sq (fused path)"},
             {"kv_dtype", 0, "k/v cache dtype: q's, or fp8 with --k-scale/--v-scale",
              {kKvDtypes.begin(), kKvDtypes.end()}}};
  t.build = [](const ParamMap& params, const ParamMap& shape) {
    PagedAttentionShape s = paged_attention_shape(shape);
    return paged_attention_fused_kernel(s, paged_attention_config(params));
  };
  t.build_all = [](const ParamMap& params, const ParamMap& shape) {
    PagedAttentionShape s = paged_attention_shape(shape);
    PagedAttentionConfig cfg = paged_attention_config(params);
    std::vector<ir::Kernel> ks;
    if (cfg.plan_programs) ks.push_back(paged_attention_plan_kernel(s, cfg)); // launched first
    ks.push_back(paged_attention_fused_kernel(s, cfg));
    if (paged_attention_splits(s, cfg) > 1) ks.push_back(paged_attention_combine_kernel(s, cfg));
    return ks;
  };
  // Offsets into a cache (or q and out, or the split partials) past 2^31 elements are 64-bit.
  t.large_buffers = [](const ParamMap& params, const ParamMap& shape) {
    PagedAttentionShape s = paged_attention_shape(shape);
    const int64_t rows = s.batch * s.hq * s.sq, limit = int64_t(1) << 31; // (varlen: total_q <= batch x sq)
    std::set<std::string> r;
    if (s.cache_elements() > limit) r.insert("k_cache");
    if (s.v_cache_elements() > limit) r.insert("v_cache");
    if (rows * s.head_dim > limit) r.insert("q");
    if (rows * s.dv() > limit) r.insert("out");
    if (rows * paged_attention_config(params).num_splits * s.dv() > limit) r.insert("partial_o");
    return r;
  };
  t.module_spec = [](const ParamMap& params, const ParamMap& shape) {
    return paged_attention_module_spec(paged_attention_shape(shape), paged_attention_config(params));
  };
  t.options = {{"softmax-scale", "scale of q.k (default 1/sqrt(head_dim))"},
               {"softcap", "cap * tanh(s / cap) on the scores (default none)"},
               {"k-scale", "fp8 k_cache: its values are k / k_scale (required with --inputs; generated: amax/max)"},
               {"v-scale", "fp8 v_cache: its values are v / v_scale (required with --inputs; generated: amax/max)"}};
  t.reads_inputs = true;
  t.inputs_help =
      "q.npy k_cache.npy [v_cache.npy: none in the latent form] block_table.npy context_lens.npy [alibi_slopes.npy] "
      "[sinks.npy] [query_start_loc.npy]";
  t.make_problem = [](const ProblemRequest& r) {
    std::optional<ir::DType> kv_fp8;
    if (int64_t kv = r.shape.count("kv_dtype") ? r.shape.at("kv_dtype") : 0; kv != 0)
      kv_fp8 = ir::parse_dtype(kKvDtypes.at(size_t(kv)));
    check_float_options(r.options, kv_fp8);
    std::optional<double> softcap;
    if (auto it = r.options.find("softcap"); it != r.options.end()) softcap = it->second;
    double scale = r.options.count("softmax-scale") ? r.options.at("softmax-scale") : 0.0;
    auto option = [&](const char* name) { return r.options.count(name) ? r.options.at(name) : 0.0; };
    PagedAttentionInputs in;
    if (!r.inputs_dir.empty()) {
      in = read_paged_attention_inputs(r.inputs_dir, scale, softcap, kv_fp8);
      // Masks are parameters of the op, not data: from --shape.
      in.shape.window = r.shape.count("window") ? r.shape.at("window") : 0;
      in.shape.causal = r.shape.count("causal") && r.shape.at("causal") != 0;
      in.shape.chunk = r.shape.count("chunk") ? r.shape.at("chunk") : 0;
      // The latent form has no v_cache.npy to give V's head dim: --shape head_dim_v (0: all of K).
      if (in.shape.latent && r.shape.count("head_dim_v")) in.shape.head_dim_v = r.shape.at("head_dim_v");
      if (r.shape.count("sinks") && r.shape.at("sinks") != 0 && !in.shape.sinks)
        throw UserError(fmt::format("--inputs {}: --shape sinks=1 needs sinks.npy (<f4 [Hq])", r.inputs_dir));
      if (kv_fp8)
        for (const char* name : {"k-scale", "v-scale"})
          if (!r.options.count(name) && !(in.shape.latent && name[0] == 'v')) // (the latent cache: k's alone)
            throw UserError(fmt::format("--inputs {}: the caches are {} (--shape kv_dtype), so --{} is required: "
                                        "the scale they were quantized with", r.inputs_dir, ir::dtype_name(*kv_fp8), name));
      in.shape.k_scale = option("k-scale");
      in.shape.v_scale = in.shape.latent && !r.options.count("v-scale") ? in.shape.k_scale : option("v-scale");
    } else {
      PagedAttentionShape s = paged_attention_shape(r.shape);
      s.softmax_scale = scale;
      s.softcap = softcap;
      s.k_scale = option("k-scale");
      s.v_scale = option("v-scale");
      check_host_memory(s);
      in = make_paged_attention_inputs(s, r.seed, r.shape.at("ctx"), /*poison_unused=*/true);
    }
    validate_paged_attention(in, false);
    const PagedAttentionShape& s = in.shape;
    Problem p;
    p.outputs = {p.add_buffer(launch::Buffer("out", s.dtype, size_t(in.q_rows() * s.dv())))};
    PagedAttentionMagnitudes seen;
    p.expected = {paged_attention_reference(in, &seen)};
    // Every path computes the scores in f32 and writes the output in q's dtype: inputs whose
    // scores or output those cannot hold have no right answer to compare with.
    if (seen.score > double(std::numeric_limits<float>::max()) / 16)
      throw UserError(fmt::format("paged_attention: the terms of a score reach {:g} in magnitude (scale * k_scale * "
                                  "sum |q k|, softcap, ALiBi): past the f32 range every path computes them in",
                                  seen.score));
    const double out_max = s.dtype == ir::DType::f16    ? 65504.0
                           : s.dtype == ir::DType::bf16 ? 3.3895313892515355e38
                                                        : double(std::numeric_limits<float>::max());
    for (size_t i = 0; i < p.expected[0].count(); ++i)
      if (std::abs(p.expected[0].get(i)) > out_max)
        throw UserError(fmt::format("paged_attention: out[{}] = {:g} exceeds {}'s largest finite value {:g} (the output "
                                    "is in q's dtype)", i, p.expected[0].get(i), ir::dtype_name(s.dtype), out_max));
    // The tolerance follows q's dtype and the magnitudes the scores and values reached
    // (paged_attention_tolerance states the rule).
    const PagedAttentionTolerance tol = paged_attention_tolerance(s, seen);
    p.atol = tol.atol;
    p.rtol = tol.rtol;
    p.ideal_bytes = paged_attention_ideal_bytes(in);
    p.description = r.inputs_dir.empty()
                        ? fmt::format("batch={} hq={} hkv={} sq={} head_dim={} block_size={} max_blocks={}{} {}{}{}{}{}{}{}{}{}",
                                      s.batch, s.hq, s.hkv, s.sq, s.head_dim, s.block_size, s.max_blocks,
                                      s.num_blocks != s.batch * s.max_blocks
                                          ? fmt::format(" num_blocks={} ({} elements per cache{})", s.num_blocks,
                                                        s.cache_elements(), s.sparse_cache() ? ", live pages filled" : "")
                                          : "",
                                      ir::dtype_name(s.dtype),
                                      s.kv_fp8 ? fmt::format(" {} cache (scales {:g}, {:g})", ir::dtype_name(*s.kv_fp8),
                                                             s.k_scale, s.v_scale)
                                               : "",
                                      s.alibi ? " alibi" : "", s.sinks ? " sinks" : "",
                                      s.dv() != s.head_dim ? fmt::format(" head_dim_v={}", s.dv()) : "",
                                      s.latent ? " latent" : "",
                                      s.window > 0 ? fmt::format(" window={}", s.window) : "",
                                      s.causal ? " causal" : "",
                                      s.chunk > 0 ? fmt::format(" chunk={}", s.chunk) : "")
                        : r.inputs_dir;
    if (!r.inputs_dir.empty()) {
      int64_t ctx = 0;
      for (size_t b = 0; b < in.context_lens.count(); ++b) ctx = std::max(ctx, in.context_lens.get_int(b));
      p.shape = {{"batch", s.batch}, {"hq", s.hq}, {"hkv", s.hkv}, {"sq", s.sq}, {"head_dim", s.head_dim},
                 {"block_size", s.block_size}, {"max_blocks", s.max_blocks}, {"num_blocks", s.num_blocks},
                 {"ctx", ctx}, {"alibi", s.alibi}, {"sinks", s.sinks}, {"head_dim_v", s.head_dim_v},
                 {"latent", s.latent}, {"window", s.window}, {"causal", s.causal}, {"chunk", s.chunk}, {"varlen", s.varlen},
                 {"dtype", std::find(kDtypes.begin(), kDtypes.end(), ir::dtype_name(s.dtype)) - kDtypes.begin()},
                 {"kv_dtype", s.kv_fp8 ? std::find(kKvDtypes.begin(), kKvDtypes.end(), ir::dtype_name(*s.kv_fp8)) -
                                             kKvDtypes.begin()
                                       : 0}};
    }
    p.context = std::move(in);
    return p;
  };
  // Both paths validate the inputs first (the decomposition reads every block-table entry).
  auto inputs = [](Problem& p) -> const PagedAttentionInputs& { return std::any_cast<const PagedAttentionInputs&>(p.context); };
  t.paths = {{"fused", "one kernel walking the block table (cost grows with the live context)",
              [inputs](Problem& p, const ParamMap& params, const ParamMap&, launch::Launcher& l) {
                p.buffers[p.outputs[0]] = run_paged_attention_fused(inputs(p), paged_attention_config(params), l);
              }},
             {"decompose",
              "the seed's recipe of primitive launches (cost grows with the padded capacity); it gathers every "
              "block-table entry, so entries past a sequence's live pages are pointed at page 0 first (masked "
              "out either way)",
              [inputs](Problem& p, const ParamMap&, const ParamMap&, launch::Launcher& l) {
                validate_paged_attention(inputs(p), false);
                if (inputs(p).shape.varlen)
                  throw UserError("paged_attention: the decompose path takes the seed's fixed-Sq layout [B, Hq, Sq, D]; "
                                  "a mixed batch (varlen=1, query_start_loc) runs on --path fused");
                launch::Buffer table = block_table_unused_cleared(inputs(p));
                p.buffers[p.outputs[0]] = run_paged_attention_decomposed(inputs(p), l, &table);
              }}};
  t.write_output = [](const std::string& path, const Problem& p) {
    write_paged_attention_output(path, std::any_cast<const PagedAttentionInputs&>(p.context), p.buffers[p.outputs[0]]);
  };
  // The query length decides the tile (head_group x sq packed rows in tiles of block_m), so it
  // comes first, and a nearer key must share its bucket: decode (1), speculative verification
  // (2-4, 5-16), short prefill chunks (17-128) and prefill (above 128) each tune their own.
  t.size_fields = {"sq", "ctx", "batch", "max_blocks", "num_blocks"};
  t.size_buckets = {{"sq", {1, 4, 16, 128}}};
  // V's head dim given as the form's default (head_dim's, or the latent form's first tile) is
  // the key's 0, as the declared run's head_dim_v_key computes it and the modules are specialized.
  t.canonical_key = [](ParamMap& shape) {
    PagedAttentionShape s;
    s.head_dim = shape.at("head_dim");
    s.head_dim_v = shape.at("head_dim_v");
    s.latent = shape.at("latent") != 0;
    shape["head_dim_v"] = s.head_dim_v_key();
  };
  // For configs/paged_attention.toml's register and shared-memory constraints: the query rows a
  // program holds once block_m 0 is chosen and any block_m cut to the packed rows.
  t.derived = {"tile_m"};
  t.derive = [](const ParamMap& params, const ParamMap& shape) {
    return ParamMap{{"tile_m", paged_attention_block_m(paged_attention_shape(shape), paged_attention_config(params))}};
  };
  // What a correct run moves (paged_attention_traffic, every term explained there) and 2% more
  // (the replay matches the emulator's count exactly over random sweeps; the 2% leaves room for
  // a layout change): one K/V tile too many shows on small problems.
  t.traffic_budget = [](const Problem& p, const ParamMap& params) -> std::optional<int64_t> {
    if (!p.ideal_bytes) return std::nullopt;
    const PagedAttentionInputs& in = std::any_cast<const PagedAttentionInputs&>(p.context);
    const int64_t moved = paged_attention_traffic(in, paged_attention_config(params)).total();
    return static_cast<int64_t>(std::ceil(double(std::max(moved, *p.ideal_bytes)) * 1.02));
  };
  t.module_variants = {{{"softcap", 0}}, {{"softcap", 1}}};
  t.run = paged_attention_run; // run_description.cpp
  return t;
}

} // namespace tilec::templates
