// Paged attention's registry entry and its .npy inputs and outputs.
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

namespace tilec::templates {

namespace {

// constexpr, not std::vector: the registry builds the templates during static initialization
// when a user's kernel registers itself (TILEC_REGISTER_KERNEL), possibly before this file's
// dynamic initializers have run.
constexpr std::array<std::string_view, 3> kDtypes = {"f32", "f16", "bf16"};
constexpr std::array<std::string_view, 3> kKvDtypes = {"same", "f8e4m3", "f8e5m2"}; // "same": q's dtype


// Converts an .npy array to a buffer of `want` dtype class; `what` names the file.
launch::Buffer to_buffer(const rt::NpyArray& a, const std::string& name, const std::string& what,
                         bool float_data, size_t rank) {
  if (a.shape.size() != rank)
    throw UserError(fmt::format("{}: has {} dimensions, expected {}", what, a.shape.size(), rank));
  launch::Buffer b;
  b.name = name;
  if (float_data) {
    if (a.descr == "<f4") b.dtype = ir::DType::f32;
    else if (a.descr == "<f2") b.dtype = ir::DType::f16;
    else if (a.descr == "<u2") b.dtype = ir::DType::bf16;
    else if (a.descr == "|u1") b.dtype = ir::DType::i8; // fp8 bits: the format is declared (kv_dtype)
    else throw UserError(fmt::format("{}: dtype '{}' is not <f4, <f2, <u2 (bfloat16 bits) or |u1 (fp8 bits)", what, a.descr));
    b.bytes = ByteArray(a.data);
    return b;
  }
  if (a.descr != "<u4" && a.descr != "<i4")
    throw UserError(fmt::format("{}: dtype '{}' is not <u4 or <i4", what, a.descr));
  b.dtype = ir::DType::i32;
  b.bytes = ByteArray(a.data);
  if (a.descr == "<u4")
    for (size_t i = 0; i < b.count(); ++i) {
      uint32_t v;
      std::memcpy(&v, b.bytes.data() + 4 * i, 4);
      if (v > 0x7fffffffu && name == "context_lens")
        throw UserError(fmt::format("{}: context_lens[{}] = {} is too large", what, i, v));
    }
  return b;
}

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
  s.block_size = in_range("block_size", 1, 256);
  s.dtype = *ir::parse_dtype(kDtypes.at(size_t(p.at("dtype"))));
  if (int64_t kv = p.count("kv_dtype") ? p.at("kv_dtype") : 0; kv != 0) s.kv_fp8 = ir::parse_dtype(kKvDtypes.at(size_t(kv)));
  s.alibi = in_range("alibi", 0, 1) != 0;
  int64_t ctx = in_range("ctx", -1, int64_t(1) << 31);
  s.max_blocks = in_range("max_blocks", 0, kMaxDim);
  s.num_blocks = in_range("num_blocks", 0, kMaxDim);
  if (auto cap = p.find("softcap"); cap != p.end() && cap->second) s.softcap = 1.0;
  s.window = p.count("window") ? p.at("window") : 0;
  if (s.window < 0) throw UserError(fmt::format("--shape window={}: must be positive (0: no window)", s.window));
  s.causal = p.count("causal") && in_range("causal", 0, 1) != 0;
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
                      2 * pages * double(s.block_size * s.hkv * s.head_dim) * ir::dtype_bytes(s.cache_dtype());
  const double have = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  if (have > 0 && need > have)
    throw UserError(fmt::format("--shape: the problem's inputs and outputs need {:.1f} GiB of host memory (q, out, "
                                "the block table and the caches' {}pages); this machine has {:.1f} GiB",
                                need / double(1 << 30), s.sparse_cache() ? "live " : "", have / double(1 << 30)));
}

PagedAttentionConfig paged_attention_config(const ParamMap& p) {
  return {p.at("block_n"), p.at("head_group"), p.at("num_warps"), p.at("num_splits"), p.at("num_stages"),
          p.count("block_m") ? p.at("block_m") : 0};
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
              {"block_m", 0, "query rows per program over head_group x sq packed rows (power of two; 0: automatic)"}};
  t.shape = {{"batch", 2, "sequences"},
             {"hq", 8, "query heads"},
             {"hkv", 2, "KV heads (Hq % Hkv == 0)"},
             {"sq", 1, "query rows per sequence"},
             {"head_dim", 64, "head dimension (multiple of 8, 16..256)"},
             {"block_size", 16, "tokens per cache page (1..256)"},
             {"max_blocks", 0, "block-table columns (0: enough for ctx, else for sq and at least 16)"},
             {"num_blocks", 0, "pages in the cache (0: batch * max_blocks)"},
             {"ctx", -1, "context length of every sequence (-1: random per sequence)"},
             {"dtype", 0, "q/k/v dtype", {kDtypes.begin(), kDtypes.end()}},
             {"alibi", 0, "1: add ALiBi slopes"},
             {"window", 0, "sliding window: query row i sees keys j > p_i - window (0: none)"},
             {"causal", 0, "1: query row i sees keys j <= p_i (p_i = ctx - sq + i)"},
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
    ks.push_back(paged_attention_fused_kernel(s, cfg));
    if (cfg.num_splits > 1) ks.push_back(paged_attention_combine_kernel(cfg.num_splits, s.head_dim, s.dtype));
    return ks;
  };
  // Offsets into a cache (or q and out, or the split partials) past 2^31 elements are 64-bit.
  t.large_buffers = [](const ParamMap& params, const ParamMap& shape) {
    PagedAttentionShape s = paged_attention_shape(shape);
    const int64_t rows = s.batch * s.hq * s.sq, limit = int64_t(1) << 31; // (varlen: total_q <= batch x sq)
    std::set<std::string> r;
    if (s.cache_elements() > limit) r.insert({"k_cache", "v_cache"});
    if (rows * s.head_dim > limit) r.insert({"q", "out"});
    if (rows * paged_attention_config(params).num_splits * s.head_dim > limit) r.insert("partial_o");
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
  t.inputs_help = "q.npy k_cache.npy v_cache.npy block_table.npy context_lens.npy [alibi_slopes.npy] [query_start_loc.npy]";
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
      if (kv_fp8)
        for (const char* name : {"k-scale", "v-scale"})
          if (!r.options.count(name))
            throw UserError(fmt::format("--inputs {}: the caches are {} (--shape kv_dtype), so --{} is required: "
                                        "the scale they were quantized with", r.inputs_dir, ir::dtype_name(*kv_fp8), name));
      in.shape.k_scale = option("k-scale");
      in.shape.v_scale = option("v-scale");
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
    p.outputs = {p.add_buffer(launch::Buffer("out", s.dtype, in.q.count()))};
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
                        ? fmt::format("batch={} hq={} hkv={} sq={} head_dim={} block_size={} max_blocks={}{} {}{}{}{}{}",
                                      s.batch, s.hq, s.hkv, s.sq, s.head_dim, s.block_size, s.max_blocks,
                                      s.num_blocks != s.batch * s.max_blocks
                                          ? fmt::format(" num_blocks={} ({} elements per cache{})", s.num_blocks,
                                                        s.cache_elements(), s.sparse_cache() ? ", live pages filled" : "")
                                          : "",
                                      ir::dtype_name(s.dtype),
                                      s.kv_fp8 ? fmt::format(" {} cache (scales {:g}, {:g})", ir::dtype_name(*s.kv_fp8),
                                                             s.k_scale, s.v_scale)
                                               : "",
                                      s.alibi ? " alibi" : "",
                                      s.window > 0 ? fmt::format(" window={}", s.window) : "",
                                      s.causal ? " causal" : "")
                        : r.inputs_dir;
    if (!r.inputs_dir.empty()) {
      int64_t ctx = 0;
      for (size_t b = 0; b < in.context_lens.count(); ++b) ctx = std::max(ctx, in.context_lens.get_int(b));
      p.shape = {{"batch", s.batch}, {"hq", s.hq}, {"hkv", s.hkv}, {"sq", s.sq}, {"head_dim", s.head_dim},
                 {"block_size", s.block_size}, {"max_blocks", s.max_blocks}, {"num_blocks", s.num_blocks},
                 {"ctx", ctx}, {"alibi", s.alibi}, {"window", s.window}, {"causal", s.causal}, {"varlen", s.varlen},
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
  return t;
}

// The emulator counts each warp-wide request's distinct bytes (runtime/emulator.h), so this
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
  const int64_t w = cfg.num_warps, N = cfg.block_n, G = cfg.head_group, S = cfg.num_splits, D = s.head_dim;
  const int64_t DP = pow2(D), BM = paged_attention_block_m(s, cfg), tiles = cdiv(G * s.sq, BM);
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
  const int64_t programs_per_tile = s.hkv * chunks * S; // grid (B x tiles, Hkv x chunks, S)
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t len = in.context_lens.get_int(size_t(b)), sq = in.query_len(b), R = G * sq;
    for (int64_t tile = 0; tile < tiles; ++tile) {
      // Every program reads q's rows of its tile (each split again), the slopes of their heads
      // (every warp: each holds at least a head group's worth of rows or the whole tile), and
      // the context length: one 4-byte warp-uniform request per warp.
      const int64_t row0 = tile * BM, rows = std::clamp<int64_t>(R - row0, 0, BM);
      // (A transposed tile holds 8 rows, its repeats reading nothing.)
      t.q += programs_per_tile * rows * D * e_io * copies((paged_attention_transposed(s, cfg) ? 8 : BM) * DP);
      if (s.alibi) t.alibi_slopes += programs_per_tile * std::min(G, rows) * 4 * w;
      t.context_lens += programs_per_tile * w * 4;
      if (s.varlen) t.query_start_loc += programs_per_tile * w * 8; // its two entries, warp-uniform
      // The walk (build_fused): from the first key the window lets the tile's first row see
      // (0 without one) to the context's end, or with causal=1 and several tiles to the tile's
      // last position, in S chunks of whole N-token steps; splits past the end walk nothing
      // but still read q and write their (empty) partials. Each step loads the page entries of
      // its live tokens and their K and V rows (head_dim elements each; the lanes past it are
      // masked).
      const int64_t p_lo = len - sq + row0 / G, p_hi = len - sq + std::min((row0 + BM - 1) / G, sq - 1);
      const int64_t lo = W > 0 ? std::max(p_lo + 1, W) - W : 0;
      // A tile past a shorter sequence's rows (varlen) walks nothing.
      const int64_t hi = rows == 0 ? lo : s.causal && tiles > 1 ? p_hi + 1 : len;
      const int64_t chunk = cdiv(cdiv(hi - lo, S), N) * N;
      int64_t tokens = 0, entries = 0;
      for (int64_t split = 0; split < S && chunk > 0; ++split) {
        const int64_t start = lo + split * chunk, end = std::min(hi, start + chunk);
        for (int64_t s0 = start; s0 < end; s0 += N) {
          const int64_t step_end = std::min(end, s0 + N);
          tokens += step_end - s0;
          for (int64_t g0 = s0; g0 < step_end; g0 += segment) entries += pages_of(g0, std::min(step_end, g0 + segment));
        }
      }
      // Each KV head's head-group chunks walk the same tokens.
      t.block_table += s.hkv * chunks * entries * 4 * copies(N);
      t.k_cache += s.hkv * chunks * tokens * D * e_kv * copies(N * DP);
      t.v_cache += s.hkv * chunks * tokens * D * e_kv * copies(N * DP);
    }
  }
  const int64_t rows = in.q_rows();
  t.out = rows * D * e_io;
  if (S > 1) {
    // Each split stores its f32 partials (o: head_dim, m and l: one each) for its rows; the
    // combine kernel (one program per row) reads m and l [S] and o [S, head_dim] back.
    t.partials = rows * S * (D + 2) * 4 + rows * (2 * S * 4 * copies(S) + S * D * 4 * copies(S * DP));
  }
  return t;
}

PagedAttentionInputs read_paged_attention_inputs(const std::string& dir, double softmax_scale,
                                                 std::optional<double> softcap, std::optional<ir::DType> kv_fp8) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw UserError(fmt::format("--inputs {}: not a directory", dir));
  auto path = [&](const char* f) { return (fs::path(dir) / f).string(); };
  auto read = [&](const char* f) {
    if (!fs::exists(path(f))) throw UserError(fmt::format("--inputs {}: {} is missing", dir, f));
    return rt::read_npy(path(f));
  };
  rt::NpyArray q = read("q.npy"), k = read("k_cache.npy"), v = read("v_cache.npy");
  rt::NpyArray bt = read("block_table.npy"), cl = read("context_lens.npy");
  PagedAttentionInputs in;
  // A mixed batch (query_start_loc.npy there): q packed [total_q, Hq, D].
  const bool varlen = fs::exists(path("query_start_loc.npy"));
  in.q = to_buffer(q, "q", path("q.npy"), true, varlen ? 3 : 4);
  in.k_cache = to_buffer(k, "k_cache", path("k_cache.npy"), true, 4);
  in.v_cache = to_buffer(v, "v_cache", path("v_cache.npy"), true, 4);
  in.block_table = to_buffer(bt, "block_table", path("block_table.npy"), false, 2);
  in.context_lens = to_buffer(cl, "context_lens", path("context_lens.npy"), false, 1);
  PagedAttentionShape& s = in.shape;
  if (varlen) {
    in.query_start_loc = to_buffer(read("query_start_loc.npy"), "query_start_loc", path("query_start_loc.npy"), false, 1);
    s.varlen = true;
    s.batch = int64_t(in.query_start_loc.count()) - 1;
    if (s.batch < 1) throw UserError(fmt::format("{}: needs batch + 1 >= 2 entries", path("query_start_loc.npy")));
    s.hq = q.shape[1];
    s.head_dim = q.shape[2];
    s.sq = 1; // the longest query: at least 1 (validation checks the entries)
    for (int64_t b = 0; b < s.batch; ++b) s.sq = std::max(s.sq, in.query_len(b));
    if (in.query_start_loc.get_int(size_t(s.batch)) != q.shape[0])
      throw UserError(fmt::format("{}: its last entry {} differs from q's {} packed rows", path("query_start_loc.npy"),
                                  in.query_start_loc.get_int(size_t(s.batch)), q.shape[0]));
  } else {
    s.batch = q.shape[0];
    s.hq = q.shape[1];
    s.sq = q.shape[2];
    s.head_dim = q.shape[3];
  }
  s.num_blocks = k.shape[0];
  s.block_size = k.shape[1];
  s.hkv = k.shape[2];
  s.max_blocks = bt.shape[1];
  s.dtype = in.q.dtype;
  s.kv_fp8 = kv_fp8;
  if (in.q.dtype == ir::DType::i8)
    throw UserError(fmt::format("{}: q holds raw bytes (|u1); q is <f4, <f2 or <u2 (bfloat16 bits)", path("q.npy")));
  for (auto [buf, file] : {std::pair{&in.k_cache, "k_cache.npy"}, std::pair{&in.v_cache, "v_cache.npy"}}) {
    bool raw = buf->dtype == ir::DType::i8;
    if (raw && !kv_fp8)
      throw UserError(fmt::format("{}: holds raw bytes (|u1): an fp8 cache; say which format with --shape "
                                  "kv_dtype=f8e4m3 or kv_dtype=f8e5m2", path(file)));
    if (!raw && kv_fp8)
      throw UserError(fmt::format("{}: --shape kv_dtype={} wants fp8 bytes (|u1), the file holds {}", path(file),
                                  ir::dtype_name(*kv_fp8), npy_descr(buf->dtype)));
    if (raw) buf->dtype = *kv_fp8;
  }
  s.softmax_scale = softmax_scale;
  s.softcap = softcap;
  if (k.shape != v.shape)
    throw UserError(fmt::format("v_cache.npy: shape differs from k_cache.npy's"));
  if (k.shape[3] != s.head_dim)
    throw UserError(fmt::format("k_cache.npy: head dim {} differs from q's {}", k.shape[3], s.head_dim));
  if (bt.shape[0] != s.batch)
    throw UserError(fmt::format("block_table.npy: {} rows, q has batch {}", bt.shape[0], s.batch));
  if (fs::exists(path("alibi_slopes.npy"))) {
    rt::NpyArray a = rt::read_npy(path("alibi_slopes.npy"));
    in.alibi_slopes = to_buffer(a, "alibi_slopes", path("alibi_slopes.npy"), true, 1);
    s.alibi = true;
  }
  return in;
}

void write_paged_attention_inputs(const std::string& dir, const PagedAttentionInputs& in) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const PagedAttentionShape& s = in.shape;
  auto put = [&](const char* file, const launch::Buffer& b, std::vector<int64_t> shape, std::string descr) {
    rt::NpyArray a{std::move(descr), std::move(shape), b.bytes.to_vector()};
    rt::write_npy((fs::path(dir) / file).string(), a);
  };
  if (s.varlen) {
    put("q.npy", in.q, {in.q_rows() / s.hq, s.hq, s.head_dim}, npy_descr(s.dtype));
    put("query_start_loc.npy", in.query_start_loc, {s.batch + 1}, "<u4");
  } else {
    put("q.npy", in.q, {s.batch, s.hq, s.sq, s.head_dim}, npy_descr(s.dtype));
  }
  put("k_cache.npy", in.k_cache, {s.num_blocks, s.block_size, s.hkv, s.head_dim}, npy_descr(s.cache_dtype()));
  put("v_cache.npy", in.v_cache, {s.num_blocks, s.block_size, s.hkv, s.head_dim}, npy_descr(s.cache_dtype()));
  put("block_table.npy", in.block_table, {s.batch, s.max_blocks}, "<u4");
  put("context_lens.npy", in.context_lens, {s.batch}, "<u4");
  if (s.alibi) put("alibi_slopes.npy", in.alibi_slopes, {s.hq}, "<f4");
}

void write_paged_attention_output(const std::string& path, const PagedAttentionInputs& in,
                                  const launch::Buffer& out) {
  const PagedAttentionShape& s = in.shape;
  std::vector<int64_t> dims = s.varlen ? std::vector<int64_t>{in.q_rows() / s.hq, s.hq, s.head_dim}
                                       : std::vector<int64_t>{s.batch, s.hq, s.sq, s.head_dim};
  rt::NpyArray a{npy_descr(out.dtype), dims, out.bytes.to_vector()};
  rt::write_npy(path, a);
}

} // namespace tilec::templates
