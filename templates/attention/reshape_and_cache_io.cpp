// reshape_and_cache's inputs (generated, or read from .npy files), their validation, the C++
// reference written from the definition, and the caches written back as .npy.
#include "templates/attention/reshape_and_cache.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "abi/float8.h"
#include "runtime/npy.h"

namespace tilec::templates {

namespace {

namespace fs = std::filesystem;

float max_finite(ir::DType fp8) { return fp8 == ir::DType::f8e4m3 ? kE4M3.max_finite : kE5M2.max_finite; }

// A quantizer's scale: the largest magnitude over the format's largest finite value.
double amax_scale(const launch::Buffer& x, ir::DType fp8) {
  double amax = 0;
  for (size_t i = 0; i < x.count(); ++i) amax = std::max(amax, std::abs(x.get(i)));
  return amax > 0 ? amax / max_finite(fp8) : 1.0;
}

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

launch::Buffer to_buffer(rt::NpyArray& a, const std::string& name, ir::DType t) {
  launch::Buffer b;
  b.name = name;
  b.dtype = t;
  b.bytes = ByteArray(a.data);
  return b;
}

// key/value/caches: f32, f16 or bfloat16 bits; the caches also fp8 bits.
std::optional<ir::DType> float_dtype(const std::string& descr) {
  if (descr == "<f4") return ir::DType::f32;
  if (descr == "<f2") return ir::DType::f16;
  if (descr == "<u2") return ir::DType::bf16;
  return std::nullopt;
}

} // namespace

ReshapeAndCacheInputs make_reshape_and_cache_inputs(const ReshapeAndCacheShape& s, uint64_t seed) {
  if (double(s.slots()) * double(s.row()) > double(int64_t(1) << 31))
    throw UserError(fmt::format("--shape: generated inputs hold the whole cache ({} slots of {} elements) in host "
                                "memory, at most 2^31 elements; give larger caches with --inputs",
                                s.slots(), s.row()));
  ReshapeAndCacheInputs in;
  in.shape = s;
  const size_t n = size_t(s.num_tokens * s.row()), cache = size_t(s.slots() * s.row());
  in.key = launch::Buffer("key", s.dtype, n);
  fill_uniform(in.key, seed, -4, 4);
  in.k_cache = launch::Buffer("k_cache", s.cache_dtype(), cache);
  fill_uniform(in.k_cache, seed + 2, -4, 4);
  if (!s.latent) {
    in.value = launch::Buffer("value", s.dtype, n);
    fill_uniform(in.value, seed + 1, -4, 4);
    in.v_cache = launch::Buffer("v_cache", s.cache_dtype(), cache);
    fill_uniform(in.v_cache, seed + 3, -4, 4);
  }
  // Distinct random slots (Floyd's sampling), about one token in eight padding (-1).
  std::mt19937_64 rng(seed + 4);
  std::vector<int64_t> slots(size_t(s.num_tokens), -1);
  int64_t pad = 0;
  for (int64_t t = 0; t < s.num_tokens; ++t) pad += rng() % 8 == 0;
  if (s.num_tokens >= 2 && pad == 0) pad = 1;
  const int64_t live = std::max<int64_t>(0, s.num_tokens - pad);
  if (live > s.slots())
    throw UserError(fmt::format("--shape num_tokens={}: {} tokens to write and the cache has num_blocks * block_size = "
                                "{} * {} = {} slots", s.num_tokens, live, s.num_blocks, s.block_size, s.slots()));
  std::unordered_set<int64_t> taken;
  std::vector<int64_t> chosen;
  for (int64_t j = s.slots() - live; j < s.slots(); ++j) {
    int64_t x = int64_t(rng() % uint64_t(j + 1));
    if (!taken.insert(x).second) {
      taken.insert(j);
      x = j;
    }
    chosen.push_back(x);
  }
  std::shuffle(chosen.begin(), chosen.end(), rng);
  std::vector<int64_t> order(size_t(s.num_tokens));
  for (int64_t t = 0; t < s.num_tokens; ++t) order[size_t(t)] = t;
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t i = 0; i < live; ++i) slots[size_t(order[size_t(i)])] = chosen[size_t(i)];
  in.slot_mapping = launch::Buffer("slot_mapping", s.slot_dtype, slots.size());
  for (size_t t = 0; t < slots.size(); ++t) in.slot_mapping.set_int(t, slots[t]);
  if (s.kv_fp8) {
    if (in.shape.k_scale == 0) in.shape.k_scale = amax_scale(in.key, *s.kv_fp8);
    if (in.shape.v_scale == 0 && !s.latent) in.shape.v_scale = amax_scale(in.value, *s.kv_fp8);
  }
  return in;
}

ReshapeAndCacheInputs read_reshape_and_cache_inputs(const std::string& dir, std::optional<ir::DType> kv_fp8) {
  if (!fs::is_directory(dir)) throw UserError(fmt::format("--inputs {}: not a folder", dir));
  auto path = [&](const char* f) { return (fs::path(dir) / f).string(); };
  auto read = [&](const char* f, size_t rank) {
    if (!fs::exists(path(f)))
      throw UserError(fmt::format("--inputs {}: {} is missing (reshape_and_cache reads key.npy, slot_mapping.npy, "
                                  "k_cache.npy, and value.npy with v_cache.npy unless latent)", dir, f));
    rt::NpyArray a = rt::read_npy(path(f));
    if (a.shape.size() != rank)
      throw UserError(fmt::format("{}: shape {} has {} dimensions, expected {}", path(f), shape_str(a.shape),
                                  a.shape.size(), rank));
    return a;
  };
  const bool has_value = fs::exists(path("value.npy")), has_v_cache = fs::exists(path("v_cache.npy"));
  if (has_value != has_v_cache)
    throw UserError(fmt::format("--inputs {}: {} is there but {} is not (both, or neither for the latent form)", dir,
                                has_value ? "value.npy" : "v_cache.npy", has_value ? "v_cache.npy" : "value.npy"));
  ReshapeAndCacheInputs in;
  ReshapeAndCacheShape& s = in.shape;
  s.latent = !has_value;
  s.kv_fp8 = kv_fp8;
  rt::NpyArray key = read("key.npy", 3), slots = read("slot_mapping.npy", 1), k_cache = read("k_cache.npy", 4);
  auto dtype = float_dtype(key.descr);
  if (!dtype)
    throw UserError(fmt::format("{}: dtype '{}' is not <f4, <f2 or <u2 (bfloat16 bits)", path("key.npy"), key.descr));
  s.dtype = *dtype;
  s.num_tokens = key.shape[0];
  s.hkv = key.shape[1];
  s.head_dim = key.shape[2];
  if (slots.descr == "<i8") s.slot_dtype = ir::DType::i64;
  else if (slots.descr == "<i4") s.slot_dtype = ir::DType::i32;
  else
    throw UserError(fmt::format("{}: dtype '{}' is not <i8 (int64) or <i4 (int32): slot_mapping holds integer slots",
                                path("slot_mapping.npy"), slots.descr));
  if (slots.shape[0] != s.num_tokens)
    throw UserError(fmt::format("{}: {} entries, but key.npy {} has num_tokens = {}", path("slot_mapping.npy"),
                                slots.shape[0], shape_str(key.shape), s.num_tokens));
  const std::string want = kv_fp8 ? "|u1" : key.descr;
  auto check_cache = [&](const rt::NpyArray& c, const char* file) {
    if (c.descr != want)
      throw UserError(kv_fp8 ? fmt::format("{}: --shape kv_dtype={} wants fp8 bytes (|u1), the file holds '{}'",
                                           path(file), ir::dtype_name(*kv_fp8), c.descr)
                             : fmt::format("{}: dtype '{}' differs from key.npy's '{}' (a cache holds the key's dtype, "
                                           "or fp8 bytes with --shape kv_dtype=f8e4m3|f8e5m2)",
                                           path(file), c.descr, key.descr));
    if (c.shape[2] != s.hkv || c.shape[3] != s.head_dim)
      throw UserError(fmt::format("{}: shape {} has [hkv, head_dim] = [{}, {}], key.npy {} has [{}, {}]", path(file),
                                  shape_str(c.shape), c.shape[2], c.shape[3], shape_str(key.shape), s.hkv, s.head_dim));
  };
  check_cache(k_cache, "k_cache.npy");
  s.num_blocks = k_cache.shape[0];
  s.block_size = k_cache.shape[1];
  in.key = to_buffer(key, "key", s.dtype);
  in.slot_mapping = to_buffer(slots, "slot_mapping", s.slot_dtype);
  in.k_cache = to_buffer(k_cache, "k_cache", s.cache_dtype());
  if (!s.latent) {
    rt::NpyArray value = read("value.npy", 3), v_cache = read("v_cache.npy", 4);
    if (value.descr != key.descr)
      throw UserError(fmt::format("{}: dtype '{}' differs from key.npy's '{}'", path("value.npy"), value.descr, key.descr));
    if (value.shape != key.shape)
      throw UserError(fmt::format("{}: shape {} differs from key.npy's {}", path("value.npy"), shape_str(value.shape),
                                  shape_str(key.shape)));
    check_cache(v_cache, "v_cache.npy");
    if (v_cache.shape != k_cache.shape)
      throw UserError(fmt::format("{}: shape {} differs from k_cache.npy's {}", path("v_cache.npy"),
                                  shape_str(v_cache.shape), shape_str(k_cache.shape)));
    in.value = to_buffer(value, "value", s.dtype);
    in.v_cache = to_buffer(v_cache, "v_cache", s.cache_dtype());
  }
  return in;
}

void validate_reshape_and_cache(const ReshapeAndCacheInputs& in) {
  const ReshapeAndCacheShape& s = in.shape;
  auto count = [&](const launch::Buffer& b, const char* name, ir::DType t, int64_t want, const std::string& dims) {
    if (b.dtype != t)
      throw UserError(fmt::format("reshape_and_cache: {} is {}, expected {}", name, ir::dtype_name(b.dtype), ir::dtype_name(t)));
    if (int64_t(b.count()) != want)
      throw UserError(fmt::format("reshape_and_cache: {} has {} elements, expected {} = {}", name, b.count(), dims, want));
  };
  const std::string token_dims = fmt::format("num_tokens * hkv * head_dim = {} * {} * {}", s.num_tokens, s.hkv, s.head_dim);
  const std::string cache_dims = fmt::format("num_blocks * block_size * hkv * head_dim = {} * {} * {} * {}",
                                             s.num_blocks, s.block_size, s.hkv, s.head_dim);
  if (s.slot_dtype != ir::DType::i64 && s.slot_dtype != ir::DType::i32)
    throw UserError(fmt::format("reshape_and_cache: slot_mapping is {}, expected i64 or i32", ir::dtype_name(s.slot_dtype)));
  count(in.key, "key", s.dtype, s.num_tokens * s.row(), token_dims);
  count(in.slot_mapping, "slot_mapping", s.slot_dtype, s.num_tokens, fmt::format("num_tokens"));
  count(in.k_cache, "k_cache", s.cache_dtype(), s.slots() * s.row(), cache_dims);
  if (!s.latent) {
    count(in.value, "value", s.dtype, s.num_tokens * s.row(), token_dims);
    count(in.v_cache, "v_cache", s.cache_dtype(), s.slots() * s.row(), cache_dims);
  }
  if (s.kv_fp8)
    for (auto [scale, name] : {std::pair{s.k_scale, "k_scale"}, std::pair{s.v_scale, "v_scale"}})
      if (!(s.latent && name[0] == 'v') && !(scale > 0 && std::isfinite(float(scale))))
        throw UserError(fmt::format("reshape_and_cache: the {} caches need their {} (a positive number; --{}), got {}",
                                    ir::dtype_name(*s.kv_fp8), name, name[0] == 'k' ? "k-scale" : "v-scale", scale));
  std::unordered_map<int64_t, int64_t> owner; // slot -> the token writing it
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    const int64_t slot = in.slot_mapping.get_int(size_t(t));
    if (slot < -1 || slot >= s.slots())
      throw UserError(fmt::format("reshape_and_cache: slot_mapping[{}] = {} is not a slot: slots are 0 to num_blocks * "
                                  "block_size - 1 = {} * {} - 1 = {}, or -1 to skip the token",
                                  t, slot, s.num_blocks, s.block_size, s.slots() - 1));
    if (slot < 0) continue;
    if (auto [it, fresh] = owner.emplace(slot, t); !fresh)
      throw UserError(fmt::format("reshape_and_cache: slot_mapping[{}] and slot_mapping[{}] both name slot {} (page {}, "
                                  "offset {}): one token per slot", it->second, t, slot, slot / s.block_size,
                                  slot % s.block_size));
  }
}

std::vector<launch::Buffer> reshape_and_cache_reference(const ReshapeAndCacheInputs& in) {
  const ReshapeAndCacheShape& s = in.shape;
  const size_t row = size_t(s.row()), in_bytes = size_t(ir::dtype_bytes(s.dtype));
  auto write = [&](const launch::Buffer& x, const launch::Buffer& cache, double scale) {
    launch::Buffer out = cache;
    for (int64_t t = 0; t < s.num_tokens; ++t) {
      const int64_t slot = in.slot_mapping.get_int(size_t(t));
      if (slot < 0) continue;
      const std::byte* from = x.bytes.data() + size_t(t) * row * in_bytes;
      if (!s.kv_fp8) {
        std::memcpy(out.bytes.data() + size_t(slot) * row * in_bytes, from, row * in_bytes);
        continue;
      }
      // x / scale in f32 (the scale as the kernel gets it), rounded to nearest even, saturated.
      const Fp8Format& f = *s.kv_fp8 == ir::DType::f8e4m3 ? kE4M3 : kE5M2;
      for (size_t i = 0; i < row; ++i) {
        const float v = launch::read_float(from + i * in_bytes, s.dtype) / float(scale);
        out.bytes[size_t(slot) * row + i] = std::byte(f32_to_fp8_bits(v, f));
      }
    }
    return out;
  };
  std::vector<launch::Buffer> caches{write(in.key, in.k_cache, s.k_scale)};
  if (!s.latent) caches.push_back(write(in.value, in.v_cache, s.v_scale));
  return caches;
}

void write_reshape_and_cache_output(const std::string& dir, const ReshapeAndCacheInputs& in,
                                    const std::vector<const launch::Buffer*>& caches) {
  const ReshapeAndCacheShape& s = in.shape;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) throw UserError(fmt::format("--out {}: cannot make the folder: {}", dir, ec.message()));
  for (const launch::Buffer* c : caches)
    rt::write_npy((fs::path(dir) / (c->name + ".npy")).string(),
                  {npy_descr(c->dtype), {s.num_blocks, s.block_size, s.hkv, s.head_dim}, c->bytes.to_vector()});
}

} // namespace tilec::templates
