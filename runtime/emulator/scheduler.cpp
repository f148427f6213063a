// Running blocks: each worker (an OS thread) takes the grid's blocks in turn and runs a block's
// threads as fibers from sync point to sync point until the block ends or is stuck; barriers.
#include "runtime/emulator/internal.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

namespace tilec::rt::emu {

std::string block_str(const Worker& w) { return fmt::format("({}, {}, {})", w.block[0], w.block[1], w.block[2]); }

std::string where(const tilec_emu_thread* t) {
  return fmt::format("kernel '{}', block {}, thread {}", t->worker->launch->manifest->kernel, block_str(*t->worker),
                     t->tid);
}

[[noreturn]] void abort_thread(tilec_emu_thread* t, std::string&& message) {
  Worker& w = *t->worker;
  w.error = std::move(message);
  t->state = State::failed;
  // Leave the fiber that runs, which need not be t's (a warpgroup MMA's operand reads fail as
  // its first thread on the last arriving thread's fiber): switching away from t's fiber while
  // on another's would save this stack pointer as t's and later resume the other at a stale one.
  tilec_emu_thread* running = w.running;
  if (!running) {
    fmt::print(stderr, "tilec emulator: a thread failed outside every fiber: {}\n", w.error);
    std::abort();
  }
  running->state = State::failed;
  emu::fiber_exit(running->fiber, w.scheduler);
}

namespace {

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

// What is wrong with the block's setmaxnreg at its end, or "": every warpgroup's threads ran
// it as often, to the same ceiling (.sync.aligned: all its warps), and the ceilings fit the
// register file.
std::string setmaxnreg_error(const Worker& w) {
  const std::uint32_t n = std::uint32_t(w.threads.size());
  std::uint32_t launch = 0;
  for (const tilec_emu_thread& t : w.threads) launch = std::max(launch, t.maxnreg_launch);
  if (!launch) return "";
  const std::string where = fmt::format("kernel '{}', block {}", w.launch->manifest->kernel, block_str(w));
  std::uint64_t total = 0;
  for (std::uint32_t g = 0; g * 128 < n; ++g) {
    const tilec_emu_thread& first = w.threads[g * 128];
    for (std::uint32_t i = g * 128; i < std::min(n, g * 128 + 128); ++i) {
      const tilec_emu_thread& t = w.threads[i];
      if (t.maxnreg_runs != first.maxnreg_runs || t.maxnreg != first.maxnreg)
        return fmt::format("{}: setmaxnreg misuse: thread {} ran it {} time{} (ceiling {}), thread {} of the same "
                           "warpgroup {} {} time{} (ceiling {}); every warp of a warpgroup runs each setmaxnreg "
                           "(.sync.aligned; at {})", where, first.tid, first.maxnreg_runs,
                           first.maxnreg_runs == 1 ? "" : "s", first.maxnreg, t.tid, g, t.maxnreg_runs,
                           t.maxnreg_runs == 1 ? "" : "s", t.maxnreg, first.maxnreg_runs ? first.maxnreg_site : t.maxnreg_site);
    }
    if (first.maxnreg_runs && n < g * 128 + 128)
      return fmt::format("{}: setmaxnreg misuse: the block's {} threads end in part of warpgroup {}; setmaxnreg "
                         "takes whole warpgroups (at {})", where, n, g, first.maxnreg_site);
  }
  for (const tilec_emu_thread& t : w.threads) total += t.maxnreg ? t.maxnreg : launch;
  if (total > 65536)
    return fmt::format("{}: setmaxnreg misuse: the warps' register ceilings add up to {} registers, more than the "
                       "register file's 65536 (setmaxnreg.inc would wait forever)", where, total);
  return "";
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
    t.wgmma_issued = t.wgmma_retired = 0;
    t.maxnreg_runs = t.maxnreg = 0;
    std::fill(std::begin(t.acquired), std::end(t.acquired), 0);
    for (auto& r : t.wgmma_results) r.retired = true; // a failed block's results are dropped
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
      w.running = &t;
      emu::fiber_switch(w.scheduler, t.fiber);
      w.running = nullptr;
      if (t.state == State::failed) return false;
    }
    std::uint32_t done = 0, at_barrier = 0;
    std::uint32_t barrier = 0, barrier_threads = 0;
    bool one_barrier = true, runnable = false;
    for (const tilec_emu_thread& t : w.threads) {
      // A warpgroup MMA's last thread releases the others as it runs, after some had their turn.
      runnable = runnable || t.state == State::runnable;
      if (t.state == State::done) ++done;
      else if (t.state == State::at_barrier) {
        if (at_barrier++ == 0) barrier = t.barrier_id, barrier_threads = t.barrier_threads;
        else one_barrier = one_barrier && t.barrier_id == barrier && t.barrier_threads == barrier_threads;
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
      if (std::string why = setmaxnreg_error(w); !why.empty()) {
        w.error = std::move(why);
        return false;
      }
      count_requests(w);
      return true;
    }
    if (runnable || release_shuffles(w) || release_mbarriers(w)) continue;
    if (at_barrier == n && one_barrier && barrier_threads == 0) {
      for (tilec_emu_thread& t : w.threads) t.state = State::runnable, t.fences_at_barrier = t.proxy_fences;
      ++w.epoch; // accesses on either side of a barrier never race
      continue;
    }
    // A barrier among some threads (bar.sync 1, count): those at it run on once all of them
    // are; the others' accesses are ordered by the mbarriers they wait for, not by it.
    if (at_barrier == barrier_threads && one_barrier && barrier_threads != 0) {
      for (tilec_emu_thread& t : w.threads)
        if (t.state == State::at_barrier) t.state = State::runnable, t.fences_at_barrier = t.proxy_fences;
      ++w.epoch;
      continue;
    }
    w.error = stuck_message(w);
    return false;
  }
}

} // namespace

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
    auto moved = [&] { return std::accumulate(w.counters.request_bytes.begin(), w.counters.request_bytes.end(), std::int64_t(0)); };
    const std::int64_t before = l.block_request_bytes.empty() ? 0 : moved();
    if (!run_block(w)) {
      l.fail(w.error);
      break;
    }
    if (!l.block_request_bytes.empty()) l.block_request_bytes[b] = moved() - before;
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

} // namespace tilec::rt::emu

using namespace tilec::rt::emu;

extern "C" {

void tilec_emu_barrier(tilec_emu_thread* t, uint32_t id) {
  t->barrier_id = id;
  t->barrier_threads = 0;
  t->state = State::at_barrier;
  yield(t);
}

void tilec_emu_barrier_among(tilec_emu_thread* t, uint32_t id, uint32_t threads) {
  if (threads == 0 || threads % 32 != 0 || threads > t->worker->threads.size())
    fail_thread(t, "bar.sync among {} threads in a block of {}: the count is a multiple of 32 up to the block's "
                   "threads", threads, t->worker->threads.size());
  t->barrier_id = id;
  t->barrier_threads = threads;
  t->state = State::at_barrier;
  yield(t);
}

void tilec_emu_setmaxnreg(tilec_emu_thread* t, uint32_t count, uint32_t inc, uint32_t launch_count, const char* site) {
  const char* action = inc ? "inc" : "dec";
  if (count % 8 != 0 || count < 24 || count > 256)
    fail_thread(t, "setmaxnreg misuse (at {}): setmaxnreg.{} to {} registers; the count is a multiple of 8 in "
                   "[24, 256]", site, action, count);
  const std::uint32_t current = t->maxnreg ? t->maxnreg : launch_count;
  if (inc ? count < current : count > current)
    fail_thread(t, "setmaxnreg misuse (at {}): setmaxnreg.{} to {} registers from the warp's ceiling of {}", site,
                action, count, current);
  t->maxnreg = count;
  t->maxnreg_launch = launch_count;
  t->maxnreg_site = site;
  ++t->maxnreg_runs;
}

} // extern "C"
