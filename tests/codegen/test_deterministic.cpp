// The same kernel compiles to the same bytes every time. The lowering once planned its
// software pipelines by walking maps keyed by op pointers, so the operands' slots in a stage,
// their offsets and the order of the copies followed where the ops happened to sit in memory:
// `tilec run paged_attention --backend emulate --shape dtype=f16 --softcap 30 --set
// num_stages=3` under TILEC_EMU_LOWERING=nvptx built two different emulator libraries in 8
// runs. Every plan (codegen/pipeline_plan.h, codegen/layout_plan.h) now decides in IR walk
// order.
//
// Each round builds the kernels again, after disturbing the heap (blocks of random sizes,
// some freed in a random order, some kept until the round ends) so that their ops land at
// other addresses and in other orders, and compiles them for nvptx (PTX and LLVM IR, sm_80
// and sm_90), emu and emu_nvptx (optimized LLVM IR): every round must give the first
// round's bytes.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <random>

#include "codegen/compile.h"
#include "dsl/dsl.h"
#include "templates/registry.h"

using namespace tilec;
using namespace tilec::dsl;
using ir::DType;

namespace {

ir::Kernel paged_attention(const std::vector<std::string>& sets, const std::vector<std::string>& shapes,
                           bool softcap = false) {
  const templates::KernelTemplate* t = templates::find_template("paged_attention");
  REQUIRE(t);
  templates::ParamMap params = templates::resolve_params(t->params, sets, "--set");
  templates::ParamMap shape = templates::resolve_params(t->shape, shapes, "--shape");
  if (softcap) shape["softcap"] = 1;
  std::vector<ir::Kernel> ks = templates::build_kernels(*t, params, shape);
  REQUIRE(ks.size() == 1);
  return ks[0];
}

// Two pipelined loops one after the other, each with a dot whose A and B (its rows found
// through a table) are both copied ahead: two slots per stage and two sets of buffers.
ir::Kernel two_pipelines() {
  KernelBuilder kb("two_pipelines");
  auto a = kb.arg<Ptr<f16>>("a");
  auto b = kb.arg<Ptr<f16>>("b");
  auto table = kb.arg<Ptr<i32>>("table");
  auto count = kb.arg<i32>("count");
  auto out = kb.arg<Ptr<f32>>("out");
  const int64_t M = 32, N = 64, BK = 32, KT = 8 * BK;
  auto mi = arange(0, M), ni = arange(0, N), ki = arange(0, BK);
  Var acc = zeros({M, N});
  for (int64_t stages : {3, 2})
    for_range(0, count * BK, BK, RangeOptions{stages}, [&](Scalar k0) {
      auto kk = k0 + ki;
      Tile at = load(a + mi.col() * KT + kk.row());
      Tile rows = load(table + kk / 4) * 4 + kk % 4;
      Tile bt = load(b + rows.col() * N + ni.row());
      acc = dot(at, bt, acc);
    });
  store(out + mi.col() * N + ni.row(), acc);
  return kb.finish();
}

struct Case {
  std::string name;
  std::function<ir::Kernel()> build;
  int num_warps = 4;
};

// Everything a compile gives for every target, as one text.
std::string compile_all(const ir::Function& fn, int num_warps) {
  std::string all;
  for (const char* arch : {"sm_80", "sm_90"}) {
    codegen::CompileOptions o;
    o.arch = arch;
    o.num_warps = num_warps;
    o.run_ptxas = false;
    codegen::CompiledKernel k = codegen::compile(fn, o);
    all += fmt::format("== nvptx {} llvm\n{}\n== nvptx {} ptx\n{}\n", arch, k.llvm_ir, arch, k.ptx);
  }
  for (codegen::Target t : {codegen::Target::emu, codegen::Target::emu_nvptx}) {
    codegen::CompileOptions o;
    o.target = t;
    o.num_warps = num_warps;
    all += fmt::format("== {}\n{}\n", t == codegen::Target::emu ? "emu" : "emu_nvptx",
                       codegen::lower_to_llvm(fn, o).llvm_ir);
  }
  return all;
}

// Blocks of random sizes around an op's, half of them freed at once in a random order (the
// allocator hands those out first, in its own order), half kept until the round ends.
std::vector<std::unique_ptr<char[]>> disturb_heap(std::mt19937& rng) {
  std::vector<std::unique_ptr<char[]>> blocks(std::uniform_int_distribution<size_t>(16, 400)(rng));
  for (auto& b : blocks) b.reset(new char[std::uniform_int_distribution<size_t>(16, 1024)(rng)]);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (size_t i = 0; i < blocks.size(); i += 2) blocks[i].reset();
  return blocks;
}

} // namespace

TEST_CASE("a kernel compiles to the same PTX and LLVM IR every time, wherever its ops sit in memory",
          "[codegen][pipeline][deterministic]") {
  const std::vector<Case> cases = {
      {"paged_attention f16 softcap num_stages=3",
       [] { return paged_attention({"num_stages=3"}, {"dtype=f16"}, true); }},
      {"paged_attention bf16 head_dim=128 block_n=64 num_stages=2",
       [] { return paged_attention({"block_n=64", "num_stages=2"}, {"dtype=bf16", "head_dim=128"}); }},
      {"paged_attention bf16 sq=4 causal head_group=4 num_stages=4",
       [] {
         return paged_attention({"block_n=32", "num_stages=4", "head_group=4"},
                                {"dtype=bf16", "sq=4", "causal=1", "hq=32", "hkv=8"});
       }},
      {"two pipelined loops", two_pipelines, 4},
  };
  std::mt19937 rng(30);
  for (const Case& c : cases) {
    INFO(c.name);
    std::string first;
    for (int round = 0; round < 6; ++round) {
      auto kept = disturb_heap(rng);
      ir::Kernel k = c.build();
      std::string all = compile_all(*k, c.num_warps);
      if (round == 0) {
        first = all;
        CHECK(first.find("cp.async") != std::string::npos);
        continue;
      }
      // Where the first difference is, not both texts.
      size_t at = size_t(std::mismatch(all.begin(), all.end(), first.begin(), first.end()).first - all.begin());
      INFO("round " << round << ": differs from round 0 at byte " << at << ":\n"
                    << all.substr(at < 300 ? 0 : at - 300, 600) << "\n-- round 0 there:\n"
                    << first.substr(at < 300 ? 0 : at - 300, 600));
      REQUIRE(all == first);
    }
  }
}
