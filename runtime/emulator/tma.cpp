// mbarriers and the Tensor Memory Accelerator (Hopper): TMA copies that complete on an mbarrier's
// phase, TMA stores and their bulk groups, each box checked against its tensor map.
#include "runtime/emulator/internal.h"

#include <algorithm>
#include <cstring>

namespace tilec::rt::emu {

bool release_mbarriers(Worker& w) {
  bool released = false;
  for (tilec_emu_thread& t : w.threads)
    if (t.state == State::at_mbarrier && w.mbars[t.mbar_at].phase >= t.mbar_need) {
      t.state = State::runnable;
      released = true;
    }
  return released;
}

} // namespace tilec::rt::emu

using namespace tilec::rt::emu;

namespace {

// The mbarrier at `bar`: its byte offset, checked to be initialized.
std::size_t mbarrier_at(tilec_emu_thread* t, void* bar, const char* what, const char* site) {
  const std::size_t off = check_shared(t, bar, 8, what, site);
  if (!t->worker->mbars.count(off))
    fail_thread(t, "{} (at {}) on the mbarrier at byte offset {}, which no thread has initialized "
                   "(mbarrier.init)", what, site, off);
  return off;
}

// Completes the mbarrier's phase when its arrivals and bytes are all in; a warp whose 32
// threads all arrived in it releases their accesses before their first arrival.
void mbarrier_progress(tilec_emu_worker::Mbarrier& m, std::uint64_t clock) {
  if (m.pending == 0 && m.tx == 0) {
    ++m.phase;
    m.pending = m.count;
    m.completed_clock = clock;
    for (int w = 0; w < 32; ++w) {
      m.released[w] = m.lanes[w] == ~0u ? m.first_arrival[w] : 0;
      m.lanes[w] = 0;
    }
  }
}

// One arrival of thread t on m, at the next tick of the sync clock.
void arrive(tilec_emu_thread* t, tilec_emu_worker::Mbarrier& m, const char* what, const char* site) {
  if (m.pending == 0) // cannot happen: a phase whose arrivals are in completes at once
    fail_thread(t, "{} (at {}): more arrivals than the count", what, site);
  const std::uint64_t now = ++t->worker->clock;
  const std::uint32_t w = t->tid / 32;
  if (!m.lanes[w]) m.first_arrival[w] = now;
  m.lanes[w] |= 1u << (t->tid % 32);
  --m.pending;
}

} // namespace

extern "C" {

void tilec_emu_mbarrier_init(tilec_emu_thread* t, void* bar, uint32_t count) {
  const std::size_t off = check_shared(t, bar, 8, "mbarrier init", "mbarrier.init");
  tilec_emu_worker& w = *t->worker;
  if (count == 0) fail_thread(t, "mbarrier.init of the mbarrier at byte offset {} with a count of 0", off);
  if (auto it = w.mbars.find(off); it != w.mbars.end() && (it->second.pending != it->second.count || it->second.tx))
    fail_thread(t, "mbarrier.init of the mbarrier at byte offset {} while its phase {} is under way",
                off, it->second.phase);
  w.mbars[off] = {count, count, 0, 0};
}

void tilec_emu_mbarrier_arrive_expect_tx(tilec_emu_thread* t, void* bar, uint32_t bytes, const char* site) {
  const std::size_t off = mbarrier_at(t, bar, "mbarrier.arrive.expect_tx", site);
  tilec_emu_worker::Mbarrier& m = t->worker->mbars[off];
  m.tx += bytes;
  arrive(t, m, "mbarrier.arrive.expect_tx", site);
  mbarrier_progress(m, t->worker->clock);
}

void tilec_emu_mbarrier_arrive(tilec_emu_thread* t, void* bar, const char* site) {
  const std::size_t off = mbarrier_at(t, bar, "mbarrier.arrive", site);
  tilec_emu_worker::Mbarrier& m = t->worker->mbars[off];
  arrive(t, m, "mbarrier.arrive", site);
  mbarrier_progress(m, t->worker->clock);
}

void tilec_emu_mbarrier_wait(tilec_emu_thread* t, void* bar, uint32_t parity, const char* site) {
  const std::size_t off = mbarrier_at(t, bar, "mbarrier.try_wait.parity", site);
  tilec_emu_worker& w = *t->worker;
  std::uint64_t& next = t->mbar_waited[off]; // the phase this thread waits for next
  if ((next & 1) != (parity & 1))
    fail_thread(t, "mbarrier phase error (at {}): the thread waits for parity {} of the mbarrier at byte "
                   "offset {}, but the next phase it has not waited for is phase {} (parity {})",
                site, parity, off, next, next & 1);
  if (w.mbars[off].phase <= next) {
    t->mbar_at = off;
    t->mbar_need = next + 1;
    t->state = State::at_mbarrier;
    yield(t);
  }
  if (w.mbars[off].phase > next + 1)
    fail_thread(t, "mbarrier phase error (at {}): phase {} of the mbarrier at byte offset {} completed "
                   "before the thread waited for phase {}; on a GPU its parity wait would see the phase "
                   "after and never return", site, next + 1, off, next);
  ++next;
  for (int i = 0; i < 32; ++i) t->acquired[i] = std::max(t->acquired[i], w.mbars[off].released[i]);
}

} // extern "C"

namespace {

// The box of a TMA copy or store (`what`), checked against its tensor map and the kernel's
// shared memory: rows of `inner` bytes (every dim but the innermost walks them), each in
// 16-byte chunks at a swizzled shared offset. `each(row_inside, row_addr, row)` is called per
// row with whether its outer coordinates lie inside the tensor and the global address of
// its inner coordinate 0.
struct TmaBox {
  const tilec_emu_tensor_map* map;
  std::uint32_t rank;
  std::int64_t coords[5];
  std::uint64_t eb, inner, swizzle, rows;
  std::size_t smem;

  TmaBox(tilec_emu_thread* t, const void* smem_ptr, const tilec_emu_tensor_map* m, std::uint32_t r,
         const std::int32_t (&c)[5], const char* what, const char* site)
      : map(m), rank(r), coords{c[0], c[1], c[2], c[3], c[4]}, eb(m->strides[0]), inner(m->box[0] * m->strides[0]),
        swizzle(m->swizzle), rows(1) {
    if (rank != map->rank || rank < 1 || rank > 5)
      fail_thread(t, "{} (at {}) of rank {} with a tensor map of rank {}", what, site, rank, map->rank);
    if (inner % 16 != 0 || (swizzle && inner != swizzle))
      fail_thread(t, "{} (at {}): a box row of {} bytes with a {}-byte swizzle (tilec's boxes are rows of 16-byte "
                     "chunks, one swizzle pattern wide when swizzled)", what, site, inner, swizzle);
    smem = check_shared(t, smem_ptr, 16, what, site);
    if (smem % 128 != 0) fail_thread(t, "{} (at {}) at byte offset {}: its shared memory is 128-byte aligned", what, site, smem);
    for (std::uint32_t d = 1; d < rank; ++d) rows *= map->box[d];
    if (smem + rows * inner > t->worker->launch->shared_bytes)
      fail_thread(t, "{} (at {}) of {} bytes at byte offset {} runs past the kernel's {} bytes of shared memory", what,
                  site, rows * inner, smem, t->worker->launch->shared_bytes);
  }
  std::uint64_t bytes() const { return rows * inner; }
  // The shared offset of chunk `cb` (a byte offset, a multiple of 16) of row `r`.
  std::size_t chunk(std::uint64_t r, std::uint64_t cb) const {
    std::size_t off = smem + r * inner + cb;
    return swizzle ? off ^ (((off >> 7) & (swizzle / 16 - 1)) << 4) : off;
  }
  // Whether the inner coordinate of element `e` of a row lies inside the tensor.
  bool inside(std::uint64_t e) const {
    const std::int64_t x = coords[0] + std::int64_t(e);
    return x >= 0 && std::uint64_t(x) < map->sizes[0];
  }
  template <class F> void each_row(F&& each) const {
    for (std::uint64_t r = 0; r < rows; ++r) {
      bool row_inside = true;
      std::uint64_t rest = r, row_addr = map->base + std::uint64_t(coords[0]) * eb;
      for (std::uint32_t d = 1; d < rank; ++d) {
        const std::int64_t coord = coords[d] + std::int64_t(rest % map->box[d]);
        rest /= map->box[d];
        row_inside = row_inside && coord >= 0 && std::uint64_t(coord) < map->sizes[d];
        row_addr += std::uint64_t(coord) * map->strides[d];
      }
      each(row_inside, row_addr, r);
    }
  }
};

} // namespace

extern "C" {

void tilec_emu_tma_load(tilec_emu_thread* t, void* dst, const tilec_emu_tensor_map* map, uint32_t rank, int32_t c0,
                        int32_t c1, int32_t c2, int32_t c3, int32_t c4, void* bar, const char* site) {
  tilec_emu_worker& w = *t->worker;
  const std::size_t boff = mbarrier_at(t, bar, "cp.async.bulk.tensor", site);
  const TmaBox box(t, dst, map, rank, {c0, c1, c2, c3, c4}, "TMA copy", site);
  tilec_emu_worker::Mbarrier& m = w.mbars[boff];
  const std::uint64_t phase = m.phase, eb = box.eb;
  std::uint8_t chunk[16];
  box.each_row([&](bool row_inside, std::uint64_t row_addr, std::uint64_t r) {
    for (std::uint64_t cb = 0; cb < box.inner; cb += 16) {
      std::memset(chunk, 0, 16);
      for (std::uint64_t e = cb / eb; e < (cb + 16) / eb;) { // the in-bounds elements, in aligned pieces
        if (!row_inside || !box.inside(e)) {
          ++e;
          continue;
        }
        const std::uintptr_t a = row_addr + e * eb;
        std::uint64_t n = eb;
        while (n < 16 && a % (2 * n) == 0 && (e * eb) % (2 * n) == 0 && e * eb + 2 * n <= cb + 16 &&
               box.inside(e + 2 * n / eb - 1))
          n *= 2;
        check_access(t, reinterpret_cast<const void*>(a), std::uint32_t(n), true, false, "TMA copy");
        std::memcpy(chunk + (e * eb - cb), reinterpret_cast<const void*>(a), n);
        e += n / eb;
      }
      const std::size_t off = box.chunk(r, cb);
      // An ordinary write of these bytes must have been fenced to the async proxy the copy
      // writes through, or the two may land in either order.
      for (std::size_t i = off; i < off + 16; ++i)
        if (!proxy_fenced(w, w.shadow[i]))
          fail_thread(t, "TMA copy (at {}) overwrites byte offset {}, which thread {} wrote (at {}) with no "
                         "fence.proxy.async since: the two writes may land in either order", site, i,
                      w.shadow[i].writer, w.shadow[i].write_site);
      check_shared_write(t, off, 16, chunk, site, 0, w.epoch, true);
      for (std::size_t i = off; i < off + 16; ++i) w.shadow[i].mbar = std::uint32_t(boff + 1), w.shadow[i].mbar_phase = phase;
    }
  });
  m.tx -= std::int64_t(box.bytes());
  mbarrier_progress(m, t->worker->clock);
}

void tilec_emu_tma_store(tilec_emu_thread* t, const void* src, const tilec_emu_tensor_map* map, uint32_t rank,
                         int32_t c0, int32_t c1, int32_t c2, int32_t c3, int32_t c4, const char* site) {
  tilec_emu_worker& w = *t->worker;
  const TmaBox box(t, src, map, rank, {c0, c1, c2, c3, c4}, "TMA store", site);
  const std::uint64_t eb = box.eb;
  std::uint8_t chunk[16];
  box.each_row([&](bool row_inside, std::uint64_t row_addr, std::uint64_t r) {
    for (std::uint64_t cb = 0; cb < box.inner; cb += 16) {
      const std::size_t off = box.chunk(r, cb);
      // The copy engine reads through the async proxy: each byte's writer fenced it first.
      for (std::size_t i = off; i < off + 16; ++i)
        if (!proxy_fenced(w, w.shadow[i]))
          fail_thread(t, "TMA store (at {}) reads byte offset {}, which thread {} wrote (at {}) with no "
                         "fence.proxy.async since: the copy engine may not see it", site, i, w.shadow[i].writer,
                      w.shadow[i].write_site);
      tilec_emu_shared_load(t, w.shared + off, 16, chunk, site);
      for (std::uint64_t e = cb / eb; e < (cb + 16) / eb; ++e) {
        if (!row_inside || !box.inside(e)) continue; // clipped, as the hardware does
        void* a = reinterpret_cast<void*>(row_addr + e * eb);
        check_access(t, a, std::uint32_t(eb), false, true, "TMA store");
        std::memcpy(a, chunk + (e * eb - cb), eb);
      }
    }
  });
  w.bulk_stores.push_back({t->tid, t->bulk_open, box.smem, box.smem + box.bytes(), site, UINT64_MAX});
  t->bulk_site = site;
}

void tilec_emu_bulk_commit(tilec_emu_thread* t) { ++t->bulk_open; }

void tilec_emu_bulk_wait(tilec_emu_thread* t, uint32_t groups) {
  const std::uint64_t keep_from = t->bulk_open >= groups ? t->bulk_open - groups : 0;
  for (auto& b : t->worker->bulk_stores)
    if (b.thread == t->tid && b.group < keep_from) b.retired_epoch = std::min(b.retired_epoch, t->worker->epoch);
}

} // extern "C"
