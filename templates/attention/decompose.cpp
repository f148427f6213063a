// The correctness floor of paged attention: the seed's decomposition
// (fuel-graph 0.23.0 PagedAttn `recipe`; docs/ARCHITECTURE.md "Paged attention") as data over the
// primitive basis, run as a sequence of primitive launches. It gathers the
// block table's PADDED capacity (kv_len = max_blocks · block_size) into dense
// K and V and masks the tail after computing it, so its cost scales with
// capacity, not with the live context_lens: the fused kernel is the fast path.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "templates/attention/paged_attention.h"
#include "templates/prim_recipe.h"

namespace tilec::templates {

namespace prim {

namespace {

// GQA head repeat (the seed's repeat_kv_heads_recipe): Reshape → equal-rank
// BroadcastTo → Reshape, or nothing when Hq == Hkv. The last Reshape cannot be
// a view of the stride-0 broadcast, so it materializes [B, Hq, kv_len, D].
int repeat_kv_heads(Recipe& r, int x, const PagedAttentionShape& s) {
  if (s.hq == s.hkv) return x;
  const int64_t b = s.batch, kv_len = s.capacity(), d = r.nodes.at(size_t(x)).shape.back();
  int r5 = r.reshape(x, {b, s.hkv, 1, kv_len, d});
  int bc = r.broadcast_to(r5, {b, s.hkv, s.group(), kv_len, d});
  return r.reshape(bc, {b, s.hq, kv_len, d});
}

// The seed's gather_kv_recipe: IndexSelect the pages the (flattened) block
// table names, view them as [B, kv_len, Hkv, D], permute to [B, Hkv, kv_len, D]
// and repeat heads up to Hq. tilec computes in f32 from here on, so the
// gathered pages are cast right after the IndexSelect (the seed keeps q's dtype); an fp8
// cache is dequantized there too (times its scale: 0 for none). The slots past each
// sequence's context (`dead`, [B, kv_len, 1, 1]: the tail of its last live page, and the pages
// it does not use) are set to 0: whatever bytes they hold, NaN and Inf included, never reach
// a score or the output (the seed's masking of the scores alone leaves 0 * NaN in probs · V).
int gather_kv(Recipe& r, int cache, int bt_flat, int dead, const PagedAttentionShape& s, double fp8_scale,
              int64_t head_dim) {
  int sel = r.index_select(cache, bt_flat, 0);
  if (s.cache_dtype() != ir::DType::f32) sel = r.cast(sel, ir::DType::f32);
  if (s.kv_fp8) sel = r.mul_scalar(sel, fp8_scale);
  int seq = r.masked_fill(r.reshape(sel, {s.batch, s.capacity(), s.hkv, head_dim}), dead, 0.0);
  int perm = r.permute(seq, {0, 2, 1, 3});
  return repeat_kv_heads(r, perm, s);
}

// ALiBi bias slope[h] · (j − i) broadcast to [B, Hq, Sq, Sk] (the seed's
// alibi_bias_recipe: query offset 0, f32, every BroadcastTo after an
// equal-rank Reshape).
int alibi_bias(Recipe& r, int slopes, const PagedAttentionShape& s) {
  const int64_t b = s.batch, hq = s.hq, sq = s.sq, sk = s.capacity();
  const ir::Shape grid = {sq, sk}, full = {b, hq, sq, sk};
  int row = r.reshape(r.iota(sq, ir::DType::f32), {sq, 1});
  int col = r.reshape(r.iota(sk, ir::DType::f32), {1, sk});
  int row_bc = r.broadcast_to(row, grid);
  int col_bc = r.broadcast_to(col, grid);
  int rel = r.sub(col_bc, row_bc); // j - i
  int rel_4d = r.broadcast_to(r.reshape(rel, {1, 1, sq, sk}), full);
  int slope_4d = r.broadcast_to(r.reshape(slopes, {1, hq, 1, 1}), full);
  return r.mul(slope_4d, rel_4d);
}

} // namespace

Recipe paged_attention_recipe(const PagedAttentionShape& s) {
  using ir::DType;
  const int64_t b = s.batch, kv_len = s.capacity(), d = s.head_dim;
  const int64_t num_blocks = s.num_blocks > 0 ? s.num_blocks : s.batch * s.max_blocks;
  const ir::Shape cache_shape = {num_blocks, s.block_size, s.hkv, d};
  const ir::Shape scores_shape = {b, s.hq, s.sq, kv_len};

  Recipe r;
  int q = r.input(0, "q", {b, s.hq, s.sq, d}, s.dtype);
  int k_cache = r.input(1, "k_cache", cache_shape, s.cache_dtype());
  // The latent form has no v_cache (bind 2 stays unused): V is K's first head_dim_v columns.
  int v_cache = s.latent ? -1 : r.input(2, "v_cache", {num_blocks, s.block_size, s.hkv, s.dv()}, s.cache_dtype());
  int block_table = r.input(3, "block_table", {b, s.max_blocks}, DType::i32);
  int context_lens = r.input(4, "context_lens", {b}, DType::i32);
  int alibi = s.alibi ? r.input(5, "alibi_slopes", {s.hq}, DType::f32) : -1;
  int sinks = s.sinks ? r.input(s.alibi ? 6 : 5, "sinks", {s.hq}, DType::f32) : -1;

  // 0. key positions and context lengths in f32, and the dead slots: key position >= context_len
  int iota_kv = r.iota(kv_len, DType::f32);
  int cl = r.reshape(r.cast(context_lens, DType::f32), {b, 1, 1, 1});
  int dead = r.ge(r.reshape(iota_kv, {1, kv_len, 1, 1}), cl); // [B, kv_len, 1, 1]

  // 1. gather the physical blocks through the (shared) flattened block table
  int bt_flat = r.reshape(block_table, {b * s.max_blocks});
  int k_att = gather_kv(r, k_cache, bt_flat, dead, s, s.k_scale, d);
  int v_att = s.latent ? r.narrow(k_att, 3, 0, s.dv()) : gather_kv(r, v_cache, bt_flat, dead, s, s.v_scale, s.dv());

  // 2. scores = scale · q·kᵀ (+ softcap, + alibi)
  int kt = r.permute(k_att, {0, 1, 3, 2});
  int q32 = s.dtype == DType::f32 ? q : r.cast(q, DType::f32);
  int scores = r.matmul(q32, kt);
  int scaled = r.mul_scalar(scores, s.scale());
  if (s.softcap) {
    int pre = r.mul_scalar(scaled, 1.0 / *s.softcap);
    scaled = r.mul_scalar(r.tanh(pre), *s.softcap);
  }
  if (alibi >= 0) scaled = r.add(scaled, alibi_bias(r, alibi, s));

  // 3. variable-length mask: -inf where key position >= context_len
  int pos = r.reshape(iota_kv, {1, 1, 1, kv_len});
  int pos_bc = r.broadcast_to(pos, scores_shape);
  int cl_bc = r.broadcast_to(cl, scores_shape);
  int mask = r.ge(pos_bc, cl_bc);
  int masked = r.masked_fill(scaled, mask, -INFINITY);
  // 3b. (off by default) query row i sits at position p_i = context_len - Sq + i; causal hides
  // keys j > p_i, a window of W keys j <= p_i - W. Constants come from ones = (x >= x).
  const int64_t window = s.effective_window(); // 0 when it hides nothing (as the fused kernel's)
  if (s.causal || window > 0) {
    int iq = r.iota(s.sq, DType::f32);
    int ones = r.cast(r.ge(iq, iq), DType::f32);
    int rel = r.sub(iq, r.mul_scalar(ones, double(s.sq - 1))); // i - (Sq - 1)
    int next = r.add(cl_bc, r.broadcast_to(r.reshape(rel, {1, 1, s.sq, 1}), scores_shape)); // p_i + 1
    if (s.causal) masked = r.masked_fill(masked, r.ge(pos_bc, next), -INFINITY);
    if (window > 0) {
      int ones_bc = r.broadcast_to(r.reshape(ones, {1, 1, s.sq, 1}), scores_shape);
      int last_hidden = r.sub(next, r.mul_scalar(ones_bc, double(window + 1))); // p_i - W
      masked = r.masked_fill(masked, r.ge(last_hidden, pos_bc), -INFINITY);
    }
  }

  // 3c. (off by default) chunked local attention: -inf where floor(j / C) != floor(p_i / C). The
  // floors are made of the basis: a cast to i32 truncates toward zero, and the remainder left
  // (in (-C, C), or off by one C where f32 rounds the quotient) moves the quotient by one.
  if (const int64_t c = s.effective_chunk(); c > 0) {
    auto floor_div = [&](int x) { // floor(x / c), x integral in f32
      int ones = r.cast(r.ge(x, x), DType::f32);
      int q0 = r.cast(r.cast(r.mul_scalar(x, 1.0 / double(c)), DType::i32), DType::f32);
      int rem = r.sub(x, r.mul_scalar(q0, double(c)));
      int up = r.cast(r.ge(rem, r.mul_scalar(ones, double(c))), DType::f32);
      int down = r.cast(r.ge(r.mul_scalar(ones, -1.0), rem), DType::f32);
      return r.sub(r.add(q0, up), down);
    };
    int iq = r.iota(s.sq, DType::f32);
    int q_ones = r.cast(r.ge(iq, iq), DType::f32);
    int rel = r.sub(iq, r.mul_scalar(q_ones, double(s.sq))); // i - Sq
    const ir::Shape rows_shape = {b, 1, s.sq, 1};
    int p = r.add(r.broadcast_to(cl, rows_shape), r.broadcast_to(r.reshape(rel, {1, 1, s.sq, 1}), rows_shape)); // p_i
    int key_chunk = r.broadcast_to(r.reshape(floor_div(iota_kv), {1, 1, 1, kv_len}), scores_shape);
    int row_chunk = r.broadcast_to(floor_div(p), scores_shape);
    int ones_bc = r.cast(r.ge(key_chunk, key_chunk), DType::f32);
    masked = r.masked_fill(masked, r.ge(key_chunk, r.add(row_chunk, ones_bc)), -INFINITY);
    masked = r.masked_fill(masked, r.ge(row_chunk, r.add(key_chunk, ones_bc)), -INFINITY);
  }

  // 3d. (off by default) attention sinks: head h's sink joins every row's softmax as one more
  // column, [B, Hq, Sq, kv_len + 1], and its probability is dropped after (it has no value).
  if (sinks >= 0) {
    int column = r.broadcast_to(r.reshape(sinks, {1, s.hq, 1, 1}), {b, s.hq, s.sq, 1});
    masked = r.concat(masked, column, 3);
  }

  // 4. probs = softmax(masked); out = probs · v
  int probs = r.softmax_last_dim(masked);
  if (sinks >= 0) probs = r.narrow(probs, 3, 0, kv_len);
  int out = r.matmul(probs, v_att);
  r.output = s.dtype == DType::f32 ? out : r.cast(out, s.dtype);
  return r;
}

} // namespace prim

namespace {

// The most bytes one intermediate of the decomposition may take: 4 GiB, so the four
// score-sized tensors alive at its peak stay near 16 GiB, within a GPU's memory and a
// workstation's (and the emulator would take hours over more).
constexpr int64_t kDecomposeMaxIntermediateBytes = int64_t(1) << 32;

} // namespace

launch::Buffer run_paged_attention_decomposed(const PagedAttentionInputs& in, launch::Launcher& launcher,
                                              const launch::Buffer* block_table) {
  if (block_table) {
    // The inputs as given, then every entry of the replacement (the decomposition reads all).
    validate_paged_attention(in, /*decompose=*/false);
    const PagedAttentionShape& s = in.shape;
    if (block_table->dtype != ir::DType::i32 || block_table->count() != in.block_table.count())
      throw UserError("paged_attention: the replacement block table differs in dtype or size");
    for (size_t i = 0; i < block_table->count(); ++i)
      if (int64_t page = block_table->get_int(i); page < 0 || page >= s.num_blocks)
        throw UserError(fmt::format("block_table[{}] = {} is not below num_blocks = {}", i, page, s.num_blocks));
  } else {
    validate_paged_attention(in, /*decompose=*/true);
  }
  const PagedAttentionShape& s = in.shape;
  prim::Recipe recipe = prim::paged_attention_recipe(s);
  // It materializes [B, Hq, Sq, kv_len] f32 scores, several alive at once (scores, mask, masked,
  // probabilities): past the cap, refuse before allocating any (docs/PAGED_ATTENTION.md).
  int64_t largest = 0;
  std::string largest_node;
  for (size_t i = 0; i < recipe.nodes.size(); ++i) {
    const prim::RecipeNode& n = recipe.nodes[i];
    if (n.op == prim::PrimOp::Input || n.op == prim::PrimOp::BroadcastTo || n.op == prim::PrimOp::Permute ||
        n.op == prim::PrimOp::Narrow)
      continue;
    int64_t bytes = ir::dtype_bytes(n.dtype);
    for (int64_t d : n.shape) bytes = d > 0 && bytes > INT64_MAX / d ? INT64_MAX : bytes * d;
    if (bytes > largest) {
      largest = bytes;
      largest_node = fmt::format("{} {} {}", prim::prim_op_name(n.op), ir::shape_str(n.shape), ir::dtype_name(n.dtype));
    }
  }
  if (largest > kDecomposeMaxIntermediateBytes)
    throw UserError(fmt::format(
        "paged_attention: the decomposition materializes {} ({} bytes, {:.1f} GiB: B x Hq x Sq x max_blocks x "
        "block_size scores), over its cap of {} bytes ({} GiB) per intermediate; use --path fused, or fewer "
        "sequences, query rows or block-table columns",
        largest_node, largest, double(largest) / double(1 << 30), kDecomposeMaxIntermediateBytes,
        kDecomposeMaxIntermediateBytes >> 30));
  // The recipe's Input nodes carry each operand's shape.
  std::vector<const launch::Buffer*> operands = {&in.q, &in.k_cache, &in.v_cache,
                                                 block_table ? block_table : &in.block_table, &in.context_lens};
  if (s.alibi) operands.push_back(&in.alibi_slopes);
  if (s.sinks) operands.push_back(&in.sinks);
  std::vector<prim::Tensor> binds(operands.size());
  for (const prim::RecipeNode& n : recipe.nodes)
    if (n.op == prim::PrimOp::Input)
      binds.at(n.bind) = prim::borrow_buffer(*operands.at(n.bind), n.shape);
  prim::Tensor out = prim::contiguous(launcher, prim::execute(recipe, binds, launcher));
  launch::Buffer result("out", out.dtype(), static_cast<size_t>(out.numel()));
  const size_t bytes = result.bytes.size(),
               start = static_cast<size_t>(out.offset) * ir::dtype_bytes(out.dtype());
  std::copy(out.buffer->bytes.begin() + start, out.buffer->bytes.begin() + start + bytes,
            result.bytes.begin());
  return result;
}

} // namespace tilec::templates
