// The runs of paged attention and reshape_and_cache (templates/attention/run_description.h).
// Every value is an expression over the sizes, the config and the lets (runtime/size_expr.h).
#include "templates/attention/run_description.h"

namespace tilec::templates {

namespace {

using rt::ScalarType;

rt::OpRun declare_paged_attention() {
  rt::OpRunBuilder b("paged_attention");
  // Sizes, in order: given by the caller (ctx, window, causal, chunk), implied by a tensor's
  // shape or dtype (a dim or dtype that is just the name), else the default.
  for (const char* n : {"batch", "hq", "hkv", "sq", "head_dim"}) b.size(n);
  // The latent form (MLA): no v_cache; V is k_cache's first head_dim_v columns, by default the
  // largest power of two up to head_dim (512 of 576). The tuning key's and the modules'
  // head_dim_v is 0 when it is the form's default (PagedAttentionShape::head_dim_v_key).
  b.size("latent", {.default_value = "!present(v_cache)"})
      .size("head_dim_v", {.default_value = "latent ? pow2(head_dim + 1) / 2 : head_dim", .key = false})
      .size("head_dim_v_key", {.default_value = "head_dim_v == (latent ? pow2(head_dim + 1) / 2 : head_dim) ? 0 : head_dim_v",
                               .key_name = "head_dim_v"});
  for (const char* n : {"block_size", "max_blocks", "num_blocks", "dtype"}) b.size(n);
  b.size("cache_dtype", {.key = false})
      .size("kv_dtype", {.default_value = R"(cache_dtype == dtype ? "same" : cache_dtype)"})
      .size("alibi", {.default_value = "present(alibi_slopes)"})
      // The --shape field `sinks` (a tensor's name here too): `has_sinks`, the key's `sinks`.
      .size("has_sinks", {.default_value = "present(sinks)", .key_name = "sinks"})
      .size("has_softcap", {.default_value = "present(softcap)", .key = false})
      .size("ctx", {.default_value = "max_blocks * block_size"})
      .size("window", {.default_value = "0"})
      .size("causal", {.default_value = "0"})
      .size("chunk", {.default_value = "0"})
      // 1 is a mixed batch (q packed [total_q, Hq, D] with query_start_loc): the CLI's fused path
      // runs it; a host's tensors take the seed's fixed-Sq layout, so there it stays 0.
      .size("varlen", {.default_value = "0"})
      .size("total_q", {.default_value = "batch * sq", .key = false});

  // head_group 0: every query head of a KV head in one program.
  b.let("group", "head_group == 0 ? hq / hkv : head_group")
      .let("rows", "total_q * hq")
      // Query rows per program over the group x sq packed rows (paged_attention_block_m):
      // block_m, or for 0 the most rows (a power of two, 1 to 256) with rows x (pow2(head_dim) +
      // block_n) at most 2048 per warp, never more than the packed rows rounded up to a power of
      // two; and the query tiles of a (sequence, head-group chunk). pow2(x + 1) / 2 rounds x >= 1
      // down.
      .let("auto_rows", "max(1, pow2(min(256, 2048 * num_warps / (pow2(head_dim) + block_n)) + 1) / 2)")
      .let("tile_rows", "min(pow2(group * sq), block_m == 0 ? auto_rows : block_m)")
      .let("q_tiles", "cdiv(group * sq, tile_rows)")
      // The KV splits (paged_attention_splits): num_splits, or by size the pieces of split_tokens
      // keys the cache's longest walk needs, rounded up to a power of two.
      .let("splits", "split_tokens == 0 ? num_splits : pow2(cdiv(max(max_blocks * block_size, 1), split_tokens))")
      // Planned: the items (sequence, query tile) whose pieces the plan lists.
      .let("items", "batch * q_tiles")
      // kv_tma = 1: the rows of the caches viewed as [num_blocks x block_size, hkv x head_dim].
      .let("cache_rows", "num_blocks * block_size");

  b.input("q", {{"batch", "hq", "sq", "head_dim"}, "dtype"})
      .input("k_cache", {{"num_blocks", "block_size", "hkv", "head_dim"}, "cache_dtype"})
      .input("v_cache", {{"num_blocks", "block_size", "hkv", "head_dim_v"}, "cache_dtype", "!latent"})
      .input("block_table", {{"batch", "max_blocks"}, R"("i32")", {}, {ScalarType::u32}})
      .input("context_lens", {{"batch"}, R"("i32")", {}, {ScalarType::u32}})
      .input("alibi_slopes", {{"hq"}, R"("f32")", "alibi"})
      .input("sinks", {{"hq"}, R"("f32")", "has_sinks"})
      .output("out", {{"batch", "hq", "sq", "head_dim_v"}, "dtype"});
  b.scalar("softmax_scale")
      .scalar("softcap", "has_softcap")
      .scalar("k_scale", R"(kv_dtype != "same")")
      .scalar("v_scale", R"(kv_dtype != "same")");

  // Split-KV (flash-decoding): each split's f32 partials, combined by the second launch.
  b.workspace("partial_o", ScalarType::f32, "rows * splits * head_dim_v", "splits > 1")
      .workspace("partial_m", ScalarType::f32, "rows * splits", "splits > 1")
      .workspace("partial_l", ScalarType::f32, "rows * splits", "splits > 1")
      // The plan (plan_programs > 0): each item's first piece, the item of every piece, then
      // each item's cost so far.
      .workspace("plan", ScalarType::i32, "items * (splits + 2) + 2", "plan_programs > 0");

  // What both modules are specialized on. A window at least as long as any context can be is
  // no window; a chunk is cut to the capacity (PagedAttentionShape::effective_window, _chunk).
  for (const char* n : {"hq", "hkv", "sq", "head_dim", "latent", "block_size", "dtype", "kv_dtype", "alibi", "block_n",
                        "head_group", "num_warps", "num_stages", "block_m", "causal", "varlen"})
    b.spec(n, n);
  // Split by size: the splits depend on the capacity too.
  b.spec("num_splits", "splits").spec("split_tokens", "split_tokens").spec("plan_programs", "plan_programs");
  b.spec("overlap", "overlap");
  b.spec("kv_tma", "kv_tma");
  b.spec("head_dim_v", "head_dim_v_key")
      .spec("sinks", "has_sinks")
      .spec("softcap", "has_softcap")
      .spec("window", "window >= min(max_blocks * block_size, 2147483647) ? 0 : window")
      .spec("chunk", "chunk <= 0 ? 0 : min(chunk, max(max_blocks * block_size, 1), 2147483647)");

  // One program per (sequence and query tile, KV head and head group, KV split); then, with
  // splits, one per query row to combine them.
  // Planned: first the plan, then plan_programs programs sharing its pieces.
  b.launch("paged_attention_plan", {"1", "1", "1"}, "plan_programs > 0")
      .launch("paged_attention", {"plan_programs > 0 ? plan_programs : batch * q_tiles",
                                  "plan_programs > 0 ? 1 : hkv * (hq / hkv / group)", "plan_programs > 0 ? 1 : splits"})
      .launch("paged_attention_combine", {"rows", "1", "1"}, "splits > 1");
  return b.finish();
}

rt::OpRun declare_reshape_and_cache() {
  rt::OpRunBuilder b("reshape_and_cache");
  // Every size comes from the caller's arrays (kv_dtype may be given, for fp8 caches passed as
  // uint8 bytes).
  for (const char* n : {"num_tokens", "hkv", "head_dim", "num_blocks", "block_size", "dtype"}) b.size(n);
  b.size("cache_dtype", {.key = false})
      .size("kv_dtype", {.default_value = R"(cache_dtype == dtype ? "same" : cache_dtype)"})
      .size("slot_dtype")
      .size("latent", {.default_value = "!present(value)"});

  // The slots the kernel writes: [0, num_slots); an i32 slot_mapping cannot name more.
  b.let("num_slots", R"(slot_dtype == "i32" ? min(num_blocks * block_size, 2147483647) : num_blocks * block_size)")
      // Elements of a token's row per program (reshape_and_cache_block_hd): block_hd, or for 0
      // the row rounded up to a power of two, at most 1024.
      .let("cols", "block_hd == 0 ? min(pow2(hkv * head_dim), 1024) : block_hd");

  b.check(R"(slot_dtype == "i64" || slot_dtype == "i32")", "slot_mapping holds integer slots: int64 or int32")
      .check(R"(kv_dtype == "same" || kv_dtype == "f8e4m3" || kv_dtype == "f8e5m2")",
             "the caches hold the key's dtype, or fp8: float8_e4m3fn or float8_e5m2 arrays, or uint8 arrays of fp8 "
             "bits with the size kv_dtype naming the format")
      // A kv_dtype the caller gives names the format of fp8 caches (uint8 arrays of their bits too).
      .check(R"(kv_dtype == "same" ? cache_dtype == dtype : cache_dtype == kv_dtype || cache_dtype == "u8")",
             "the caches' dtype is not the one kv_dtype names");

  // The caches are read and written in place on the caller's arrays.
  b.input("key", {{"num_tokens", "hkv", "head_dim"}, "dtype"})
      .input("value", {{"num_tokens", "hkv", "head_dim"}, "dtype", "!latent"})
      .input("slot_mapping", {{"num_tokens"}, "slot_dtype"})
      .inout("k_cache", {{"num_blocks", "block_size", "hkv", "head_dim"}, "cache_dtype"})
      .inout("v_cache", {{"num_blocks", "block_size", "hkv", "head_dim"}, "cache_dtype", "!latent"});
  b.scalar("k_scale", R"(kv_dtype != "same")").scalar("v_scale", R"(kv_dtype != "same" && !latent)");

  for (const char* n : {"hkv", "head_dim", "dtype", "kv_dtype", "slot_dtype", "latent", "block_t", "block_hd", "num_warps"})
    b.spec(n, n);
  // One program per (block_t tokens, cols elements of their rows); no launch for no tokens.
  b.launch("reshape_and_cache", {"cdiv(num_tokens, block_t)", "cdiv(hkv * head_dim, cols)", "1"}, "num_tokens > 0");
  return b.finish();
}

} // namespace

const rt::OpRun& paged_attention_run() {
  static const rt::OpRun run = declare_paged_attention();
  return run;
}

const rt::OpRun& reshape_and_cache_run() {
  static const rt::OpRun run = declare_reshape_and_cache();
  return run;
}

} // namespace tilec::templates
