// vector_add, softmax and matmul as a host runs them: from a folder `tilec autotune --export` or
// `tilec compile` wrote, through rt::OpStore (what the C ABI and the Python package call), on the
// emulator, with the run the kernel card carries (generated from the template,
// templates/run_generation.h). Each run matches the template's own reference, at ragged sizes
// and at configs whose grid is not the default one; the modules come from the folder alone.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <unistd.h>

#include "backends/module_builder.h"
#include "runtime/module_store.h"
#include "runtime/op_store.h"
#include "templates/registry.h"
#include "tests/runtime/helpers.h"
#include "tests/tilec_process.h"

using namespace tilec;
using namespace tilec::templates;

namespace {

namespace fs = std::filesystem;

// The folder a host ships, and an empty module cache: only the folder's modules serve.
struct Deploy {
  rt::test::TempDir dir, cache;
  rt::test::EnvVar env{"TILEC_CACHE_DIR", cache.path.string()};
  Deploy() { rt::set_module_builder({}); } // as a host that links only the runtime

  void tilec_ok(const std::string& args) const {
    test::Process p = test::run_tilec(args);
    INFO("tilec " << args << "\n" << p.text());
    REQUIRE(p.exited());
    REQUIRE(p.exit_code == 0);
  }
  // `tilec compile KERNEL --target emu ARGS -o DIR/SUB` (SUB empty: the folder itself, with the
  // card).
  void compile(const std::string& kernel, const std::string& args,
               const std::string& sub = "") const {
    tilec_ok(
        fmt::format("compile {} --target emu {} -o {}", kernel, args, (dir.path / sub).string()));
  }
};

struct HostRun {
  Comparison cmp;
  rt::OpCall call;
};

// Runs `t` at `given_shape` through the store's op on the problem make_problem generates (its
// arrays passed in place, the output written into the problem's buffer), and compares with
// the template's reference. `config`: values the caller sets over the selected config.
HostRun run_on_host(const rt::OpStore& store, const KernelTemplate& t, const ParamMap& given_shape,
                    const rt::TunedConfig& config = {},
                    const std::map<std::string, double>& options = {}) {
  ParamMap shape = resolve_params(t.shape, {}, "--shape");
  for (const auto& [k, v] : given_shape)
    shape[k] = v;
  Problem p = make_problem(t, {shape, 11, options, {}});
  if (p.expected.empty()) t.reference(p);
  const rt::Op& op = store.op(t.name);
  rt::OpArgs args;
  for (const TensorSpec& ts : t.tensors) {
    auto b = std::find_if(p.buffers.begin(), p.buffers.end(),
                          [&](const launch::Buffer& x) { return x.name == ts.name; });
    REQUIRE(b != p.buffers.end());
    std::vector<int64_t> dims;
    for (const std::string& d : ts.dims)
      dims.push_back(p.shape.count(d) ? p.shape.at(d) : std::stoll(d));
    args.tensors.push_back(
        {ts.name, uint64_t(reinterpret_cast<uintptr_t>(b->bytes.data())), b->dtype, dims, {}});
  }
  for (const auto& [name, v] : options)
    args.scalars.push_back({name, v});
  args.config = config;
  HostRun r{{}, op.prepare(args)};
  op.run(r.call, 0, 0, nullptr);
  r.cmp = compare_outputs(p);
  // The host launched on the grid the CLI launches this config on.
  ParamMap params(r.call.config.begin(), r.call.config.end());
  REQUIRE(r.call.launches.size() == 1);
  const rt::Dim3 g = r.call.launches[0].grid;
  CHECK(launch::Grid{g.x, g.y, g.z} == launch_grid(t, params, p.shape));
  return r;
}

std::string shape_text(const ParamMap& s) {
  std::string out;
  for (const auto& [k, v] : s)
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", k, v);
  return out;
}

} // namespace

TEST_CASE(
    "vector_add runs through rt::OpStore from a folder autotune --export wrote, at ragged sizes",
    "[templates][op_run][hosts]") {
  Deploy d;
  const fs::path space = d.dir.path / "space.toml";
  std::ofstream(space) << "kernel = \"vector_add\"\n[params]\nblock = [256, 512]\nnum_warps = [4]\n"
                          "[measure]\nwarmup = 0\nrepeats = 1\n";
  const fs::path out = d.dir.path / "deploy";
  d.tilec_ok(fmt::format("autotune vector_add --space {} --shape n=4097 --backend emulate "
                         "--no-ptxas -o {} --export {}",
                         space.string(), (d.dir.path / "db.toml").string(), out.string()));
  // A config the search did not have, whose grid (cdiv(n, 128)) is neither winner's.
  d.tilec_ok(fmt::format("compile vector_add --target emu --set block=128 num_warps=2 -o {}",
                         (out / "b128").string()));
  auto store = rt::OpStore::open(out, "emulate");
  REQUIRE(store->ops() == std::vector<std::string>{"vector_add"});
  const KernelTemplate& t = *find_template("vector_add");
  for (int64_t n :
       {4097, 1, 1000, 5003}) { // the tuned key, then the nearest tuned key serves the others
    INFO("n=" << n);
    HostRun r = run_on_host(*store, t, {{"n", n}});
    INFO(r.call.note << "\n" << r.cmp.first_mismatch);
    CHECK(r.cmp.ok);
    CHECK(r.call.note.find("n=4097") != std::string::npos);
    CHECK((r.call.config.at("block") == 256 || r.call.config.at("block") == 512));
  }
  HostRun r = run_on_host(*store, t, {{"n", 1001}}, {{"block", 128}, {"num_warps", 2}});
  INFO(r.cmp.first_mismatch);
  CHECK(r.cmp.ok);
  CHECK(r.call.launches[0].grid.x == 8); // cdiv(1001, 128)
}

TEST_CASE("softmax runs through rt::OpStore from folders tilec compile wrote, at ragged sizes and "
          "configs",
          "[templates][op_run][hosts]") {
  Deploy d;
  d.compile("softmax",
            "--set block=512 --shape cols=257"); // the module serves every cols up to its block
  d.compile("softmax", "--set block=2048 num_warps=8", "b2048");
  auto store = rt::OpStore::open(d.dir.path, "emulate");
  const KernelTemplate& t = *find_template("softmax");
  struct Case {
    ParamMap shape;
    rt::TunedConfig config;
  };
  for (const Case& c :
       std::vector<Case>{{{{"rows", 5}, {"cols", 257}}, {{"block", 512}}},
                         {{{"rows", 1}, {"cols", 1}}, {{"block", 512}}},
                         {{{"rows", 37}, {"cols", 1000}}, {{"block", 2048}, {"num_warps", 8}}},
                         {{{"rows", 3}, {"cols", 2048}}, {{"block", 2048}, {"num_warps", 8}}}}) {
    INFO(shape_text(c.shape));
    HostRun r = run_on_host(*store, t, c.shape, c.config);
    INFO(r.cmp.first_mismatch);
    CHECK(r.cmp.ok);
    CHECK(r.call.launches[0].grid.x == unsigned(c.shape.at("rows")));
  }
  // Nothing tuned: the defaults (block=1024), whose module the folder lacks; the error says how to
  // build it.
  CHECK_THROWS_WITH(run_on_host(*store, t, {{"rows", 2}, {"cols", 10}}),
                    Catch::Contains("no module softmax") &&
                        Catch::Contains("compile softmax --target emu") &&
                        Catch::Contains("block=1024"));
  // A config the caller sets with no module (block=3, which the template refuses): the error names
  // the config the call uses without it, and no command to build the caller's.
  CHECK_THROWS_WITH(run_on_host(*store, t, {{"rows", 2}, {"cols", 10}}, {{"block", 3}}),
                    Catch::Contains("the caller set block=3") &&
                        Catch::Contains("the kernel card's defaults (block=1024 num_warps=4)") &&
                        !Catch::Contains("--set block=3"));
  // A tensor of another rank is refused naming it, before any size is worked out from it.
  std::vector<float> x(10);
  rt::OpArgs one_d;
  one_d.tensors.push_back(
      {"x", uint64_t(reinterpret_cast<uintptr_t>(x.data())), rt::ScalarType::f32, {10}, {}});
  CHECK_THROWS_WITH(store->op("softmax").prepare(one_d),
                    Catch::Contains("tensor 'x' has 1 dimension (shape [10]), expected 2 ([rows, cols])"));
}

TEST_CASE("matmul runs through rt::OpStore from folders tilec compile wrote, at ragged sizes, "
          "configs and dtypes",
          "[templates][op_run][hosts]") {
  Deploy d;
  // A module is specialized on the dtype, n and k (and the config); any m serves.
  d.compile("matmul", "--set block_m=16 block_n=64 block_k=8 --shape m=33 n=65 k=17");
  d.compile("matmul", "--shape m=100 n=75 k=50 dtype=f16", "f16");
  d.compile("matmul", "--shape m=20 n=24 k=40 dtype=bf16", "bf16");
  auto store = rt::OpStore::open(d.dir.path, "emulate");
  const KernelTemplate& t = *find_template("matmul");
  const rt::TunedConfig small_m{{"block_m", 16}, {"block_n", 64}, {"block_k", 8}};
  struct Case {
    ParamMap shape;
    rt::TunedConfig config;
    std::array<unsigned, 2> grid;
  };
  for (const Case& c :
       std::vector<Case>{{{{"m", 33}, {"n", 65}, {"k", 17}}, small_m, {3, 2}},
                         {{{"m", 7}, {"n", 65}, {"k", 17}}, small_m, {1, 2}},
                         {{{"m", 100}, {"n", 75}, {"k", 50}, {"dtype", 1}}, {}, {4, 3}},
                         {{{"m", 1}, {"n", 24}, {"k", 40}, {"dtype", 2}}, {}, {1, 1}}}) {
    INFO(shape_text(c.shape));
    HostRun r = run_on_host(*store, t, c.shape, c.config);
    INFO(r.cmp.first_mismatch);
    CHECK(r.cmp.ok);
    CHECK(r.call.launches[0].grid.x == c.grid[0]);
    CHECK(r.call.launches[0].grid.y == c.grid[1]);
  }
  // The dtype comes from the tensors: f16 arrays select the f16 module.
  CHECK_THROWS_WITH(
      run_on_host(*store, t, {{"m", 33}, {"n", 65}, {"k", 17}, {"dtype", 1}}, small_m),
      Catch::Contains("no module matmul") && Catch::Contains("dtype=f16"));
}

TEST_CASE("the tutorial's rmsnorm runs through rt::OpStore with its float option as a scalar",
          "[templates][op_run][hosts]") {
  // rmsnorm is registered in the test suite, not in `tilec`: its module and card are written
  // here as its own CLI's `compile -o` writes them.
  Deploy d;
  const KernelTemplate& t = *find_template("rmsnorm");
  const ParamMap params = resolve_params(t.params, {"block=512", "num_warps=2"}, "--set");
  backends::write_template_modules(t, params, resolve_params(t.shape, {"cols=300"}, "--shape"),
                                   "host", d.dir.path, false);
  rt::write_kernel_card(kernel_card(t), d.dir.path);
  auto store = rt::OpStore::open(d.dir.path, "emulate");
  CHECK(store->op("rmsnorm").run().scalars ==
        std::vector<rt::OpScalar>{{"eps", rt::ScalarType::f32, {}}});
  const rt::TunedConfig config(params.begin(), params.end());
  for (double eps : {1e-5, 0.25}) {
    INFO("eps=" << eps);
    HostRun r = run_on_host(*store, t, {{"rows", 7}, {"cols", 300}}, config, {{"eps", eps}});
    INFO(r.cmp.first_mismatch);
    CHECK(r.cmp.ok);
    CHECK(r.call.launches[0].grid.x == 7);
  }
  // The scalar is the caller's to give: the op refuses a call without it, naming it.
  CHECK_THROWS_WITH(run_on_host(*store, t, {{"rows", 2}, {"cols", 300}}, config),
                    Catch::Contains("scalar argument 'eps' is missing"));
}
