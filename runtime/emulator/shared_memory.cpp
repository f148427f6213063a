// Shared memory through the race shadow: every load and store is bounds- and alignment-checked
// and recorded per byte (writer, readers, barrier interval), so a missing barrier is a named race.
#include "runtime/emulator/internal.h"

#include <algorithm>
#include <cstring>

namespace tilec::rt::emu {

namespace {

// Whether `bytes` at `a` and `b` hold the same values: equal bits or, for float elements
// (`float_type` 1 f32, 2 f16, 3 bf16, 4 f8e4m3, 5 f8e5m2), two zeros or two NaNs.
bool same_value(const std::byte* a, const std::byte* b, std::uint32_t bytes, std::uint32_t float_type) {
  if (std::memcmp(a, b, bytes) == 0) return true;
  if (float_type < 1 || float_type > 5) return false;
  const std::uint32_t size = float_type == 1 ? 4 : float_type <= 3 ? 2 : 1;
  const std::uint32_t sign = float_type == 1 ? 0x80000000u : float_type <= 3 ? 0x8000u : 0x80u;
  const std::uint32_t exp = float_type == 1   ? 0x7f800000u
                            : float_type == 2 ? 0x7c00u
                            : float_type == 3 ? 0x7f80u
                            : float_type == 4 ? 0x78u
                                              : 0x7cu;
  auto is_nan = [&](std::uint32_t x) {
    if (float_type == 4) return (x & 0x7fu) == 0x7fu; // e4m3: no infinities, only S.1111.111 is NaN
    return (x & exp) == exp && (x & ~(exp | sign)) != 0;
  };
  for (std::uint32_t i = 0; i < bytes; i += size) {
    std::uint32_t x = 0, y = 0;
    std::memcpy(&x, a + i, size);
    std::memcpy(&y, b + i, size);
    bool zeros = (x | sign) == sign && (y | sign) == sign;
    if (x != y && !zeros && !(is_nan(x) && is_nan(y))) return false;
  }
  return true;
}

} // namespace

std::size_t check_shared(tilec_emu_thread* t, const void* addr, std::uint32_t n, const char* what, const char* site) {
  const Worker& w = *t->worker;
  auto a = reinterpret_cast<std::uintptr_t>(addr), base = reinterpret_cast<std::uintptr_t>(w.shared);
  std::size_t size = w.launch->shared_bytes;
  if (a < base || a - base > size || n > size - (a - base)) {
    std::string message = fmt::format("{}: shared-memory {} of {} bytes at byte offset {} is outside the kernel's {} "
                                      "bytes of shared memory (at {})",
                                      where(t), what, n, std::intptr_t(a - base), size, site);
    abort_thread(t, std::move(message));
  }
  if (n == 0 || (n & (n - 1)) != 0 || n > 16 || (a - base) % n != 0) {
    std::string message = fmt::format("{}: misaligned shared-memory {} of {} bytes at byte offset {} (at {})",
                                      where(t), what, n, a - base, site);
    abort_thread(t, std::move(message));
  }
  return a - base;
}

void check_shared_write(tilec_emu_thread* t, std::size_t off, std::uint32_t bytes, const void* src, const char* site,
                        std::uint32_t float_type, std::uint64_t since, bool write) {
  tilec_emu_worker& w = *t->worker;
  // Writing the value already there changes nothing another thread sees: replicated owners
  // of one element all write its value (floats: the zeros alike, the NaNs alike).
  bool same = same_value(w.shared + off, static_cast<const std::byte*>(src), bytes, float_type);
  const char* window = since == w.epoch ? "no barrier between" : "while an asynchronous copy to it was in flight";
  std::erase_if(w.wgmmas, [&](const tilec_emu_worker::PendingWgmma& p) { return p.retired_epoch < w.epoch; });
  for (const auto& p : w.wgmmas) {
    if (t->tid / 128 == p.warpgroup && p.waited[t->tid % 128]) continue;
    // Retired for a thread that waited for an mbarrier phase its waiter's warp arrived on after.
    if (p.first_waiter != UINT32_MAX && mbar_ordered(t, 1u << (p.first_waiter / 32), p.waited_clock)) continue;
    for (auto [lo, hi] : p.ranges)
      if (off < hi && lo < off + bytes) {
        std::string message = fmt::format(
            "{}: shared-memory write of byte offset {} (at {}) while a warpgroup MMA of warpgroup {} still reads it "
            "(wgmma at {}): wait for it first (wgmma.wait_group)", where(t), std::max(off, lo), site, p.warpgroup,
            p.site);
        abort_thread(t, std::move(message));
      }
  }
  std::erase_if(w.bulk_stores, [&](const tilec_emu_worker::PendingBulkStore& b) { return b.retired_epoch < w.epoch; });
  for (const auto& b : w.bulk_stores)
    if (off < b.hi && b.lo < off + bytes && !(b.thread == t->tid && b.retired_epoch != UINT64_MAX)) {
      std::string message = fmt::format(
          "{}: shared-memory write of byte offset {} (at {}) while a TMA store of thread {} still reads it (at {}): "
          "wait for it first (cp.async.bulk.wait_group), then a barrier", where(t), std::max(off, b.lo), site,
          b.thread, b.site);
      abort_thread(t, std::move(message));
    }
  for (std::size_t i = off; i < off + bytes; ++i) {
    ShadowByte& s = w.shadow[i];
    bool written_here = s.write_epoch >= w.block_epoch;
    // A TMA copy's byte, once this thread waited for its phase, is ordered before (checked below).
    const bool tma_waited = s.mbar && tma_landed_for(t, s);
    if (!same && written_here && s.write_epoch >= since && s.writer != t->tid && !tma_waited) {
      std::string message = fmt::format(
          "{}: shared-memory race (write after write, {}): thread {} writes byte offset {} that thread {} wrote "
          "with another value (write at {}; other write at {})", where(t), window, t->tid, i, s.writer, site,
          s.write_site);
      abort_thread(t, std::move(message));
    }
    if (!(same && written_here) && s.read_epoch >= since && s.read_epoch >= w.block_epoch &&
        (s.reader != t->tid || s.several_readers) && !mbar_ordered(t, s.reader_warps, s.read_clock)) {
      std::uint32_t reader = s.reader != t->tid ? s.reader : UINT32_MAX;
      std::string readers = reader != UINT32_MAX ? fmt::format("thread {}", reader) : std::string("other threads");
      std::string message = fmt::format(
          "{}: shared-memory race (write after read, {}): thread {} writes byte offset {} that {} read (write at "
          "{}; read at {})", where(t), window, t->tid, i, readers, site, s.read_site);
      abort_thread(t, std::move(message));
    }
    if (s.mbar && write && written_here) { // a TMA copy's byte: it may still land unless this thread waited for it
      if (!tma_landed_for(t, s)) {
        std::string message = fmt::format(
            "{}: shared-memory write of byte offset {} (at {}) that a TMA copy (at {}) writes in phase {} of the "
            "mbarrier at byte offset {}, which this thread has not waited for: the copy may land after it",
            where(t), i, site, s.write_site, s.mbar_phase, s.mbar - 1);
        abort_thread(t, std::move(message));
      }
    }
    if (write) s.write_epoch = w.epoch, s.writer = t->tid, s.write_site = site, s.writer_fences = t->proxy_fences, s.mbar = 0;
  }
  if (write) std::memcpy(w.shared + off, src, bytes);
}

bool tma_landed_for(const tilec_emu_thread* t, const ShadowByte& s) {
  auto it = t->mbar_waited.find(s.mbar - 1);
  if ((it == t->mbar_waited.end() ? 0 : it->second) > s.mbar_phase) return true;
  // Or the phase completed, and t waited for a phase some warp released after that (a
  // producer refilling a stage its consumers, who waited for the copy, emptied).
  const auto m = t->worker->mbars.find(s.mbar - 1);
  if (m == t->worker->mbars.end() || m->second.phase <= s.mbar_phase) return false;
  for (std::uint32_t w = 0; w < 32; ++w)
    if (t->acquired[w] > m->second.completed_clock) return true;
  return false;
}

bool proxy_fenced(const tilec_emu_worker& w, const ShadowByte& sb) {
  if (sb.write_epoch < w.block_epoch || sb.mbar) return true;
  const tilec_emu_thread& wr = w.threads[sb.writer];
  return (sb.write_epoch == w.epoch ? wr.proxy_fences : wr.fences_at_barrier) != sb.writer_fences;
}

} // namespace tilec::rt::emu

using namespace tilec::rt::emu;

extern "C" {

void* tilec_emu_shared_base(tilec_emu_thread* t) { return t->worker->shared; }

void tilec_emu_shared_load(tilec_emu_thread* t, const void* addr, uint32_t bytes, void* dst, const char* site) {
  std::size_t off = check_shared(t, addr, bytes, "load", site);
  tilec_emu_worker& w = *t->worker;
  for (const auto& c : t->pending_copies) { // on a GPU it reads the old bytes or the new, by chance
    std::size_t coff = std::size_t(static_cast<std::byte*>(c.dst) - w.shared);
    if (coff < off + bytes && off < coff + 16) {
      fail_thread(t, "shared-memory load of {} bytes at byte offset {} (at {}) reads the destination of "
                     "an asynchronous copy this thread issued and has not waited for (cp.async at {}; "
                     "cp.async.wait_group missing)",
                  bytes, off, site, c.site);
    }
  }
  for (std::size_t i = off; i < off + bytes; ++i) {
    ShadowByte& s = w.shadow[i];
    if (s.write_epoch < w.block_epoch) {
      std::string message = fmt::format(
          "{}: shared-memory load of {} bytes at byte offset {} reads byte {}, which no thread of the block has "
          "written (at {})", where(t), bytes, off, i, site);
      abort_thread(t, std::move(message));
    }
    if (s.mbar) { // a TMA copy's: visible once its phase is waited for
      auto it = t->mbar_waited.find(s.mbar - 1);
      if ((it == t->mbar_waited.end() ? 0 : it->second) <= s.mbar_phase) {
        std::string message = fmt::format(
            "{}: shared-memory load of byte offset {} (at {}) reads what a TMA copy (at {}) writes in phase {} of the "
            "mbarrier at byte offset {}, which this thread has not waited for (mbarrier.try_wait.parity missing)",
            where(t), i, site, s.write_site, s.mbar_phase, s.mbar - 1);
        abort_thread(t, std::move(message));
      }
    } else if (s.write_epoch == w.epoch && s.writer != t->tid) {
      std::string message = fmt::format(
          "{}: shared-memory race (read after write, no barrier between): thread {} reads byte offset {} that "
          "thread {} wrote (read at {}; write at {})", where(t), t->tid, i, s.writer, site, s.write_site);
      abort_thread(t, std::move(message));
    }
    if (s.read_epoch == w.epoch && s.reader != t->tid) {
      s.several_readers = true;
    } else if (s.read_epoch != w.epoch) {
      s.read_epoch = w.epoch, s.reader = t->tid, s.several_readers = false, s.read_site = site, s.reader_warps = 0;
    }
    s.reader_warps |= 1u << (t->tid / 32);
    s.read_clock = w.clock;
  }
  std::memcpy(dst, w.shared + off, bytes);
}

void tilec_emu_shared_store(tilec_emu_thread* t, void* addr, uint32_t bytes, const void* src, const char* site,
                            uint32_t float_type) {
  std::size_t off = check_shared(t, addr, bytes, "store", site);
  check_untagged(t, src, bytes, "shared-memory store");
  check_shared_write(t, off, bytes, src, site, float_type, t->worker->epoch, true);
}

} // extern "C"
