// Paged attention's run as data (templates/attention/run_description.cpp), resolved as a host
// resolves it (from tensors), against what the C++ path does (run_paged_attention_fused, which
// evaluates the same declaration from the sizes it knows): for many configs and shapes the
// described launches (kernels, grids) equal the recorded ones, the workspace equals its partial
// buffers, the specialization equals paged_attention_module_spec and the tuning key has the
// fields of problem_key. And the declaration's values against what the kernels are built from
// (the query tiles of paged_attention_block_m, the shape's effective window and chunk), so the
// description cannot drift from the kernels it runs.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <unistd.h>

#include "runtime/op_store.h"
#include "templates/attention/paged_attention.h"
#include "templates/attention/run_description.h"
#include "templates/registry.h"

// The launch layer is moving from templates/ and interp/ to launch/ (issue 30): either spelling.
#if __has_include("launch/launcher.h")
#include "launch/launcher.h"
using RecGrid = tilec::launch::Grid;
using RecArg = tilec::launch::Arg;
using RecLauncher = tilec::launch::Launcher;
#else
#include "templates/launcher.h"
using RecGrid = tilec::interp::Grid;
using RecArg = tilec::interp::Arg;
using RecLauncher = tilec::templates::Launcher;
#endif

using namespace tilec;
using namespace tilec::templates;

namespace {

// Records each launch (kernel, grid, the element count of each buffer by name); runs nothing.
struct Recorder : RecLauncher {
  struct Launch {
    std::string kernel;
    std::array<int64_t, 3> grid;
    std::map<std::string, size_t> buffers;
  };
  std::vector<Launch> launches;
  std::string backend() const override { return "record"; }
  void launch(const ir::Kernel& kernel, int, RecGrid grid, const std::vector<RecArg>& args) override {
    Launch l{kernel->name, {grid[0], grid[1], grid[2]}, {}};
    for (const RecArg& a : args)
      if (a.buffer) l.buffers[a.buffer->name] = a.buffer->count();
    launches.push_back(std::move(l));
  }
};

std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / fmt::format("tilec-{}-{}", name, ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

} // namespace

TEST_CASE("paged attention's run description matches run_paged_attention_fused", "[templates][paged_attention][op_run]") {
  const KernelTemplate& t = *find_template("paged_attention");
  rt::KernelCard card = kernel_card(t);
  REQUIRE(card.run);
  auto dir = fresh_dir("pa-run");
  std::filesystem::path file = rt::write_kernel_card(card, dir);
  REQUIRE(rt::read_kernel_card(file) == card); // the card carries the run and reads it back
  auto store = rt::OpStore::open(dir, "emulate");
  const rt::Op& op = store->op("paged_attention");

  struct Case {
    int64_t batch, hq, hkv, sq, head_dim, alibi, dtype, chunk, sinks = 0, head_dim_v = 0, latent = 0;
  };
  // (A chunk past the capacity is cut to it on both sides: 2^40.)
  const std::vector<Case> shapes = {{1, 8, 2, 1, 64, 0, 0, 0}, {3, 8, 8, 1, 32, 1, 0, 16}, {2, 16, 2, 3, 32, 0, 1, 0},
                                    {4, 4, 1, 2, 64, 1, 0, int64_t(1) << 40}, {2, 32, 4, 1, 128, 0, 2, 8},
                                    {2, 8, 2, 1, 64, 0, 1, 0, 1},             {3, 16, 2, 2, 64, 1, 0, 8, 1},
                                    {2, 16, 1, 2, 576, 0, 2, 0, 0, 512, 1},   {2, 8, 2, 1, 64, 0, 1, 0, 0, 32, 0},
                                    {1, 8, 1, 1, 48, 0, 0, 0, 1, 32, 1},      {2, 8, 2, 1, 32, 0, 1, 0, 0, 0, 1}};
  int checked = 0;
  for (const Case& c : shapes) {
    ParamMap shape;
    for (const Param& p : t.shape) shape[p.name] = p.value;
    shape.insert_or_assign("batch", c.batch);
    shape.insert_or_assign("hq", c.hq);
    shape.insert_or_assign("hkv", c.hkv);
    shape.insert_or_assign("sq", c.sq);
    shape.insert_or_assign("head_dim", c.head_dim);
    shape.insert_or_assign("alibi", c.alibi);
    shape.insert_or_assign("dtype", c.dtype);
    shape.insert_or_assign("block_size", 8);
    shape.insert_or_assign("ctx", 40);
    shape.insert_or_assign("chunk", c.chunk);
    shape.insert_or_assign("sinks", c.sinks);
    shape.insert_or_assign("head_dim_v", c.head_dim_v);
    shape.insert_or_assign("latent", c.latent);
    PagedAttentionShape s = paged_attention_shape(shape);
    PagedAttentionInputs in = make_paged_attention_inputs(s, 7, 40);
    const int64_t group = c.hq / c.hkv, pages = int64_t(in.k_cache.count()) / (8 * c.hkv * c.head_dim);
    for (int64_t head_group : {int64_t(0), int64_t(1), group})
      for (int64_t split_choice : {1, 2, 4, -1}) // -1: planned, pieces of 32 keys over 5 programs
        for (int64_t block_n : {16, 32}) {
          ParamMap params;
          for (const Param& p : t.params) params[p.name] = p.value;
          params.insert_or_assign("head_group", head_group);
          const bool planned = split_choice < 0;
          params.insert_or_assign("num_splits", planned ? 1 : split_choice);
          params.insert_or_assign("split_tokens", planned ? 32 : 0);
          params.insert_or_assign("plan_programs", planned ? 5 : 0);
          params.insert_or_assign("block_n", block_n);
          params.insert_or_assign("num_stages", 1);
          INFO(fmt::format("batch={} hq={} hkv={} sq={} head_dim={} alibi={} dtype={} chunk={} head_group={} num_splits={} "
                           "block_n={}",
                           c.batch, c.hq, c.hkv, c.sq, c.head_dim, c.alibi, c.dtype, c.chunk, head_group, split_choice,
                           block_n));
          Recorder rec;
          run_paged_attention_fused(in, paged_attention_config(params), rec);

          // The same problem as a host gives it: tensors (at a fake address), scalars, config.
          const rt::ScalarType dt = s.dtype;
          rt::OpArgs args;
          const int64_t dv = s.dv();
          args.tensors = {{"q", 256, dt, {c.batch, c.hq, c.sq, c.head_dim}, {}},
                          {"k_cache", 256, dt, {pages, 8, c.hkv, c.head_dim}, {}},
                          {"block_table", 256, rt::ScalarType::u32, {c.batch, s.max_blocks}, {}},
                          {"context_lens", 256, rt::ScalarType::i32, {c.batch}, {}},
                          {"out", 256, dt, {c.batch, c.hq, c.sq, dv}, {}}};
          if (!c.latent) args.tensors.push_back({"v_cache", 256, dt, {pages, 8, c.hkv, dv}, {}});
          if (c.alibi) args.tensors.push_back({"alibi_slopes", 256, rt::ScalarType::f32, {c.hq}, {}});
          if (c.sinks) args.tensors.push_back({"sinks", 256, rt::ScalarType::f32, {c.hq}, {}});
          args.scalars = {{"softmax_scale", 0.125}};
          for (const auto& [k, v] : params) args.config[k] = v;
          args.sizes["ctx"] = int64_t(40);
          if (c.chunk) args.sizes["chunk"] = c.chunk;
          rt::OpCall call = op.resolve(args);
          rt::ExprLookup lookup = [&](std::string_view n) -> std::optional<rt::SpecValue> {
            if (n == "present(alibi_slopes)") return int64_t(c.alibi);
            if (n == "present(sinks)") return int64_t(c.sinks);
            if (n == "present(v_cache)") return int64_t(!c.latent);
            if (n.starts_with("present(")) return int64_t(0);
            auto it = call.values.find(std::string(n));
            if (it == call.values.end()) return std::nullopt;
            return it->second;
          };

          std::vector<std::pair<std::string, std::array<int64_t, 3>>> described, recorded;
          for (const rt::OpLaunch& l : op.run().launches)
            if (l.when.empty() || l.when.eval_int(lookup))
              described.push_back({l.kernel, {l.grid[0].eval_int(lookup), l.grid[1].eval_int(lookup), l.grid[2].eval_int(lookup)}});
          for (const Recorder::Launch& l : rec.launches) recorded.push_back({l.kernel, l.grid});
          CHECK(described == recorded);
          // The grid the kernel's tiles are built for: a program per query tile of
          // paged_attention_block_m rows, per group of heads, per split; the combine, a program a row.
          // Planned: the plan, then its 5 programs.
          const PagedAttentionConfig cfg = paged_attention_config(params);
          const int64_t splits = paged_attention_splits(s, cfg);
          const int64_t heads = head_group ? head_group : group, rows = c.batch * c.hq * c.sq;
          std::vector<std::pair<std::string, std::array<int64_t, 3>>> built = {
              {"paged_attention", {c.batch * paged_attention_query_tiles(s, cfg), c.hkv * (group / heads), splits}}};
          if (planned) built = {{"paged_attention_plan", {1, 1, 1}}, {"paged_attention", {5, 1, 1}}};
          if (splits > 1) built.push_back({"paged_attention_combine", {rows, 1, 1}});
          CHECK(recorded == built);
          if (t.grid) CHECK(launch_grid(t, params, shape) == RecGrid{recorded[0].second[0], recorded[0].second[1], recorded[0].second[2]});

          // The workspace: each described buffer is one the fused path allocates, as large.
          std::map<std::string, size_t> partials;
          for (const rt::OpWorkspace& w : op.run().workspace)
            if (w.when.empty() || w.when.eval_int(lookup)) partials[w.name] = size_t(w.elements.eval_int(lookup));
          std::map<std::string, size_t> allocated;
          for (const Recorder::Launch& l : rec.launches)
            for (const auto& [name, n] : l.buffers)
              if (name.starts_with("partial_") || name == "plan") allocated[name] = n;
          CHECK(partials == allocated);
          std::map<std::string, size_t> own;
          if (splits > 1)
            own = {{"partial_l", size_t(rows * splits)}, {"partial_m", size_t(rows * splits)}, {"partial_o", size_t(rows * splits * dv)}};
          // The plan: each item's first piece and the items' count, then a table entry per piece.
          const int64_t items = c.batch * paged_attention_query_tiles(s, cfg);
          if (planned) own["plan"] = size_t(items * (splits + 2) + 2);
          CHECK(allocated == own);

          // What the modules are looked up with is what they are compiled with.
          std::map<std::string, rt::SpecValue> spec;
          for (const auto& [k, e] : op.run().spec) spec[k] = e.eval(lookup);
          CHECK(spec == module_spec(t, params, shape));
          // ... which names what the kernels are built from (fused_spec): the shape's fields with the
          // window and chunk as every computation applies them, and the config as given.
          const std::map<std::string, rt::SpecValue> built_from = {
              {"hq", s.hq}, {"hkv", s.hkv}, {"sq", s.sq}, {"head_dim", s.head_dim},
              {"head_dim_v", s.head_dim_v_key()}, {"latent", int64_t(s.latent)}, {"block_size", s.block_size},
              {"dtype", std::string(ir::dtype_name(s.dtype))},
              {"kv_dtype", std::string(s.kv_fp8 ? ir::dtype_name(*s.kv_fp8) : "same")}, {"alibi", int64_t(s.alibi)},
              {"softcap", int64_t(s.softcap.has_value())}, {"sinks", int64_t(s.sinks)}, {"block_n", block_n},
              {"head_group", head_group}, {"block_m", params.at("block_m")}, {"num_warps", params.at("num_warps")},
              {"num_splits", splits}, {"split_tokens", planned ? int64_t(32) : int64_t(0)},
              {"plan_programs", planned ? int64_t(5) : int64_t(0)}, {"num_stages", int64_t(1)}, {"window", s.effective_window()},
              {"causal", int64_t(s.causal)}, {"chunk", s.effective_chunk()}, {"varlen", int64_t(s.varlen)},
              {"overlap", params.at("overlap")}, {"kv_tma", params.at("kv_tma")}};
          CHECK(spec == built_from);
          ++checked;
        }
    // The tuning key has the fields of the database's keys.
    rt::OpArgs none;
    std::set<std::string> key_fields, db_fields;
    for (const rt::OpSize& sz : op.run().sizes)
      if (sz.key) key_fields.insert(sz.key_field());
    for (const auto& [k, v] : problem_key(t, shape)) db_fields.insert(k);
    CHECK(key_fields == db_fields);
  }
  CHECK(checked == int(shapes.size()) * 24);
  std::filesystem::remove_all(dir);
}

TEST_CASE("size expressions: cdiv, min, max, ?:, strings, errors", "[runtime][op_run]") {
  std::map<std::string, rt::SpecValue> v = {{"head_group", int64_t(4)}, {"sq", int64_t(3)}, {"block_m", int64_t(0)},
                                            {"dtype", std::string("f16")}};
  rt::ExprLookup lookup = [&](std::string_view n) -> std::optional<rt::SpecValue> {
    auto it = v.find(std::string(n));
    if (it == v.end()) return std::nullopt;
    return it->second;
  };
  auto eval = [&](const char* text) { return rt::SizeExpr::parse(text).eval(lookup); };
  // The query-tile count the block_m knob brings (0: automatic, here one tile).
  CHECK(eval("cdiv(head_group * sq, block_m == 0 ? head_group * sq : block_m)") == rt::SpecValue(int64_t(1)));
  v["block_m"] = int64_t(5);
  CHECK(eval("cdiv(head_group * sq, block_m == 0 ? head_group * sq : block_m)") == rt::SpecValue(int64_t(3)));
  CHECK(eval("min(7, max(2, sq * 3), 100) - -1") == rt::SpecValue(int64_t(8)));
  CHECK(eval("dtype == \"f16\" && !(sq < 2) || 0") == rt::SpecValue(int64_t(1)));
  CHECK(eval("dtype != \"f16\" ? 1 : dtype") == rt::SpecValue(std::string("f16")));
  CHECK(eval("(sq + 1) * 2 % 5 / 1") == rt::SpecValue(int64_t(3)));
  CHECK(rt::SizeExpr::parse("batch").as_name() == "batch");
  CHECK_FALSE(rt::SizeExpr::parse("batch * 1").as_name());
  CHECK_THROWS_WITH(rt::SizeExpr::parse("cdiv(1)"), "expression 'cdiv(1)', column 8: cdiv takes two arguments");
  CHECK_THROWS_WITH(rt::SizeExpr::parse("sq +"), "expression 'sq +', column 5: expected a value, found the end");
  CHECK_THROWS_WITH(rt::SizeExpr::parse("foo(1)"), "expression 'foo(1)', column 7: no function 'foo' (cdiv, pow2, min, max, present)");
  CHECK_THROWS_WITH(eval("sq / (block_m - 5)"), "expression 'sq / (block_m - 5)': 3 / 0: division by zero");
  CHECK_THROWS_WITH(eval("nope + 1"), "expression 'nope + 1': no value named 'nope'");
  CHECK_THROWS_WITH(eval("dtype * 2"), "expression 'dtype * 2': '*' takes integers, got \"f16\" and 2");
  CHECK_THROWS_WITH(eval("4611686018427387904 * 4"), "expression '4611686018427387904 * 4': 4611686018427387904 * 4 is past 64 bits");
}

TEST_CASE("a [run] table that is wrong is refused naming the key", "[runtime][op_run]") {
  CHECK_FALSE(rt::parse_op_run("kernel = \"k\"\n", "card.toml"));
  CHECK_THROWS_WITH(rt::parse_op_run("[[run.launch]]\nkernel = \"k\"\ngrid = [\"n\", 1]\n", "card.toml"),
                    "card.toml:3:8: key 'run.launch[0].grid' must be an array of three expressions (x, y, z)");
  CHECK_THROWS_WITH(rt::parse_op_run("[[run.launch]]\nkernel = \"k\"\ngrid = [\"cdiv(n\", 1, 1]\n", "card.toml"),
                    "card.toml:3:9: key 'run.launch[0].grid[0]': expression 'cdiv(n', column 7: expected ')' closing cdiv(");
  CHECK_THROWS_WITH(rt::parse_op_run("[[run.size]]\nname = \"n\"\n[[run.size]]\nname = \"n\"\n[[run.launch]]\nkernel = "
                                     "\"k\"\ngrid = [1, 1, 1]\n", "card.toml"),
                    "card.toml:4:8: key 'run.size[1].name': 'n' is declared twice");
  // What format_op_run writes reads back the same.
  CHECK(rt::parse_op_run("[run]\n" + rt::format_op_run(paged_attention_run()), "again") == paged_attention_run());
}

TEST_CASE("a run declared in code refuses what a [run] table would, naming the op, and evaluates from given sizes",
          "[runtime][op_run]") {
  using B = rt::OpRunBuilder;
  CHECK_THROWS_WITH(B("op").size("n").size("n"), "op's run: 'n' is declared twice");
  CHECK_THROWS_WITH(B("op").size("n").input("n", {{"n"}, R"("f32")"}), "op's run: 'n' is declared twice");
  CHECK_THROWS_WITH(B("op").let("m", "cdiv(n"), "op's run: let m 'cdiv(n': expression 'cdiv(n', column 7: expected ')' closing cdiv(");
  CHECK_THROWS_WITH(B("op").size("n").finish(), "op's run has no launch");
  CHECK_THROWS_WITH(B("op").spec("a", "n").spec("a", "n"), "op's run: spec 'a' is declared twice");

  const rt::OpRun run = B("op")
                            .size("n")
                            .size("dtype")
                            .size("wide", {.default_value = "present(extra)", .key = false})
                            .let("tiles", "cdiv(n, block)")
                            .input("x", {{"n"}, "dtype"})
                            .input("extra", {{"n"}, "dtype", "wide"})
                            .workspace("scratch", rt::ScalarType::f32, "tiles * 2", "tiles > 1")
                            .spec("wide", "wide")
                            .spec("dtype", "dtype")
                            .launch("first", {"tiles", "1", "1"})
                            .launch("second", {"1", "1", "1"}, "tiles > 1")
                            .finish();
  // The specialization reads back in name order, as a [run.spec] table does.
  REQUIRE(run.spec.size() == 2);
  CHECK(run.spec[0].first == "dtype");
  CHECK(rt::parse_op_run("[run]\n" + rt::format_op_run(run), "again") == run);

  rt::RunValues one(run, {{"n", int64_t(100)}, {"dtype", std::string("f16")}}, {}, {{"block", 128}});
  CHECK(one.grid("first") == std::array<int64_t, 3>{1, 1, 1});
  CHECK_FALSE(one.launched("second"));
  CHECK(one.workspace_elements("scratch") == 0);
  CHECK(one.spec() == std::map<std::string, rt::SpecValue>{{"dtype", std::string("f16")}, {"wide", int64_t(0)}});
  rt::RunValues many(run, {{"n", int64_t(1000)}, {"dtype", std::string("f16")}}, {"extra"}, {{"block", 128}});
  CHECK(many.grid("first") == std::array<int64_t, 3>{8, 1, 1});
  CHECK(many.launched("second"));
  CHECK(many.workspace_elements("scratch") == 16);
  CHECK(many.value_int("wide") == 1);
  CHECK_THROWS_WITH(rt::RunValues(run, {{"m", int64_t(1)}}, {}, {}), "no size 'm' in the run");
  CHECK_THROWS_WITH(rt::RunValues(run, {{"n", int64_t(1)}}, {}, {{"block", 1}}), "size 'dtype' is not given and has no default");
  CHECK_THROWS_WITH(rt::RunValues(run, {{"n", int64_t(1)}, {"dtype", std::string("f16")}}, {}, {{"block", 0}}),
                    Catch::Contains("let tiles = cdiv(n, block)"));
  CHECK_THROWS_WITH(one.grid("third"), "the run launches no kernel 'third'");
  CHECK_THROWS_WITH(one.value_int("dtype"), "'dtype' is \"f16\", not an integer");
}
