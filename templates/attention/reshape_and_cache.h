#pragma once
// reshape_and_cache: the write side of a paged KV cache (vLLM's op of that name). Each step of a
// serving engine writes its new tokens' keys and values into the cache pages before it attends:
//   k_cache[slot / block_size, slot % block_size] = key[t]   for slot = slot_mapping[t] >= 0
// (and v_cache from value), a token with slot -1 (padding) writes nothing, and every other slot
// keeps its bytes. An fp8 cache stores x / scale rounded to nearest even and saturated to the
// format's largest finite value. The latent form (MLA) has one cache, no value.
#include <cstdint>
#include <optional>
#include <string>

#include "launch/args.h"
#include "runtime/op_run.h"
#include "templates/registry.h"

namespace tilec::templates {

struct ReshapeAndCacheShape {
  int64_t num_tokens = 37, hkv = 2, head_dim = 64;
  int64_t num_blocks = 8, block_size = 16;
  ir::DType dtype = ir::DType::f32;      // key and value; the caches' too unless kv_fp8
  std::optional<ir::DType> kv_fp8;       // f8e4m3 or f8e5m2 caches
  ir::DType slot_dtype = ir::DType::i64; // slot_mapping's: i64 (vLLM's) or i32
  bool latent = false;                   // MLA: the key cache alone
  double k_scale = 0.0, v_scale = 0.0;   // fp8 caches: stored = x / scale (0: chosen from the data)

  ir::DType cache_dtype() const { return kv_fp8 ? *kv_fp8 : dtype; }
  int64_t row() const { return hkv * head_dim; }          // elements of one token (and one slot)
  int64_t slots() const { return num_blocks * block_size; }
};

struct ReshapeAndCacheConfig {
  int64_t block_t = 2;  // tokens per program
  int64_t block_hd = 0; // elements of a token's hkv x head_dim row per program (0: automatic)
  int64_t num_warps = 4;
};

// block_hd, or for 0 the row rounded up to a power of two, at most 1024.
int64_t reshape_and_cache_block_hd(const ReshapeAndCacheShape& s, const ReshapeAndCacheConfig& c);

struct ReshapeAndCacheInputs {
  ReshapeAndCacheShape shape;
  launch::Buffer key, value, slot_mapping, k_cache, v_cache; // value and v_cache empty when latent
};

// The sizes of --shape values; UserError naming the field out of range.
ReshapeAndCacheShape reshape_and_cache_shape(const ParamMap& shape);
ReshapeAndCacheConfig reshape_and_cache_config(const ParamMap& params);

// The kernel: one program per (block_t tokens, block_hd elements of their rows).
ir::Kernel reshape_and_cache_kernel(const ReshapeAndCacheShape& s, const ReshapeAndCacheConfig& c);
launch::Grid reshape_and_cache_grid(const ReshapeAndCacheShape& s, const ReshapeAndCacheConfig& c);

// Generated inputs: random keys and values, distinct random slots with some -1 padding, caches
// holding random values (the slots not named must keep them).
ReshapeAndCacheInputs make_reshape_and_cache_inputs(const ReshapeAndCacheShape& s, uint64_t seed);
// Reads key.npy, value.npy, slot_mapping.npy, k_cache.npy and v_cache.npy from `dir` (no value
// and v_cache: the latent form). UserError naming the file and the numbers.
ReshapeAndCacheInputs read_reshape_and_cache_inputs(const std::string& dir, std::optional<ir::DType> kv_fp8);
// Refuses what the op cannot take, naming the input and the numbers: shapes and dtypes that
// disagree, a slot outside [-1, num_blocks * block_size), two tokens on one slot, fp8 caches
// without a positive scale.
void validate_reshape_and_cache(const ReshapeAndCacheInputs& in);
// The caches after the op, from the definition: {k_cache, v_cache} (k_cache alone when latent).
std::vector<launch::Buffer> reshape_and_cache_reference(const ReshapeAndCacheInputs& in);
// Writes OUTDIR/k_cache.npy and OUTDIR/v_cache.npy (latent: k_cache.npy alone).
void write_reshape_and_cache_output(const std::string& dir, const ReshapeAndCacheInputs& in,
                                    const std::vector<const launch::Buffer*>& caches);

// The values of the op's declared run (run_description.h) for a problem and a config: its
// grid, module specialization and num_slots come from there.
rt::RunValues reshape_and_cache_run_values(const ReshapeAndCacheShape& s, const ReshapeAndCacheConfig& c);

} // namespace tilec::templates
