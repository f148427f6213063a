// Paged attention's .npy inputs and outputs: reading an inputs folder, writing generated inputs and
// the output.
#include <array>
#include <string_view>
#include <fmt/format.h>
#include <fmt/ranges.h>

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

} // namespace

PagedAttentionInputs read_paged_attention_inputs(const std::string& dir, double softmax_scale,
                                                 std::optional<double> softcap, std::optional<ir::DType> kv_fp8) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw UserError(fmt::format("--inputs {}: not a directory", dir));
  auto path = [&](const char* f) { return (fs::path(dir) / f).string(); };
  auto read = [&](const char* f) {
    if (!fs::exists(path(f))) throw UserError(fmt::format("--inputs {}: {} is missing", dir, f));
    return rt::read_npy(path(f));
  };
  // No v_cache.npy: the latent form (MLA), V the first head_dim_v columns of the K cache.
  const bool latent = !fs::exists(path("v_cache.npy"));
  rt::NpyArray q = read("q.npy"), k = read("k_cache.npy"), v = latent ? rt::NpyArray{} : read("v_cache.npy");
  rt::NpyArray bt = read("block_table.npy"), cl = read("context_lens.npy");
  PagedAttentionInputs in;
  // A mixed batch (query_start_loc.npy there): q packed [total_q, Hq, D].
  const bool varlen = fs::exists(path("query_start_loc.npy"));
  in.q = to_buffer(q, "q", path("q.npy"), true, varlen ? 3 : 4);
  in.k_cache = to_buffer(k, "k_cache", path("k_cache.npy"), true, 4);
  if (!latent) in.v_cache = to_buffer(v, "v_cache", path("v_cache.npy"), true, 4);
  else in.v_cache = launch::Buffer("v_cache", in.k_cache.dtype, 0);
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
    if (latent && buf == &in.v_cache) {
      buf->dtype = in.k_cache.dtype;
      continue;
    }
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
  s.latent = latent;
  if (!latent) {
    if (v.shape.size() != 4 || !std::equal(k.shape.begin(), k.shape.end() - 1, v.shape.begin()))
      throw UserError(fmt::format("v_cache.npy: its shape [{}] differs from k_cache.npy's [{}] in more than the last dim",
                                  fmt::join(v.shape, ", "), fmt::join(k.shape, ", ")));
    if (v.shape[3] != k.shape[3]) s.head_dim_v = v.shape[3];
  }
  if (k.shape[3] != s.head_dim)
    throw UserError(fmt::format("k_cache.npy: head dim {} differs from q's {}", k.shape[3], s.head_dim));
  if (bt.shape[0] != s.batch)
    throw UserError(fmt::format("block_table.npy: {} rows, q has batch {}", bt.shape[0], s.batch));
  if (fs::exists(path("alibi_slopes.npy"))) {
    rt::NpyArray a = rt::read_npy(path("alibi_slopes.npy"));
    in.alibi_slopes = to_buffer(a, "alibi_slopes", path("alibi_slopes.npy"), true, 1);
    s.alibi = true;
  }
  if (fs::exists(path("sinks.npy"))) {
    rt::NpyArray a = rt::read_npy(path("sinks.npy"));
    if (a.descr != "<f4") throw UserError(fmt::format("{}: dtype '{}' is not <f4", path("sinks.npy"), a.descr));
    in.sinks = to_buffer(a, "sinks", path("sinks.npy"), true, 1);
    s.sinks = true;
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
  if (!s.latent) put("v_cache.npy", in.v_cache, {s.num_blocks, s.block_size, s.hkv, s.dv()}, npy_descr(s.cache_dtype()));
  put("block_table.npy", in.block_table, {s.batch, s.max_blocks}, "<u4");
  put("context_lens.npy", in.context_lens, {s.batch}, "<u4");
  if (s.alibi) put("alibi_slopes.npy", in.alibi_slopes, {s.hq}, "<f4");
  if (s.sinks) put("sinks.npy", in.sinks, {s.hq}, "<f4");
}

void write_paged_attention_output(const std::string& path, const PagedAttentionInputs& in,
                                  const launch::Buffer& out) {
  const PagedAttentionShape& s = in.shape;
  std::vector<int64_t> dims = s.varlen ? std::vector<int64_t>{in.q_rows() / s.hq, s.hq, s.dv()}
                                       : std::vector<int64_t>{s.batch, s.hq, s.sq, s.dv()};
  rt::NpyArray a{npy_descr(out.dtype), dims, out.bytes.to_vector()};
  rt::write_npy(path, a);
}

} // namespace tilec::templates
