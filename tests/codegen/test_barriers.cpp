// Where the lowering puts barriers: exchanges through shared memory take regions nothing
// touched since the last barrier (no barrier before their writes), a loop's next trip waits
// for its last one only where their accesses conflict, and a kernel's own stores to a buffer
// are ordered across threads before its later loads of it (the IR's program order). Each case
// runs on the emulator, which executes every thread up to each barrier in turn, against the
// interpreter: a barrier left out shows as a stale value or a shared-memory race.
#include <catch2/catch.hpp>

#include "codegen/compile.h"
#include "dsl/dsl.h"
#include "tests/codegen/emu_harness.h"

using namespace tilec;
using namespace tilec::dsl;

namespace {

codegen::LoweringStats stats_of(const ir::Function& fn, int warps = 4) {
  codegen::CompileOptions o;
  o.num_warps = warps;
  o.run_ptxas = false;
  return codegen::compile(fn, o).stats;
}

} // namespace

TEST_CASE("two cross-warp reductions in a row wait at one barrier each", "[codegen][barriers]") {
  KernelBuilder kb("two_reductions");
  auto x = kb.arg<Ptr<f32>>("x"), out = kb.arg<Ptr<f32>>("out");
  auto r = arange(0, 4), c = arange(0, 256);
  auto t = load(x + r.col() * 256 + c.row()); // [4, 256]: a row spreads over every warp
  auto m = reduce_max(t, 1), s = reduce_sum(t, 1);
  store(out + r, m + s);
  ir::Kernel k = kb.finish();
  // Each reduction writes its warps' partials, waits once and reads them: the second takes a
  // region next to the first's instead of waiting for the first's reads to finish.
  CHECK(stats_of(*k).barriers == 2);
  launch::Buffer xb("x", ir::DType::f32, 4 * 256), ob("out", ir::DType::f32, 4);
  codegen::test::fill_random(xb, 3, -4, 4);
  codegen::test::check_against_interpreter(*k, {1, 1, 1}, {xb, ob}, [](std::vector<launch::Buffer>& b) {
    return std::vector<launch::Arg>{launch::Arg::of(b[0]), launch::Arg::of(b[1])};
  }, 1e-6);
}

TEST_CASE("a loop with one exchange a trip waits once before reusing its region", "[codegen][barriers]") {
  // Each trip reduces across warps through the same region: the next trip's partials may only
  // be written once every thread has read this trip's, so the body starts with a barrier.
  KernelBuilder kb("loop_reductions");
  auto x = kb.arg<Ptr<f32>>("x"), out = kb.arg<Ptr<f32>>("out");
  auto n = kb.arg<i32>("n");
  auto c = arange(0, 512);
  Var acc = zeros({1});
  for_range(0, n, 1, [&](Scalar i) { acc = acc + reduce_sum(load(x + i * 512 + c), 0); });
  store(out + arange(0, 1), acc);
  ir::Kernel k = kb.finish();
  CHECK(stats_of(*k).barriers == 2); // the exchange's own, and the one at the top of the body
  launch::Buffer xb("x", ir::DType::f32, 6 * 512), ob("out", ir::DType::f32, 1);
  codegen::test::fill_random(xb, 5, -1, 1);
  codegen::test::check_against_interpreter(*k, {1, 1, 1}, {xb, ob}, [](std::vector<launch::Buffer>& b) {
    return std::vector<launch::Arg>{launch::Arg::of(b[0]), launch::Arg::of(b[1]), launch::Arg::of_int(6)};
  }, 1e-5);
}

TEST_CASE("a kernel's store to a buffer is seen by its later loads from other threads", "[codegen][barriers]") {
  // `a` is written and read back a row further on (each element by another thread: the
  // thread that holds row i reads row i + 1), straight and from one trip to the next: a
  // barrier orders each store before the loads that follow.
  for (bool in_loop : {false, true}) {
    INFO((in_loop ? "across trips" : "straight"));
    KernelBuilder kb(in_loop ? "store_then_load_loop" : "store_then_load");
    auto a = kb.arg<Ptr<f32>>("a"), out = kb.arg<Ptr<f32>>("out");
    auto i = arange(0, 32), j = arange(0, 32);
    auto rows = a + i.col() * 32 + j.row(), next = a + ((i + 1) % 32).col() * 32 + j.row(); // row i + 1
    if (in_loop) {
      for_range(0, 4, 1, [&](Scalar) { store(rows, load(next) * 2 + 1); });
    } else {
      store(rows, load(rows) + 1);
      store(out + i.col() * 32 + j.row(), load(next));
    }
    if (in_loop) store(out + i.col() * 32 + j.row(), load(rows));
    ir::Kernel k = kb.finish();
    launch::Buffer ab("a", ir::DType::f32, 32 * 32), ob("out", ir::DType::f32, 32 * 32);
    codegen::test::fill_random(ab, 7, -8, 8);
    codegen::test::check_against_interpreter(*k, {1, 1, 1}, {ab, ob}, [](std::vector<launch::Buffer>& b) {
      return std::vector<launch::Arg>{launch::Arg::of(b[0]), launch::Arg::of(b[1])};
    }, 0);
  }
}

TEST_CASE("loads and stores of one pointer tile in one layout need no barrier between them", "[codegen][barriers]") {
  // x = load(p); store(p, f(x)): each thread reads and writes its own elements.
  KernelBuilder kb("in_place");
  auto a = kb.arg<Ptr<f32>>("a");
  auto p = a + program_id(0) * 256 + arange(0, 256);
  store(p, load(p) * 3);
  ir::Kernel k = kb.finish();
  CHECK(stats_of(*k).barriers == 0);
}

TEST_CASE("two pipelined loops sharing their buffers in different shapes agree with the interpreter",
          "[codegen][barriers][pipeline]") {
  // Both loops copy B ahead into the same shared buffers, in different shapes; the first
  // loop's last copies, issued past its end, zero-fill at its exit, and the second's first
  // copies wait at a barrier for them (emit_for, pipe_written_unfenced_). The emulator checks
  // every copy's bytes against other threads' accesses, and the results against the
  // interpreter's.
  KernelBuilder kb("two_pipelined_loops");
  auto a = kb.arg<Ptr<f16>>("a"), b = kb.arg<Ptr<f16>>("b"), out = kb.arg<Ptr<f32>>("out");
  auto n = kb.arg<i32>("n");
  auto m16 = arange(0, 16), k32 = arange(0, 32), n64 = arange(0, 64), n32 = arange(0, 32);
  auto at = load(a + m16.col() * 32 + k32.row()); // [16, 32]
  Var acc = zeros({16, 64});
  for_range(0, n, 1, RangeOptions{2}, [&](Scalar s) {
    acc = dot(at + at, load(b + (s * 32 + k32).col() * 64 + n64.row()), acc); // B [32, 64]
  });
  Var acc2 = zeros({16, 32});
  for_range(0, n, 1, RangeOptions{2}, [&](Scalar s) {
    // A computed in the body (not resident): no barrier of its own before the loop.
    acc2 = dot(at + at, load(b + (s * 32 + k32).col() * 32 + n32.row()), acc2); // B [32, 32]
  });
  store(out + m16.col() * 64 + n64.row(), acc);
  store(out + 16 * 64 + m16.col() * 32 + n32.row(), acc2);
  ir::Kernel k = kb.finish();
  codegen::CompileOptions o;
  o.run_ptxas = false;
  REQUIRE(codegen::compile(*k, o).stats.pipelined_loops == 2);
  launch::Buffer ab("a", ir::DType::f16, 16 * 32), bb("b", ir::DType::f16, 4 * 32 * 64), ob("out", ir::DType::f32,
                                                                                               16 * 64 + 16 * 32);
  codegen::test::fill_random(ab, 11, -1, 1);
  codegen::test::fill_random(bb, 13, -1, 1);
  codegen::test::check_against_interpreter(*k, {1, 1, 1}, {ab, bb, ob}, [](std::vector<launch::Buffer>& v) {
    return std::vector<launch::Arg>{launch::Arg::of(v[0]), launch::Arg::of(v[1]), launch::Arg::of(v[2]),
                                    launch::Arg::of_int(3)};
  }, 1e-3);
}
