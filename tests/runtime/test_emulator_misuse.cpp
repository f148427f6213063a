// The classic synchronization bugs of a Hopper pipeline, each planted in a small hand-written
// emu-ABI kernel (C, built with cc) and each reported by the emulator as a named error, not a
// crash or a wrong number: a consumer reading a stage before its mbarrier phase completes, a
// wgmma accumulator read before the wgmma.wait_group that retires it, a producer (TMA or
// cp.async) overwriting a stage an MMA in flight still reads, a parity bit off by one, a short
// transaction count and a descriptor's wrong swizzle mode.
#include <catch2/catch.hpp>

#include "abi/float16.h"
#include "runtime/emulator/emulator.h"
#include "tests/runtime/helpers.h"

#include <fstream>
#include <vector>

using namespace tilec::rt;
using namespace tilec::rt::test;

namespace {

const char* kKernels = R"C(
#include "abi/emu_abi.h"

#define ARG(T, i) (*(T const*)args[i])

/* A two-stage ring feeding a warpgroup MMA, 128 threads (one warpgroup), `trips` trips. Trip j
   takes A rows [64 j, 64 j + 64) (64 x 16 f16) and all of B (16 x 16, as B[n][k]) by TMA into
   stage j % 2 (A at 1024 + 2560 s, B 2048 after it, both 32-byte swizzled), completing on the
   stage's mbarrier (byte offset 8 s); thread 0 is the producer and issues trip j + 1's copies
   ahead. Every thread waits for the stage's phase (parity (j / 2) % 2), then the warpgroup
   runs wgmma m64n16k16 into one accumulator across the trips; out = the sum as [64][16].
   Modes: 0 right, a wait_group 0 and a barrier each trip, then the refill; 1 right, pipelined:
   wait_group 1 (the trip's MMA stays in flight), the refill of the other stage after it and a
   barrier, wait_group 0 after the loop. The bugs: 2 trip 1 reads its stage without waiting
   for the phase; 3 the parity waited for is off by one; 4 the mbarrier is armed for A's bytes
   only (B's copy lands in the next phase); 5 the descriptors say a 64-byte swizzle; 6 a
   thread stores its accumulator before the last wait_group 0; 7 (pipelined) the same after
   wait_group 1, with the last MMA in flight; 8 (pipelined) the refill before wait_group 1,
   into the stage the previous MMA still reads; 9 thread 0 refills its stage by cp.async before
   the MMA's wait. */
static uint64_t desc32(uint32_t start, int swizzle64) {
  uint64_t sw = swizzle64 ? 64 : 32, mode = swizzle64 ? 2 : 3;
  return (uint64_t)(start >> 4) | (uint64_t)1 << 16 | ((8 * sw) >> 4) << 32 | mode << 62;
}
static void issue(tilec_emu_thread* c, uint8_t* sm, const tilec_emu_tensor_map* ma,
                  const tilec_emu_tensor_map* mb, int32_t j, int32_t mode) {
  uint8_t* stage = sm + 1024 + 2560 * (j % 2);
  void* bar = sm + 8 * (j % 2);
  tilec_emu_mbarrier_arrive_expect_tx(c, bar, mode == 4 ? 2048 : 2560, "ring arm");
  tilec_emu_tma_load(c, stage, ma, 2, 0, 64 * j, 0, 0, 0, bar, "ring copy A");
  tilec_emu_tma_load(c, stage + 2048, mb, 2, 0, 0, 0, 0, 0, bar, "ring copy B");
}
void ring(tilec_emu_thread* c, void* const* args) {
  const uint16_t* a = ARG(uint16_t*, 0);
  float* out = ARG(float*, 2);
  int32_t trips = ARG(int32_t, 3), mode = ARG(int32_t, 4);
  const tilec_emu_tensor_map* ma = (const tilec_emu_tensor_map*)args[5];
  const tilec_emu_tensor_map* mb = (const tilec_emu_tensor_map*)args[6];
  int pipelined = mode == 1 || mode == 7 || mode == 8;
  uint32_t t = tilec_emu_thread_id(c);
  uint8_t* sm = (uint8_t*)tilec_emu_shared_base(c);
  if (t == 0) {
    tilec_emu_mbarrier_init(c, sm, 1);
    tilec_emu_mbarrier_init(c, sm + 8, 1);
  }
  tilec_emu_barrier(c, 0);
  if (t == 0) issue(c, sm, ma, mb, 0, mode);
  float acc[8] = {0};
  for (int32_t j = 0; j < trips; ++j) {
    uint32_t s = (uint32_t)j % 2, start = 1024 + 2560 * s;
    if (!pipelined && t == 0 && j + 1 < trips) issue(c, sm, ma, mb, j + 1, mode);
    uint32_t parity = ((uint32_t)j / 2) % 2;
    if (!(mode == 2 && j == 1)) tilec_emu_mbarrier_wait(c, sm + 8 * s, mode == 3 ? parity ^ 1 : parity, "ring wait");
    tilec_emu_wgmma_fence(c);
    tilec_emu_wgmma(c, 2, 16, desc32(start, mode == 5), desc32(start + 2048, mode == 5), j > 0, 0, acc, "ring mma");
    tilec_emu_wgmma_commit(c);
    if (mode == 9 && t == 0) tilec_emu_cp_async(c, sm + start, a, 16, "ring cp.async refill");
    if (mode == 6 && j == trips - 1) tilec_emu_store(c, &out[t], 4, &acc[0]);
    if (!pipelined) {
      tilec_emu_wgmma_wait(c, 0);
      tilec_emu_barrier(c, 1);
      continue;
    }
    if (mode == 8 && t == 0 && j + 1 < trips) issue(c, sm, ma, mb, j + 1, mode);
    tilec_emu_wgmma_wait(c, 1);
    if (mode == 7 && j == trips - 1) tilec_emu_store(c, &out[t], 4, &acc[1]);
    tilec_emu_barrier(c, 1);
    if (mode != 8 && t == 0 && j + 1 < trips) issue(c, sm, ma, mb, j + 1, mode);
  }
  tilec_emu_wgmma_wait(c, 0);
  if (mode == 9 && t == 0) tilec_emu_cp_async_wait(c, 0);
  uint32_t w = t / 32, g = (t % 32) / 4, q = t % 4;
  for (uint32_t i = 0; i < 8; ++i) {
    uint32_t row = 16 * w + g + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * q + i % 2;
    tilec_emu_store(c, &out[row * 16 + col], 4, &acc[i]);
  }
}
)C";

// Builds the kernels above once per process.
const std::filesystem::path& kernel_library() {
  static TempDir dir;
  static std::filesystem::path lib = [] {
    std::ofstream(dir.path / "misuse.c") << kKernels;
    std::filesystem::path so = dir.path / "misuse.so";
    Output o = run_command("cc -O1 -shared -fPIC -I " + quoted(TILEC_SOURCE_DIR) + " -o " + quoted(so) + " " +
                           quoted(dir.path / "misuse.c"));
    INFO(o.text);
    REQUIRE(o.status == 0);
    return so;
  }();
  return lib;
}

template <class T> Arg buf(std::vector<T>& v) {
  return Arg::buffer(reinterpret_cast<std::uint64_t>(v.data()), v.size() * sizeof(T));
}

// The ring kernel over `trips` trips in `mode`, its output checked against the product when it
// runs to the end; returns the launch's error ("" for none).
std::string run_ring(int trips, int mode, EmuSchedule order = EmuSchedule::forward) {
  Manifest m;
  m.kernel = m.symbol = "ring";
  m.arch = "host";
  m.emulator = kernel_library();
  m.params = {{"a", {ScalarType::u16, true}}, {"b", {ScalarType::u16, true}}, {"out", {ScalarType::f32, true}},
              {"trips", {ScalarType::i32, false}}, {"mode", {ScalarType::i32, false}}};
  m.threads_per_block = 128;
  m.shared_bytes = 1024 + 2 * 2560;
  m.tensor_maps = {{"a", {std::int64_t(64 * trips), std::int64_t(16)}, {std::int64_t(16), std::int64_t(1)}, {64, 16}, 32},
                   {"b", {std::int64_t(16), std::int64_t(16)}, {std::int64_t(16), std::int64_t(1)}, {16, 16}, 32}};
  EmuModule mod(m);
  std::vector<std::uint16_t> a(size_t(64 * 16 * trips)), b(16 * 16);
  std::vector<float> fa(a.size()), fb(b.size()), out(64 * 16, -1.0f);
  // Small integers: every sum is exact in any order.
  for (size_t i = 0; i < a.size(); ++i) fa[i] = float(int(i * 7 % 9) - 4), a[i] = tilec::f32_to_f16_bits(fa[i]);
  for (size_t i = 0; i < b.size(); ++i) fb[i] = float(int(i * 5 % 7) - 3), b[i] = tilec::f32_to_f16_bits(fb[i]);
  EmuOptions o;
  o.schedule = {order, 1};
  try {
    mod.launch({1, 1, 1}, std::vector<Arg>{buf(a), buf(b), buf(out), Arg(std::int32_t(trips)), Arg(std::int32_t(mode))},
               {}, o);
  } catch (const EmulationError& e) {
    return e.what();
  }
  for (int r = 0; r < 64; ++r)
    for (int n = 0; n < 16; ++n) {
      float want = 0;
      for (int j = 0; j < trips; ++j)
        for (int k = 0; k < 16; ++k) want += fa[size_t((64 * j + r) * 16 + k)] * fb[size_t(16 * n + k)];
      INFO("row " << r << " column " << n);
      REQUIRE(out[size_t(16 * r + n)] == want);
    }
  return "";
}

} // namespace

TEST_CASE("emulator misuse: a TMA ring into wgmma runs right, waiting wait_group 0 or 1", "[emulator_misuse][emulator]") {
  for (EmuSchedule order : {EmuSchedule::forward, EmuSchedule::reverse, EmuSchedule::random}) {
    CHECK(run_ring(4, 0, order) == "");
    CHECK(run_ring(5, 1, order) == "");
  }
}

TEST_CASE("emulator misuse: a consumer reading a stage before its mbarrier phase completes is named",
          "[emulator_misuse][emulator]") {
  // The wgmma reads the stage as the warpgroup's first thread on the last thread's fiber: the
  // failure leaves that fiber (it used to resume a stale one and crash).
  for (EmuSchedule order : {EmuSchedule::forward, EmuSchedule::reverse}) {
    std::string e = run_ring(3, 2, order);
    CHECK_THAT(e, Catch::Contains("kernel 'ring', block (0, 0, 0), thread 0: shared-memory load"));
    CHECK_THAT(e, Catch::Contains("(at ring mma) reads what a TMA copy (at ring copy A) writes in phase 0 of the "
                                  "mbarrier at byte offset 8, which this thread has not waited for"));
  }
}

TEST_CASE("emulator misuse: an mbarrier parity off by one is named", "[emulator_misuse][emulator]") {
  CHECK_THAT(run_ring(3, 3), Catch::Contains("mbarrier phase error (at ring wait): the thread waits for parity 1 of "
                                             "the mbarrier at byte offset 0, but the next phase it has not waited "
                                             "for is phase 0 (parity 0)"));
}

TEST_CASE("emulator misuse: a short transaction count and a wrong swizzle mode are named, not crashes",
          "[emulator_misuse][emulator]") {
  // Armed for A alone, the phase completes with A's copy: B's bytes belong to the next phase,
  // which the wgmma reads before anyone waits for it.
  for (EmuSchedule order : {EmuSchedule::forward, EmuSchedule::reverse}) {
    std::string e = run_ring(2, 4, order);
    CHECK_THAT(e, Catch::Contains("(at ring mma) reads what a TMA copy (at ring copy B) writes in phase 1 of the "
                                  "mbarrier at byte offset 0, which this thread has not waited for"));
    // 64-byte rows over a 32-byte swizzled stage: the MMA reads past A into bytes not waited for.
    e = run_ring(2, 5, order);
    CHECK_THAT(e, Catch::Contains("kernel 'ring', block (0, 0, 0), thread 0: shared-memory load"));
    CHECK_THAT(e, Catch::Contains("(at ring mma)"));
  }
}

TEST_CASE("emulator misuse: a wgmma accumulator read before the wait_group that retires it is named",
          "[emulator_misuse][emulator][wgmma]") {
  for (EmuSchedule order : {EmuSchedule::forward, EmuSchedule::reverse}) {
    std::string e = run_ring(2, 6, order);
    CHECK_THAT(e, Catch::Contains("global store of register 0 of a warpgroup MMA's accumulator (wgmma at ring mma) "
                                  "read before the wgmma.wait_group that retires it"));
    CHECK_THAT(e, Catch::Contains("kernel 'ring', block (0, 0, 0), thread "));
    // wait_group 1 retires the trip before; the last trip's MMA is still in flight.
    e = run_ring(3, 7, order);
    CHECK_THAT(e, Catch::Contains("global store of register 1 of a warpgroup MMA's accumulator (wgmma at ring mma) "
                                  "read before the wgmma.wait_group that retires it"));
  }
}

TEST_CASE("emulator misuse: a producer overwriting a stage an MMA in flight still reads is named",
          "[emulator_misuse][emulator]") {
  // TMA: the refill of trip j + 1 before wait_group 1 lands in the stage trip j - 1's MMA reads.
  std::string e = run_ring(3, 8);
  CHECK_THAT(e, Catch::Contains("kernel 'ring', block (0, 0, 0), thread 0: shared-memory write of byte offset 1024 "
                                "(at ring copy A) while a warpgroup MMA of warpgroup 0 still reads it (wgmma at ring "
                                "mma): wait for it first (wgmma.wait_group)"));
  // cp.async into the stage of the MMA just committed.
  e = run_ring(2, 9);
  CHECK_THAT(e, Catch::Contains("shared-memory write of byte offset 1024 (at ring cp.async refill) while a warpgroup "
                                "MMA of warpgroup 0 still reads it"));
}
