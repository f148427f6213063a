#pragma once
// Fibers for the emulator: a GPU thread's stack and the switch between fibers. On x86-64 the
// switch is a few instructions (callee-saved registers, MXCSR and the x87 control word);
// elsewhere it falls back to ucontext, which is correct but makes a system call per switch.
#include <cstddef>
#include <memory>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace tilec::rt::emu {

// A fiber made by fiber_init, or an OS thread's own stack (a default-constructed context that
// a fiber_switch saves into).
struct FiberContext {
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
  void (*entry)(void*) = nullptr;
  void* arg = nullptr;
  // The stack this context runs on, for AddressSanitizer, which must be told of every
  // switch; for an OS thread's stack, learned on each switch away from it.
  const void* stack = nullptr;
  std::size_t stack_size = 0;
  bool is_fiber = false;
};

// Prepares `ctx` so that switching to it runs entry(arg) on [stack, stack + size). `entry`
// must never return: it ends with fiber_exit.
void fiber_init(FiberContext& ctx, void* stack, std::size_t size, void (*entry)(void*), void* arg);
// Saves the running fiber's state in `from` and resumes `to`.
void fiber_switch(FiberContext& from, FiberContext& to);
// Like fiber_switch, for a fiber that will never be resumed (finished or abandoned).
[[noreturn]] void fiber_exit(FiberContext& from, FiberContext& to);

// `count` stacks of `bytes` each, every one with an inaccessible guard page below it, so an
// overflow faults instead of corrupting a neighbour. Arenas are pooled and reused.
class StackArena {
public:
  StackArena(std::size_t count, std::size_t bytes);
  ~StackArena();
  StackArena(const StackArena&) = delete;
  StackArena& operator=(const StackArena&) = delete;

  void* stack(std::size_t i) const { return base_ + i * stride_ + guard_; }
  std::size_t count() const { return count_; }
  std::size_t bytes() const { return bytes_; }

private:
  char* base_ = nullptr;
  std::size_t count_, bytes_, guard_, stride_;
};

// A pooled arena with at least `count` stacks of `bytes`; returned to the pool on release.
struct ArenaRelease {
  void operator()(StackArena* a) const;
};
using PooledArena = std::unique_ptr<StackArena, ArenaRelease>;
PooledArena acquire_stacks(std::size_t count, std::size_t bytes);

} // namespace tilec::rt::emu
