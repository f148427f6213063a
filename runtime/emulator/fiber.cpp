#include "runtime/emulator/fiber.h"

#include "abi/error.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define TILEC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TILEC_ASAN 1
#endif
#endif
#ifndef TILEC_ASAN
#define TILEC_ASAN 0
#endif
#if TILEC_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__)
// tilec_emu_fiber_switch(void** save_sp, void* load_sp): pushes the callee-saved registers
// and the floating-point control state, stores the stack pointer, and pops the other
// fiber's. A new fiber's first "return" lands in tilec_emu_fiber_start, which calls
// r13(r12), that is fiber_entry(&context), on a 16-byte aligned stack.
asm(R"(
  .text
  .p2align 4
  .globl tilec_emu_fiber_switch
  .hidden tilec_emu_fiber_switch
  .type tilec_emu_fiber_switch, @function
tilec_emu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tilec_emu_fiber_switch, .-tilec_emu_fiber_switch

  .p2align 4
  .globl tilec_emu_fiber_start
  .hidden tilec_emu_fiber_start
  .type tilec_emu_fiber_start, @function
tilec_emu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size tilec_emu_fiber_start, .-tilec_emu_fiber_start
)");

extern "C" void tilec_emu_fiber_switch(void** save_sp, void* load_sp);
extern "C" void tilec_emu_fiber_start();
#endif

namespace tilec::rt::emu {

namespace {

#if TILEC_ASAN
// The context this OS thread last switched away from. When it is the thread's own stack, the
// fiber that starts or resumes next learns that stack's bounds from ASan and records them
// there, so that switching back can name them.
thread_local FiberContext* t_switched_from = nullptr;
#endif

// Tells ASan which stack runs next. A null `fake_stack`: `from` is never resumed, so its
// fake stack (detect_stack_use_after_return) is freed.
void before_switch(FiberContext& from, const FiberContext& to, void** fake_stack) {
#if TILEC_ASAN
  t_switched_from = &from;
  __sanitizer_start_switch_fiber(fake_stack, to.stack, to.stack_size);
#endif
}

// Runs first on the stack switched to.
void after_switch(void* fake_stack) {
#if TILEC_ASAN
  const void* bottom = nullptr;
  std::size_t size = 0;
  __sanitizer_finish_switch_fiber(fake_stack, &bottom, &size);
  if (FiberContext* from = t_switched_from; from && !from->is_fiber) {
    from->stack = bottom;
    from->stack_size = size;
  }
#endif
}

// The first function a new fiber runs.
void fiber_entry(void* p) {
  after_switch(nullptr);
  auto* ctx = static_cast<FiberContext*>(p);
  ctx->entry(ctx->arg);
  std::abort(); // entry ends with fiber_exit
}

// What fiber_init does on every platform; a stack reused from an abandoned fiber may still
// hold ASan's poisoned redzones of that fiber's frames.
void init_common(FiberContext& ctx, void* stack, std::size_t size, void (*entry)(void*), void* arg) {
  ctx.entry = entry;
  ctx.arg = arg;
  ctx.stack = stack;
  ctx.stack_size = size;
  ctx.is_fiber = true;
#if TILEC_ASAN
  __asan_unpoison_memory_region(stack, size);
#endif
}

} // namespace

#if defined(__x86_64__)

namespace {
void raw_switch(FiberContext& from, FiberContext& to) { tilec_emu_fiber_switch(&from.sp, to.sp); }
} // namespace

void fiber_init(FiberContext& ctx, void* stack, std::size_t size, void (*entry)(void*), void* arg) {
  init_common(ctx, stack, size, entry, arg);
  auto top = (reinterpret_cast<std::uintptr_t>(stack) + size) & ~std::uintptr_t(15);
  auto* w = reinterpret_cast<std::uint64_t*>(top);
  w[-1] = 0;
  w[-2] = 0;
  w[-3] = reinterpret_cast<std::uint64_t>(&tilec_emu_fiber_start); // return address
  w[-4] = 0;                                                       // rbp
  w[-5] = 0;                                                       // rbx
  w[-6] = reinterpret_cast<std::uint64_t>(&ctx);                   // r12
  w[-7] = reinterpret_cast<std::uint64_t>(&fiber_entry);           // r13
  w[-8] = 0;                                                       // r14
  w[-9] = 0;                                                       // r15
  std::uint32_t csr[2] = {0x1f80, 0x037f}; // MXCSR and x87 control word defaults
  std::memcpy(&w[-10], csr, sizeof csr);
  ctx.sp = &w[-10];
}

#else

namespace {
// makecontext passes int arguments only: the context's address travels as two halves.
void start_trampoline(unsigned hi, unsigned lo) {
  fiber_entry(reinterpret_cast<FiberContext*>((std::uintptr_t(hi) << 32) | lo));
}

void raw_switch(FiberContext& from, FiberContext& to) { swapcontext(&from.uc, &to.uc); }
} // namespace

void fiber_init(FiberContext& ctx, void* stack, std::size_t size, void (*entry)(void*), void* arg) {
  init_common(ctx, stack, size, entry, arg);
  getcontext(&ctx.uc);
  ctx.uc.uc_stack.ss_sp = stack;
  ctx.uc.uc_stack.ss_size = size;
  ctx.uc.uc_link = nullptr;
  auto p = reinterpret_cast<std::uintptr_t>(&ctx);
  makecontext(&ctx.uc, reinterpret_cast<void (*)()>(start_trampoline), 2, unsigned(p >> 32), unsigned(p));
}

#endif

void fiber_switch(FiberContext& from, FiberContext& to) {
  void* fake_stack = nullptr;
  before_switch(from, to, &fake_stack);
  raw_switch(from, to);
  after_switch(fake_stack);
}

void fiber_exit(FiberContext& from, FiberContext& to) {
  before_switch(from, to, nullptr);
  raw_switch(from, to);
  std::abort(); // never resumed
}

StackArena::StackArena(std::size_t count, std::size_t bytes) : count_(count) {
  auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  bytes_ = (bytes + page - 1) / page * page;
  guard_ = page;
  stride_ = bytes_ + guard_;
  void* p = ::mmap(nullptr, stride_ * count_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  if (p == MAP_FAILED) throw Error("emulator: cannot map " + std::to_string(count_) + " fiber stacks");
  base_ = static_cast<char*>(p);
  for (std::size_t i = 0; i < count_; ++i) ::mprotect(base_ + i * stride_, guard_, PROT_NONE);
}

StackArena::~StackArena() { ::munmap(base_, stride_ * count_); }

namespace {
std::mutex g_pool_mutex;
std::vector<StackArena*>& pool() {
  static auto* p = new std::vector<StackArena*>; // never destroyed: workers may outlive statics
  return *p;
}
} // namespace

void ArenaRelease::operator()(StackArena* a) const {
  std::lock_guard lock(g_pool_mutex);
  if (pool().size() < 64) pool().push_back(a);
  else delete a;
}

PooledArena acquire_stacks(std::size_t count, std::size_t bytes) {
  // AddressSanitizer's frames (redzones around every local) take several times the stack of
  // the uninstrumented runtime: a warpgroup MMA's operand reads and sort, run on the last
  // arriving thread's fiber, overflowed 64 KiB. The pages are reserved lazily, so the larger
  // stacks cost only what is touched.
  if (TILEC_ASAN) bytes *= 8;
  {
    std::lock_guard lock(g_pool_mutex);
    auto& p = pool();
    for (std::size_t i = 0; i < p.size(); ++i)
      if (p[i]->count() >= count && p[i]->bytes() >= bytes) {
        StackArena* a = p[i];
        p.erase(p.begin() + static_cast<std::ptrdiff_t>(i));
        return PooledArena(a);
      }
  }
  return PooledArena(new StackArena(count, bytes));
}

} // namespace tilec::rt::emu
