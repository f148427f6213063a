#pragma once
// Helpers shared by the codegen tests: compile a kernel for every arch, with
// ptxas when it exists (required when TILEC_REQUIRE_PTXAS=1, as in CI).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>

#include "codegen/compile.h"
#include "ir/builder.h"

namespace tilec::codegen::test {

// How many ops of `kind` the kernel holds, nested blocks included.
inline size_t count_kind(const ir::Function& fn, ir::OpKind kind) {
  size_t n = 0;
  ir::walk(const_cast<ir::Block&>(fn.body), [&](ir::Op& op) { n += op.kind == kind; });
  return n;
}

// How many times `what` occurs in `s` (instructions in PTX text, say).
inline size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

inline bool ptxas_required() {
  const char* v = std::getenv("TILEC_REQUIRE_PTXAS");
  return v && std::string(v) == "1";
}

// True when ptxas can be used; otherwise warns loudly, or fails when required.
inline bool have_ptxas() {
  static const bool found = find_ptxas().has_value();
  if (!found) {
    if (ptxas_required()) FAIL("ptxas not found on PATH or in /usr/local/cuda/bin, and TILEC_REQUIRE_PTXAS=1");
    WARN("ptxas not found on PATH or in /usr/local/cuda/bin: PTX is NOT checked by ptxas in this run");
  }
  return found;
}

inline int count_matches(const std::string& text, const std::string& re) {
  std::regex r(re);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), r), std::sregex_iterator()));
}

struct ArchResult {
  std::string arch;
  CompiledKernel kernel;
};

// Compiles `fn` for sm_80 and sm_90; ptxas must accept each with zero spills.
inline std::vector<ArchResult> compile_all_archs(const ir::Function& fn, int num_warps = 4) {
  std::vector<ArchResult> out;
  bool ptxas = have_ptxas();
  for (const char* arch : {"sm_80", "sm_90"}) {
    CompileOptions o;
    o.arch = arch;
    o.num_warps = num_warps;
    CompiledKernel k = compile(fn, o);
    if (const char* dir = std::getenv("TILEC_DUMP_DIR")) { // debugging aid: keep the stages
      std::ofstream(fmt::format("{}/{}.{}.ll", dir, fn.name, arch)) << k.llvm_ir;
      std::ofstream(fmt::format("{}/{}.{}.ptx", dir, fn.name, arch)) << k.ptx;
    }
    INFO("kernel " << fn.name << " for " << arch);
    REQUIRE(!k.ptx.empty());
    CHECK(k.ptx.find(".entry " + fn.name) != std::string::npos);
    if (ptxas) {
      REQUIRE(k.ptxas.has_value());
      INFO("ptxas log:\n" << k.ptxas->log);
      CHECK(k.ptxas->registers > 0);
      CHECK(k.ptxas->spill_stores == 0);
      CHECK(k.ptxas->spill_loads == 0);
      CHECK(!k.cubin.empty());
    }
    out.push_back({arch, std::move(k)});
  }
  return out;
}

inline ir::Value* i32c(ir::Builder& b, int64_t v) { return b.constant(ir::scalar_type(ir::DType::i32), ir::ConstValue::of_int(v)); }
inline ir::Value* splat_i32(ir::Builder& b, int64_t v, ir::Shape s) {
  return b.constant(ir::tile_type(ir::DType::i32, std::move(s)), ir::ConstValue::of_int(v));
}
inline ir::Type ptr_type(ir::DType t) { return {{t, true}, {}}; }

} // namespace tilec::codegen::test
