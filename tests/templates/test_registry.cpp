// The kernel contract's checks: what the registry refuses, and the clear error every command
// gives for a kernel without a reference.
#include <catch2/catch.hpp>

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
