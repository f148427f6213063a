// EmuModule: opens an emu module's library, launches it over a pool of worker threads and sums
// their counters into the launch's stats; the process's default schedule (TILEC_EMU_SCHEDULE).
#include "runtime/emulator/internal.h"

#include "abi/device_print.h"
#include "runtime/tensor_map.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <dlfcn.h>
#include <thread>

namespace tilec::rt {

using emu::KernelEntry;
using emu::Launch;
using emu::run_worker;
using emu::setup_worker;
using emu::Track;
using emu::Worker;

namespace {

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

// Every entry point of abi/emu_abi.h, by the file that defines it. The kernel libraries call
// them through the dynamic symbol table, which a static link cannot see, and a linker takes a
// member of the runtime's static library only for a symbol something references: this table,
// in the member that defines EmuModule, makes a program that uses EmuModule link all of them.
// A new entry point goes here too.
[[gnu::used]] void* const kEntryPoints[] = {
    // scheduler.cpp
    reinterpret_cast<void*>(&tilec_emu_barrier), reinterpret_cast<void*>(&tilec_emu_barrier_among),
    reinterpret_cast<void*>(&tilec_emu_setmaxnreg),
    // entry_points.cpp
    reinterpret_cast<void*>(&tilec_emu_thread_id), reinterpret_cast<void*>(&tilec_emu_block_dim),
    reinterpret_cast<void*>(&tilec_emu_block_id), reinterpret_cast<void*>(&tilec_emu_num_blocks),
    reinterpret_cast<void*>(&tilec_emu_f16_to_f32), reinterpret_cast<void*>(&tilec_emu_f32_to_f16),
    reinterpret_cast<void*>(&tilec_emu_bf16_to_f32), reinterpret_cast<void*>(&tilec_emu_f32_to_bf16),
    reinterpret_cast<void*>(&tilec_emu_fp8x2_to_f16x2), reinterpret_cast<void*>(&tilec_emu_f32x2_to_fp8x2),
    reinterpret_cast<void*>(&tilec_emu_print_op), reinterpret_cast<void*>(&tilec_emu_print),
    reinterpret_cast<void*>(&tilec_emu_assert_fail),
    // global_memory.cpp
    reinterpret_cast<void*>(&tilec_emu_load), reinterpret_cast<void*>(&tilec_emu_store),
    reinterpret_cast<void*>(&tilec_emu_atomic_f32), reinterpret_cast<void*>(&tilec_emu_atomic_i32),
    reinterpret_cast<void*>(&tilec_emu_atomic_add_f32), reinterpret_cast<void*>(&tilec_emu_atomic_add_i32),
    // shared_memory.cpp
    reinterpret_cast<void*>(&tilec_emu_shared_base), reinterpret_cast<void*>(&tilec_emu_shared_load),
    reinterpret_cast<void*>(&tilec_emu_shared_store),
    // warp_collectives.cpp
    reinterpret_cast<void*>(&tilec_emu_shfl_xor), reinterpret_cast<void*>(&tilec_emu_shfl_idx),
    reinterpret_cast<void*>(&tilec_emu_shfl_sync), reinterpret_cast<void*>(&tilec_emu_mma_m16n8k16),
    reinterpret_cast<void*>(&tilec_emu_ldmatrix),
    // cp_async.cpp
    reinterpret_cast<void*>(&tilec_emu_cp_async), reinterpret_cast<void*>(&tilec_emu_cp_async_commit),
    reinterpret_cast<void*>(&tilec_emu_cp_async_wait),
    // tma.cpp
    reinterpret_cast<void*>(&tilec_emu_mbarrier_init), reinterpret_cast<void*>(&tilec_emu_mbarrier_arrive_expect_tx),
    reinterpret_cast<void*>(&tilec_emu_mbarrier_wait), reinterpret_cast<void*>(&tilec_emu_mbarrier_arrive),
    reinterpret_cast<void*>(&tilec_emu_tma_load),
    reinterpret_cast<void*>(&tilec_emu_tma_store), reinterpret_cast<void*>(&tilec_emu_bulk_commit),
    reinterpret_cast<void*>(&tilec_emu_bulk_wait),
    // wgmma.cpp
    reinterpret_cast<void*>(&tilec_emu_wgmma), reinterpret_cast<void*>(&tilec_emu_wgmma_rs),
    reinterpret_cast<void*>(&tilec_emu_wgmma_fence),
    reinterpret_cast<void*>(&tilec_emu_wgmma_commit), reinterpret_cast<void*>(&tilec_emu_wgmma_wait),
    reinterpret_cast<void*>(&tilec_emu_wgmma_fence_operands),
    reinterpret_cast<void*>(&tilec_emu_fence_proxy_async),
};

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
  if (blocks <= kMaxBlocksCounted) l.block_request_bytes.assign(blocks, 0);
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
  st.block_request_bytes = std::move(l.block_request_bytes);
  st.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

} // namespace tilec::rt
