// reshape_and_cache as a host runs it: its declared run (run_description.cpp), resolved from
// tensors, against the template and what its kernel is built from (grids, specialization, tuning
// key), and the C ABI (runtime/tilec.h) updating the
// caller's caches in place on the emulator, with the run's refusals.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <filesystem>
#include <sstream>

#include "backends/module_builder.h"
#include "runtime/op_store.h"
#include "runtime/tilec.h"
#include "templates/attention/reshape_and_cache.h"
#include "tests/runtime/helpers.h"

using namespace tilec;
using namespace tilec::templates;

namespace {

const KernelTemplate& rac() {
  const KernelTemplate* t = find_template("reshape_and_cache");
  REQUIRE(t);
  return *t;
}

const launch::Buffer& buffer(const Problem& p, const std::string& name) {
  for (const launch::Buffer& b : p.buffers)
    if (b.name == name) return b;
  FAIL("no buffer " << name);
  return p.buffers.front();
}

tilec_dtype abi_dtype(ir::DType t) {
  switch (t) {
  case ir::DType::f32: return TILEC_F32;
  case ir::DType::f16: return TILEC_F16;
  case ir::DType::bf16: return TILEC_BF16;
  case ir::DType::f8e4m3: return TILEC_F8E4M3;
  case ir::DType::f8e5m2: return TILEC_F8E5M2;
  case ir::DType::i32: return TILEC_I32;
  default: return TILEC_I64;
  }
}

} // namespace

TEST_CASE("reshape_and_cache's run description matches the template", "[templates][reshape_and_cache][op_run]") {
  const KernelTemplate& t = rac();
  rt::KernelCard card = kernel_card(t);
  REQUIRE(card.run);
  rt::test::TempDir dir;
  REQUIRE(rt::read_kernel_card(rt::write_kernel_card(card, dir.path)) == card);
  CHECK(rt::parse_op_run("[run]\n" + rt::format_op_run(*card.run), "again") == card.run); // inout and checks read back
  auto store = rt::OpStore::open(dir.path, "emulate");
  const rt::Op& op = store->op("reshape_and_cache");
  int checked = 0;
  for (const char* shape_text : {"hkv=8 head_dim=128 num_tokens=33", "hkv=1 head_dim=576 latent=1 kv_dtype=f8e4m3",
                                 "hkv=3 head_dim=40 dtype=bf16 slot_dtype=i32 num_tokens=1", "num_tokens=0"}) {
    std::vector<std::string> sets;
    std::istringstream in(shape_text);
    for (std::string w; in >> w;) sets.push_back(w);
    ParamMap shape = resolve_params(t.shape, sets, "--shape");
    ReshapeAndCacheShape s = reshape_and_cache_shape(shape);
    for (const char* config : {"block_t=1 block_hd=0", "block_t=4 block_hd=256", "block_t=8 block_hd=32 num_warps=1"}) {
      INFO(fmt::format("{} / {}", shape_text, config));
      std::vector<std::string> cs;
      std::istringstream cin(config);
      for (std::string w; cin >> w;) cs.push_back(w);
      ParamMap params = resolve_params(t.params, cs, "--set");
      rt::OpArgs args;
      const rt::ScalarType cache = s.cache_dtype();
      args.tensors = {{"key", 256, s.dtype, {s.num_tokens, s.hkv, s.head_dim}, {}},
                      {"slot_mapping", 256, s.slot_dtype, {s.num_tokens}, {}},
                      {"k_cache", 256, cache, {s.num_blocks, s.block_size, s.hkv, s.head_dim}, {}}};
      if (!s.latent) {
        args.tensors.push_back({"value", 256, s.dtype, {s.num_tokens, s.hkv, s.head_dim}, {}});
        args.tensors.push_back({"v_cache", 256, cache, {s.num_blocks, s.block_size, s.hkv, s.head_dim}, {}});
      }
      for (const auto& [k, v] : params) args.config[k] = v;
      rt::OpCall call = op.resolve(args);
      rt::ExprLookup lookup = [&](std::string_view n) -> std::optional<rt::SpecValue> {
        if (n.starts_with("present(")) return int64_t(!s.latent);
        auto it = call.values.find(std::string(n));
        if (it == call.values.end()) return std::nullopt;
        return it->second;
      };
      const rt::OpLaunch& l = op.run().launches.at(0);
      const launch::Grid g = launch_grid(t, params, shape);
      CHECK(l.when.eval_int(lookup) == (s.num_tokens > 0));
      CHECK(launch::Grid{l.grid[0].eval_int(lookup), l.grid[1].eval_int(lookup), l.grid[2].eval_int(lookup)} == g);
      std::map<std::string, rt::SpecValue> spec;
      for (const auto& [k, e] : op.run().spec) spec[k] = e.eval(lookup);
      CHECK(spec == module_spec(t, params, shape));
      const ReshapeAndCacheConfig c = reshape_and_cache_config(params);
      CHECK(g == launch::Grid{cdiv(s.num_tokens, c.block_t), cdiv(s.row(), reshape_and_cache_block_hd(s, c)), 1});
      CHECK(spec == std::map<std::string, rt::SpecValue>{
                        {"hkv", s.hkv}, {"head_dim", s.head_dim}, {"dtype", std::string(ir::dtype_name(s.dtype))},
                        {"kv_dtype", std::string(s.kv_fp8 ? ir::dtype_name(*s.kv_fp8) : "same")},
                        {"slot_dtype", std::string(ir::dtype_name(s.slot_dtype))}, {"latent", int64_t(s.latent)},
                        {"block_t", c.block_t}, {"block_hd", c.block_hd}, {"num_warps", c.num_warps}});
      CHECK(std::get<int64_t>(call.values.at("num_slots")) == s.slots());
      std::set<std::string> key_fields, db_fields;
      for (const rt::OpSize& sz : op.run().sizes)
        if (sz.key) key_fields.insert(sz.name);
      for (const auto& [k, v] : problem_key(t, shape)) db_fields.insert(k);
      CHECK(key_fields == db_fields);
      ++checked;
    }
  }
  CHECK(checked == 12);
}

TEST_CASE("reshape_and_cache through the C ABI updates the caller's caches in place", "[templates][reshape_and_cache][abi]") {
  const KernelTemplate& t = rac();
  rt::test::TempDir dir;
  const std::vector<std::string> config = {"block_t=4", "block_hd=16", "num_warps=2"};
  const ParamMap params = resolve_params(t.params, config, "--set");
  const std::vector<std::vector<std::string>> shapes = {
      {"num_tokens=9", "hkv=2", "head_dim=16", "num_blocks=3", "block_size=4", "dtype=f16"},
      {"num_tokens=6", "hkv=1", "head_dim=24", "num_blocks=2", "block_size=4", "dtype=bf16", "kv_dtype=f8e4m3",
       "slot_dtype=i32", "latent=1"}};
  for (const auto& sizes : shapes)
    backends::write_template_modules(t, params, resolve_params(t.shape, sizes, "--shape"), "host", dir.path, true);
  rt::write_kernel_card(kernel_card(t), dir.path); // as autotune --export does

  tilec_store* store = nullptr;
  REQUIRE(tilec_store_open(dir.path.c_str(), "emulate", &store) == TILEC_OK);
  const tilec_op* op = nullptr;
  REQUIRE(tilec_store_op(store, "reshape_and_cache", &op) == TILEC_OK);
  std::map<std::string, int> roles;
  int flag = -1;
  for (size_t i = 0; const char* n = tilec_op_tensor(op, i, &flag); ++i) roles[n] = flag;
  CHECK(roles == std::map<std::string, int>{{"key", 0}, {"value", 0}, {"slot_mapping", 0}, {"k_cache", 2}, {"v_cache", 2}});

  for (const auto& sizes : shapes) {
    INFO(fmt::format("{}", fmt::join(sizes, " ")));
    Problem p = make_problem(t, {resolve_params(t.shape, sizes, "--shape"), 11, {}, ""});
    const ReshapeAndCacheShape& s = std::any_cast<const ReshapeAndCacheShape&>(p.context);
    // The caller's arrays: copies of the problem's inputs, caches holding their old contents.
    std::vector<launch::Buffer> mine;
    for (const char* name : {"key", "value", "slot_mapping", "k_cache", "v_cache"})
      if (!s.latent || (name[0] != 'v')) mine.push_back(buffer(p, name));
    std::vector<std::vector<int64_t>> dims;
    std::vector<tilec_tensor> tensors;
    for (launch::Buffer& b : mine) {
      REQUIRE(reinterpret_cast<uintptr_t>(b.bytes.data()) % 16 == 0);
      dims.push_back(b.name == "slot_mapping" ? std::vector<int64_t>{s.num_tokens}
                     : b.name.ends_with("cache") ? std::vector<int64_t>{s.num_blocks, s.block_size, s.hkv, s.head_dim}
                                                 : std::vector<int64_t>{s.num_tokens, s.hkv, s.head_dim});
    }
    for (size_t i = 0; i < mine.size(); ++i)
      tensors.push_back({mine[i].name.c_str(), mine[i].bytes.data(), abi_dtype(mine[i].dtype), int(dims[i].size()),
                         dims[i].data(), nullptr});
    std::vector<tilec_value> cfg;
    for (const auto& [k, v] : params) cfg.push_back({k.c_str(), v, nullptr});
    std::vector<tilec_scalar> scalars;
    if (s.kv_fp8) scalars.push_back({"k_scale", s.k_scale});
    tilec_args args{tensors.data(), tensors.size(), scalars.data(), scalars.size(), nullptr, 0, cfg.data(), cfg.size()};
    const tilec_status status = tilec_op_run(op, &args, nullptr, 0, nullptr);
    INFO(tilec_last_error());
    REQUIRE(status == TILEC_OK);
    for (size_t k = 0; k < p.expected.size(); ++k) {
      const launch::Buffer& got = mine[k == 0 ? (s.latent ? 2 : 3) : 4];
      CHECK(got.name == p.expected[k].name);
      CHECK(got.bytes == p.expected[k].bytes); // in place, every byte as the reference has it
    }

    // The run's refusals name the argument.
    auto refused = [&](std::vector<tilec_tensor> ts, const std::string& message) {
      tilec_args a = args;
      a.tensors = ts.data();
      a.num_tensors = ts.size();
      CHECK(tilec_op_run(op, &a, nullptr, 0, nullptr) == TILEC_ERROR_ARGUMENT);
      CHECK_THAT(std::string(tilec_last_error()), Catch::Contains(message));
    };
    std::vector<tilec_tensor> no_cache(tensors.begin(), tensors.end() - 1);
    // (Without the latent form's one cache nothing gives the cache's sizes.)
    refused(no_cache, s.latent ? "size 'num_blocks' is not given and no tensor argument implies it"
                               : "tensor argument 'v_cache' is missing");
    std::vector<tilec_tensor> float_slots = tensors;
    for (tilec_tensor& x : float_slots)
      if (std::string(x.name) == "slot_mapping") x.dtype = s.slot_dtype == ir::DType::i32 ? TILEC_F32 : TILEC_U64;
    refused(float_slots, "slot_mapping holds integer slots");
    std::vector<tilec_tensor> overlapping = tensors;
    overlapping.back().data = tensors.front().data; // the last cache over the key
    refused(overlapping, "overlap");
  }
  tilec_store_close(store);
}
