#pragma once
// A minimal test-only executor for the emu target, so the codegen tests can
// run the real SIMT lowering on the CPU and compare it with the interpreter.
// (The product emulator lives in runtime/; this one only has to be correct:
// one OS thread, GPU threads as ucontext fibers run round-robin, switching at
// barriers; shuffles are two block barriers, valid because the lowering only
// shuffles in uniform control flow.) Its C source is built with `cc` at test
// time and loaded RTLD_GLOBAL, so kernel libraries resolve tilec_emu_* to it.
#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <filesystem>
#include <fstream>
#include <string>

#include "codegen/compile.h"
#include "interp/interpreter.h"
#include "ir/float16.h"

namespace tilec::codegen::test {

inline const char* kEmuStubSource = R"C(
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

typedef void (*kernel_fn)(void* ctx, void* const* args);
struct block;
typedef struct tilec_emu_thread {
  int tid, done, waiting;
  struct block* blk;
  ucontext_t uc;
  char* stack;
} tilec_emu_thread;
struct block {
  int n;
  uint32_t bid[3], grid[3];
  unsigned char* smem;
  uint32_t shfl[1024];
  ucontext_t sched;
  kernel_fn fn;
  void* const* args;
};
static tilec_emu_thread* g_start;
static int g_error;

static void entry(void) {
  tilec_emu_thread* t = g_start;
  t->blk->fn(t, t->blk->args);
  t->done = 1;
}

uint32_t tilec_emu_thread_id(tilec_emu_thread* t) { return (uint32_t)t->tid; }
uint32_t tilec_emu_block_dim(tilec_emu_thread* t) { return (uint32_t)t->blk->n; }
uint32_t tilec_emu_block_id(tilec_emu_thread* t, uint32_t a) { return t->blk->bid[a]; }
uint32_t tilec_emu_num_blocks(tilec_emu_thread* t, uint32_t a) { return t->blk->grid[a]; }
void tilec_emu_barrier(tilec_emu_thread* t) {
  t->waiting = 1;
  swapcontext(&t->uc, &t->blk->sched);
}
void* tilec_emu_shared_base(tilec_emu_thread* t) { return t->blk->smem; }
uint32_t tilec_emu_shfl_xor(tilec_emu_thread* t, uint32_t v, uint32_t m) {
  t->blk->shfl[t->tid] = v;
  tilec_emu_barrier(t);
  uint32_t r = t->blk->shfl[(t->tid & ~31) | ((t->tid & 31) ^ (int)m)];
  tilec_emu_barrier(t);
  return r;
}
uint32_t tilec_emu_shfl_idx(tilec_emu_thread* t, uint32_t v, uint32_t src) {
  t->blk->shfl[t->tid] = v;
  tilec_emu_barrier(t);
  uint32_t r = t->blk->shfl[(t->tid & ~31) | (src & 31)];
  tilec_emu_barrier(t);
  return r;
}
void tilec_emu_load(tilec_emu_thread* t, const void* a, uint32_t n, void* d) {
  if (((uintptr_t)a) % n) { fprintf(stderr, "misaligned load %p/%u\n", a, n); g_error = 1; }
  memcpy(d, a, n);
}
void tilec_emu_store(tilec_emu_thread* t, void* a, uint32_t n, const void* s) {
  if (((uintptr_t)a) % n) { fprintf(stderr, "misaligned store %p/%u\n", a, n); g_error = 1; }
  memcpy(a, s, n);
}
float tilec_emu_atomic_add_f32(tilec_emu_thread* t, float* a, float v) { float o = *a; *a = o + v; return o; }
int32_t tilec_emu_atomic_add_i32(tilec_emu_thread* t, int32_t* a, int32_t v) {
  int32_t o = *a; *a = (int32_t)((uint32_t)o + (uint32_t)v); return o;
}
static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
float tilec_emu_bf16_to_f32(tilec_emu_thread* t, uint16_t h) { return bitsf((uint32_t)h << 16); }
uint16_t tilec_emu_f32_to_bf16(tilec_emu_thread* t, float f) {
  uint32_t u = fbits(f);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
uint16_t tilec_emu_f32_to_f16(tilec_emu_thread* t, float f) {
  uint32_t u = fbits(f), sign = (u >> 16) & 0x8000, exp = (u >> 23) & 0xff, man = u & 0x7fffff;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000;
    int shift = 14 - e;
    uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return (uint16_t)(sign | half);
  }
  uint32_t half = ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return (uint16_t)(sign | half);
}
float tilec_emu_f16_to_f32(tilec_emu_thread* t, uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) { float v = ldexpf((float)man, -24); return sign ? -v : v; }
  if (exp == 31) return bitsf(sign | 0x7f800000 | (man << 13));
  return bitsf(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

/* Returns 0 on success. */
int stub_launch(kernel_fn fn, const uint32_t grid[3], int threads, int smem_bytes, void* const* args) {
  struct block* b = calloc(1, sizeof *b);
  tilec_emu_thread* th = calloc((size_t)threads, sizeof *th);
  g_error = 0;
  b->n = threads;
  b->fn = fn;
  b->args = args;
  memcpy(b->grid, grid, sizeof b->grid);
  b->smem = aligned_alloc(16, (size_t)(smem_bytes + 16) / 16 * 16);
  for (uint32_t z = 0; z < grid[2]; ++z)
    for (uint32_t y = 0; y < grid[1]; ++y)
      for (uint32_t x = 0; x < grid[0]; ++x) {
        b->bid[0] = x; b->bid[1] = y; b->bid[2] = z;
        memset(b->smem, 0xcd, (size_t)smem_bytes);
        for (int i = 0; i < threads; ++i) {
          tilec_emu_thread* t = &th[i];
          t->tid = i; t->done = 0; t->waiting = 0; t->blk = b;
          if (!t->stack) t->stack = malloc(1 << 18);
          getcontext(&t->uc);
          t->uc.uc_stack.ss_sp = t->stack;
          t->uc.uc_stack.ss_size = 1 << 18;
          t->uc.uc_link = &b->sched;
          makecontext(&t->uc, entry, 0);
        }
        int started = 0;
        for (;;) {
          int done = 0, waiting = 0;
          for (int i = 0; i < threads; ++i) {
            tilec_emu_thread* t = &th[i];
            if (t->done) { ++done; continue; }
            t->waiting = 0;
            if (!started) g_start = t;
            swapcontext(&b->sched, &t->uc);
            if (t->done) ++done; else ++waiting;
          }
          started = 1;
          if (done == threads) break;
          if (done) { fprintf(stderr, "barrier not reached by every thread\n"); return 2; }
        }
      }
  for (int i = 0; i < threads; ++i) free(th[i].stack);
  free(th); free(b->smem); free(b);
  return g_error;
}
)C";

class EmuStub {
public:
  using Launch = int (*)(void (*)(void*, void* const*), const uint32_t*, int, int, void* const*);
  static EmuStub& get() {
    static EmuStub s;
    return s;
  }
  Launch launch = nullptr;
  std::string dir;

private:
  EmuStub() {
    namespace fs = std::filesystem;
    std::string tmpl = (fs::temp_directory_path() / "tilec-emu-stub-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) return;
    dir = tmpl;
    std::ofstream(dir + "/stub.c") << kEmuStubSource;
    std::string cmd = "cc -shared -fPIC -O1 -o " + dir + "/libstub.so " + dir + "/stub.c -lm";
    if (std::system(cmd.c_str()) != 0) return;
    void* h = dlopen((dir + "/libstub.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) return;
    launch = reinterpret_cast<Launch>(dlsym(h, "stub_launch"));
  }
};

// Compiles `fn` for the emu target, links it, runs it over `grid` on `args`
// (buffers are modified in place). Returns "" or what went wrong.
inline std::string run_emulated(const ir::Function& fn, interp::Grid grid, const std::vector<interp::Arg>& args,
                                int num_warps = 4) {
  EmuStub& stub = EmuStub::get();
  if (!stub.launch) return "could not build the test emulator stub with cc";
  CompileOptions o;
  o.target = Target::emu;
  o.num_warps = num_warps;
  CompiledKernel k = compile(fn, o);
  static int counter = 0;
  std::string lib = stub.dir + "/k" + std::to_string(counter++) + ".so";
  link_emu_library(k.object, lib);
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return std::string("dlopen: ") + dlerror();
  auto entry = reinterpret_cast<void (*)(void*, void* const*)>(dlsym(h, k.symbol.c_str()));
  if (!entry) return "kernel symbol missing";
  std::vector<std::array<unsigned char, 8>> storage(fn.params.size());
  std::vector<void*> argv(fn.params.size());
  for (size_t i = 0; i < fn.params.size(); ++i) {
    const ir::Type& t = fn.params[i]->type;
    unsigned char* s = storage[i].data();
    if (t.is_ptr()) {
      void* p = args[i].buffer->bytes.data();
      std::memcpy(s, &p, sizeof p);
    } else if (ir::is_float(t.dtype())) {
      float f = static_cast<float>(args[i].f);
      if (t.dtype() == ir::DType::f32) std::memcpy(s, &f, 4);
      else {
        uint16_t h16 = t.dtype() == ir::DType::f16 ? f32_to_f16_bits(f) : f32_to_bf16_bits(f);
        std::memcpy(s, &h16, 2);
      }
    } else {
      int64_t v = args[i].i;
      std::memcpy(s, &v, 8); // little-endian: the low bytes are the narrower value
    }
    argv[i] = s;
  }
  uint32_t g[3] = {static_cast<uint32_t>(grid[0]), static_cast<uint32_t>(grid[1]), static_cast<uint32_t>(grid[2])};
  int rc = stub.launch(entry, g, k.threads_per_block, k.shared_bytes, argv.data());
  dlclose(h);
  return rc == 0 ? "" : "emulated launch failed (see stderr)";
}

inline void fill_random(interp::Buffer& b, uint32_t seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  for (size_t i = 0; i < b.count(); ++i) {
    double v = d(rng);
    b.set(i, ir::is_float(b.dtype) ? v : std::floor(v));
  }
}

using MakeArgs = std::function<std::vector<interp::Arg>(std::vector<interp::Buffer>&)>;

// Runs `fn` in the interpreter and, compiled for the emu target, in the test
// emulator, each on its own copy of `init`; every buffer must agree within
// tol * (1 + |reference|).
inline void check_against_interpreter(const ir::Function& fn, interp::Grid grid,
                                      const std::vector<interp::Buffer>& init, const MakeArgs& make_args,
                                      double tol, int num_warps = 4, std::vector<size_t> skip = {}) {
  auto ref = init;
  interp::interpret(fn, grid, make_args(ref));
  auto emu = init;
  std::string err = run_emulated(fn, grid, make_args(emu), num_warps);
  INFO("kernel " << fn.name);
  REQUIRE(err == "");
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::find(skip.begin(), skip.end(), i) != skip.end()) continue;
    int bad = 0;
    for (size_t j = 0; j < ref[i].count(); ++j) {
      double a = ref[i].get(j), b = emu[i].get(j);
      if (std::isnan(a) && std::isnan(b)) continue;
      if (a == b) continue;
      if (!(std::fabs(a - b) <= tol * (1 + std::fabs(a)))) {
        if (++bad <= 5) FAIL_CHECK("buffer " << ref[i].name << "[" << j << "]: interpreter " << a << ", emulated " << b);
      }
    }
    CHECK(bad == 0);
  }
}

} // namespace tilec::codegen::test
