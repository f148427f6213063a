// The kernel contract's checks: what the registry refuses, and the clear error every command
// gives for a kernel without a reference.
#include <catch2/catch.hpp>

#include <cmath>

#include "ir/error.h"
#include "templates/kernels.h"
#include "templates/registry.h"

using namespace tilec;
using namespace tilec::templates;

namespace {

KernelTemplate no_reference() {
  KernelTemplate t;
  t.name = "softmax_no_reference";
  t.params = {{"block", 256, "columns per program"}};
  t.build = [](const ParamMap& p, const ParamMap&) { return softmax(p.at("block")); };
  return t; // no make_problem: it can be compiled, not run, checked or tuned
}

KernelTemplate duplicate_name() {
  KernelTemplate t = no_reference();
  t.name = "softmax";
  return t;
}

KernelTemplate nameless() { return KernelTemplate{}; }

} // namespace

TEST_CASE("a kernel without a reference is refused by every command that checks results", "[kernels][registry]") {
  KernelTemplate t = no_reference();
  CHECK_THROWS_WITH(make_problem(t, {{}, 1, {}, {}}),
                    Catch::Contains("softmax_no_reference has no problem generator with a reference") &&
                        Catch::Contains("cannot be run, checked, benchmarked or tuned"));
  CHECK_NOTHROW(build_kernels(t, {{"block", 256}}, {})); // it still compiles
}

TEST_CASE("the registry refuses a second kernel of one name and a kernel without name or builder",
          "[kernels][registry]") {
  size_t before = all_templates().size();
  CHECK_THROWS_WITH(register_kernel(duplicate_name), Catch::Contains("'softmax' is already registered"));
  CHECK_THROWS_WITH(register_kernel(nameless), Catch::Contains("needs a name and a build function"));
  CHECK(all_templates().size() == before);
}

TEST_CASE("options and inputs a kernel does not take are errors naming them", "[kernels][registry]") {
  const KernelTemplate& softmax_t = *find_template("softmax");
  ParamMap params = resolve_params(softmax_t.params, {}, "--set"), shape = resolve_params(softmax_t.shape, {}, "--shape");
  CHECK_THROWS_WITH(make_problem(softmax_t, {shape, 1, {{"softcap", 30.0}}, {}}),
                    Catch::Contains("--softcap: softmax has no such option"));
  KernelTemplate no_files = softmax_t; // without its declared arrays it reads no files
  no_files.tensors.clear();
  CHECK_THROWS_WITH(make_problem(no_files, {shape, 1, {}, "/tmp"}),
                    Catch::Contains("--inputs: softmax does not read its inputs from files"));
  // The paged-attention problem's own description and ideal bytes come with it.
  const KernelTemplate& pa = *find_template("paged_attention");
  Problem p = make_problem(pa, {resolve_params(pa.shape, {"ctx=40"}, "--shape"), 1, {}, {}});
  CHECK(p.ideal_bytes.value_or(0) > 0);
  CHECK_THAT(p.description, Catch::Contains("batch=2 hq=8 hkv=2"));
}

TEST_CASE("output comparison: NaN and infinities match only where the reference has the same", "[templates]") {
  const double nan = std::nan(""), inf = INFINITY;
  auto compare = [](std::vector<double> got, std::vector<double> want) {
    Problem p;
    p.add_buffer(launch::Buffer("out", ir::DType::f32, got.size()));
    launch::Buffer expected("out", ir::DType::f32, want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      p.buffers[0].set(i, got[i]);
      expected.set(i, want[i]);
    }
    p.outputs = {0};
    p.expected.push_back(std::move(expected));
    return compare_outputs(p);
  };
  CHECK(compare({1.0, nan, inf, -inf}, {1.0, nan, inf, -inf}).ok);
  Comparison c = compare({1.0, nan}, {1.0, 2.0});
  CHECK_FALSE(c.ok);
  CHECK(c.first_mismatch == "out[1]: got nan, expected 2");
  CHECK_FALSE(compare({2.0}, {nan}).ok);
  CHECK_FALSE(compare({inf}, {-inf}).ok);
  CHECK_FALSE(compare({inf}, {1e30}).ok);
  CHECK_FALSE(compare({1e30}, {inf}).ok);
  CHECK_FALSE(compare({nan}, {inf}).ok);
  // Finite values keep the tolerance: within it passes, past it names the element.
  CHECK(compare({1.0 + 1e-7}, {1.0}).ok);
  c = compare({0.0, 1.5}, {0.0, 1.0});
  CHECK_FALSE(c.ok);
  CHECK(c.first_mismatch == "out[1]: got 1.5, expected 1");
}

TEST_CASE("sizes are refused before a template sees them: below the field's minimum, past 2^40, or a tensor past "
          "2^48 elements",
          "[templates]") {
  const std::vector<Param> declared = {{"rows", 4, "rows"}, {"ctx", -1, "context (-1: random)", {}, -1}};
  CHECK(resolve_params(declared, {"rows=0", "ctx=-1"}, "--shape").at("ctx") == -1);
  CHECK(resolve_params(declared, {"rows=1099511627776"}, "--shape").at("rows") == int64_t(1) << 40);
  CHECK_THROWS_WITH(resolve_params(declared, {"rows=-5"}, "--shape"),
                    "--shape 'rows=-5': rows must be from 0 to 1099511627776 (2^40), got -5");
  CHECK_THROWS_WITH(resolve_params(declared, {"ctx=-2"}, "--shape"),
                    "--shape 'ctx=-2': ctx must be from -1 to 1099511627776 (2^40), got -2");
  CHECK_THROWS_WITH(resolve_params(declared, {"rows=1099511627777"}, "--shape"),
                    Catch::Contains("rows must be from 0 to 1099511627776"));
  // softmax's x is [rows, cols]: 2^30 x 2^30 overflows nothing in int64 but is past 2^48.
  const KernelTemplate* softmax = find_template("softmax");
  REQUIRE(softmax);
  ParamMap shape = resolve_params(softmax->shape, {"rows=1073741824", "cols=1073741824"}, "--shape");
  CHECK_THROWS_WITH(make_problem(*softmax, {shape, 1, {}, {}}),
                    Catch::Contains("x would have more than 2^48 elements (rows=1073741824 x cols=1073741824)"));
}
