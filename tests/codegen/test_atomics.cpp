// Every atomic (add, max, min, and, or, xor, xchg, cas) under contention on the CPU backends
// (the emulator runs blocks on several OS threads, so these are real races), their NaN and
// bit rules, and the GPU instructions they become.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>

#include "abi/atomic_ops.h"
#include "backends/launchers.h"
#include "codegen/compile.h"
#include "dsl/dsl.h"
#include "interp/launcher.h"
#include "launch/launcher.h"
#include "tests/codegen/codegen_test_util.h"

using namespace tilec;
using codegen::test::count;
using namespace tilec::dsl;
using ir::DType;
using ir::OpKind;

namespace {

constexpr int64_t kLanes = 128, kPrograms = 4, kSlots = 8;

Tile apply(OpKind k, const Tile& p, const Tile& v, const Tile& mask) {
  switch (k) {
  case OpKind::AtomicAdd: return atomic_add(p, v, mask);
  case OpKind::AtomicMax: return atomic_max(p, v, mask);
  case OpKind::AtomicMin: return atomic_min(p, v, mask);
  case OpKind::AtomicAnd: return atomic_and(p, v, mask);
  case OpKind::AtomicOr: return atomic_or(p, v, mask);
  case OpKind::AtomicXor: return atomic_xor(p, v, mask);
  case OpKind::AtomicXchg: return atomic_xchg(p, v, mask);
  default: FAIL("not a read-modify-write"); return Tile();
  }
}

// Lane i of program g (index n = g * 128 + i) applies `kind` with vals[n] to mem[n % 8],
// unless n % 5 == 0, and writes the old value to olds[n].
ir::Kernel contended(OpKind kind, DType t) {
  KernelBuilder kb("contended");
  auto mem = kb.arg(ptr_to(t), "mem");
  auto vals = kb.arg(ptr_to(t), "vals");
  auto olds = kb.arg(ptr_to(t), "olds");
  auto n = program_id(0) * kLanes + arange(0, kLanes);
  auto v = load(vals + n);
  store(olds + n, apply(kind, mem + n % kSlots, v, n % 5 != 0));
  return kb.finish();
}

// Lane n claims mem[n % 8] with cas(-1 -> n): one lane per slot wins.
ir::Kernel claim() {
  KernelBuilder kb("claim");
  auto mem = kb.arg<Ptr<i32>>("mem");
  auto olds = kb.arg<Ptr<i32>>("olds");
  auto n = program_id(0) * kLanes + arange(0, kLanes);
  store(olds + n, atomic_cas(mem + n % kSlots, -1, n));
  return kb.finish();
}

std::vector<std::unique_ptr<launch::Launcher>> cpu_launchers() {
  std::vector<std::unique_ptr<launch::Launcher>> l;
  l.push_back(interp::make_interpret_launcher());
  l.push_back(backends::make_emulate_launcher(backends::EmuLowering::emu));
  l.push_back(backends::make_emulate_launcher(backends::EmuLowering::nvptx));
  return l;
}

} // namespace

TEST_CASE("atomics under contention leave what the op's definition says", "[codegen][atomic][emulator]") {
  const int64_t total = kLanes * kPrograms;
  for (DType t : {DType::i32, DType::f32})
    for (OpKind kind : {OpKind::AtomicAdd, OpKind::AtomicMax, OpKind::AtomicMin, OpKind::AtomicAnd, OpKind::AtomicOr,
                        OpKind::AtomicXor, OpKind::AtomicXchg}) {
      const bool bits = kind == OpKind::AtomicAnd || kind == OpKind::AtomicOr || kind == OpKind::AtomicXor;
      if (bits && t == DType::f32) continue;
      ir::Kernel k = contended(kind, t);
      for (auto& l : cpu_launchers()) {
        INFO(ir::op_name(kind) << " " << ir::dtype_name(t) << " on " << l->backend());
        launch::Buffer mem("mem", t, kSlots), vals("vals", t, size_t(total)), olds("olds", t, size_t(total));
        // Integer-valued floats: sums are exact in any order.
        for (int64_t s = 0; s < kSlots; ++s) mem.set(size_t(s), double(s * 3 - 10));
        for (int64_t n = 0; n < total; ++n) vals.set(size_t(n), double((n * 37) % 101 - 50));
        l->launch(k, 4, {kPrograms, 1, 1}, {launch::Arg::of(mem), launch::Arg::of(vals), launch::Arg::of(olds)});
        std::map<int64_t, std::vector<double>> seen; // per slot: the values applied, and the olds returned
        std::map<int64_t, std::vector<double>> returned;
        for (int64_t n = 0; n < total; ++n) {
          if (n % 5 == 0) {
            REQUIRE(olds.get(size_t(n)) == 0); // masked: no effect, 0 returned
            continue;
          }
          seen[n % kSlots].push_back(vals.get(size_t(n)));
          returned[n % kSlots].push_back(olds.get(size_t(n)));
        }
        for (int64_t s = 0; s < kSlots; ++s) {
          const double init = double(s * 3 - 10);
          if (kind == OpKind::AtomicXchg) {
            // The olds and the final value are the initial value and the values, each once.
            std::vector<double> have = returned[s], want = seen[s];
            have.push_back(mem.get(size_t(s)));
            want.push_back(init);
            std::sort(have.begin(), have.end());
            std::sort(want.begin(), want.end());
            CHECK(have == want);
            continue;
          }
          double want = init;
          for (double v : seen[s]) {
            if (t == DType::i32)
              want = atomic_result(ir::atomic_op(kind), int32_t(want), int32_t(v), 0);
            else
              want = atomic_result(ir::atomic_op(kind), float(want), float(v), 0.0f);
          }
          CHECK(mem.get(size_t(s)) == want);
          // Each old value is the slot's value at some point: for max never above the final
          // value and never below the initial one.
          if (kind == OpKind::AtomicMax)
            for (double o : returned[s]) CHECK((o <= want && o >= init));
        }
      }
    }
}

TEST_CASE("atomic_cas lets one lane per element win", "[codegen][atomic][emulator]") {
  ir::Kernel k = claim();
  const int64_t total = kLanes * kPrograms;
  for (auto& l : cpu_launchers()) {
    INFO(l->backend());
    launch::Buffer mem("mem", DType::i32, kSlots), olds("olds", DType::i32, size_t(total));
    for (int64_t s = 0; s < kSlots; ++s) mem.set_int(size_t(s), -1);
    l->launch(k, 4, {kPrograms, 1, 1}, {launch::Arg::of(mem), launch::Arg::of(olds)});
    for (int64_t s = 0; s < kSlots; ++s) {
      const int64_t winner = mem.get_int(size_t(s));
      REQUIRE(winner >= 0);
      CHECK(winner % kSlots == s);
      int wins = 0;
      for (int64_t n = s; n < total; n += kSlots) {
        const int64_t old = olds.get_int(size_t(n));
        if (old == -1) {
          ++wins;
          CHECK(n == winner);
        } else {
          CHECK(old == winner);
        }
      }
      CHECK(wins == 1);
    }
  }
}

TEST_CASE("float atomic max/min ignore NaN and cas compares bits", "[codegen][atomic][emulator]") {
  KernelBuilder kb("float_rules");
  auto mx = kb.arg<Ptr<f32>>("mx");
  auto mn = kb.arg<Ptr<f32>>("mn");
  auto cs = kb.arg<Ptr<f32>>("cs");
  auto vals = kb.arg<Ptr<f32>>("vals");
  auto i = arange(0, 4);
  auto v = load(vals + i);
  atomic_max(mx + i, v);
  atomic_min(mn + i, v);
  atomic_cas(cs + i, v, full({4}, 7.0f));
  ir::Kernel k = kb.finish();
  const float nan = std::nanf("");
  const std::vector<float> mem0 = {1.0f, nan, 3.0f, -0.0f}, val = {nan, 2.0f, 1.0f, 0.0f};
  for (auto& l : cpu_launchers()) {
    INFO(l->backend());
    launch::Buffer mx_b("mx", DType::f32, 4), mn_b("mn", DType::f32, 4), cs_b("cs", DType::f32, 4),
        v_b("vals", DType::f32, 4);
    for (size_t j = 0; j < 4; ++j) {
      mx_b.set(j, mem0[j]);
      mn_b.set(j, mem0[j]);
      cs_b.set(j, mem0[j]);
      v_b.set(j, val[j]);
    }
    l->launch(k, 1, {1, 1, 1},
              {launch::Arg::of(mx_b), launch::Arg::of(mn_b), launch::Arg::of(cs_b), launch::Arg::of(v_b)});
    // A NaN value leaves memory alone; a NaN in memory is replaced.
    CHECK(mx_b.get(0) == 1.0);
    CHECK(mx_b.get(1) == 2.0);
    CHECK(mx_b.get(2) == 3.0);
    CHECK(mn_b.get(0) == 1.0);
    CHECK(mn_b.get(1) == 2.0);
    CHECK(mn_b.get(2) == 1.0);
    // -0.0 counts below +0.0, in either order.
    CHECK_FALSE(std::signbit(mx_b.get(3)));
    CHECK(std::signbit(mn_b.get(3)));
    // cas: NaN never equals itself by value, but these bits differ anyway (memory 1 vs NaN);
    // -0.0 in memory against a +0.0 compare value: different bits, no store.
    CHECK(cs_b.get(0) == 1.0);
    CHECK(std::isnan(cs_b.get(1)));
    CHECK(cs_b.get(2) == 3.0);
    CHECK(std::signbit(cs_b.get(3)));
  }
}

TEST_CASE("atomics become PTX's atom instructions", "[codegen][atomic]") {
  codegen::CompileOptions o;
  o.arch = "sm_90";
  o.run_ptxas = codegen::find_ptxas().has_value();
  auto ptx = [&](OpKind kind, DType t) { return codegen::compile(*contended(kind, t), o).ptx; };
  CHECK(count(ptx(OpKind::AtomicMax, DType::i32), "atom.global.max.s32") >= 1);
  CHECK(count(ptx(OpKind::AtomicMin, DType::i32), "atom.global.min.s32") >= 1);
  CHECK(count(ptx(OpKind::AtomicAnd, DType::i32), "atom.global.and.b32") >= 1);
  CHECK(count(ptx(OpKind::AtomicOr, DType::i32), "atom.global.or.b32") >= 1);
  CHECK(count(ptx(OpKind::AtomicXor, DType::i32), "atom.global.xor.b32") >= 1);
  CHECK(count(ptx(OpKind::AtomicXchg, DType::f32), "atom.global.exch.b32") >= 1);
  CHECK(count(ptx(OpKind::AtomicAdd, DType::f32), "atom.global.add.f32") >= 1);
  // f32 max has no atom instruction here: a compare-and-swap loop.
  CHECK(count(ptx(OpKind::AtomicMax, DType::f32), "atom.global.cas.b32") >= 1);
  CHECK(count(codegen::compile(*claim(), o).ptx, "atom.global.cas.b32") >= 1);
}
