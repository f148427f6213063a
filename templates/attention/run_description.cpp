// Paged attention's run as data: its launches, grids, buffers and specialization, in the
// format of runtime/op_run.h. This text is what `tilec autotune --export` and `tilec compile`
// write into paged_attention.kernel.toml and what rt::OpStore and the C ABI execute; it must
// say what run_paged_attention_fused (templates/attention/fused.cpp) does.
// tests/templates/test_paged_attention_launch.cpp holds the two together: for many configs
// and shapes the grids here equal the grids that function launches, the workspace equals its
// partial buffers, and the specialization equals paged_attention_module_spec.
#include "templates/attention/run_description.h"

namespace tilec::templates {

std::string_view paged_attention_run() {
  return R"toml(
# Sizes, in order: given by the caller (ctx, window, causal), implied by a tensor's shape or
# dtype (a dim or dtype that is just the name), else the default. key = false: not in the
# tuning key.
[[run.size]]
name = "batch"
[[run.size]]
name = "hq"
[[run.size]]
name = "hkv"
[[run.size]]
name = "sq"
[[run.size]]
name = "head_dim"
[[run.size]]
name = "block_size"
[[run.size]]
name = "max_blocks"
[[run.size]]
name = "num_blocks"
[[run.size]]
name = "dtype"
[[run.size]]
name = "cache_dtype"
key = false
[[run.size]]
name = "kv_dtype"
default = 'cache_dtype == dtype ? "same" : cache_dtype'
[[run.size]]
name = "alibi"
default = "present(alibi_slopes)"
[[run.size]]
name = "has_softcap"
default = "present(softcap)"
key = false
[[run.size]]
name = "ctx"
default = "max_blocks * block_size"
[[run.size]]
name = "window"
default = "0"
[[run.size]]
name = "causal"
default = "0"
# 1 would be a mixed batch (q packed [total_q, Hq, D] with query_start_loc); this description
# runs the seed's fixed-Sq layout only, so it stays 0 (in the tuning key as tilec writes it).
[[run.size]]
name = "varlen"
default = "0"

# head_group 0: every query head of a KV head in one program.
[[run.let]]
name = "group"
value = "head_group == 0 ? hq / hkv : head_group"
[[run.let]]
name = "rows"
value = "batch * hq * sq"
# Query rows per program over the group x sq packed rows (paged_attention_block_m): block_m,
# or for 0 the most rows (a power of two, 1 to 256) with rows x (pow2(head_dim) + block_n) at
# most 2048 per warp, never more than the packed rows rounded up to a power of two; and the
# query tiles of a (sequence, head-group chunk). pow2(x + 1) / 2 rounds x >= 1 down.
[[run.let]]
name = "auto_rows"
value = "max(1, pow2(min(256, 2048 * num_warps / (pow2(head_dim) + block_n)) + 1) / 2)"
[[run.let]]
name = "tile_rows"
value = "min(pow2(group * sq), block_m == 0 ? auto_rows : block_m)"
[[run.let]]
name = "q_tiles"
value = "cdiv(group * sq, tile_rows)"

[[run.tensor]]
name = "q"
role = "input"
dims = ["batch", "hq", "sq", "head_dim"]
dtype = "dtype"
[[run.tensor]]
name = "k_cache"
role = "input"
dims = ["num_blocks", "block_size", "hkv", "head_dim"]
dtype = "cache_dtype"
[[run.tensor]]
name = "v_cache"
role = "input"
dims = ["num_blocks", "block_size", "hkv", "head_dim"]
dtype = "cache_dtype"
[[run.tensor]]
name = "block_table"
role = "input"
dims = ["batch", "max_blocks"]
dtype = '"i32"'
accept = ["u32"]
[[run.tensor]]
name = "context_lens"
role = "input"
dims = ["batch"]
dtype = '"i32"'
accept = ["u32"]
[[run.tensor]]
name = "alibi_slopes"
role = "input"
dims = ["hq"]
dtype = '"f32"'
when = "alibi"
[[run.tensor]]
name = "out"
role = "output"
dims = ["batch", "hq", "sq", "head_dim"]
dtype = "dtype"

[[run.scalar]]
name = "softmax_scale"
type = "f32"
[[run.scalar]]
name = "softcap"
type = "f32"
when = "has_softcap"
[[run.scalar]]
name = "k_scale"
type = "f32"
when = 'kv_dtype != "same"'
[[run.scalar]]
name = "v_scale"
type = "f32"
when = 'kv_dtype != "same"'

# Split-KV (flash-decoding): each split's f32 partials, combined by the second launch.
[[run.workspace]]
name = "partial_o"
dtype = "f32"
elements = "rows * num_splits * head_dim"
when = "num_splits > 1"
[[run.workspace]]
name = "partial_m"
dtype = "f32"
elements = "rows * num_splits"
when = "num_splits > 1"
[[run.workspace]]
name = "partial_l"
dtype = "f32"
elements = "rows * num_splits"
when = "num_splits > 1"

# What both modules are specialized on (paged_attention_module_spec). A window at least as long
# as any context can be is no window.
[run.spec]
hq = "hq"
hkv = "hkv"
sq = "sq"
head_dim = "head_dim"
block_size = "block_size"
dtype = "dtype"
kv_dtype = "kv_dtype"
alibi = "alibi"
softcap = "has_softcap"
block_n = "block_n"
head_group = "head_group"
num_warps = "num_warps"
num_splits = "num_splits"
num_stages = "num_stages"
block_m = "block_m"
window = "window >= min(max_blocks * block_size, 2147483647) ? 0 : window"
causal = "causal"
varlen = "varlen"

# One program per (sequence and query tile, KV head and head group, KV split); then, with
# splits, one per query row to combine them.
[[run.launch]]
kernel = "paged_attention"
grid = ["batch * q_tiles", "hkv * (hq / hkv / group)", "num_splits"]
[[run.launch]]
kernel = "paged_attention_combine"
grid = ["rows", "1", "1"]
when = "num_splits > 1"
)toml";
}

} // namespace tilec::templates
