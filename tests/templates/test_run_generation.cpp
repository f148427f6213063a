// The run hosts execute, generated from each template's declaration (templates/run_generation.h):
// it reads back as written, binds every kernel parameter to what the C++ problem passes, and
// its grid is the C++ launch's grid for every config of the shipped search spaces, checked
// against grids written out here independently.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <functional>
#include <unistd.h>

#include "autotune/space.h"
#include "autotune/tuner.h"
#include "runtime/op_store.h"
#include "templates/registry.h"
#include "templates/run_generation.h"

using namespace tilec;
using namespace tilec::templates;

namespace {

namespace fs = std::filesystem;

struct Scratch {
  fs::path dir;
  Scratch() {
    static int n = 0;
    dir = fs::temp_directory_path() / fmt::format("tilec_rungen_{}_{}", ::getpid(), n++);
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// The templates whose run is generated: every one that does not declare its own.
std::vector<const KernelTemplate*> generated_templates() {
  std::vector<const KernelTemplate*> out;
  for (const KernelTemplate& t : all_templates())
    if (!t.run) out.push_back(&t);
  return out;
}

ParamMap with(const std::vector<Param>& declared, const ParamMap& given) {
  ParamMap out = resolve_params(declared, {}, "--set");
  for (const auto& [k, v] : given)
    out[k] = v;
  return out;
}

} // namespace

TEST_CASE(
    "every shipped template but paged attention has a generated run that reads back as written",
    "[templates][op_run]") {
  std::vector<std::string> names;
  for (const KernelTemplate* t : generated_templates())
    names.push_back(t->name);
  // The shipped ones and the tutorial's (registered in the suite): none may fall back to no run.
  for (const char* name : {"vector_add", "softmax", "matmul", "rmsnorm"})
    CHECK(std::find(names.begin(), names.end(), name) != names.end());
  for (const KernelTemplate* t : generated_templates()) {
    INFO(t->name);
    rt::OpRun run = generate_run(*t);
    rt::KernelCard card = kernel_card(*t);
    REQUIRE(card.run);
    CHECK(*card.run == run);
    const std::string text = rt::format_op_run(run);
    INFO(text);
    std::optional<rt::OpRun> back = rt::parse_op_run(text, t->name + " (generated)");
    REQUIRE(back);
    CHECK(*back == run);
    Scratch s;
    CHECK(rt::read_kernel_card(rt::write_kernel_card(card, s.dir)) == card);

    // One size per --shape field, one tensor per TensorSpec, one launch of the built kernel on
    // grid_expr.
    REQUIRE(run.sizes.size() == t->shape.size());
    for (size_t i = 0; i < t->shape.size(); ++i)
      CHECK(run.sizes[i].name == t->shape[i].name);
    REQUIRE(run.tensors.size() == t->tensors.size());
    REQUIRE(run.launches.size() == 1);
    const ParamMap params = with(t->params, {}), shape = with(t->shape, {});
    CHECK(run.launches[0].kernel == t->build(params, shape)->name);
    CHECK(run.launches[0].grid[0].text() == t->grid_expr[0]);
  }
}

TEST_CASE("a generated run's tensors have the problem's dtypes and its values are the problem's "
          "arguments",
          "[templates][op_run]") {
  struct Case {
    std::string kernel;
    ParamMap shape, config;
  };
  const std::vector<Case> cases = {
      {"vector_add", {{"n", 1000}}, {{"block", 256}}},
      {"softmax", {{"rows", 5}, {"cols", 257}}, {{"block", 512}}},
      {"matmul", {{"m", 33}, {"n", 65}, {"k", 17}, {"dtype", 2}}, {{"block_m", 16}}},
      {"rmsnorm", {{"rows", 7}, {"cols", 300}}, {{"block", 512}}}};
  for (const Case& c : cases) {
    const KernelTemplate& t = *find_template(c.kernel);
    INFO(c.kernel);
    const rt::OpRun run = generate_run(t);
    const ParamMap shape = with(t.shape, c.shape), config = with(t.params, c.config);
    Problem p = make_problem(t, {shape, 3, {}, {}});
    // Each tensor's dtype (a fixed one, or its dtype field's choice) is the problem's buffer's.
    const std::map<std::string, rt::SpecValue> values = run_values(t, config, shape);
    rt::ExprLookup lookup = [&](std::string_view n) -> std::optional<rt::SpecValue> {
      auto it = values.find(std::string(n));
      if (it == values.end()) return std::nullopt;
      return it->second;
    };
    for (const rt::OpTensor& ot : run.tensors) {
      auto b = std::find_if(p.buffers.begin(), p.buffers.end(),
                            [&](const launch::Buffer& x) { return x.name == ot.name; });
      REQUIRE(b != p.buffers.end());
      CHECK(ot.dtype.eval(lookup) == rt::SpecValue(std::string(ir::dtype_name(b->dtype))));
      int64_t elements = 1;
      for (const rt::SizeExpr& d : ot.dims)
        elements *= d.eval_int(lookup);
      CHECK(size_t(elements) == b->count());
    }
    // Each integer parameter of the kernel binds by name to the value the problem passes it.
    ir::Kernel k = t.build(config, shape);
    REQUIRE(k->params.size() == p.args.size());
    for (size_t i = 0; i < k->params.size(); ++i) {
      const ir::Value* param = k->params[i];
      INFO(param->name);
      if (param->type.is_ptr()) {
        REQUIRE(p.args[i].buffer >= 0);
        CHECK(p.buffers[size_t(p.args[i].buffer)].name == param->name);
      } else if (ir::is_int(param->type.dtype())) {
        REQUIRE(values.count(param->name));
        CHECK(values.at(param->name) == rt::SpecValue(p.args[i].i));
      } else {
        CHECK(std::any_of(run.scalars.begin(), run.scalars.end(),
                          [&](const rt::OpScalar& s) { return s.name == param->name; }));
      }
    }
  }
}

TEST_CASE(
    "the C++ grid is the card's grid expression for every config of the shipped search spaces",
    "[templates][op_run][grid]") {
  using Ref = std::function<launch::Grid(const ParamMap& p, const ParamMap& s)>;
  struct SpaceGrid {
    std::string kernel, file;
    std::vector<ParamMap> shapes;
    Ref grid; // written out here, apart from the template's expression
  };
  auto rows = [](const ParamMap&, const ParamMap& s) { return launch::Grid{s.at("rows"), 1, 1}; };
  const std::vector<SpaceGrid> spaces = {
      {"vector_add",
       "configs/vector_add.toml",
       {{{"n", 1}}, {{"n", 4097}}, {{"n", 100003}}},
       [](const ParamMap& p, const ParamMap& s) {
         return launch::Grid{cdiv(s.at("n"), p.at("block")), 1, 1};
       }},
      {"softmax",
       "configs/softmax.toml",
       {{{"rows", 1}, {"cols", 1}}, {{"rows", 37}, {"cols", 1000}}},
       rows},
      {"rmsnorm",
       "examples/rmsnorm/rmsnorm.toml",
       {{{"rows", 7}, {"cols", 300}}, {{"rows", 64}, {"cols", 1000}}},
       rows},
      {"matmul",
       "configs/matmul.toml",
       {{{"m", 1}, {"n", 1}, {"k", 1}}, {{"m", 100}, {"n", 75}, {"k", 50}}},
       [](const ParamMap& p, const ParamMap& s) {
         return launch::Grid{cdiv(s.at("m"), p.at("block_m")), cdiv(s.at("n"), p.at("block_n")), 1};
       }},
      {"matmul",
       "configs/matmul_sm90.toml",
       {{{"m", 130}, {"n", 96}, {"k", 64}, {"dtype", 2}}},
       nullptr},
  };
  size_t checked = 0;
  for (const SpaceGrid& sg : spaces) {
    const KernelTemplate& t = *find_template(sg.kernel);
    INFO(sg.file);
    const Ref ref = sg.grid ? sg.grid : spaces[3].grid;
    autotune::SearchSpace space = autotune::load_space(
        (fs::path(TILEC_SOURCE_DIR) / sg.file).string(), autotune::space_names(t));
    // The host's side: the card's run in an OpStore, whose values the launch grid is evaluated
    // with.
    Scratch s;
    rt::write_kernel_card(kernel_card(t), s.dir);
    auto store = rt::OpStore::open(s.dir, "emulate");
    const rt::Op& op = store->op(t.name);
    REQUIRE(op.run().launches.size() == 1);
    // Every config of the space's cross product, constraints or not.
    std::vector<ParamMap> configs{{}};
    for (const auto& [name, values] : space.params) {
      std::vector<ParamMap> next;
      for (const ParamMap& c : configs)
        for (int64_t v : values) {
          ParamMap x = c;
          x[name] = v;
          next.push_back(std::move(x));
        }
      configs = std::move(next);
    }
    for (const ParamMap& given_shape : sg.shapes)
      for (const ParamMap& given_config : configs) {
        const ParamMap shape = with(t.shape, given_shape), config = with(t.params, given_config);
        INFO(autotune::format_values(shape) << " " << autotune::format_values(config));
        const launch::Grid want = ref(config, shape);
        CHECK(launch_grid(t, config, shape) == want);
        rt::OpArgs args;
        for (const Param& p : t.shape)
          args.sizes[p.name] = p.choices.empty() ? rt::SpecValue(shape.at(p.name))
                                                 : rt::SpecValue(p.value_str(shape.at(p.name)));
        args.config = rt::TunedConfig(config.begin(), config.end());
        rt::OpCall call = op.resolve(args);
        rt::ExprLookup lookup = [&](std::string_view n) -> std::optional<rt::SpecValue> {
          auto it = call.values.find(std::string(n));
          if (it == call.values.end()) return std::nullopt;
          return it->second;
        };
        launch::Grid host{};
        for (size_t i = 0; i < 3; ++i)
          host[i] = op.run().launches[0].grid[i].eval_int(lookup);
        CHECK(host == want);
        ++checked;
      }
  }
  CHECK(checked >= 200);
}

TEST_CASE("templates whose run cannot be generated are refused, naming what they lack",
          "[templates][op_run]") {
  const KernelTemplate& va = *find_template("vector_add");
  auto refused = [](const KernelTemplate& t) {
    try {
      generate_run(t);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("(generated)");
  };
  KernelTemplate t = va;
  t.grid_expr = {};
  CHECK_THAT(refused(t), Catch::Contains("vector_add") && Catch::Contains("no grid expressions"));
  CHECK_FALSE(kernel_card(t).run); // no grid_expr, no run: the card describes none, as before

  t = va;
  t.tensors[1].dtype.clear();
  CHECK_THAT(refused(t), Catch::Contains("tensor 'y' declares no dtype"));
  CHECK_THROWS_WITH(kernel_card(t), Catch::Contains("tensor 'y' declares no dtype"));

  t = va;
  t.tensors[2].dtype = "f16";
  CHECK_THAT(refused(t), Catch::Contains("tensor 'out' is f16") && Catch::Contains("ptr<f32>"));

  t = va;
  t.tensors.pop_back(); // the kernel's `out` binds to nothing
  CHECK_THAT(refused(t), Catch::Contains("kernel parameter 'out'"));

  t = va;
  t.tensors[0].dims = {"len"};
  CHECK_THAT(refused(t), Catch::Contains("'len', which is no size"));

  t = *find_template("softmax");
  t.lets.pop_back(); // stride
  CHECK_THAT(refused(t), Catch::Contains("kernel parameter 'stride'") &&
                             Catch::Contains("KernelTemplate::lets"));

  t = *find_template("rmsnorm");
  t.options.clear(); // eps
  CHECK_THAT(refused(t),
             Catch::Contains("kernel parameter 'eps'") && Catch::Contains("float option"));

  t = va;
  t.module_spec = [](const ParamMap& p, const ParamMap&) {
    return std::map<std::string, rt::SpecValue>{{"block", p.at("block") * 2}};
  };
  CHECK_THAT(refused(t), Catch::Contains("module_spec gives block=2048"));

  t = va;
  t.paths = {{"other", "", {}}};
  CHECK_THAT(refused(t), Catch::Contains("run paths of its own"));

  t = va;
  t.build_all = [](const ParamMap&, const ParamMap&) { return std::vector<ir::Kernel>{}; };
  CHECK_THAT(refused(t), Catch::Contains("several kernels"));
}

namespace {
KernelTemplate grid_twice() {
  KernelTemplate t = *find_template("vector_add");
  t.name = "vector_add_grid_twice";
  return t; // its grid (derived at registration) and its grid_expr
}
KernelTemplate bad_grid_expr() {
  KernelTemplate t = *find_template("vector_add");
  t.name = "vector_add_bad_grid";
  t.grid = {};
  t.grid_expr = {"cdiv(n, block", "1", "1"};
  return t;
}
KernelTemplate grid_expr_with_paths() {
  KernelTemplate t = *find_template("vector_add");
  t.name = "vector_add_paths";
  t.grid = {};
  t.paths = {{"fast", "", {}}};
  return t;
}
KernelTemplate y_only() {
  KernelTemplate t = *find_template("vector_add");
  t.name = "vector_add_y_only";
  t.grid = {};
  t.grid_expr = {"", "n", ""};
  return t;
}
} // namespace

TEST_CASE("registration refuses a grid given twice, a grid expression that does not parse, and "
          "grid_expr beside paths",
          "[templates][registry][op_run]") {
  CHECK_THROWS_WITH(register_kernel(grid_twice), Catch::Contains("given twice"));
  CHECK_THROWS_WITH(register_kernel(bad_grid_expr),
                    Catch::Contains("vector_add_bad_grid") &&
                        Catch::Contains("grid_expr[0] 'cdiv(n, block'"));
  CHECK_THROWS_WITH(register_kernel(grid_expr_with_paths), Catch::Contains("paths or build_all"));
  CHECK_THROWS_WITH(register_kernel(y_only), Catch::Contains("no x axis"));
  for (const char* name :
       {"vector_add_grid_twice", "vector_add_bad_grid", "vector_add_paths", "vector_add_y_only"})
    CHECK_FALSE(find_template(name));
}

TEST_CASE(
    "a grid expression that cannot be evaluated is a UserError naming the template and the axis",
    "[templates][op_run][grid]") {
  KernelTemplate t = *find_template("vector_add");
  t.grid_expr = {"cdiv(n, block - block)", "", ""};
  CHECK_THROWS_WITH(run_grid(t, with(t.params, {}), with(t.shape, {})),
                    Catch::Contains("vector_add: grid_expr[0] = cdiv(n, block - block)") &&
                        Catch::Contains("divisor must be positive"));
  t.grid_expr = {"rows", "", ""};
  CHECK_THROWS_WITH(run_grid(t, with(t.params, {}), with(t.shape, {})), Catch::Contains("rows"));
  t.grid_expr = {"n", "", ""};
  CHECK(run_grid(t, with(t.params, {}), {{"n", 9}}) ==
        launch::Grid{9, 1, 1}); // y and z left empty: 1
}
