// cp.async: Ampere's asynchronous 16-byte copies from global into shared memory, their commit
// groups and waits, race-checked as writes that may land any time from their issue to their wait.
#include "runtime/emulator/internal.h"

#include <cstring>

using namespace tilec::rt::emu;

extern "C" {

void tilec_emu_cp_async(tilec_emu_thread* t, void* dst, const void* src, uint32_t src_bytes, const char* site) {
  if (src_bytes != 0 && src_bytes != 16) {
    fail_thread(t, "cp.async of {} source bytes (0 or 16) at {}", src_bytes, site);
  }
  std::size_t off = check_shared(t, dst, 16, "asynchronous copy", site);
  tilec_emu_thread::PendingCopy c{t->open_group, t->worker->epoch, dst, {}, site};
  if (src_bytes) {
    check_access(t, src, 16, true, false, "asynchronous copy",
                 reinterpret_cast<std::uintptr_t>(__builtin_return_address(0)));
    std::memcpy(c.data, src, 16);
  }
  // The copy may land at once: its bytes must be free of other threads' accesses now.
  check_shared_write(t, off, 16, c.data, site, 0, c.epoch, false);
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
      check_shared_write(t, off, 16, c.data, c.site, 0, c.epoch, true);
    }
    else still.push_back(c);
  }
  t->pending_copies = std::move(still);
}

} // extern "C"
