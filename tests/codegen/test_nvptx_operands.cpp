// The nvptx target's hooks run only on a GPU, so their operands are checked in the PTX here,
// not only their opcodes: full member masks on every shuffle, a rounding mode on every
// narrowing float conversion, truncation toward zero on float-to-int, an explicit state
// space on every load and store. Two real escapes motivated it: a shuffle member mask of
// 0xffff, and a bf16 conversion that truncated instead of rounding; both passed every test
// that counted opcodes.
#include <catch2/catch.hpp>

#include <regex>
#include <set>
#include <string>
#include <vector>

#include "codegen/compile.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"

using namespace tilec;

namespace {

// Each line of `ptx` matching `instr`, with its operands.
std::vector<std::string> lines_of(const std::string& ptx, const std::string& instr) {
  std::vector<std::string> out;
  std::regex re("^\\s*(" + instr + ")[^\\n]*$", std::regex::multiline);
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back(it->str());
  return out;
}

void check_operands(const std::string& what, const std::string& ptx, std::set<std::string>& seen) {
  INFO(what);
  for (const std::string& l : lines_of(ptx, "shfl\\.sync\\.[a-z.0-9]+")) {
    INFO(l);
    seen.insert("shfl");
    // shfl.sync.bfly.b32 d, a, b, c, membermask: every lane of the warp, c = 31 (the whole warp).
    CHECK(std::regex_search(l, std::regex(",\\s*31,\\s*-1;")));
  }
  for (const std::string& l : lines_of(ptx, "cvt(\\.[a-z0-9]+)*\\.(f16|bf16)\\.f32")) {
    INFO(l);
    seen.insert("narrow");
    CHECK(l.find("cvt.rn.") != std::string::npos); // round to nearest even, never truncate
  }
  for (const std::string& l : lines_of(ptx, "cvt(\\.[a-z0-9]+)*\\.[su](8|16|32|64)\\.f(16|32)")) {
    INFO(l);
    seen.insert("to_int");
    CHECK(l.find("cvt.rzi.") != std::string::npos); // toward zero, as ir/SEMANTICS.md says
  }
  for (const std::string& l : lines_of(ptx, "(ld|st)\\.[a-z0-9.]+")) {
    INFO(l);
    seen.insert("memory");
    CHECK(std::regex_search(l, std::regex("^\\s*(ld|st)\\.(global|shared|param|local|const)\\.")));
  }
}

} // namespace

TEST_CASE("nvptx: shuffle masks, rounding modes and state spaces in every kernel's PTX", "[codegen][nvptx]") {
  std::set<std::string> seen;
  auto compile_each = [&](const ir::Function& fn, int num_warps) {
    for (const char* arch : {"sm_80", "sm_90"}) {
      codegen::CompileOptions o;
      o.arch = arch;
      o.num_warps = num_warps;
      o.run_ptxas = false;
      check_operands(fn.name + " for " + arch, codegen::compile(fn, o).ptx, seen);
    }
  };
  for (const templates::KernelTemplate& t : templates::all_templates()) {
    templates::ParamMap params = templates::resolve_params(t.params, {}, "--set");
    templates::ParamMap shape = templates::resolve_params(t.shape, {}, "--shape");
    for (const ir::Kernel& k : templates::build_kernels(t, params, shape))
      compile_each(*k, params.count("num_warps") ? int(params.at("num_warps")) : 4);
  }
  for (const char* dtype : {"f16", "bf16"}) {
    const templates::KernelTemplate& pa = *templates::find_template("paged_attention");
    templates::ParamMap params = templates::resolve_params(pa.params, {"num_splits=2"}, "--set");
    templates::ParamMap shape = templates::resolve_params(pa.shape, {std::string("dtype=") + dtype}, "--shape");
    size_t rounding = 0; // conversions of the output from f32, over the run's kernels
    for (const ir::Kernel& k : templates::build_kernels(pa, params, shape)) {
      compile_each(*k, 4);
      codegen::CompileOptions o;
      o.arch = "sm_90";
      o.run_ptxas = false;
      rounding += lines_of(codegen::compile(*k, o).ptx, std::string("cvt\\.rn\\.") + dtype + "\\.f32").size();
    }
    // The output is converted by the hardware's rounding conversion, not by bit manipulation
    // (a truncating conversion has no cvt at all).
    INFO("paged_attention " << dtype);
    CHECK(rounding >= 1);
  }
  // The checks above looked at something: shuffles, narrowing conversions and memory accesses.
  CHECK(seen.count("shfl"));
  CHECK(seen.count("narrow"));
  CHECK(seen.count("memory"));
}
