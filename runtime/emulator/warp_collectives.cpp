// Warp-wide operations: the shuffles, the mma.m16n8k16 and ldmatrix, each lane waiting until its
// whole warp is there, then completed together by the scheduler (release_shuffles).
#include "runtime/emulator/internal.h"

#include "abi/float16.h"

#include <algorithm>

namespace tilec::rt::emu {

namespace {

// One warp's MMA, every lane waiting with its fragments (tilec_emu_mma_m16n8k16).
void run_mma(Worker& w, std::uint32_t base) {
  float A[16][16], B[16][8], C[16][8];
  std::uint32_t dtype = w.threads[base].mma_dtype;
  auto half = [&](std::uint32_t reg, int hi) {
    auto bits = std::uint16_t(hi ? reg >> 16 : reg & 0xffff);
    return dtype == 3 ? bf16_bits_to_f32(bits) : f16_bits_to_f32(bits);
  };
  for (std::uint32_t lane = 0; lane < 32; ++lane) {
    const tilec_emu_thread& t = w.threads[base + lane];
    std::uint32_t g = lane / 4, c2 = 2 * (lane % 4);
    for (int h = 0; h < 2; ++h) {
      A[g][c2 + h] = half(t.mma_a[0], h);
      A[g + 8][c2 + h] = half(t.mma_a[1], h);
      A[g][c2 + 8 + h] = half(t.mma_a[2], h);
      A[g + 8][c2 + 8 + h] = half(t.mma_a[3], h);
      B[c2 + h][g] = half(t.mma_b[0], h);
      B[c2 + 8 + h][g] = half(t.mma_b[1], h);
      C[g][c2 + h] = t.mma_c[h];
      C[g + 8][c2 + h] = t.mma_c[2 + h];
    }
  }
  float D[16][8];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float acc = C[i][j];
      for (int k = 0; k < 16; ++k) acc += A[i][k] * B[k][j]; // exact product, rounded sum
      D[i][j] = acc;
    }
  for (std::uint32_t lane = 0; lane < 32; ++lane) {
    tilec_emu_thread& t = w.threads[base + lane];
    std::uint32_t g = lane / 4, c2 = 2 * (lane % 4);
    for (int h = 0; h < 2; ++h) {
      t.mma_d[h] = D[g][c2 + h];
      t.mma_d[2 + h] = D[g + 8][c2 + h];
    }
    t.mma_dtype = 0;
  }
}

// One warp's ldmatrix: every lane has read the row it addresses (tilec_emu_ldmatrix).
void run_ldmatrix(Worker& w, std::uint32_t base) {
  std::uint32_t count = w.threads[base].ldm_count, trans = w.threads[base].ldm_trans;
  for (std::uint32_t lane = 0; lane < 32; ++lane) {
    tilec_emu_thread& t = w.threads[base + lane];
    std::uint32_t g = lane / 4, c2 = 2 * (lane % 4);
    for (std::uint32_t m = 0; m < count; ++m) {
      const tilec_emu_thread* rows = &w.threads[base + 8 * m];
      std::uint16_t lo = trans ? rows[c2].ldm_row[g] : rows[g].ldm_row[c2];
      std::uint16_t hi = trans ? rows[c2 + 1].ldm_row[g] : rows[g].ldm_row[c2 + 1];
      t.ldm_dst[m] = std::uint32_t(lo) | std::uint32_t(hi) << 16;
    }
  }
  for (std::uint32_t lane = 0; lane < 32; ++lane) w.threads[base + lane].ldm_count = 0;
}

} // namespace

bool release_shuffles(Worker& w) {
  bool released = false;
  std::uint32_t n = std::uint32_t(w.threads.size());
  for (std::uint32_t base = 0; base < n; base += 32) {
    std::uint32_t end = std::min(n, base + 32);
    bool all = true, any = false;
    for (std::uint32_t i = base; i < end; ++i) {
      all = all && w.threads[i].state == State::at_shuffle;
      any = any || w.threads[i].state == State::at_shuffle;
    }
    if (!any || !all) continue;
    bool at_wgmma = false; // released by the warpgroup's last thread to arrive (tilec_emu_wgmma)
    for (std::uint32_t i = base; i < end; ++i) at_wgmma = at_wgmma || w.threads[i].wgmma_n != 0;
    if (at_wgmma) continue;
    std::uint32_t mmas = 0, ldms = 0;
    for (std::uint32_t i = base; i < end; ++i) {
      mmas += w.threads[i].mma_dtype != 0;
      ldms += w.threads[i].ldm_count != 0;
    }
    // A warp whose lanes wait at different kinds of collective is reported as stuck.
    if ((mmas != 0 && (mmas != 32 || end - base != 32)) || (ldms != 0 && (ldms != 32 || end - base != 32)))
      continue;
    if (mmas || ldms) {
      if (mmas) run_mma(w, base);
      else run_ldmatrix(w, base);
      for (std::uint32_t i = base; i < end; ++i) w.threads[i].state = State::runnable;
      released = true;
      continue;
    }
    for (std::uint32_t i = base; i < end; ++i) {
      std::uint32_t src = base + w.threads[i].shfl_src;
      w.threads[i].shfl_result = src < end ? w.threads[src].shfl_value : w.threads[i].shfl_value;
    }
    for (std::uint32_t i = base; i < end; ++i) w.threads[i].state = State::runnable;
    released = true;
  }
  return released;
}

} // namespace tilec::rt::emu

using namespace tilec::rt::emu;

extern "C" {

uint32_t tilec_emu_shfl_xor(tilec_emu_thread* t, uint32_t value, uint32_t lane_mask) {
  check_untagged(t, &value, 4, "warp shuffle");
  t->shfl_value = value;
  t->shfl_src = ((t->tid & 31) ^ lane_mask) & 31;
  t->state = State::at_shuffle;
  yield(t);
  return t->shfl_result;
}

uint32_t tilec_emu_shfl_idx(tilec_emu_thread* t, uint32_t value, uint32_t src_lane) {
  check_untagged(t, &value, 4, "warp shuffle");
  t->shfl_value = value;
  t->shfl_src = src_lane & 31;
  t->state = State::at_shuffle;
  yield(t);
  return t->shfl_result;
}

uint32_t tilec_emu_shfl_sync(tilec_emu_thread* t, uint32_t mode, uint32_t member_mask, uint32_t value, uint32_t b,
                             uint32_t c) {
  const char* name = mode == 0 ? "shfl.sync.idx" : "shfl.sync.bfly";
  if (mode > 1) fail_thread(t, "shuffle of unknown mode {}", mode);
  if (member_mask != 0xffffffffu)
    fail_thread(t, "{} with member mask {:#010x}: tilec's shuffles take the whole warp (0xffffffff); lanes "
                   "outside the mask read undefined values on the GPU",
                name, member_mask);
  if (c != 0x1f)
    fail_thread(t, "{} with clamp/segment operand c = {:#x}: tilec's shuffles use one 32-lane segment "
                   "without clamping (c = 0x1f)",
                name, c);
  return mode == 0 ? tilec_emu_shfl_idx(t, value, b) : tilec_emu_shfl_xor(t, value, b);
}

void tilec_emu_mma_m16n8k16(tilec_emu_thread* t, uint32_t dtype, const uint32_t* a, const uint32_t* b, const float* c,
                            float* d) {
  if (dtype != 2 && dtype != 3)
    fail_thread(t, "MMA with unknown operand type {}", dtype);
  t->mma_dtype = dtype, t->mma_a = a, t->mma_b = b, t->mma_c = c, t->mma_d = d;
  t->state = State::at_shuffle;
  yield(t);
}

void tilec_emu_ldmatrix(tilec_emu_thread* t, uint32_t count, uint32_t trans, const void* row, uint32_t* dst,
                        const char* site) {
  if (count != 1 && count != 2 && count != 4)
    fail_thread(t, "ldmatrix of {} matrices (1, 2 or 4)", count);
  if ((t->tid & 31) < 8 * count) tilec_emu_shared_load(t, row, 16, t->ldm_row, site);
  t->ldm_count = count, t->ldm_trans = trans ? 1 : 0, t->ldm_dst = dst;
  t->state = State::at_shuffle;
  yield(t);
}

} // extern "C"
