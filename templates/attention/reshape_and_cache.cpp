// reshape_and_cache's kernel and registry entry: its config, sizes, float options, problem and
// run's values (its run is declared in run_description.cpp). Its inputs, validation and reference are in reshape_and_cache_io.cpp.
#include "templates/attention/reshape_and_cache.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "abi/limits.h"
#include "dsl/dsl.h"
#include "templates/attention/run_description.h"

namespace tilec::templates {

using namespace dsl;

namespace {

// constexpr arrays, not vectors: the registry may be built during static initialization.
constexpr std::array<std::string_view, 3> kDtypes = {"f32", "f16", "bf16"};
constexpr std::array<std::string_view, 3> kKvDtypes = {"same", "f8e4m3", "f8e5m2"}; // "same": the key's dtype
constexpr std::array<std::string_view, 2> kSlotDtypes = {"i64", "i32"};

template <size_t N> int64_t choice_index(const std::array<std::string_view, N>& choices, ir::DType t) {
  return std::find(choices.begin(), choices.end(), ir::dtype_name(t)) - choices.begin();
}

int64_t field(const ParamMap& p, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  auto it = p.find(name);
  if (it == p.end()) return fallback;
  if (it->second < lo || it->second > hi)
    throw UserError(fmt::format("--shape {}={}: must be from {} to {}", name, it->second, lo, hi));
  return it->second;
}

// The scales as the kernel takes them (f32), for fp8 caches only: positive and in f32's normal
// range, each named with its flag.
void check_scales(const std::map<std::string, double>& options, const ReshapeAndCacheShape& s) {
  for (const char* name : {"k-scale", "v-scale"}) {
    auto it = options.find(name);
    if (it == options.end()) continue;
    if (!s.kv_fp8)
      throw UserError(fmt::format("--{} {}: the caches are not fp8, so there is no scale to apply (set --shape "
                                  "kv_dtype=f8e4m3 or f8e5m2 for fp8 caches)", name, it->second));
    if (s.latent && name[0] == 'v')
      throw UserError(fmt::format("--v-scale {}: the latent form (latent=1) has no value cache", it->second));
    const double v = it->second;
    if (!(v >= double(std::numeric_limits<float>::min()) && v <= double(std::numeric_limits<float>::max())))
      throw UserError(fmt::format("--{} {}: the {} cache's scale must be a positive number in f32's normal range, "
                                  "{:g} to {:g}: the kernel takes it as an f32", name, v, ir::dtype_name(*s.kv_fp8),
                                  std::numeric_limits<float>::min(), std::numeric_limits<float>::max()));
  }
}

} // namespace

ReshapeAndCacheShape reshape_and_cache_shape(const ParamMap& p) {
  ReshapeAndCacheShape s;
  s.num_tokens = field(p, "num_tokens", 0, int64_t(1) << 24, s.num_tokens);
  s.hkv = field(p, "hkv", 1, 1024, s.hkv);
  s.head_dim = field(p, "head_dim", 1, 4096, s.head_dim);
  s.num_blocks = field(p, "num_blocks", 1, int64_t(1) << 31, s.num_blocks);
  s.block_size = field(p, "block_size", 1, 4096, s.block_size);
  s.dtype = *ir::parse_dtype(kDtypes.at(size_t(field(p, "dtype", 0, 2, 0))));
  if (int64_t kv = field(p, "kv_dtype", 0, 2, 0); kv != 0) s.kv_fp8 = ir::parse_dtype(kKvDtypes.at(size_t(kv)));
  s.slot_dtype = *ir::parse_dtype(kSlotDtypes.at(size_t(field(p, "slot_dtype", 0, 1, 0))));
  s.latent = field(p, "latent", 0, 1, 0) != 0;
  const double cache_bytes = double(s.slots()) * double(s.row()) * ir::dtype_bytes(s.cache_dtype());
  if (cache_bytes > double(kMaxTensorBytes))
    throw UserError(fmt::format("--shape: the cache [num_blocks={}, block_size={}, hkv={}, head_dim={}] has {:.0f} "
                                "bytes; a tensor takes at most 2^44 bytes (16 TiB)",
                                s.num_blocks, s.block_size, s.hkv, s.head_dim, cache_bytes));
  return s;
}

ReshapeAndCacheConfig reshape_and_cache_config(const ParamMap& p) {
  ReshapeAndCacheConfig c;
  if (auto it = p.find("block_t"); it != p.end()) c.block_t = it->second;
  if (auto it = p.find("block_hd"); it != p.end()) c.block_hd = it->second;
  if (auto it = p.find("num_warps"); it != p.end()) c.num_warps = it->second;
  return c;
}

int64_t reshape_and_cache_block_hd(const ReshapeAndCacheShape& s, const ReshapeAndCacheConfig& c) {
  if (c.block_hd > 0) return c.block_hd;
  int64_t b = 1;
  while (b < s.row() && b < 1024) b *= 2;
  return b;
}

rt::RunValues reshape_and_cache_run_values(const ReshapeAndCacheShape& s, const ReshapeAndCacheConfig& c) {
  std::set<std::string> present;
  if (!s.latent) present = {"value", "v_scale"};
  return rt::RunValues(reshape_and_cache_run(),
                       {{"num_tokens", s.num_tokens}, {"hkv", s.hkv}, {"head_dim", s.head_dim},
                        {"num_blocks", s.num_blocks}, {"block_size", s.block_size},
                        {"dtype", std::string(ir::dtype_name(s.dtype))},
                        {"cache_dtype", std::string(ir::dtype_name(s.cache_dtype()))},
                        {"slot_dtype", std::string(ir::dtype_name(s.slot_dtype))}},
                       std::move(present), {{"block_t", c.block_t}, {"block_hd", c.block_hd}, {"num_warps", c.num_warps}});
}

launch::Grid reshape_and_cache_grid(const ReshapeAndCacheShape& s, const ReshapeAndCacheConfig& c) {
  return reshape_and_cache_run_values(s, c).grid("reshape_and_cache");
}

// Each program copies a [block_t tokens, block_hd elements] tile of key rows to the rows of
// their slots (a token's hkv x head_dim row and a slot's are both contiguous), and the same of
// value. A token whose slot is -1, or out of [0, num_slots), and the lanes past the row write
// nothing.
ir::Kernel reshape_and_cache_kernel(const ReshapeAndCacheShape& s, const ReshapeAndCacheConfig& c) {
  ParamMap pc{{"block_t", c.block_t}, {"num_warps", c.num_warps}};
  require_pow2(pc, "block_t", 1, 1024);
  require_pow2(pc, "num_warps", 1, 32);
  if (c.block_hd != 0) require_pow2({{"block_hd", c.block_hd}}, "block_hd", 1, 1 << 14);
  const int64_t HD = s.row(), BT = c.block_t, BC = reshape_and_cache_block_hd(s, c);
  if (BT * BC > (int64_t(1) << 16))
    throw UserError(fmt::format("--set block_t={} block_hd={}: a tile of {} elements; at most 65536 per program", BT,
                                BC, BT * BC));
  const bool fp8 = s.kv_fp8.has_value();
  KernelBuilder k("reshape_and_cache");
  Tile key = k.arg(ptr_to(s.dtype), "key");
  Tile value = s.latent ? Tile() : k.arg(ptr_to(s.dtype), "value");
  Tile slot_mapping = k.arg(ptr_to(s.slot_dtype), "slot_mapping");
  Tile k_cache = k.arg(ptr_to(s.cache_dtype()), "k_cache");
  Tile v_cache = s.latent ? Tile() : k.arg(ptr_to(s.cache_dtype()), "v_cache");
  Tile k_scale = fp8 ? k.arg<f32>("k_scale") : Tile();
  Tile v_scale = fp8 && !s.latent ? k.arg<f32>("v_scale") : Tile();
  Tile num_tokens = k.arg<i32>("num_tokens");
  Tile num_slots = k.arg(ElemType{s.slot_dtype, false}, "num_slots");

  auto t = program_id(0) * BT + arange(0, BT);
  auto col = program_id(1) * BC + arange(0, BC);
  auto slot = load(slot_mapping + t, t < num_tokens, -1);
  auto named = (slot >= 0) & (slot < num_slots);
  // Columns past the row exist only when block_hd does not divide it.
  Tile mask = HD % BC == 0 ? named.col() : named.col() & (col < HD).row();
  auto src = t.col() * HD + col.row();
  auto dst = slot.col() * HD + col.row();
  auto copy = [&](const Tile& from, const Tile& to, const Tile& scale) {
    Tile x = load(from + src, mask);
    // fp8: x / scale in f32, rounded to nearest even and saturated by the cast (ir/SEMANTICS.md).
    if (fp8) x = (x.to(f32) / scale).to(*s.kv_fp8);
    store(to + dst, x, mask);
  };
  copy(key, k_cache, k_scale);
  if (!s.latent) copy(value, v_cache, v_scale);
  return k.finish();
}

KernelTemplate reshape_and_cache_template() {
  KernelTemplate t;
  t.name = "reshape_and_cache";
  t.summary = "writes new tokens' keys and values into a paged KV cache in place (vLLM's reshape_and_cache; fp8 "
              "caches, the latent form)";
  t.params = {{"block_t", 2, "tokens per program (power of two)"},
              {"block_hd", 0, "elements of a token's hkv x head_dim row per program (power of two; 0: the row "
                              "rounded up, at most 1024)"},
              {"num_warps", 4, "warps per program on the GPU"}};
  t.shape = {{"num_tokens", 37, "tokens to write (key and value [num_tokens, hkv, head_dim])"},
             {"hkv", 2, "KV heads"},
             {"head_dim", 64, "head dimension"},
             {"num_blocks", 8, "pages in the cache"},
             {"block_size", 16, "tokens per page"},
             {"dtype", 0, "key/value dtype (and the caches', unless kv_dtype is fp8)", {kDtypes.begin(), kDtypes.end()}},
             {"kv_dtype", 0, "cache dtype: the key's, or fp8 with --k-scale/--v-scale", {kKvDtypes.begin(), kKvDtypes.end()}},
             {"slot_dtype", 0, "slot_mapping's dtype", {kSlotDtypes.begin(), kSlotDtypes.end()}},
             {"latent", 0, "1: MLA's latent form, no value and no v_cache"}};
  t.build = [](const ParamMap& params, const ParamMap& shape) {
    return reshape_and_cache_kernel(reshape_and_cache_shape(shape), reshape_and_cache_config(params));
  };
  t.grid = [](const ParamMap& params, const ParamMap& shape) {
    return reshape_and_cache_grid(reshape_and_cache_shape(shape), reshape_and_cache_config(params));
  };
  t.module_spec = [](const ParamMap& params, const ParamMap& shape) {
    return reshape_and_cache_run_values(reshape_and_cache_shape(shape), reshape_and_cache_config(params)).spec();
  };
  // Offsets past 2^31 elements are 64-bit: the caches', and key's and value's.
  t.large_buffers = [](const ParamMap&, const ParamMap& shape) {
    ReshapeAndCacheShape s = reshape_and_cache_shape(shape);
    const int64_t limit = int64_t(1) << 31;
    std::set<std::string> r;
    if (s.slots() * s.row() > limit) r.insert({"k_cache", "v_cache"});
    if (s.num_tokens * s.row() > limit) r.insert({"key", "value"});
    return r;
  };
  t.options = {{"k-scale", "fp8 k_cache: it stores key / k_scale (generated inputs: amax / the format's largest)"},
               {"v-scale", "fp8 v_cache: it stores value / v_scale (generated inputs: amax / the format's largest)"}};
  t.reads_inputs = true;
  t.inputs_help = "key.npy [value.npy] slot_mapping.npy k_cache.npy [v_cache.npy] (no value and v_cache: the latent "
                  "form); --out names a folder: OUTDIR/k_cache.npy [OUTDIR/v_cache.npy]";
  // --out is a folder: two outputs (tools/cmd_run.cpp takes a folder when a template declares several).
  t.tensors = {{"key", {"num_tokens", "hkv", "head_dim"}},
               {"slot_mapping", {"num_tokens"}},
               {"k_cache", {"num_blocks", "block_size", "hkv", "head_dim"}, true},
               {"v_cache", {"num_blocks", "block_size", "hkv", "head_dim"}, true}};
  t.make_problem = [](const ProblemRequest& r) {
    ReshapeAndCacheShape asked = reshape_and_cache_shape(r.shape);
    ReshapeAndCacheInputs in;
    if (!r.inputs_dir.empty()) {
      in = read_reshape_and_cache_inputs(r.inputs_dir, asked.kv_fp8);
      check_scales(r.options, in.shape);
      if (in.shape.kv_fp8)
        for (const char* name : {"k-scale", "v-scale"})
          if (!r.options.count(name) && !(in.shape.latent && name[0] == 'v'))
            throw UserError(fmt::format("--inputs {}: the caches are {} (--shape kv_dtype), so --{} is required: the "
                                        "scale they are quantized with", r.inputs_dir, ir::dtype_name(*in.shape.kv_fp8), name));
    } else {
      check_scales(r.options, asked);
      in = make_reshape_and_cache_inputs(asked, r.seed);
    }
    if (auto it = r.options.find("k-scale"); it != r.options.end()) in.shape.k_scale = it->second;
    if (auto it = r.options.find("v-scale"); it != r.options.end()) in.shape.v_scale = it->second;
    validate_reshape_and_cache(in);
    const ReshapeAndCacheShape& s = in.shape;
    Problem p;
    const int key = p.add_buffer(in.key), value = s.latent ? -1 : p.add_buffer(in.value);
    const int slots = p.add_buffer(in.slot_mapping), kc = p.add_buffer(in.k_cache);
    const int vc = s.latent ? -1 : p.add_buffer(in.v_cache);
    p.arg_buffer(key);
    if (!s.latent) p.arg_buffer(value);
    p.arg_buffer(slots);
    p.arg_buffer(kc);
    if (!s.latent) p.arg_buffer(vc);
    if (s.kv_fp8) p.arg_float(float(s.k_scale));
    if (s.kv_fp8 && !s.latent) p.arg_float(float(s.v_scale));
    p.arg_int(s.num_tokens);
    // The slots the kernel may write (the run's num_slots: an i32 slot_mapping names fewer).
    p.arg_int(reshape_and_cache_run_values(s, {}).value_int("num_slots"));
    p.outputs = s.latent ? std::vector<int>{kc} : std::vector<int>{kc, vc};
    p.expected = reshape_and_cache_reference(in);
    p.atol = p.rtol = 0; // a copy, or one rounding the reference makes the same way: bit for bit
    int64_t live = 0;
    for (size_t i = 0; i < in.slot_mapping.count(); ++i) live += in.slot_mapping.get_int(i) >= 0;
    const int caches = s.latent ? 1 : 2;
    p.ideal_bytes = s.num_tokens * ir::dtype_bytes(s.slot_dtype) +
                    caches * live * s.row() * (ir::dtype_bytes(s.dtype) + ir::dtype_bytes(s.cache_dtype()));
    p.shape = {{"num_tokens", s.num_tokens}, {"hkv", s.hkv}, {"head_dim", s.head_dim}, {"num_blocks", s.num_blocks},
               {"block_size", s.block_size}, {"dtype", choice_index(kDtypes, s.dtype)},
               {"kv_dtype", s.kv_fp8 ? choice_index(kKvDtypes, *s.kv_fp8) : 0},
               {"slot_dtype", choice_index(kSlotDtypes, s.slot_dtype)}, {"latent", s.latent}};
    p.description = fmt::format("num_tokens={} ({} written) hkv={} head_dim={} num_blocks={} block_size={} {}{} "
                                "slots {}{}{}",
                                s.num_tokens, live, s.hkv, s.head_dim, s.num_blocks, s.block_size,
                                ir::dtype_name(s.dtype),
                                !s.kv_fp8   ? std::string()
                                : s.latent  ? fmt::format(" {} cache (scale {:g})", ir::dtype_name(*s.kv_fp8), s.k_scale)
                                            : fmt::format(" {} caches (scales {:g}, {:g})", ir::dtype_name(*s.kv_fp8),
                                                          s.k_scale, s.v_scale),
                                ir::dtype_name(s.slot_dtype), s.latent ? " latent" : "",
                                r.inputs_dir.empty() ? "" : " from " + r.inputs_dir);
    p.context = s;
    return p;
  };
  t.write_output = [](const std::string& dir, const Problem& p) {
    ReshapeAndCacheInputs in;
    in.shape = std::any_cast<const ReshapeAndCacheShape&>(p.context);
    std::vector<const launch::Buffer*> caches;
    for (int o : p.outputs) caches.push_back(&p.buffers[size_t(o)]);
    write_reshape_and_cache_output(dir, in, caches);
  };
  t.size_fields = {"num_tokens", "num_blocks", "block_size"};
  // For configs/reshape_and_cache.toml: the elements of a row one program takes (block_hd 0 resolved).
  t.derived = {"cols"};
  t.derive = [](const ParamMap& params, const ParamMap& shape) {
    return ParamMap{{"cols", reshape_and_cache_block_hd(reshape_and_cache_shape(shape), reshape_and_cache_config(params))}};
  };
  // What a correct run moves, and 2% more: each written token's row read once and stored once,
  // except that a tile smaller than the program's threads is read by every warp holding a copy
  // (each stores it once); and every program reads its tokens' slots in each warp.
  t.traffic_budget = [](const Problem& p, const ParamMap& params) -> std::optional<int64_t> {
    if (!p.ideal_bytes) return std::nullopt;
    const ReshapeAndCacheShape& s = std::any_cast<const ReshapeAndCacheShape&>(p.context);
    const ReshapeAndCacheConfig c = reshape_and_cache_config(params);
    const launch::Grid g = reshape_and_cache_grid(s, c);
    const int64_t tile = c.block_t * reshape_and_cache_block_hd(s, c), threads = 32 * c.num_warps;
    // (A tile smaller than a warp splits its requests over the lanes: count one copy more.)
    const int64_t copies = std::clamp<int64_t>(threads / tile, 1, c.num_warps) + (tile < 32 ? 1 : 0);
    const int64_t slot_reads = g[0] * g[1] * c.num_warps * c.block_t * ir::dtype_bytes(s.slot_dtype);
    const int64_t rows = *p.ideal_bytes - s.num_tokens * ir::dtype_bytes(s.slot_dtype); // read + stored
    const int64_t read = rows / (ir::dtype_bytes(s.dtype) + ir::dtype_bytes(s.cache_dtype())) * ir::dtype_bytes(s.dtype);
    return static_cast<int64_t>(std::ceil(double(rows + (copies - 1) * read + slot_reads) * 1.02));
  };
  t.run = reshape_and_cache_run; // run_description.cpp
  return t;
}

} // namespace tilec::templates
