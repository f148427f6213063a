#include "runtime/emulator/emulator.h"
#include "runtime/tensor_map.h"

#include "abi/atomic_ops.h"
#include "abi/device_print.h"
#include "abi/emu_abi.h"
#include "abi/float16.h"
#include "abi/float8.h"
#include "runtime/emulator/fiber.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fmt/format.h>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

namespace tilec::rt {

namespace {

using KernelEntry = void (*)(tilec_emu_thread*, void* const*);

// One buffer argument of a launch, with its counters.
struct Track {
  std::uintptr_t lo = 0, hi = 0; // [lo, hi)
  std::string name;
  std::size_t elem_bytes = 1;
  std::unique_ptr<std::atomic<std::uint64_t>[]> sectors; // one bit per 32-byte sector
  std::size_t sector_words = 0;
};

struct Launch;

// What the race check knows of one byte of shared memory: who wrote it last and who read it
// since, with the epoch (barrier interval) of each; epochs count up across the blocks a
// worker runs, so a new block needs no clearing.
struct ShadowByte {
  std::uint64_t write_epoch = 0, read_epoch = 0;
  std::uint32_t writer = 0, reader = 0;
  std::uint32_t writer_fences = 0; // the writer's fence.proxy.async count when it wrote
  bool several_readers = false;
  // Written by a TMA copy: the mbarrier its phase completes on (byte offset + 1; 0: not a TMA
  // copy's) and that phase, which a reader must have waited for.
  std::uint32_t mbar = 0;
  std::uint64_t mbar_phase = 0;
  const char* write_site = "";
  const char* read_site = "";
};

enum class State : std::uint8_t { runnable, at_barrier, at_shuffle, at_mbarrier, done, failed };

} // namespace
} // namespace tilec::rt

// A GPU thread: the context every generated call receives.
struct tilec_emu_thread {
  tilec::rt::emu::FiberContext fiber;
  struct tilec_emu_worker* worker = nullptr;
  std::uint32_t tid = 0;
  std::uint64_t print_ops = 0; // device_print ops this thread has run in its block
  tilec::rt::State state = tilec::rt::State::runnable;
  std::uint32_t barrier_id = 0; // the barrier a waiting thread is blocked at (tilec_emu_barrier)
  std::uint32_t shfl_value = 0, shfl_src = 0, shfl_result = 0;
  // A lane waiting at a warp MMA (state at_shuffle with mma_dtype != 0): its fragments.
  // At an ldmatrix (ldm_count != 0): the row it read and where its registers go.
  std::uint32_t ldm_count = 0, ldm_trans = 0;
  std::uint16_t ldm_row[8] = {};
  std::uint32_t* ldm_dst = nullptr;
  std::uint32_t mma_dtype = 0;
  // Asynchronous copies issued and not yet landed (tilec_emu_cp_async), with their group:
  // groups count up from 0; open_group is the one new copies join.
  struct PendingCopy {
    std::uint64_t group;
    std::uint64_t epoch; // the barrier interval it was issued in: it may land any time from then
    void* dst;
    std::uint8_t data[16];
    const char* site;
  };
  std::vector<PendingCopy> pending_copies;
  std::uint64_t open_group = 0;
  const std::uint32_t* mma_a = nullptr;
  const std::uint32_t* mma_b = nullptr;
  const float* mma_c = nullptr;
  float* mma_d = nullptr;
  int last_track = 0; // the buffer this thread touched last: most accesses hit it again
  // Warpgroup MMA: while waiting at one (wgmma_n != 0), its operands; the group each wgmma
  // issued and not yet retired belongs to; whether a wgmma.fence ran since the last wait; how
  // many fence.proxy.async it ran.
  std::uint32_t wgmma_n = 0, wgmma_dtype = 0, wgmma_scale = 0, wgmma_trans = 0;
  std::uint64_t wgmma_desc_a = 0, wgmma_desc_b = 0;
  float* wgmma_acc = nullptr;
  const char* wgmma_site = "";
  std::vector<std::uint64_t> wgmma_groups;
  std::uint64_t wgmma_open = 0;
  bool wgmma_fenced = false;
  std::uint32_t proxy_fences = 0;
  std::uint32_t fences_at_barrier = 0; // proxy_fences when the block's last barrier released it
  // Per mbarrier (byte offset): the phases this thread has waited for, so its next is that
  // one; while blocked in tilec_emu_mbarrier_wait (at_mbarrier), the mbarrier and the count
  // of completed phases it waits for.
  std::unordered_map<std::size_t, std::uint64_t> mbar_waited;
  // TMA stores (tilec_emu_tma_store): the bulk group new ones join, and the site of the last.
  std::uint64_t bulk_open = 0;
  const char* bulk_site = "";
  std::size_t mbar_at = 0;
  std::uint64_t mbar_need = 0;
  // How often this thread has run each global access site (the call's return address) in
  // this block: the n-th run of a site by each lane of a warp is one warp-wide request.
  std::unordered_map<std::uintptr_t, std::uint32_t> site_runs;
};

namespace tilec::rt {
namespace {

// Counters of one worker, merged after the launch.
struct Counters {
  std::vector<std::int64_t> loaded, stored;
  // Per buffer, over warp-wide requests: their count, the 32-byte sectors they touch, the
  // distinct bytes they move, and the fewest sectors that many bytes could take.
  std::vector<std::int64_t> requests, sectors, request_bytes, ideal_sectors;
};

// One warp-wide global access: the n-th run of one site by the lanes of one warp.
struct RequestKey {
  std::uintptr_t site = 0;
  std::uint32_t warp = 0, run = 0;
  bool operator==(const RequestKey&) const = default;
};
struct RequestKeyHash {
  std::size_t operator()(const RequestKey& k) const {
    return std::hash<std::uintptr_t>()(k.site) ^ (std::size_t(k.warp) << 40) ^ (std::size_t(k.run) * 0x9e3779b97f4a7c15ull);
  }
};
struct Request {
  int track = 0;
  std::vector<std::pair<std::uintptr_t, std::uint32_t>> ranges; // (offset in the buffer, bytes), per lane
};

// Everything one launch shares between its workers.
struct Launch {
  const Manifest* manifest = nullptr;
  KernelEntry entry = nullptr;
  void* const* args = nullptr;
  Dim3 grid;
  std::uint32_t threads = 0;
  std::size_t shared_bytes = 0;
  EmuScheduleChoice schedule;
  std::vector<Track> tracks;          // sorted by lo
  std::vector<int> track_of_param;    // index into tracks per parameter, -1 for scalars
  std::atomic<std::uint64_t> next_block{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::string error;
  // device_print's lines, keyed (block, the thread's print op count, element) and written in
  // that order when the launch ends: the order the interpreter prints in, whatever the
  // schedule.
  struct PrintLine {
    std::uint64_t block, op;
    std::int64_t element;
    std::string text;
    bool operator<(const PrintLine& o) const {
      return std::tie(block, op, element) < std::tie(o.block, o.op, o.element);
    }
  };
  std::mutex print_mutex;
  std::vector<PrintLine> prints;

  void fail(std::string message) {
    std::lock_guard lock(error_mutex);
    if (error.empty()) error = std::move(message);
    failed.store(true, std::memory_order_relaxed);
  }
};

} // namespace
} // namespace tilec::rt

// An OS thread running blocks: its fibers, the scheduler's context, the block's shared memory.
struct tilec_emu_worker {
  tilec::rt::Launch* launch = nullptr;
  tilec::rt::emu::FiberContext scheduler;
  std::vector<tilec_emu_thread> threads;
  tilec::rt::emu::PooledArena stacks;
  std::unique_ptr<std::byte[]> shared_storage;
  std::byte* shared = nullptr;
  std::vector<tilec::rt::ShadowByte> shadow; // one per byte of shared memory
  std::uint64_t epoch = 0;                   // the current barrier interval
  std::uint64_t block_epoch = 0;             // the first epoch of the running block
  std::uint64_t blocks_run = 0;              // for the random schedule's seed
  std::uint32_t block[3] = {0, 0, 0};
  tilec::rt::Counters counters;
  std::unordered_map<tilec::rt::RequestKey, tilec::rt::Request, tilec::rt::RequestKeyHash> requests; // this block's
  std::string error; // why the running block stopped, when it did
  // Warpgroup MMAs issued and not yet retired by a wait of their warpgroup: the shared bytes
  // they read, which no one may write until then.
  // A thread may write them once it waited for the MMA itself, or after a barrier that
  // follows some thread's wait (which completes it for the whole warpgroup).
  struct PendingWgmma {
    std::uint32_t warpgroup;
    std::uint64_t group;
    std::vector<std::pair<std::size_t, std::size_t>> ranges; // [lo, hi) byte offsets
    const char* site;
    std::vector<bool> waited;                  // per thread of the warpgroup
    std::uint64_t retired_epoch = UINT64_MAX;  // the barrier interval of its first wait
  };
  std::vector<PendingWgmma> wgmmas;
  // The block's mbarriers, by byte offset: arrivals per phase and still to come, transaction
  // bytes still to come (negative: copies completed ahead of their arrive.expect_tx), the
  // phases completed, and where it was initialized.
  struct Mbarrier {
    std::uint32_t count = 0, pending = 0;
    std::int64_t tx = 0;
    std::uint64_t phase = 0;
  };
  std::unordered_map<std::size_t, Mbarrier> mbars;
  // TMA stores still reading shared memory: the issuing thread, its bulk group, the bytes,
  // where it was issued, and the barrier interval of the issuer's wait that retired it. The
  // issuer may write the bytes after its wait, others after a barrier that follows it.
  struct PendingBulkStore {
    std::uint32_t thread;
    std::uint64_t group;
    std::size_t lo, hi;
    const char* site;
    std::uint64_t retired_epoch = UINT64_MAX;
  };
  std::vector<PendingBulkStore> bulk_stores;
  // run_wgmma's operands and the offsets it read: the worker's, reused, since a fiber that
  // fails is never unwound (its own vectors would leak).
  std::vector<float> wgmma_a, wgmma_b;
  std::vector<std::size_t> wgmma_offsets;
};

namespace tilec::rt {
namespace {

using Worker = tilec_emu_worker;

std::string block_str(const Worker& w) { return fmt::format("({}, {}, {})", w.block[0], w.block[1], w.block[2]); }

// Where a message comes from: "kernel 'softmax', block (3, 0, 0), thread 17".
std::string where(const tilec_emu_thread* t) {
  return fmt::format("kernel '{}', block {}, thread {}", t->worker->launch->manifest->kernel, block_str(*t->worker),
                     t->tid);
}

// Stops the calling GPU thread for good: records why and hands control back to the
// scheduler, which abandons the block. The fiber's frames are never unwound, so a caller
// builds `message` in a statement of its own: temporaries of the calling expression would
// never be destroyed (a leak).
[[noreturn]] void abort_thread(tilec_emu_thread* t, std::string&& message) {
  t->worker->error = std::move(message);
  t->state = State::failed;
  emu::fiber_exit(t->fiber, t->worker->scheduler);
}

// abort_thread with "WHERE: " and a formatted message. abort_thread never returns, so the
// message is built (and every temporary of it freed) before the call; a caller passing
// fmt::format(..., where(t)) straight in would leak the temporaries of its expression.
template <class... A> [[noreturn]] void fail_thread(tilec_emu_thread* t, fmt::format_string<A...> f, A&&... args) {
  std::string message = where(t) + ": " + fmt::format(f, std::forward<A>(args)...);
  abort_thread(t, std::move(message));
}

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

// The byte offset of a shared-memory access [addr, addr + n), checked to lie inside the
// kernel's shared memory and to be aligned.
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

void yield(tilec_emu_thread* t) { emu::fiber_switch(t->fiber, t->worker->scheduler); }

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

// Checks [addr, addr + n) against the launch's buffers and counts it; returns the buffer.
// `site` (the generated call's return address; 0 for atomics) groups the access with the
// same run of the same site by the other lanes of the warp into one warp-wide request.
int check_access(tilec_emu_thread* t, const void* addr, std::uint32_t n, bool load, bool store, const char* what,
                 std::uintptr_t site = 0) {
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

std::string ranges_str(const std::vector<std::uint32_t>& tids) {
  std::string s;
  for (std::size_t i = 0; i < tids.size();) {
    std::size_t j = i;
    while (j + 1 < tids.size() && tids[j + 1] == tids[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") +
         (i == j ? std::to_string(tids[i]) : fmt::format("{}-{}", tids[i], tids[j]));
    i = j + 1;
  }
  return s;
}

// Why a block cannot make progress: every live thread waits, but no barrier or shuffle can
// complete.
std::string stuck_message(const Worker& w) {
  std::vector<std::uint32_t> done;
  std::vector<std::pair<std::uint32_t, std::vector<std::uint32_t>>> barriers; // per barrier
  std::vector<std::uint32_t> shuffles, mbar_waiters;
  for (const tilec_emu_thread& t : w.threads) {
    if (t.state == State::at_mbarrier) mbar_waiters.push_back(t.tid);
    if (t.state == State::done) done.push_back(t.tid);
    else if (t.state == State::at_shuffle) shuffles.push_back(t.tid);
    else if (t.state == State::at_barrier) {
      auto it = std::find_if(barriers.begin(), barriers.end(), [&](auto& b) { return b.first == t.barrier_id; });
      if (it == barriers.end()) barriers.push_back({t.barrier_id, {t.tid}});
      else it->second.push_back(t.tid);
    }
  }
  std::string parts;
  auto add = [&](const std::string& s) { parts += (parts.empty() ? "" : "; ") + s; };
  for (auto& [id, tids] : barriers)
    add(fmt::format("threads {} wait at {}barrier{}", ranges_str(tids), barriers.size() > 1 ? "" : "a ",
                    barriers.size() > 1 ? fmt::format(" #{}", id) : ""));
  std::vector<std::uint32_t> mmas, ldms;
  for (const tilec_emu_thread& t : w.threads) {
    if (t.state == State::at_shuffle && t.mma_dtype) mmas.push_back(t.tid);
    if (t.state == State::at_shuffle && t.ldm_count) ldms.push_back(t.tid);
  }
  if (!shuffles.empty())
    add(mmas.empty() && ldms.empty()
            ? fmt::format("threads {} wait at a warp shuffle", ranges_str(shuffles))
            : fmt::format("threads {} wait at a warp-wide operation (of them, at an MMA: {}; at an ldmatrix: {})",
                          ranges_str(shuffles), mmas.empty() ? "none" : ranges_str(mmas),
                          ldms.empty() ? "none" : ranges_str(ldms)));
  if (!mbar_waiters.empty()) {
    const tilec_emu_thread& t = w.threads[mbar_waiters[0]];
    auto it = w.mbars.find(t.mbar_at);
    add(fmt::format("threads {} wait for an mbarrier phase that never completes (thread {}: phase {} of the mbarrier "
                    "at byte offset {}, {} arrivals and {} transaction bytes still to come)",
                    ranges_str(mbar_waiters), t.tid, t.mbar_need - 1, t.mbar_at,
                    it == w.mbars.end() ? 0 : it->second.pending, it == w.mbars.end() ? 0 : it->second.tx));
  }
  if (!done.empty()) add(fmt::format("threads {} finished", ranges_str(done)));
  const char* what = !mbar_waiters.empty()          ? "an mbarrier phase that never completes"
                     : barriers.size() > 1           ? "threads wait at different barriers"
                     : !barriers.empty() && !done.empty() ? "a barrier not reached by every thread of the block"
                     : !shuffles.empty()                  ? "a warp shuffle not reached by every lane of its warp"
                                                          : "a barrier not reached by every thread of the block";
  return fmt::format("kernel '{}', block {}: {} ({})", w.launch->manifest->kernel, block_str(w), what, parts);
}

void fiber_main(void* p) {
  auto* t = static_cast<tilec_emu_thread*>(p);
  Launch& l = *t->worker->launch;
  l.entry(t, l.args);
  if (!t->pending_copies.empty())
    fail_thread(t, "finished with {} asynchronous cop{} never waited for (cp.async at {}): its bytes never land in "
                "shared memory",
                t->pending_copies.size(), t->pending_copies.size() == 1 ? "y" : "ies", t->pending_copies.front().site);
  for (const auto& b : t->worker->bulk_stores)
    if (b.thread == t->tid && b.retired_epoch == UINT64_MAX)
      fail_thread(t, "finished with a TMA store never waited for (at {}; cp.async.bulk.wait_group missing): its "
                     "shared memory may go before the copy engine reads it", b.site);
  if (!t->wgmma_groups.empty())
    fail_thread(t, "finished with {} warpgroup MMA{} never waited for (wgmma at {}; wgmma.wait_group missing)",
                t->wgmma_groups.size(), t->wgmma_groups.size() == 1 ? "" : "s", t->wgmma_site);
  t->state = State::done;
  emu::fiber_exit(t->fiber, t->worker->scheduler);
}

// Completes the shuffles of every warp whose live lanes all wait at one; returns whether any did.
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

// Threads waiting at an mbarrier whose phase has completed run again.
bool release_mbarriers(Worker& w) {
  bool released = false;
  for (tilec_emu_thread& t : w.threads)
    if (t.state == State::at_mbarrier && w.mbars[t.mbar_at].phase >= t.mbar_need) {
      t.state = State::runnable;
      released = true;
    }
  return released;
}

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

// Folds the block's warp-wide requests into the counters: distinct bytes and sectors of each.
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

// Runs one block to the end; false (with w.error set) when it failed.
bool run_block(Worker& w) {
  Launch& l = *w.launch;
  if (l.shared_bytes) std::memset(w.shared, 0xcd, l.shared_bytes); // stale data, like a GPU's
  w.block_epoch = ++w.epoch;
  w.wgmmas.clear();
  w.mbars.clear();
  w.bulk_stores.clear();
  for (tilec_emu_thread& t : w.threads) {
    t.state = State::runnable;
    t.mbar_waited.clear();
    t.bulk_open = 0;
    t.pending_copies.clear();
    t.open_group = 0;
    t.wgmma_n = 0;
    t.wgmma_groups.clear();
    t.wgmma_open = 0;
    t.wgmma_fenced = false;
    emu::fiber_init(t.fiber, w.stacks->stack(t.tid), w.stacks->bytes(), fiber_main, &t);
  }
  std::uint32_t n = std::uint32_t(w.threads.size());
  // The order the threads run in between sync points (EmuOptions::schedule).
  std::vector<std::uint32_t> order(n);
  for (std::uint32_t i = 0; i < n; ++i) order[i] = l.schedule.order == EmuSchedule::reverse ? n - 1 - i : i;
  std::mt19937_64 rng(l.schedule.seed * 0x9e3779b97f4a7c15ull + ++w.blocks_run);
  for (;;) {
    if (l.schedule.order == EmuSchedule::random) std::shuffle(order.begin(), order.end(), rng);
    for (std::uint32_t i : order) {
      tilec_emu_thread& t = w.threads[i];
      if (t.state != State::runnable) continue;
      emu::fiber_switch(w.scheduler, t.fiber);
      if (t.state == State::failed) return false;
    }
    std::uint32_t done = 0, at_barrier = 0;
    std::uint32_t barrier = 0;
    bool one_barrier = true, runnable = false;
    for (const tilec_emu_thread& t : w.threads) {
      // A warpgroup MMA's last thread releases the others as it runs, after some had their turn.
      runnable = runnable || t.state == State::runnable;
      if (t.state == State::done) ++done;
      else if (t.state == State::at_barrier) {
        if (at_barrier++ == 0) barrier = t.barrier_id;
        else one_barrier = one_barrier && t.barrier_id == barrier;
      }
    }
    if (done == n) {
      for (const auto& [off, m] : w.mbars)
        if (m.pending != m.count || m.tx != 0) {
          w.error = fmt::format("kernel '{}', block {}: the block ends with phase {} of the mbarrier at byte offset {} "
                                "begun and not completed ({} of {} arrivals and {} transaction bytes still to come)",
                                l.manifest->kernel, block_str(w), m.phase, off, m.pending, m.count, m.tx);
          return false;
        }
      count_requests(w);
      return true;
    }
    if (runnable || release_shuffles(w) || release_mbarriers(w)) continue;
    if (at_barrier == n && one_barrier) {
      for (tilec_emu_thread& t : w.threads) t.state = State::runnable, t.fences_at_barrier = t.proxy_fences;
      ++w.epoch; // accesses on either side of a barrier never race
      continue;
    }
    w.error = stuck_message(w);
    return false;
  }
}

void run_worker(Worker& w) {
  Launch& l = *w.launch;
  std::uint64_t total = std::uint64_t(l.grid.x) * l.grid.y * l.grid.z;
  while (!l.failed.load(std::memory_order_relaxed)) {
    std::uint64_t b = l.next_block.fetch_add(1, std::memory_order_relaxed);
    if (b >= total) break;
    w.block[0] = std::uint32_t(b % l.grid.x);
    w.block[1] = std::uint32_t(b / l.grid.x % l.grid.y);
    w.block[2] = std::uint32_t(b / l.grid.x / l.grid.y);
    for (tilec_emu_thread& t : w.threads) t.print_ops = 0;
    if (!run_block(w)) {
      l.fail(w.error);
      break;
    }
  }
}

void setup_worker(Worker& w, Launch& l, const EmuOptions& o) {
  w.launch = &l;
  w.threads.resize(l.threads);
  for (std::uint32_t i = 0; i < l.threads; ++i) {
    w.threads[i].worker = &w;
    w.threads[i].tid = i;
  }
  w.stacks = emu::acquire_stacks(l.threads, o.stack_bytes);
  w.shared_storage = std::make_unique<std::byte[]>(l.shared_bytes + 16);
  auto p = reinterpret_cast<std::uintptr_t>(w.shared_storage.get());
  w.shared = w.shared_storage.get() + ((16 - p % 16) % 16);
  w.shadow.assign(l.shared_bytes, ShadowByte{});
  for (auto* v : {&w.counters.loaded, &w.counters.stored, &w.counters.requests, &w.counters.sectors,
                  &w.counters.request_bytes, &w.counters.ideal_sectors})
    v->assign(l.tracks.size(), 0);
}

// The tilec_emu_* functions must be visible to libraries opened later (see emulator.h).
void ensure_abi_exported() {
  static std::once_flag once;
  static std::string problem;
  std::call_once(once, [] {
    void* ours = reinterpret_cast<void*>(&tilec_emu_barrier);
    void* found = dlsym(RTLD_DEFAULT, "tilec_emu_barrier");
    if (!found) {
      // The runtime may sit in a shared library loaded RTLD_LOCAL: make its symbols global.
      Dl_info info{};
      if (dladdr(ours, &info) && info.dli_fname) dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
      found = dlsym(RTLD_DEFAULT, "tilec_emu_barrier");
    }
    if (!found)
      problem = "the emulator's tilec_emu_* functions are not exported by this program, so emulated kernels "
                "cannot call them: link the executable with -rdynamic (CMake: ENABLE_EXPORTS ON)";
    else if (found != ours)
      problem = "another library in this process defines tilec_emu_* and shadows the emulator's; emulated "
                "kernels would call it";
  });
  if (!problem.empty()) throw Error(problem);
}

} // namespace

EmuScheduleChoice default_schedule() {
  static const EmuScheduleChoice choice = [] {
    EmuScheduleChoice c;
    const char* env = std::getenv("TILEC_EMU_SCHEDULE");
    std::string v = env ? env : "";
    if (v.empty() || v == "forward") return c;
    if (v == "reverse") {
      c.order = EmuSchedule::reverse;
      return c;
    }
    if (v.rfind("random", 0) == 0) {
      c.order = EmuSchedule::random;
      if (v.size() > 6) {
        std::size_t used = 0;
        try {
          if (v[6] != ':') throw std::invalid_argument("no colon");
          c.seed = std::stoull(v.substr(7), &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || 7 + used != v.size())
          throw EmulationError(fmt::format("TILEC_EMU_SCHEDULE={}: expected forward, reverse, random or random:SEED", v));
      }
      return c;
    }
    throw EmulationError(fmt::format("TILEC_EMU_SCHEDULE={}: expected forward, reverse, random or random:SEED", v));
  }();
  return choice;
}

EmuModule::EmuModule(const Manifest& m) : manifest_(m) {
  std::filesystem::path lib = m.code_path(m.emulator);
  if (lib.empty()) throw ManifestError(fmt::format("module '{}' has no emulator library ([code] emulator)", m.kernel));
  if (m.threads_per_block <= 0 || m.threads_per_block > 1024)
    throw ManifestError(fmt::format("module '{}': threads_per_block {} is not in [1, 1024]", m.kernel,
                                    m.threads_per_block));
  if (m.shared_bytes < 0)
    throw ManifestError(fmt::format("module '{}': shared_bytes {} is negative", m.kernel, m.shared_bytes));
  ensure_abi_exported();
  handle_ = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) throw Error(fmt::format("cannot open the emulator library of '{}': {}", m.kernel, dlerror()));
  entry_ = dlsym(handle_, m.symbol.c_str());
  if (!entry_) {
    dlclose(handle_);
    throw Error(fmt::format("the emulator library {} has no kernel symbol '{}'", lib.string(), m.symbol));
  }
}

EmuModule::~EmuModule() {
  if (handle_) dlclose(handle_);
}

EmuLaunchStats EmuModule::launch(Dim3 grid, std::span<const Arg> args, std::span<const std::string> buffer_names,
                                 const EmuOptions& options) const {
  check_launch_args(manifest_, args);
  if (!buffer_names.empty() && buffer_names.size() != args.size())
    throw LaunchArgumentError(fmt::format("kernel '{}': {} buffer names for {} arguments", manifest_.kernel,
                                          buffer_names.size(), args.size()));
  auto t0 = std::chrono::steady_clock::now();
  Launch l;
  l.manifest = &manifest_;
  l.entry = reinterpret_cast<KernelEntry>(entry_);
  l.grid = grid;
  l.threads = std::uint32_t(manifest_.threads_per_block);
  l.shared_bytes = std::size_t(manifest_.shared_bytes);
  l.schedule = options.schedule;

  std::vector<void*> values(args.size());
  std::vector<std::pair<std::size_t, std::size_t>> order; // (param, track slot) before sorting
  for (std::size_t i = 0; i < args.size(); ++i) {
    values[i] = const_cast<void*>(args[i].value());
    if (!args[i].is_buffer()) continue;
    Track t;
    t.lo = std::uintptr_t(args[i].bits());
    t.hi = t.lo + args[i].buffer_bytes();
    t.name = buffer_names.empty() ? manifest_.params[i].name : buffer_names[i];
    t.elem_bytes = std::max<std::size_t>(1, scalar_type_bytes(manifest_.params[i].type.element));
    t.sector_words = ((args[i].buffer_bytes() + 31) / 32 + 63) / 64;
    t.sectors = std::make_unique<std::atomic<std::uint64_t>[]>(t.sector_words);
    l.tracks.push_back(std::move(t));
    order.push_back({i, l.tracks.size() - 1});
  }
  std::vector<std::size_t> perm(l.tracks.size());
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = i;
  std::sort(perm.begin(), perm.end(), [&](std::size_t a, std::size_t b) { return l.tracks[a].lo < l.tracks[b].lo; });
  std::vector<Track> sorted;
  std::vector<std::size_t> slot_of(perm.size());
  for (std::size_t k = 0; k < perm.size(); ++k) {
    slot_of[perm[k]] = k;
    sorted.push_back(std::move(l.tracks[perm[k]]));
  }
  l.tracks = std::move(sorted);
  // The TMA copies' tensor maps, after the arguments: args[i] points at the map itself.
  std::vector<tilec_emu_tensor_map> maps;
  const bool programs = grid.x && grid.y && grid.z; // no programs: no map is read (nor checked)
  for (const ResolvedTensorMap& r : programs ? resolve_tensor_maps(manifest_, args) : std::vector<ResolvedTensorMap>{}) {
    tilec_emu_tensor_map t{};
    t.base = r.base;
    t.rank = std::uint32_t(r.rank);
    t.swizzle = std::uint32_t(r.swizzle);
    for (int d = 0; d < r.rank; ++d) t.sizes[d] = r.sizes[d], t.strides[d] = r.strides[d], t.box[d] = r.box[d];
    maps.push_back(t);
  }
  for (tilec_emu_tensor_map& t : maps) values.push_back(&t);
  l.args = values.data();

  std::uint64_t blocks = std::uint64_t(grid.x) * grid.y * grid.z;
  int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  int nworkers = int(std::min<std::uint64_t>(blocks, std::uint64_t(options.workers > 0 ? options.workers : hw)));
  std::vector<Worker> workers(std::size_t(std::max(nworkers, 0)));
  for (Worker& w : workers) setup_worker(w, l, options);
  if (workers.size() == 1) run_worker(workers[0]);
  else if (workers.size() > 1) {
    std::vector<std::thread> pool;
    for (std::size_t i = 1; i < workers.size(); ++i) pool.emplace_back([&w = workers[i]] { run_worker(w); });
    run_worker(workers[0]);
    for (std::thread& th : pool) th.join();
  }
  std::sort(l.prints.begin(), l.prints.end()); // printed before a failure too: they may explain it
  for (const Launch::PrintLine& p : l.prints) device_print_emit(p.text);
  if (l.failed.load()) throw EmulationError(l.error);

  EmuLaunchStats st;
  for (auto [param, slot] : order) {
    std::size_t k = slot_of[slot];
    const Track& t = l.tracks[k];
    EmuBufferStats b;
    b.name = t.name;
    for (const Worker& w : workers) {
      b.bytes_loaded += w.counters.loaded[k];
      b.bytes_stored += w.counters.stored[k];
      b.requests += w.counters.requests[k];
      b.sectors += w.counters.sectors[k];
      b.request_bytes += w.counters.request_bytes[k];
      b.ideal_sectors += w.counters.ideal_sectors[k];
    }
    // A buffer passed twice is tracked twice but counts once in the totals (the first time).
    bool repeat = false;
    for (std::size_t j = 0; j < k; ++j) repeat = repeat || (l.tracks[j].lo == t.lo && l.tracks[j].hi == t.hi);
    for (std::size_t wi = 0; wi < t.sector_words; ++wi)
      b.unique_bytes += 32 * std::popcount(t.sectors[wi].load(std::memory_order_relaxed));
    if (!repeat) {
      st.bytes_loaded += b.bytes_loaded;
      st.bytes_stored += b.bytes_stored;
      st.unique_bytes += b.unique_bytes;
      st.requests += b.requests;
      st.sectors += b.sectors;
      st.request_bytes += b.request_bytes;
      st.ideal_sectors += b.ideal_sectors;
    }
    st.buffers.push_back(std::move(b));
  }
  st.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

} // namespace tilec::rt

namespace tilec::rt {

// The race checks of a shared-memory write of `bytes` at byte offset `off` that may happen
// at any time from barrier interval `since` to now (a plain store: since is now; an
// asynchronous copy lands somewhere between its issue and its wait): another thread's write
// of a different value, or its read, in that window races with it. `write`: also record it
// and write the bytes.
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
    if (!same && written_here && s.write_epoch >= since && s.writer != t->tid) {
      std::string message = fmt::format(
          "{}: shared-memory race (write after write, {}): thread {} writes byte offset {} that thread {} wrote "
          "with another value (write at {}; other write at {})", where(t), window, t->tid, i, s.writer, site,
          s.write_site);
      abort_thread(t, std::move(message));
    }
    if (!(same && written_here) && s.read_epoch >= since && s.read_epoch >= w.block_epoch &&
        (s.reader != t->tid || s.several_readers)) {
      std::uint32_t reader = s.reader != t->tid ? s.reader : UINT32_MAX;
      std::string readers = reader != UINT32_MAX ? fmt::format("thread {}", reader) : std::string("other threads");
      std::string message = fmt::format(
          "{}: shared-memory race (write after read, {}): thread {} writes byte offset {} that {} read (write at "
          "{}; read at {})", where(t), window, t->tid, i, readers, site, s.read_site);
      abort_thread(t, std::move(message));
    }
    if (s.mbar && write && written_here) { // a TMA copy's byte: it may still land unless this thread waited for it
      auto it = t->mbar_waited.find(s.mbar - 1);
      if ((it == t->mbar_waited.end() ? 0 : it->second) <= s.mbar_phase) {
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

} // namespace tilec::rt

using tilec::rt::State;

extern "C" {

uint32_t tilec_emu_thread_id(tilec_emu_thread* t) { return t->tid; }
uint32_t tilec_emu_block_dim(tilec_emu_thread* t) { return std::uint32_t(t->worker->threads.size()); }
uint32_t tilec_emu_block_id(tilec_emu_thread* t, uint32_t axis) { return axis < 3 ? t->worker->block[axis] : 0; }
uint32_t tilec_emu_num_blocks(tilec_emu_thread* t, uint32_t axis) {
  const tilec::rt::Dim3& g = t->worker->launch->grid;
  return axis == 0 ? g.x : axis == 1 ? g.y : axis == 2 ? g.z : 1;
}

void tilec_emu_barrier(tilec_emu_thread* t, uint32_t id) {
  t->barrier_id = id;
  t->state = State::at_barrier;
  tilec::rt::yield(t);
}

void* tilec_emu_shared_base(tilec_emu_thread* t) { return t->worker->shared; }

void tilec_emu_shared_load(tilec_emu_thread* t, const void* addr, uint32_t bytes, void* dst, const char* site) {
  std::size_t off = tilec::rt::check_shared(t, addr, bytes, "load", site);
  tilec_emu_worker& w = *t->worker;
  for (const auto& c : t->pending_copies) { // on a GPU it reads the old bytes or the new, by chance
    std::size_t coff = std::size_t(static_cast<std::byte*>(c.dst) - w.shared);
    if (coff < off + bytes && off < coff + 16) {
      tilec::rt::fail_thread(t, "shared-memory load of {} bytes at byte offset {} (at {}) reads the destination of "
                                "an asynchronous copy this thread issued and has not waited for (cp.async at {}; "
                                "cp.async.wait_group missing)",
                             bytes, off, site, c.site);
    }
  }
  for (std::size_t i = off; i < off + bytes; ++i) {
    tilec::rt::ShadowByte& s = w.shadow[i];
    if (s.write_epoch < w.block_epoch) {
      std::string message = fmt::format(
          "{}: shared-memory load of {} bytes at byte offset {} reads byte {}, which no thread of the block has "
          "written (at {})", tilec::rt::where(t), bytes, off, i, site);
      tilec::rt::abort_thread(t, std::move(message));
    }
    if (s.mbar) { // a TMA copy's: visible once its phase is waited for
      auto it = t->mbar_waited.find(s.mbar - 1);
      if ((it == t->mbar_waited.end() ? 0 : it->second) <= s.mbar_phase) {
        std::string message = fmt::format(
            "{}: shared-memory load of byte offset {} (at {}) reads what a TMA copy (at {}) writes in phase {} of the "
            "mbarrier at byte offset {}, which this thread has not waited for (mbarrier.try_wait.parity missing)",
            tilec::rt::where(t), i, site, s.write_site, s.mbar_phase, s.mbar - 1);
        tilec::rt::abort_thread(t, std::move(message));
      }
    } else if (s.write_epoch == w.epoch && s.writer != t->tid) {
      std::string message = fmt::format(
          "{}: shared-memory race (read after write, no barrier between): thread {} reads byte offset {} that "
          "thread {} wrote (read at {}; write at {})", tilec::rt::where(t), t->tid, i, s.writer, site, s.write_site);
      tilec::rt::abort_thread(t, std::move(message));
    }
    if (s.read_epoch == w.epoch && s.reader != t->tid) {
      s.several_readers = true;
    } else if (s.read_epoch != w.epoch) {
      s.read_epoch = w.epoch, s.reader = t->tid, s.several_readers = false, s.read_site = site;
    }
  }
  std::memcpy(dst, w.shared + off, bytes);
}

void tilec_emu_shared_store(tilec_emu_thread* t, void* addr, uint32_t bytes, const void* src, const char* site,
                            uint32_t float_type) {
  std::size_t off = tilec::rt::check_shared(t, addr, bytes, "store", site);
  tilec::rt::check_shared_write(t, off, bytes, src, site, float_type, t->worker->epoch, true);
}

uint32_t tilec_emu_shfl_xor(tilec_emu_thread* t, uint32_t value, uint32_t lane_mask) {
  t->shfl_value = value;
  t->shfl_src = ((t->tid & 31) ^ lane_mask) & 31;
  t->state = State::at_shuffle;
  tilec::rt::yield(t);
  return t->shfl_result;
}

uint32_t tilec_emu_shfl_idx(tilec_emu_thread* t, uint32_t value, uint32_t src_lane) {
  t->shfl_value = value;
  t->shfl_src = src_lane & 31;
  t->state = State::at_shuffle;
  tilec::rt::yield(t);
  return t->shfl_result;
}

uint32_t tilec_emu_shfl_sync(tilec_emu_thread* t, uint32_t mode, uint32_t member_mask, uint32_t value, uint32_t b,
                             uint32_t c) {
  const char* name = mode == 0 ? "shfl.sync.idx" : "shfl.sync.bfly";
  if (mode > 1) tilec::rt::fail_thread(t, "shuffle of unknown mode {}", mode);
  if (member_mask != 0xffffffffu)
    tilec::rt::fail_thread(t, "{} with member mask {:#010x}: tilec's shuffles take the whole warp (0xffffffff); lanes "
                              "outside the mask read undefined values on the GPU",
                           name, member_mask);
  if (c != 0x1f)
    tilec::rt::fail_thread(t, "{} with clamp/segment operand c = {:#x}: tilec's shuffles use one 32-lane segment "
                              "without clamping (c = 0x1f)",
                           name, c);
  return mode == 0 ? tilec_emu_shfl_idx(t, value, b) : tilec_emu_shfl_xor(t, value, b);
}

void tilec_emu_mma_m16n8k16(tilec_emu_thread* t, uint32_t dtype, const uint32_t* a, const uint32_t* b, const float* c,
                            float* d) {
  if (dtype != 2 && dtype != 3)
    tilec::rt::fail_thread(t, "MMA with unknown operand type {}", dtype);
  t->mma_dtype = dtype, t->mma_a = a, t->mma_b = b, t->mma_c = c, t->mma_d = d;
  t->state = State::at_shuffle;
  tilec::rt::yield(t);
}

void tilec_emu_ldmatrix(tilec_emu_thread* t, uint32_t count, uint32_t trans, const void* row, uint32_t* dst,
                        const char* site) {
  if (count != 1 && count != 2 && count != 4)
    tilec::rt::fail_thread(t, "ldmatrix of {} matrices (1, 2 or 4)", count);
  if ((t->tid & 31) < 8 * count) tilec_emu_shared_load(t, row, 16, t->ldm_row, site);
  t->ldm_count = count, t->ldm_trans = trans ? 1 : 0, t->ldm_dst = dst;
  t->state = State::at_shuffle;
  tilec::rt::yield(t);
}

void tilec_emu_cp_async(tilec_emu_thread* t, void* dst, const void* src, uint32_t src_bytes, const char* site) {
  if (src_bytes != 0 && src_bytes != 16) {
    tilec::rt::fail_thread(t, "cp.async of {} source bytes (0 or 16) at {}", src_bytes, site);
  }
  std::size_t off = tilec::rt::check_shared(t, dst, 16, "asynchronous copy", site);
  tilec_emu_thread::PendingCopy c{t->open_group, t->worker->epoch, dst, {}, site};
  if (src_bytes) {
    tilec::rt::check_access(t, src, 16, true, false, "asynchronous copy",
                            reinterpret_cast<std::uintptr_t>(__builtin_return_address(0)));
    std::memcpy(c.data, src, 16);
  }
  // The copy may land at once: its bytes must be free of other threads' accesses now.
  tilec::rt::check_shared_write(t, off, 16, c.data, site, 0, c.epoch, false);
  t->pending_copies.push_back(c);
}

void tilec_emu_cp_async_commit(tilec_emu_thread* t) { ++t->open_group; }

void tilec_emu_cp_async_wait(tilec_emu_thread* t, uint32_t groups) {
  // Closed groups are those below open_group; all but the newest `groups` of them land.
  std::uint64_t keep_from = t->open_group >= groups ? t->open_group - groups : 0;
  std::vector<tilec_emu_thread::PendingCopy> still;
  for (const auto& c : t->pending_copies) {
    if (c.group < keep_from) {
      std::size_t off = std::size_t(static_cast<std::byte*>(c.dst) - t->worker->shared);
      tilec::rt::check_shared_write(t, off, 16, c.data, c.site, 0, c.epoch, true);
    }
    else still.push_back(c);
  }
  t->pending_copies = std::move(still);
}

} // extern "C"

namespace {

// Whether the byte's last ordinary write was fenced to the async proxy by its writer
// (fence.proxy.async before the barrier that orders it here, or since, for a write in this
// barrier interval); bytes the async proxy wrote itself (TMA copies), and bytes not written in
// this block, need none.
bool proxy_fenced(const tilec_emu_worker& w, const tilec::rt::ShadowByte& sb) {
  if (sb.write_epoch < w.block_epoch || sb.mbar) return true;
  const tilec_emu_thread& wr = w.threads[sb.writer];
  return (sb.write_epoch == w.epoch ? wr.proxy_fences : wr.fences_at_barrier) != sb.writer_fences;
}

using namespace tilec::rt;

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

// The warpgroup's MMA, run by its last thread to arrive (`t`), every other one waiting.
void run_wgmma(tilec_emu_thread* t, std::uint32_t g0) {
  tilec_emu_worker& w = *t->worker;
  const tilec_emu_thread& first = w.threads[g0];
  for (std::uint32_t i = g0; i < g0 + 128; ++i) {
    const tilec_emu_thread& o = w.threads[i];
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
  for (std::uint64_t d : {first.wgmma_desc_a, first.wgmma_desc_b})
    if ((d >> 49) & 7)
      fail_thread(t, "warpgroup MMA (at {}): matrix descriptor {:#x} has a base offset ({}): tilec places swizzled "
                     "operands at multiples of the pattern, where it is 0", first.wgmma_site, d, (d >> 49) & 7);
  // A swizzled operand's rows start on the pattern: the start's row bits within it are those
  // of the pattern's start, which a base offset of 0 says is aligned.
  for (std::uint64_t d : {first.wgmma_desc_a, first.wgmma_desc_b}) {
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
  for (std::uint32_t r = 0; r < 64; ++r)
    for (std::uint32_t k = 0; k < ks; ++k) A[r * ks + k] = read(first.wgmma_desc_a, first.wgmma_trans & 1, r, k);
  for (std::uint32_t c = 0; c < n; ++c)
    for (std::uint32_t k = 0; k < ks; ++k) B[c * ks + k] = read(first.wgmma_desc_b, first.wgmma_trans & 2, c, k);
  for (std::uint32_t i = g0; i < g0 + 128; ++i) {
    tilec_emu_thread& o = w.threads[i];
    const std::uint32_t warp = (i - g0) / 32, lane = i % 32;
    for (std::uint32_t r = 0; r < n / 2; ++r) {
      const std::uint32_t row = 16 * warp + lane / 4 + 8 * ((r / 2) % 2), col = 8 * (r / 4) + 2 * (lane % 4) + r % 2;
      float acc = first.wgmma_scale ? o.wgmma_acc[r] : 0.0f;
      for (std::uint32_t k = 0; k < ks; ++k) acc += A[row * ks + k] * B[col * ks + k]; // exact product, rounded sum
      o.wgmma_acc[r] = acc;
    }
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

} // namespace

extern "C" {

void tilec_emu_wgmma(tilec_emu_thread* t, uint32_t dtype, uint32_t n, uint64_t desc_a, uint64_t desc_b,
                     uint32_t scale_d, uint32_t trans, float* acc, const char* site) {
  using namespace tilec::rt;
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
    }
  t->wgmma_fenced = false;
}

void tilec_emu_fence_proxy_async(tilec_emu_thread* t) { ++t->proxy_fences; }

} // extern "C"

namespace {

// The mbarrier at `bar`: its byte offset, checked to be initialized.
std::size_t mbarrier_at(tilec_emu_thread* t, void* bar, const char* what, const char* site) {
  const std::size_t off = tilec::rt::check_shared(t, bar, 8, what, site);
  if (!t->worker->mbars.count(off))
    tilec::rt::fail_thread(t, "{} (at {}) on the mbarrier at byte offset {}, which no thread has initialized "
                              "(mbarrier.init)", what, site, off);
  return off;
}

// Completes the mbarrier's phase when its arrivals and bytes are all in.
void mbarrier_progress(tilec_emu_worker::Mbarrier& m) {
  if (m.pending == 0 && m.tx == 0) {
    ++m.phase;
    m.pending = m.count;
  }
}

} // namespace

extern "C" {

void tilec_emu_mbarrier_init(tilec_emu_thread* t, void* bar, uint32_t count) {
  const std::size_t off = tilec::rt::check_shared(t, bar, 8, "mbarrier init", "mbarrier.init");
  tilec_emu_worker& w = *t->worker;
  if (count == 0) tilec::rt::fail_thread(t, "mbarrier.init of the mbarrier at byte offset {} with a count of 0", off);
  if (auto it = w.mbars.find(off); it != w.mbars.end() && (it->second.pending != it->second.count || it->second.tx))
    tilec::rt::fail_thread(t, "mbarrier.init of the mbarrier at byte offset {} while its phase {} is under way",
                           off, it->second.phase);
  w.mbars[off] = {count, count, 0, 0};
}

void tilec_emu_mbarrier_arrive_expect_tx(tilec_emu_thread* t, void* bar, uint32_t bytes, const char* site) {
  const std::size_t off = mbarrier_at(t, bar, "mbarrier.arrive.expect_tx", site);
  tilec_emu_worker::Mbarrier& m = t->worker->mbars[off];
  if (m.pending == 0) // cannot happen: a phase whose arrivals are in completes at once
    tilec::rt::fail_thread(t, "mbarrier.arrive.expect_tx (at {}): more arrivals than the count", site);
  m.tx += bytes;
  --m.pending;
  mbarrier_progress(m);
}

void tilec_emu_mbarrier_wait(tilec_emu_thread* t, void* bar, uint32_t parity, const char* site) {
  const std::size_t off = mbarrier_at(t, bar, "mbarrier.try_wait.parity", site);
  tilec_emu_worker& w = *t->worker;
  std::uint64_t& next = t->mbar_waited[off]; // the phase this thread waits for next
  if ((next & 1) != (parity & 1))
    tilec::rt::fail_thread(t, "mbarrier phase error (at {}): the thread waits for parity {} of the mbarrier at byte "
                              "offset {}, but the next phase it has not waited for is phase {} (parity {})",
                           site, parity, off, next, next & 1);
  if (w.mbars[off].phase <= next) {
    t->mbar_at = off;
    t->mbar_need = next + 1;
    t->state = State::at_mbarrier;
    tilec::rt::yield(t);
  }
  if (w.mbars[off].phase > next + 1)
    tilec::rt::fail_thread(t, "mbarrier phase error (at {}): phase {} of the mbarrier at byte offset {} completed "
                              "before the thread waited for phase {}; on a GPU its parity wait would see the phase "
                              "after and never return", site, next + 1, off, next);
  ++next;
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
    using namespace tilec::rt;
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
  using namespace tilec::rt;
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
  mbarrier_progress(m);
}

void tilec_emu_tma_store(tilec_emu_thread* t, const void* src, const tilec_emu_tensor_map* map, uint32_t rank,
                         int32_t c0, int32_t c1, int32_t c2, int32_t c3, int32_t c4, const char* site) {
  using namespace tilec::rt;
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

void tilec_emu_load(tilec_emu_thread* t, const void* addr, uint32_t bytes, void* dst) {
  tilec::rt::check_access(t, addr, bytes, true, false, "load",
                          reinterpret_cast<std::uintptr_t>(__builtin_return_address(0)));
  std::memcpy(dst, addr, bytes);
}

void tilec_emu_store(tilec_emu_thread* t, void* addr, uint32_t bytes, const void* src) {
  tilec::rt::check_access(t, addr, bytes, false, true, "store",
                          reinterpret_cast<std::uintptr_t>(__builtin_return_address(0)));
  std::memcpy(addr, src, bytes);
}

// Blocks run concurrently on several OS threads, so atomics are real atomics: a compare-
// exchange loop around abi/atomic_ops.h's definition of what each op stores.
} // extern "C"
namespace {

template <class T> T atomic_rmw(tilec_emu_thread* t, T* addr, int32_t op, T value, T cmp) {
  static const char* const names[] = {"atomic add",  "atomic max", "atomic min", "atomic and", "atomic or",
                                      "atomic xor",  "atomic xchg", "atomic cas", "atomic max", "atomic min"};
  tilec::rt::check_access(t, addr, 4, true, true, op >= 0 && op < 10 ? names[op] : "atomic");
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

// The one f16/bf16 conversion of the project (abi/float16.h): round to nearest even, NaN stays NaN.
float tilec_emu_f16_to_f32(tilec_emu_thread*, uint16_t bits) { return tilec::f16_bits_to_f32(bits); }
uint16_t tilec_emu_f32_to_f16(tilec_emu_thread*, float f) { return tilec::f32_to_f16_bits(f); }
float tilec_emu_bf16_to_f32(tilec_emu_thread*, uint16_t bits) { return tilec::bf16_bits_to_f32(bits); }
uint16_t tilec_emu_f32_to_bf16(tilec_emu_thread*, float f) { return tilec::f32_to_bf16_bits(f); }
void tilec_emu_print_op(tilec_emu_thread* t) { ++t->print_ops; }

void tilec_emu_print(tilec_emu_thread* t, const char* prefix, const char* shape, int64_t element, int32_t kind,
                     int64_t ivalue, float fvalue) {
  std::vector<std::int64_t> dims;
  for (const char* p = shape; *p;) {
    char* end = nullptr;
    dims.push_back(std::strtoll(p, &end, 10));
    p = *end == 'x' ? end + 1 : end;
  }
  tilec_emu_worker& w = *t->worker;
  tilec::rt::Launch& l = *w.launch;
  std::string text = tilec::device_print_line(w.block, dims, element, prefix, tilec::PrintedValue(kind), ivalue, fvalue);
  std::uint64_t block = w.block[0] + std::uint64_t(l.grid.x) * (w.block[1] + std::uint64_t(l.grid.y) * w.block[2]);
  std::lock_guard lock(l.print_mutex);
  l.prints.push_back({block, t->print_ops, element, std::move(text)});
}

void tilec_emu_assert_fail(tilec_emu_thread* t, const char* where) {
  tilec::rt::fail_thread(t, "device_assert failed at {}", where);
}

// fp8 -> f16 is exact (both formats fit), so the f16 conversion adds no rounding.
uint32_t tilec_emu_fp8x2_to_f16x2(tilec_emu_thread*, uint16_t pair, uint32_t format) {
  const tilec::Fp8Format& f = format == 0 ? tilec::kE4M3 : tilec::kE5M2;
  auto half = [&](unsigned byte) { return uint32_t(tilec::f32_to_f16_bits(tilec::fp8_bits_to_f32(uint8_t(byte), f))); };
  return half(pair & 0xff) | (half(pair >> 8) << 16);
}
uint16_t tilec_emu_f32x2_to_fp8x2(tilec_emu_thread*, float hi, float lo, uint32_t format) {
  const tilec::Fp8Format& f = format == 0 ? tilec::kE4M3 : tilec::kE5M2;
  return uint16_t(tilec::f32_to_fp8_bits(lo, f) | (tilec::f32_to_fp8_bits(hi, f) << 8));
}

} // extern "C"
