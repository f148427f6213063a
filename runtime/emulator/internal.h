#pragma once
// The emulator's own types and the helpers its files share: a GPU thread (tilec_emu_thread), a
// worker and the block it runs (tilec_emu_worker), a launch. Included only under runtime/emulator/.
#include "abi/emu_abi.h"
#include "runtime/emulator/emulator.h"
#include "runtime/emulator/fiber.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <fmt/format.h>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

// Everything declared here is the emulator's own: hidden, so libtilec.so does not export it
// (the tilec_emu_* entry points, declared by abi/emu_abi.h above, stay exported).
#pragma GCC visibility push(hidden)

namespace tilec::rt::emu {

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
  // The warps (one bit each) whose threads read it in read_epoch, and the worker's sync clock
  // at the last of those reads: reads an mbarrier phase orders before a write (mbar_ordered).
  std::uint32_t reader_warps = 0;
  std::uint64_t read_clock = 0;
  const char* write_site = "";
  const char* read_site = "";
};

enum class State : std::uint8_t { runnable, at_barrier, at_shuffle, at_mbarrier, done, failed };

} // namespace tilec::rt::emu

// A GPU thread: the context every generated call receives. (abi/emu_abi.h names it before the
// pragma, so it says hidden itself.)
struct __attribute__((visibility("hidden"))) tilec_emu_thread {
  tilec::rt::emu::FiberContext fiber;
  struct tilec_emu_worker* worker = nullptr;
  std::uint32_t tid = 0;
  std::uint64_t print_ops = 0; // device_print ops this thread has run in its block
  tilec::rt::emu::State state = tilec::rt::emu::State::runnable;
  std::uint32_t barrier_id = 0; // the barrier a waiting thread is blocked at (tilec_emu_barrier)
  std::uint32_t barrier_threads = 0; // the threads it waits for (tilec_emu_barrier_among; 0: the block's)
  // setmaxnreg: how often this thread ran it in the block, its ceiling since (0: none), the
  // kernel's launch ceiling it named, and where.
  std::uint32_t maxnreg_runs = 0, maxnreg = 0, maxnreg_launch = 0;
  const char* maxnreg_site = "";
  // Per warp of the block: the sync clock before which every access of its threads is ordered
  // before this thread's next ones, as the mbarrier phases this thread waited for say (each
  // of the warp's 32 threads arrived on the phase after those accesses).
  std::uint64_t acquired[32] = {};
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
  // A from registers (tilec_emu_wgmma_rs): the thread's four A fragment registers.
  bool wgmma_a_in_regs = false;
  std::uint32_t wgmma_a_regs[4] = {};
  float* wgmma_acc = nullptr;
  const char* wgmma_site = "";
  std::vector<std::uint64_t> wgmma_groups;
  std::uint64_t wgmma_open = 0;
  // The results of this thread's wgmmas, as the hardware delivers them: asynchronously. Each
  // wgmma's result waits here (a ring of kWgmmaSlots, by issue number) until a wgmma_wait
  // retires its group and writes it into the accumulator; until then the accumulator holds
  // tags naming it (wgmma_tag), which a later wgmma takes as its input (chaining) and which
  // anything else that reads them reports. wgmma_issued counts this block's wgmmas, of which
  // the first wgmma_retired are retired.
  struct WgmmaResult {
    std::uint64_t group = 0;
    float* acc = nullptr;
    const char* site = "";
    bool retired = true;
    std::vector<float> values;
  };
  std::vector<WgmmaResult> wgmma_results;
  std::uint64_t wgmma_issued = 0, wgmma_retired = 0;
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

namespace tilec::rt::emu {

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
  // The request bytes of each block (by linear index), each written by the worker that ran it;
  // empty past kMaxBlocksCounted blocks.
  std::vector<std::int64_t> block_request_bytes;

  void fail(std::string message) {
    std::lock_guard lock(error_mutex);
    if (error.empty()) error = std::move(message);
    failed.store(true, std::memory_order_relaxed);
  }
};

} // namespace tilec::rt::emu

// An OS thread running blocks: its fibers, the scheduler's context, the block's shared memory.
struct tilec_emu_worker {
  tilec::rt::emu::Launch* launch = nullptr;
  tilec::rt::emu::FiberContext scheduler;
  std::vector<tilec_emu_thread> threads;
  // The thread whose fiber runs now (null: the scheduler runs). Not always the thread a check
  // fails for: a warpgroup MMA reads its operands as the warpgroup's first thread on the fiber
  // of the last one to arrive.
  tilec_emu_thread* running = nullptr;
  tilec::rt::emu::PooledArena stacks;
  std::unique_ptr<std::byte[]> shared_storage;
  std::byte* shared = nullptr;
  std::vector<tilec::rt::emu::ShadowByte> shadow; // one per byte of shared memory
  std::uint64_t epoch = 0;                   // the current barrier interval
  std::uint64_t clock = 0;                   // counts mbarrier arrivals (the sync clock)
  std::uint64_t block_epoch = 0;             // the first epoch of the running block
  std::uint64_t blocks_run = 0;              // for the random schedule's seed
  std::uint32_t block[3] = {0, 0, 0};
  tilec::rt::emu::Counters counters;
  // This block's warp-wide requests.
  std::unordered_map<tilec::rt::emu::RequestKey, tilec::rt::emu::Request, tilec::rt::emu::RequestKeyHash> requests;
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
    std::uint32_t first_waiter = UINT32_MAX;   // the thread of that wait, and the sync clock then
    std::uint64_t waited_clock = 0;
  };
  std::vector<PendingWgmma> wgmmas;
  // The block's mbarriers, by byte offset: arrivals per phase and still to come, transaction
  // bytes still to come (negative: copies completed ahead of their arrive.expect_tx), the
  // phases completed, and where it was initialized.
  struct Mbarrier {
    std::uint32_t count = 0, pending = 0;
    std::int64_t tx = 0;
    std::uint64_t phase = 0;
    // Per warp: the lanes that arrived in the phase under way (a bit each) and the earliest of
    // their arrivals' sync clocks; of the last completed phase, that clock where all 32 lanes
    // arrived (0: not all): what a thread that waited for the phase acquires.
    std::uint32_t lanes[32] = {};
    std::uint64_t first_arrival[32] = {};
    std::uint64_t released[32] = {};
    std::uint64_t completed_clock = 0; // the sync clock when the last phase completed
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

namespace tilec::rt::emu {

using Worker = tilec_emu_worker;

// --- scheduler.cpp: failing a thread, running blocks

std::string block_str(const Worker& w);
// Where a message comes from: "kernel 'softmax', block (3, 0, 0), thread 17".
std::string where(const tilec_emu_thread* t);

// Stops the calling GPU thread for good: records why and hands control back to the
// scheduler, which abandons the block. The fiber's frames are never unwound, so a caller
// builds `message` in a statement of its own: temporaries of the calling expression would
// never be destroyed (a leak).
[[noreturn]] void abort_thread(tilec_emu_thread* t, std::string&& message);

// abort_thread with "WHERE: " and a formatted message. abort_thread never returns, so the
// message is built (and every temporary of it freed) before the call; a caller passing
// fmt::format(..., where(t)) straight in would leak the temporaries of its expression.
template <class... A> [[noreturn]] void fail_thread(tilec_emu_thread* t, fmt::format_string<A...> f, A&&... args) {
  std::string message = where(t) + ": " + fmt::format(f, std::forward<A>(args)...);
  abort_thread(t, std::move(message));
}

// --- wgmma.cpp: the asynchronous accumulator

// A wgmma result's register not yet delivered reads as a tag: a quiet NaN whose payload names
// the result (its slot in the thread's ring) and the register. NaN arithmetic keeps a payload,
// so a value computed from a tag is mostly a tag too.
inline constexpr std::uint32_t kWgmmaSlots = 512;
inline bool is_wgmma_tag(std::uint32_t bits) { return (bits & 0x7fff0000u) == 0x7fed0000u; }
// Fails the thread when one of the `bytes` at `p` (whole 4-byte words) a `what` (a store, a
// conversion, a shuffle) hands on is a tag of one of its wgmma results: an accumulator
// register read before the wgmma.wait_group that retires it. Only threads that issued a
// wgmma in this block are checked (and no conversion called with no thread: the nvptx
// rewrite's __truncsfbf2 passes none).
[[noreturn]] void report_tag(tilec_emu_thread* t, std::uint32_t bits, const char* what);
inline void check_untagged(tilec_emu_thread* t, const void* p, std::uint32_t bytes, const char* what) {
  if (!t || t->wgmma_issued == 0) return;
  for (std::uint32_t i = 0; i + 4 <= bytes; i += 4) {
    std::uint32_t bits;
    __builtin_memcpy(&bits, static_cast<const char*>(p) + i, 4);
    if (is_wgmma_tag(bits)) report_tag(t, bits, what);
  }
}

// Hands control from the calling GPU thread back to its worker's scheduler.
inline void yield(tilec_emu_thread* t) { emu::fiber_switch(t->fiber, t->worker->scheduler); }

// Prepares a worker for launch `l`: its threads, their stacks, its shared memory and shadow.
void setup_worker(Worker& w, Launch& l, const EmuOptions& o);
// Runs blocks of the launch until none is left or one fails (Launch::fail).
void run_worker(Worker& w);

// --- global_memory.cpp: the checked global accesses and their counters

// Checks [addr, addr + n) against the launch's buffers and counts it; returns the buffer.
// `site` (the generated call's return address; 0 for atomics) groups the access with the
// same run of the same site by the other lanes of the warp into one warp-wide request.
int check_access(tilec_emu_thread* t, const void* addr, std::uint32_t n, bool load, bool store, const char* what,
                 std::uintptr_t site = 0);
// Folds the block's warp-wide requests into the counters: distinct bytes and sectors of each.
void count_requests(Worker& w);

// --- shared_memory.cpp: shared memory and its race shadow

// The byte offset of a shared-memory access [addr, addr + n), checked to lie inside the
// kernel's shared memory and to be aligned.
std::size_t check_shared(tilec_emu_thread* t, const void* addr, std::uint32_t n, const char* what, const char* site);
// The race checks of a shared-memory write of `bytes` at byte offset `off` that may happen
// at any time from barrier interval `since` to now (a plain store: since is now; an
// asynchronous copy lands somewhere between its issue and its wait): another thread's write
// of a different value, or its read, in that window races with it. `write`: also record it
// and write the bytes.
void check_shared_write(tilec_emu_thread* t, std::size_t off, std::uint32_t bytes, const void* src, const char* site,
                        std::uint32_t float_type, std::uint64_t since, bool write);
// Whether the byte's last ordinary write was fenced to the async proxy by its writer
// (fence.proxy.async before the barrier that orders it here, or since, for a write in this
// barrier interval); bytes the async proxy wrote itself (TMA copies), and bytes not written in
// this block, need none.
bool proxy_fenced(const tilec_emu_worker& w, const ShadowByte& sb);
// Whether the TMA copy that wrote byte `s` has landed for thread t: it waited for the copy's
// mbarrier phase, or for a phase another warp released after that phase completed.
bool tma_landed_for(const tilec_emu_thread* t, const ShadowByte& s);
// Whether accesses of the warps `warps` (a bit each) up to sync clock `clock` are ordered
// before thread t's next access by the mbarrier phases it waited for.
inline bool mbar_ordered(const tilec_emu_thread* t, std::uint32_t warps, std::uint64_t clock) {
  if (!warps) return false;
  for (std::uint32_t w = 0; w < 32; ++w)
    if ((warps >> w & 1) && t->acquired[w] <= clock) return false;
  return true;
}

// --- warp_collectives.cpp, tma.cpp: what the scheduler releases

// Completes the shuffles of every warp whose live lanes all wait at one; returns whether any did.
bool release_shuffles(Worker& w);
// Threads waiting at an mbarrier whose phase has completed run again.
bool release_mbarriers(Worker& w);

} // namespace tilec::rt::emu

#pragma GCC visibility pop
