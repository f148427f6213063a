// A snapshot of what the lowering emits, for a change to it that must not change its output
// (moving code between files, say): run it before and after into two folders and compare
// them byte for byte.
//
//   TILEC_SNAPSHOT_DIR=/tmp/before build/tests/tilec_tests "[lowering_snapshot]"
//   ... change codegen/, rebuild ...
//   TILEC_SNAPSHOT_DIR=/tmp/after build/tests/tilec_tests "[lowering_snapshot]"
//   diff -r /tmp/before /tmp/after
//
// It writes the LLVM IR lower_kernel emits (before any optimization, so a change in the order
// of instructions shows) with the nvptx hooks for sm_80 and sm_90 and with the emulator's, and
// the PTX of a part of them, for generated programs (every op family), tensor-core dots over
// shapes that take every padding and staging case, and pipelined dot loops. Hidden: it checks
// nothing by itself.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/Support/raw_ostream.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "codegen/compile.h"
#include "codegen/lower.h"
#include "codegen/target.h"
#include "tests/codegen/dot_kernel.h"
#include "dsl/dsl.h"
#include "fuzz/generator.h"

using namespace tilec;
using namespace tilec::dsl;
using ir::DType;

namespace {

struct Snapshot {
  std::filesystem::path dir;

  void write(const std::string& name, const std::string& text) const { std::ofstream(dir / name) << text; }

  // The unoptimized LLVM IR of `fn` with each target's hooks, and optionally its PTX.
  void lower(const std::string& name, const ir::Function& fn, codegen::CompileOptions o, bool ptx) const {
    struct Hooks {
      const char* tag;
      int sm; // 0: the emulator's
    };
    for (Hooks h : {Hooks{"sm80", 80}, Hooks{"sm90", 90}, Hooks{"emu", 0}}) {
      std::string text;
      try {
        llvm::LLVMContext ctx;
        llvm::Module m(fn.name, ctx);
        m.setTargetTriple(h.sm ? "nvptx64-nvidia-cuda" : "x86_64-unknown-linux-gnu");
        m.setDataLayout(h.sm ? "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
                             : "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128");
        auto hooks = h.sm ? codegen::make_nvptx_hooks(h.sm) : codegen::make_emu_hooks();
        codegen::LoweringStats st = codegen::lower_kernel(fn, o, *hooks, m);
        llvm::raw_string_ostream os(text);
        os << fmt::format("; conversions {} barriers {} shared {} pipelined {} stages {} stage_bytes {} "
                          "accesses {} vectors {} bytes {}\n",
                          st.conversions, st.barriers, st.shared_bytes, st.pipelined_loops, st.pipeline_stages,
                          st.pipeline_stage_bytes, st.shared_accesses, st.shared_vector_accesses,
                          st.shared_access_bytes);
        m.print(os, nullptr);
      } catch (const std::exception& e) {
        text = std::string("error: ") + e.what() + "\n";
      }
      write(fmt::format("{}.{}.ll", name, h.tag), text);
    }
    if (!ptx) return;
    o.run_ptxas = false;
    o.arch = "sm_90";
    try {
      write(name + ".sm90.ptx", codegen::compile(fn, o).ptx);
    } catch (const std::exception& e) {
      write(name + ".sm90.ptx", std::string("error: ") + e.what() + "\n");
    }
  }
};

struct DotCase {
  int64_t m, n, k;
  DType dt;
  bool trans_a, trans_b, with_acc;
};

ir::Kernel dot_kernel(const DotCase& c) {
  return codegen::test::dot_kernel("snapshot_dot", c.m, c.n, c.k, c.dt, c.trans_a, c.trans_b, c.with_acc);
}

struct PipeCase {
  int64_t m, n, bk;
  DType dt;
  int64_t stages;
  bool row_pages, trans_a, trans_b;
};

// A dot per step of a loop whose operands (B's rows found through a table) the pipeline can
// copy ahead.
ir::Kernel pipe_kernel(const PipeCase& c) {
  KernelBuilder kb("snapshot_pipe");
  auto a = kb.arg(ptr_to(c.dt), "a");
  auto b = kb.arg(ptr_to(c.dt), "b");
  auto table = kb.arg<Ptr<i32>>("table");
  auto count = kb.arg<i32>("count");
  auto out = kb.arg(ptr_to(DType::f32), "out");
  const int64_t KT = 6 * c.bk;
  auto mi = arange(0, c.m), ni = arange(0, c.n), ki = arange(0, c.bk);
  Var acc = zeros({c.m, c.n});
  for_range(0, count * c.bk, c.bk, RangeOptions{c.stages}, [&](Scalar k0) {
    auto kk = k0 + ki;
    Tile at = c.trans_a ? trans(load(a + kk.col() * c.m + mi.row())) : load(a + mi.col() * KT + kk.row());
    Tile rows = c.row_pages ? load(table + kk / 4) * 4 + kk % 4 : load(table + k0 / c.bk) * c.bk + ki;
    Tile bt = c.trans_b ? trans(load(b + ni.col() * KT + rows.row())) : load(b + rows.col() * c.n + ni.row());
    acc = dot(at, bt, acc);
  });
  store(out + mi.col() * c.n + ni.row(), acc);
  return kb.finish();
}

} // namespace

TEST_CASE("lowering snapshot: LLVM IR and PTX of generated programs and dots, into $TILEC_SNAPSHOT_DIR",
          "[.][lowering_snapshot]") {
  const char* dir = std::getenv("TILEC_SNAPSHOT_DIR");
  if (!dir || !*dir) FAIL("set TILEC_SNAPSHOT_DIR to the folder to write the snapshot into");
  Snapshot snap{dir};
  std::filesystem::create_directories(snap.dir);

  for (uint64_t seed = 1; seed <= 600; ++seed) {
    fuzz::Program p = fuzz::generate(seed);
    codegen::CompileOptions o;
    o.num_warps = p.num_warps;
    o.tensor_cores = seed % 5 != 0;
    snap.lower(fmt::format("fuzz{}", seed), *p.kernel, o, seed <= 120);
  }

  fuzz::Rng rng(2024);
  const std::vector<int64_t> mn = {1, 2, 4, 8, 16, 32, 64, 128}, ks = {2, 4, 8, 16, 32, 64};
  for (int i = 0; i < 400; ++i) {
    DotCase c{rng.pick(mn), rng.pick(mn), rng.pick(ks), rng.chance(0.5) ? DType::f16 : DType::bf16,
              rng.chance(0.5), rng.chance(0.5), rng.chance(0.5)};
    if (i % 10 == 9) c.dt = DType::f32; // CUDA cores
    codegen::CompileOptions o;
    o.num_warps = int(rng.pick(std::vector<int64_t>{1, 2, 4, 8}));
    o.tensor_cores = i % 13 != 12;
    snap.lower(fmt::format("dot{}_m{}_n{}_k{}_{}_ta{}_tb{}_acc{}_w{}_tc{}", i, c.m, c.n, c.k, ir::dtype_name(c.dt),
                           c.trans_a, c.trans_b, c.with_acc, o.num_warps, o.tensor_cores),
               *dot_kernel(c), o, i % 2 == 0);
  }

  const std::vector<int64_t> pm = {4, 8, 16, 32, 64}, pn = {8, 16, 32, 64, 128}, pk = {16, 32, 64};
  for (int i = 0; i < 120; ++i) {
    PipeCase c{rng.pick(pm), rng.pick(pn), rng.pick(pk), rng.chance(0.5) ? DType::f16 : DType::bf16,
               rng.pick(std::vector<int64_t>{1, 2, 3, 4}), rng.chance(0.5), rng.chance(0.5), rng.chance(0.3)};
    codegen::CompileOptions o;
    o.num_warps = int(rng.pick(std::vector<int64_t>{1, 2, 4, 8}));
    snap.lower(fmt::format("pipe{}_m{}_n{}_bk{}_{}_s{}_rp{}_ta{}_tb{}_w{}", i, c.m, c.n, c.bk, ir::dtype_name(c.dt),
                           c.stages, c.row_pages, c.trans_a, c.trans_b, o.num_warps),
               *pipe_kernel(c), o, i % 2 == 0);
  }
}
