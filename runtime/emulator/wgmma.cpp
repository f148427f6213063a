// Warpgroup MMA (Hopper's wgmma): matrix descriptors decoded by the PTX ISA's canonical layouts,
// the MMA run by the warpgroup's last thread to arrive, its fences, commit groups and waits.
#include "runtime/emulator/internal.h"

#include "abi/float16.h"
#include "abi/float8.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <span>

namespace tilec::rt::emu {

namespace {

// Element (mn, k) of an operand in shared memory, as a matrix descriptor places it (PTX ISA,
// "Canonical Layouts"), `kb` and `mnb` its byte offsets along K and along M or N:
//   K-major, no swizzle: 8 x 16-byte core matrices, rows 16 bytes apart, 8-row groups `sbo`
//     apart, 16-byte columns `lbo` apart;
//   K-major, swizzle s: rows of s bytes, 8-row groups `sbo` apart;
//   MN-major, no swizzle: 16-byte runs of M or N, K rows 16 bytes apart, 8-row groups `lbo`
//     apart, runs `sbo` apart;
//   MN-major, swizzle s: K rows of s bytes, 8-row groups `sbo` apart, panels of s bytes of M
//     or N `lbo` apart.
// A swizzle of s bytes (128, 64, 32) then XORs the address bits [4, 4 + log2(s / 16)) with
// bits [7, ...): what the GPU does to the address.
std::size_t descriptor_offset(std::uint64_t desc, bool mn_major, std::uint32_t mn, std::uint32_t k, std::uint32_t eb) {
  const std::size_t start = (desc & 0x3fff) << 4, lbo = ((desc >> 16) & 0x3fff) << 4, sbo = ((desc >> 32) & 0x3fff) << 4;
  const std::uint32_t mode = std::uint32_t(desc >> 62);
  const std::size_t kb = std::size_t(k) * eb, mnb = std::size_t(mn) * eb;
  if (mode == 0)
    return mn_major ? start + (mnb / 16) * sbo + (k / 8) * lbo + (k % 8) * 16 + mnb % 16
                    : start + (mn / 8) * sbo + (kb / 16) * lbo + (mn % 8) * 16 + kb % 16;
  const std::size_t s = mode == 1 ? 128 : mode == 2 ? 64 : 32;
  const std::size_t logical = mn_major ? start + (mnb / s) * lbo + (k / 8) * sbo + (k % 8) * s + mnb % s
                                       : start + (mn / 8) * sbo + (mn % 8) * s + kb;
  return logical ^ (((logical >> 7) & (s / 16 - 1)) << 4);
}

std::uint32_t tag_of(std::uint32_t slot, std::uint32_t reg) { return 0x7fed0000u | slot << 7 | reg; }

// The result a tag names, or null.
tilec_emu_thread::WgmmaResult* tagged(tilec_emu_thread& o, std::uint32_t bits) {
  const std::uint32_t slot = (bits >> 7) & (kWgmmaSlots - 1), reg = bits & 127;
  if (slot >= o.wgmma_results.size() || reg >= o.wgmma_results[slot].values.size()) return nullptr;
  return &o.wgmma_results[slot];
}

// Register r of thread o's accumulator as a wgmma takes it: a tag stands for the register of
// the result it names (a wgmma may take an earlier one's result before it is retired).
float accumulator_in(tilec_emu_thread* t, tilec_emu_thread& o, std::uint32_t r) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(o.wgmma_acc[r]);
  if (!is_wgmma_tag(bits)) return o.wgmma_acc[r];
  tilec_emu_thread::WgmmaResult* res = tagged(o, bits);
  if (!res)
    fail_thread(t, "warpgroup MMA (at {}): register {} of thread {}'s accumulator holds the tag of no wgmma result",
                o.wgmma_site, r, o.tid);
  return res->values[bits & 127];
}

// The warpgroup's MMA, run by its last thread to arrive (`t`), every other one waiting.
void run_wgmma(tilec_emu_thread* t, std::uint32_t g0) {
  tilec_emu_worker& w = *t->worker;
  const tilec_emu_thread& first = w.threads[g0];
  for (std::uint32_t i = g0; i < g0 + 128; ++i) {
    const tilec_emu_thread& o = w.threads[i];
    if (o.wgmma_a_in_regs != first.wgmma_a_in_regs)
      fail_thread(t, "warpgroup MMA (at {}): thread {} takes A from {} and thread {} from {}: the warpgroup's threads "
                     "issue the same wgmma", first.wgmma_site, i, o.wgmma_a_in_regs ? "registers" : "shared memory", g0,
                  first.wgmma_a_in_regs ? "registers" : "shared memory");
    if (o.wgmma_dtype != first.wgmma_dtype || o.wgmma_n != first.wgmma_n || o.wgmma_desc_a != first.wgmma_desc_a ||
        o.wgmma_desc_b != first.wgmma_desc_b || o.wgmma_scale != first.wgmma_scale || o.wgmma_trans != first.wgmma_trans)
      fail_thread(t, "warpgroup MMA (at {}): thread {} passes other operands than thread {} (dtype {}/{}, n {}/{}, "
                     "descriptors {:#x}/{:#x} and {:#x}/{:#x}, scale-d {}/{})",
                  first.wgmma_site, i, g0, o.wgmma_dtype, first.wgmma_dtype, o.wgmma_n, first.wgmma_n, o.wgmma_desc_a,
                  first.wgmma_desc_a, o.wgmma_desc_b, first.wgmma_desc_b, o.wgmma_scale, first.wgmma_scale);
  // (trans differs only where the descriptors' meaning does: reported with them)
  }
  const std::uint32_t n = first.wgmma_n, dtype = first.wgmma_dtype;
  const std::uint32_t eb = dtype >= 4 ? 1 : 2, ks = 32 / eb; // element bytes; k step: 16 or 32
  if (eb == 1 && first.wgmma_trans)
    fail_thread(t, "warpgroup MMA (at {}) on 8-bit operands with a transposed operand: they are K-major only",
                first.wgmma_site);
  if (first.wgmma_a_in_regs && eb != 2)
    fail_thread(t, "warpgroup MMA (at {}) with A in registers on 8-bit operands: tilec takes A from registers for "
                   "16-bit operands only", first.wgmma_site);
  // The descriptors the MMA reads: A's only when A is in shared memory. (Nothing here holds
  // heap memory: a failed check leaves this fiber for good, its destructors never run.)
  const std::uint64_t read_descs[2] = {first.wgmma_desc_b, first.wgmma_desc_a};
  const std::span<const std::uint64_t> descs(read_descs, first.wgmma_a_in_regs ? 1 : 2);
  for (std::uint64_t d : descs)
    if ((d >> 49) & 7)
      fail_thread(t, "warpgroup MMA (at {}): matrix descriptor {:#x} has a base offset ({}): tilec places swizzled "
                     "operands at multiples of the pattern, where it is 0", first.wgmma_site, d, (d >> 49) & 7);
  // A swizzled operand's rows start on the pattern: the start's row bits within it are those
  // of the pattern's start, which a base offset of 0 says is aligned.
  for (std::uint64_t d : descs) {
    const std::uint32_t mode = std::uint32_t(d >> 62);
    const std::size_t s = mode == 1 ? 128 : mode == 2 ? 64 : 32, start = (d & 0x3fff) << 4;
    if (mode && ((start >> 7) & (s / 16 - 1)) != 0)
      fail_thread(t, "warpgroup MMA (at {}): descriptor {:#x} starts at byte offset {}, inside a {}-byte swizzle "
                     "pattern that does not start at a multiple of {} bytes (base offset 0)",
                  first.wgmma_site, d, start, s, 8 * s);
  }
  // The operands, read as the warpgroup's first thread through the shared-memory checks; each
  // byte must have been fenced to the async proxy by its writer.
  tilec_emu_thread* reader = &w.threads[g0];
  std::vector<std::size_t>& offsets = w.wgmma_offsets;
  offsets.clear();
  auto read = [&](std::uint64_t desc, bool mn_major, std::uint32_t row, std::uint32_t k) {
    std::size_t off = descriptor_offset(desc, mn_major, row, k, eb);
    if (off + eb > w.launch->shared_bytes)
      fail_thread(t, "warpgroup MMA (at {}): descriptor {:#x} addresses byte offset {} (row {}, k {}), outside the "
                     "kernel's {} bytes of shared memory", first.wgmma_site, desc, off, row, k, w.launch->shared_bytes);
    for (std::size_t i = off; i < off + eb; ++i)
      if (!proxy_fenced(w, w.shadow[i]))
        fail_thread(t, "warpgroup MMA (at {}) reads byte offset {}, which thread {} wrote (at {}) with no "
                       "fence.proxy.async since: the async proxy may not see it", first.wgmma_site, i,
                    w.shadow[i].writer, w.shadow[i].write_site);
    std::uint16_t bits = 0;
    tilec_emu_shared_load(reader, w.shared + off, eb, &bits, first.wgmma_site);
    offsets.push_back(off);
    switch (dtype) {
    case 3: return tilec::bf16_bits_to_f32(bits);
    case 4: return tilec::f8e4m3_bits_to_f32(std::uint8_t(bits));
    case 5: return tilec::f8e5m2_bits_to_f32(std::uint8_t(bits));
    default: return tilec::f16_bits_to_f32(bits);
    }
  };
  std::vector<float>& A = w.wgmma_a;
  std::vector<float>& B = w.wgmma_b;
  A.assign(64 * ks, 0.0f);
  B.assign(std::size_t(n) * ks, 0.0f);
  if (first.wgmma_a_in_regs) // each thread's fragments: register r, row 16 warp + g + 8 (r % 2), columns 8 (r / 2) + 2 t
    for (std::uint32_t i = g0; i < g0 + 128; ++i) {
      const tilec_emu_thread& o = w.threads[i];
      const std::uint32_t warp = (i - g0) / 32, lane = i % 32;
      for (std::uint32_t r = 0; r < 4; ++r)
        for (std::uint32_t e = 0; e < 2; ++e) {
          const std::uint16_t bits = std::uint16_t(o.wgmma_a_regs[r] >> (16 * e));
          A[(16 * warp + lane / 4 + 8 * (r % 2)) * ks + 8 * (r / 2) + 2 * (lane % 4) + e] =
              dtype == 3 ? tilec::bf16_bits_to_f32(bits) : tilec::f16_bits_to_f32(bits);
        }
    }
  else
    for (std::uint32_t r = 0; r < 64; ++r)
      for (std::uint32_t k = 0; k < ks; ++k) A[r * ks + k] = read(first.wgmma_desc_a, first.wgmma_trans & 1, r, k);
  for (std::uint32_t c = 0; c < n; ++c)
    for (std::uint32_t k = 0; k < ks; ++k) B[c * ks + k] = read(first.wgmma_desc_b, first.wgmma_trans & 2, c, k);
  // Each thread's result waits in its ring until a wait retires its group; its accumulator
  // holds the result's tags until then.
  for (std::uint32_t i = g0; i < g0 + 128; ++i) {
    tilec_emu_thread& o = w.threads[i];
    if (o.wgmma_issued - o.wgmma_retired >= kWgmmaSlots)
      fail_thread(t, "warpgroup MMA (at {}): thread {} has {} wgmma results in flight, more than the emulator "
                     "tracks (wgmma.wait_group missing?)", first.wgmma_site, i, kWgmmaSlots);
    const std::uint32_t slot = std::uint32_t(o.wgmma_issued % kWgmmaSlots);
    if (o.wgmma_results.size() <= slot) o.wgmma_results.resize(slot + 1);
    tilec_emu_thread::WgmmaResult& res = o.wgmma_results[slot];
    res.values.resize(n / 2);
    const std::uint32_t warp = (i - g0) / 32, lane = i % 32;
    for (std::uint32_t r = 0; r < n / 2; ++r) {
      const std::uint32_t row = 16 * warp + lane / 4 + 8 * ((r / 2) % 2), col = 8 * (r / 4) + 2 * (lane % 4) + r % 2;
      float acc = first.wgmma_scale ? accumulator_in(t, o, r) : 0.0f;
      for (std::uint32_t k = 0; k < ks; ++k) acc += A[row * ks + k] * B[col * ks + k]; // exact product, rounded sum
      res.values[r] = acc;
    }
    res.group = o.wgmma_open, res.acc = o.wgmma_acc, res.site = first.wgmma_site, res.retired = false;
    for (std::uint32_t r = 0; r < n / 2; ++r) o.wgmma_acc[r] = std::bit_cast<float>(tag_of(slot, r));
    ++o.wgmma_issued;
  }
  std::sort(offsets.begin(), offsets.end());
  tilec_emu_worker::PendingWgmma p{g0 / 128, first.wgmma_open, {}, first.wgmma_site, std::vector<bool>(128), UINT64_MAX};
  for (std::size_t off : offsets) {
    if (!p.ranges.empty() && off <= p.ranges.back().second) p.ranges.back().second = std::max(p.ranges.back().second, off + eb);
    else p.ranges.push_back({off, off + eb});
  }
  w.wgmmas.push_back(std::move(p));
  for (std::uint32_t i = g0; i < g0 + 128; ++i) {
    tilec_emu_thread& o = w.threads[i];
    o.wgmma_groups.push_back(o.wgmma_open);
    o.wgmma_n = 0;
    if (&o != t) o.state = State::runnable;
  }
}

// One thread's arrival at a warpgroup MMA: A from shared memory (`desc_a`) or from its
// registers (`a_regs`, non-null).
void arrive_wgmma(tilec_emu_thread* t, uint32_t dtype, uint32_t n, uint64_t desc_a, const uint32_t* a_regs,
                  uint64_t desc_b, uint32_t scale_d, uint32_t trans, float* acc, const char* site) {
  if (dtype < 2 || dtype > 5) fail_thread(t, "warpgroup MMA (at {}) with unknown operand type {}", site, dtype);
  if (n < 8 || n > 256 || n % 8 != 0) fail_thread(t, "warpgroup MMA (at {}) with n = {} (8, 16, ..., 256)", site, n);
  tilec_emu_worker& w = *t->worker;
  const std::uint32_t g0 = t->tid / 128 * 128;
  if (g0 + 128 > w.threads.size())
    fail_thread(t, "warpgroup MMA (at {}) in a block of {} threads: warpgroups are 4 whole warps", site,
                w.threads.size());
  if (!t->wgmma_fenced)
    fail_thread(t, "warpgroup MMA (at {}) with no wgmma.fence since the thread's last wgmma.wait_group (or its "
                   "start): its accumulator registers' last writes are not ordered before it", site);
  t->wgmma_n = n, t->wgmma_dtype = dtype, t->wgmma_desc_a = desc_a, t->wgmma_desc_b = desc_b;
  t->wgmma_scale = scale_d ? 1 : 0, t->wgmma_trans = trans & 3, t->wgmma_acc = acc, t->wgmma_site = site;
  t->wgmma_a_in_regs = a_regs != nullptr;
  if (a_regs) std::copy(a_regs, a_regs + 4, t->wgmma_a_regs);
  bool all = true;
  for (std::uint32_t i = g0; i < g0 + 128 && all; ++i)
    all = &w.threads[i] == t || (w.threads[i].state == State::at_shuffle && w.threads[i].wgmma_n != 0);
  if (all) {
    run_wgmma(t, g0);
    return;
  }
  t->state = State::at_shuffle;
  yield(t);
}

} // namespace

void report_tag(tilec_emu_thread* t, std::uint32_t bits, const char* what) {
  const tilec_emu_thread::WgmmaResult* res = tagged(*t, bits);
  if (!res)
    fail_thread(t, "{} of a value ({:#010x}) that is the tag of no warpgroup MMA result of this thread", what, bits);
  fail_thread(t, "{} of register {} of a warpgroup MMA's accumulator (wgmma at {}) read before the wgmma.wait_group "
                 "that retires it{}: on a GPU the MMA may still be writing it",
              what, bits & 127, res->site,
              res->retired ? " (retired since; the value was taken before, or not passed through the operand fence "
                             "after the wait)" : "");
}

} // namespace tilec::rt::emu

using namespace tilec::rt::emu;

extern "C" {


void tilec_emu_wgmma(tilec_emu_thread* t, uint32_t dtype, uint32_t n, uint64_t desc_a, uint64_t desc_b,
                     uint32_t scale_d, uint32_t trans, float* acc, const char* site) {
  arrive_wgmma(t, dtype, n, desc_a, nullptr, desc_b, scale_d, trans, acc, site);
}

void tilec_emu_wgmma_rs(tilec_emu_thread* t, uint32_t dtype, uint32_t n, const uint32_t* a, uint64_t desc_b,
                        uint32_t scale_d, uint32_t trans, float* acc, const char* site) {
  if (trans & 1) fail_thread(t, "warpgroup MMA (at {}) with A in registers and transposed: only B transposes", site);
  arrive_wgmma(t, dtype, n, 0, a, desc_b, scale_d, trans & 2, acc, site);
}

void tilec_emu_wgmma_fence(tilec_emu_thread* t) { t->wgmma_fenced = true; }

void tilec_emu_wgmma_commit(tilec_emu_thread* t) { ++t->wgmma_open; }

void tilec_emu_wgmma_wait(tilec_emu_thread* t, uint32_t groups) {
  const std::uint64_t keep_from = t->wgmma_open >= groups ? t->wgmma_open - groups : 0;
  std::erase_if(t->wgmma_groups, [&](std::uint64_t g) { return g < keep_from; });
  // Complete for this thread now, and for every thread after the next barrier.
  tilec_emu_worker& w = *t->worker;
  for (auto& p : w.wgmmas)
    if (p.warpgroup == t->tid / 128 && p.group < keep_from) {
      p.waited[t->tid % 128] = true;
      p.retired_epoch = std::min(p.retired_epoch, w.epoch);
      if (p.first_waiter == UINT32_MAX) p.first_waiter = t->tid, p.waited_clock = w.clock;
    }
  // The retired results land in their accumulators, oldest first, in the registers that still
  // hold their tags (a later wgmma on the same registers has them now).
  while (t->wgmma_retired < t->wgmma_issued) {
    const std::uint32_t slot = std::uint32_t(t->wgmma_retired % kWgmmaSlots);
    tilec_emu_thread::WgmmaResult& res = t->wgmma_results[slot];
    if (res.group >= keep_from) break;
    for (std::uint32_t r = 0; r < res.values.size(); ++r)
      if (std::bit_cast<std::uint32_t>(res.acc[r]) == tag_of(slot, r)) res.acc[r] = res.values[r];
    res.retired = true;
    ++t->wgmma_retired;
  }
  t->wgmma_fenced = false;
}

void tilec_emu_wgmma_fence_operands(tilec_emu_thread* t, float* regs, uint32_t count) {
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(regs[i]);
    if (!is_wgmma_tag(bits)) continue;
    const tilec_emu_thread::WgmmaResult* res = tagged(*t, bits);
    if (res && res->retired) regs[i] = res->values[bits & 127];
  }
}

void tilec_emu_fence_proxy_async(tilec_emu_thread* t) { ++t->proxy_fences; }

} // extern "C"
