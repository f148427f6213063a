// Global memory: generated code's loads, stores and atomics, each checked against the launch's
// buffers (bounds, alignment) and counted (bytes, 32-byte sectors, warp-wide requests).
#include "runtime/emulator/internal.h"

#include "abi/atomic_ops.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

namespace tilec::rt::emu {

namespace {

std::string offset_str(const Track& b, std::uintptr_t a) {
  std::uintptr_t off = a - b.lo;
  return fmt::format("byte offset {} (element {})", off, off / b.elem_bytes);
}

// The message for an access [a, a + n) that is not inside any one buffer.
std::string out_of_bounds(const tilec_emu_thread* t, const char* what, std::uintptr_t a, std::uint32_t n) {
  const Launch& l = *t->worker->launch;
  std::string head = fmt::format("{}: {} of {} bytes", where(t), what, n);
  for (const Track& b : l.tracks)
    if (a >= b.lo && a < b.hi)
      return fmt::format("{} at {} of buffer '{}' runs past its end ({} bytes, {} elements)", head,
                         offset_str(b, a), b.name, b.hi - b.lo, (b.hi - b.lo) / b.elem_bytes);
  const Track* nearest = nullptr;
  std::uintptr_t best = UINTPTR_MAX;
  for (const Track& b : l.tracks) {
    std::uintptr_t d = a < b.lo ? b.lo - a : a - b.hi + 1;
    if (d < best) best = d, nearest = &b;
  }
  if (!nearest) return fmt::format("{} at address {:#x}: the kernel was given no buffers", head, a);
  const Track& b = *nearest;
  std::intptr_t off = static_cast<std::intptr_t>(a - b.lo);
  std::intptr_t elems = off >= 0 ? off / std::intptr_t(b.elem_bytes)
                                 : -((-off + std::intptr_t(b.elem_bytes) - 1) / std::intptr_t(b.elem_bytes));
  return fmt::format("{} at address {:#x} is out of bounds of every buffer; the nearest is '{}' ({} bytes, {} "
                     "elements), at byte offset {} (element {}) from its start",
                     head, a, b.name, b.hi - b.lo, (b.hi - b.lo) / b.elem_bytes, off, elems);
}

} // namespace

int check_access(tilec_emu_thread* t, const void* addr, std::uint32_t n, bool load, bool store, const char* what,
                 std::uintptr_t site) {
  Launch& l = *t->worker->launch;
  auto a = reinterpret_cast<std::uintptr_t>(addr);
  int i = t->last_track;
  if (i >= int(l.tracks.size()) || a < l.tracks[i].lo || a + n > l.tracks[i].hi || a + n < a) {
    auto it = std::upper_bound(l.tracks.begin(), l.tracks.end(), a,
                               [](std::uintptr_t v, const Track& b) { return v < b.lo; });
    i = -1;
    // Buffers may be empty or overlap (one passed twice, a view of another): look at every
    // one that starts at or before the address.
    while (it != l.tracks.begin()) {
      --it;
      if (a >= it->lo && a + n <= it->hi && a + n >= a) {
        i = int(it - l.tracks.begin());
        break;
      }
    }
    if (i < 0) {
      std::string message = out_of_bounds(t, what, a, n);
      abort_thread(t, std::move(message));
    }
    t->last_track = i;
  }
  const Track& b = l.tracks[i];
  if (n == 0 || (n & (n - 1)) != 0 || n > 16 || a % n != 0) {
    std::string message = fmt::format("{}: misaligned {} of {} bytes at {} of buffer '{}' (address {:#x})", where(t),
                                      what, n, offset_str(b, a), b.name, a);
    abort_thread(t, std::move(message));
  }
  if (load) t->worker->counters.loaded[i] += n;
  if (store) t->worker->counters.stored[i] += n;
  if (site) {
    RequestKey key{site, t->tid / 32, t->site_runs[site]++};
    Request& r = t->worker->requests[key];
    r.track = i;
    r.ranges.push_back({a - b.lo, n});
  }
  std::uintptr_t first = (a - b.lo) >> 5, last = (a + n - 1 - b.lo) >> 5;
  for (std::uintptr_t s = first; s <= last; ++s) {
    std::atomic<std::uint64_t>& word = b.sectors[s >> 6];
    std::uint64_t bit = std::uint64_t(1) << (s & 63);
    if (!(word.load(std::memory_order_relaxed) & bit)) word.fetch_or(bit, std::memory_order_relaxed);
  }
  return i;
}

void count_requests(Worker& w) {
  for (auto& [key, r] : w.requests) {
    std::sort(r.ranges.begin(), r.ranges.end());
    std::int64_t bytes = 0, sectors = 0;
    std::uintptr_t covered = 0, last_sector = UINTPTR_MAX;
    for (auto [off, n] : r.ranges) {
      std::uintptr_t lo = std::max(off, covered), hi = off + n;
      if (hi > lo) bytes += std::int64_t(hi - lo), covered = hi;
      for (std::uintptr_t s = off >> 5; s <= (off + n - 1) >> 5; ++s)
        if (last_sector == UINTPTR_MAX || s > last_sector) ++sectors, last_sector = s;
    }
    Counters& c = w.counters;
    c.requests[r.track] += 1;
    c.sectors[r.track] += sectors;
    c.request_bytes[r.track] += bytes;
    c.ideal_sectors[r.track] += (bytes + 31) / 32;
  }
  w.requests.clear();
  for (tilec_emu_thread& t : w.threads) t.site_runs.clear();
}

} // namespace tilec::rt::emu

using namespace tilec::rt::emu;

extern "C" {

void tilec_emu_load(tilec_emu_thread* t, const void* addr, uint32_t bytes, void* dst) {
  check_access(t, addr, bytes, true, false, "load",
               reinterpret_cast<std::uintptr_t>(__builtin_return_address(0)));
  std::memcpy(dst, addr, bytes);
}

void tilec_emu_store(tilec_emu_thread* t, void* addr, uint32_t bytes, const void* src) {
  check_untagged(t, src, bytes, "global store");
  check_access(t, addr, bytes, false, true, "store",
               reinterpret_cast<std::uintptr_t>(__builtin_return_address(0)));
  std::memcpy(addr, src, bytes);
}

} // extern "C"

namespace {

// Blocks run concurrently on several OS threads, so atomics are real atomics: a compare-
// exchange loop around abi/atomic_ops.h's definition of what each op stores.
template <class T> T atomic_rmw(tilec_emu_thread* t, T* addr, int32_t op, T value, T cmp) {
  static const char* const names[] = {"atomic add",  "atomic max", "atomic min", "atomic and", "atomic or",
                                      "atomic xor",  "atomic xchg", "atomic cas", "atomic max", "atomic min"};
  if constexpr (std::is_same_v<T, float>) check_untagged(t, &value, 4, "atomic");
  check_access(t, addr, 4, true, true, op >= 0 && op < 10 ? names[op] : "atomic");
  auto* word = reinterpret_cast<std::uint32_t*>(addr);
  std::uint32_t old = __atomic_load_n(word, __ATOMIC_RELAXED);
  for (;;) {
    T next = tilec::atomic_result(tilec::AtomicOp(op), std::bit_cast<T>(old), value, cmp);
    if (std::bit_cast<std::uint32_t>(next) == old) return std::bit_cast<T>(old); // nothing to store
    if (__atomic_compare_exchange_n(word, &old, std::bit_cast<std::uint32_t>(next), true, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
      return std::bit_cast<T>(old);
  }
}

} // namespace

extern "C" {

float tilec_emu_atomic_f32(tilec_emu_thread* t, float* addr, int32_t op, float value, float cmp) {
  return atomic_rmw<float>(t, addr, op, value, cmp);
}
int32_t tilec_emu_atomic_i32(tilec_emu_thread* t, int32_t* addr, int32_t op, int32_t value, int32_t cmp) {
  return atomic_rmw<int32_t>(t, addr, op, value, cmp);
}
float tilec_emu_atomic_add_f32(tilec_emu_thread* t, float* addr, float value) {
  return atomic_rmw<float>(t, addr, 0, value, 0.0f);
}
int32_t tilec_emu_atomic_add_i32(tilec_emu_thread* t, int32_t* addr, int32_t value) {
  return atomic_rmw<int32_t>(t, addr, 0, value, 0);
}

} // extern "C"
