/* A stand-in for libcuda.so.1 so tests can drive runtime/cuda.cpp on machines without a GPU.
 * Built as <build>/fake_cuda/libcuda.so.1 and picked up through LD_LIBRARY_PATH by a child
 * process only. Device memory is host memory. It loads any module and finds any kernel a PTX
 * image declares (a cubin, any kernel), but the one it can "run" is vector_add (out = x + y
 * over n floats, whatever the grid); other launches do nothing, so tests check what reached the
 * driver: with FAKE_CUDA_TRACE it also prints allocations, copies and the launched kernel.
 *
 * It insists on the discipline the real driver needs: calls that use a context fail with
 * CUDA_ERROR_INVALID_CONTEXT unless one was pushed. With FAKE_CUDA_TRACE set it prints each
 * notable call, and at exit what is still alive, to stderr. FAKE_CUDA_NO_DEVICE makes cuInit
 * fail as on a machine with a driver but no GPU; FAKE_CUDA_OOM makes cuMemAlloc fail; PTX
 * containing FAKE_JIT_ERROR fails to JIT with an error log. FAKE_CUDA_RECORD=FILE appends one line
 * per driver call to FILE, as it is made: the entry point's name, then what it was given that a
 * test checks (bytes, the kernel and its stream: "cuLaunchKernel paged_attention stream 7f..."),
 * so a test can assert which calls a span of its program made (tests/runtime/test_graph_safe_run.cpp). */
#include <cuda.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int context_depth, retained, live_allocations, live_modules, live_streams, live_events;
static struct { int unused; } the_context, a_stream, an_event;

/* A loaded module: its PTX text (NULL for a cubin) and the functions looked up in it. */
struct FakeFunction {
  char name[128];
};
struct FakeModule {
  char* ptx;
  struct FakeFunction functions[16];
  int function_count;
};

static int tracing(void) { return getenv("FAKE_CUDA_TRACE") != NULL; }
#define TRACE(...)                                                                                 \
  do {                                                                                             \
    if (tracing()) fprintf(stderr, "fake: " __VA_ARGS__);                                          \
  } while (0)
/* One line for FAKE_CUDA_RECORD's file: the call's name (the function's, less "fake_"), then
   `details` (a printf format; NULL: none). The file is opened and closed per call, so a test
   may append lines of its own between calls. */
__attribute__((format(printf, 2, 3))) static void record(const char* name, const char* details, ...) {
  const char* path = getenv("FAKE_CUDA_RECORD");
  if (!path) return;
  FILE* f = fopen(path, "a");
  if (!f) return;
  fputs(name + strlen("fake_"), f);
  if (details) {
    va_list ap;
    va_start(ap, details);
    fputc(' ', f);
    vfprintf(f, details, ap);
    va_end(ap);
  }
  fputc('\n', f);
  fclose(f);
}
#define RECORD(...) record(__func__, __VA_ARGS__)
#define STREAM(s) ((unsigned long long)(size_t)(s)) /* 0: the legacy default stream */
#define NEED_CONTEXT()                                                                             \
  do {                                                                                             \
    if (context_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;                                     \
  } while (0)

static CUresult fake_cuGetErrorName(CUresult error, const char** s) {
  RECORD("%d", (int)error);
  switch (error) {
  case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; return CUDA_SUCCESS;
  case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return CUDA_SUCCESS;
  case CUDA_ERROR_NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_PTX: *s = "CUDA_ERROR_INVALID_PTX"; return CUDA_SUCCESS;
  case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
  default: *s = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
}

static CUresult fake_cuGetErrorString(CUresult error, const char** s) {
  RECORD("%d", (int)error);
  switch (error) {
  case CUDA_SUCCESS: *s = "no error"; return CUDA_SUCCESS;
  case CUDA_ERROR_OUT_OF_MEMORY: *s = "out of memory"; return CUDA_SUCCESS;
  case CUDA_ERROR_NO_DEVICE: *s = "no CUDA-capable device is detected"; return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_CONTEXT: *s = "invalid device context"; return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_PTX: *s = "a PTX JIT compilation failed"; return CUDA_SUCCESS;
  case CUDA_ERROR_NOT_FOUND: *s = "named symbol not found"; return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_VALUE: *s = "invalid argument"; return CUDA_SUCCESS;
  default: *s = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
}

static CUresult fake_cuInit(unsigned flags) {
  RECORD(NULL);
  (void)flags;
  return getenv("FAKE_CUDA_NO_DEVICE") ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}
static CUresult fake_cuDriverGetVersion(int* v) {
  RECORD(NULL);
  *v = 12040;
  return CUDA_SUCCESS;
}
static CUresult fake_cuDeviceGetCount(int* n) {
  RECORD(NULL);
  *n = 1;
  return CUDA_SUCCESS;
}
static CUresult fake_cuDeviceGet(CUdevice* d, int ordinal) {
  RECORD(NULL);
  if (ordinal != 0) return CUDA_ERROR_INVALID_VALUE;
  *d = 0;
  return CUDA_SUCCESS;
}
static CUresult fake_cuDeviceGetName(char* name, int len, CUdevice d) {
  RECORD(NULL);
  (void)d;
  snprintf(name, (size_t)len, "Fake CUDA Device");
  return CUDA_SUCCESS;
}
static CUresult fake_cuDeviceTotalMem(size_t* bytes, CUdevice d) {
  RECORD(NULL);
  (void)d;
  *bytes = (size_t)80 << 30;
  return CUDA_SUCCESS;
}
static CUresult fake_cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
  RECORD("%d", (int)a);
  (void)d;
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 48 * 1024; break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 227 * 1024; break;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
static CUresult fake_cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  RECORD(NULL);
  (void)d;
  *c = (CUcontext)&the_context;
  ++retained;
  return CUDA_SUCCESS;
}
static CUresult fake_cuDevicePrimaryCtxRelease(CUdevice d) {
  RECORD(NULL);
  (void)d;
  if (retained == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --retained;
  return CUDA_SUCCESS;
}
static CUresult fake_cuCtxPushCurrent(CUcontext c) {
  RECORD(NULL);
  if (c != (CUcontext)&the_context || retained == 0) return CUDA_ERROR_INVALID_CONTEXT;
  ++context_depth;
  return CUDA_SUCCESS;
}
static CUresult fake_cuCtxPopCurrent(CUcontext* c) {
  RECORD(NULL);
  if (context_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --context_depth;
  if (c) *c = (CUcontext)&the_context;
  return CUDA_SUCCESS;
}
static CUresult fake_cuCtxSynchronize(void) {
  RECORD(NULL);
  NEED_CONTEXT();
  return CUDA_SUCCESS;
}
static CUresult fake_cuMemAlloc(CUdeviceptr* p, size_t bytes) {
  RECORD("%zu bytes", bytes);
  NEED_CONTEXT();
  if (getenv("FAKE_CUDA_OOM")) return CUDA_ERROR_OUT_OF_MEMORY;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* memory = NULL; /* aligned as the driver's allocations are (256 bytes at least) */
  if (posix_memalign(&memory, 256, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = (CUdeviceptr)(size_t)memory;
  ++live_allocations;
  TRACE("cuMemAlloc %zu bytes\n", bytes);
  return CUDA_SUCCESS;
}
static CUresult fake_cuMemFree(CUdeviceptr p) {
  RECORD(NULL);
  NEED_CONTEXT();
  free((void*)(size_t)p);
  --live_allocations;
  return CUDA_SUCCESS;
}
static CUresult fake_cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t n) {
  RECORD("%zu bytes", n);
  NEED_CONTEXT();
  TRACE("cuMemcpyHtoD %zu bytes\n", n);
  memcpy((void*)(size_t)dst, src, n);
  return CUDA_SUCCESS;
}
static CUresult fake_cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t n) {
  RECORD("%zu bytes", n);
  NEED_CONTEXT();
  TRACE("cuMemcpyDtoH %zu bytes\n", n);
  memcpy(dst, (const void*)(size_t)src, n);
  return CUDA_SUCCESS;
}
static CUresult fake_cuMemsetD8(CUdeviceptr dst, unsigned char v, size_t n) {
  RECORD("%zu bytes", n);
  NEED_CONTEXT();
  memset((void*)(size_t)dst, v, n);
  return CUDA_SUCCESS;
}
static CUresult fake_cuStreamCreate(CUstream* s, unsigned flags) {
  RECORD(NULL);
  (void)flags;
  NEED_CONTEXT();
  *s = (CUstream)&a_stream;
  ++live_streams;
  return CUDA_SUCCESS;
}
static CUresult fake_cuStreamDestroy(CUstream s) {
  RECORD("stream %llx", STREAM(s));
  (void)s;
  NEED_CONTEXT();
  --live_streams;
  return CUDA_SUCCESS;
}
static CUresult fake_cuStreamSynchronize(CUstream s) {
  RECORD("stream %llx", STREAM(s));
  (void)s;
  NEED_CONTEXT();
  return CUDA_SUCCESS;
}
static CUresult fake_cuEventCreate(CUevent* e, unsigned flags) {
  RECORD(NULL);
  (void)flags;
  NEED_CONTEXT();
  *e = (CUevent)&an_event;
  ++live_events;
  return CUDA_SUCCESS;
}
static CUresult fake_cuEventDestroy(CUevent e) {
  RECORD(NULL);
  (void)e;
  NEED_CONTEXT();
  --live_events;
  return CUDA_SUCCESS;
}
static CUresult fake_cuEventRecord(CUevent e, CUstream s) {
  RECORD("stream %llx", STREAM(s));
  (void)e, (void)s;
  NEED_CONTEXT();
  return CUDA_SUCCESS;
}
static CUresult fake_cuEventSynchronize(CUevent e) {
  RECORD(NULL);
  (void)e;
  NEED_CONTEXT();
  return CUDA_SUCCESS;
}
static CUresult fake_cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  RECORD(NULL);
  (void)a, (void)b;
  NEED_CONTEXT();
  *ms = 0.25f;
  return CUDA_SUCCESS;
}
static CUresult fake_cuModuleLoadDataEx(CUmodule* m, const void* image, unsigned n,
                                        CUjit_option* options, void** values) {
  RECORD("%s", memcmp(image, "\177ELF", 4) == 0 ? "cubin" : "ptx");
  NEED_CONTEXT();
  const char* text = (const char*)image;
  int elf = memcmp(text, "\177ELF", 4) == 0;
  TRACE("cuModuleLoadDataEx %s\n", elf ? "cubin" : "ptx");
  if (!elf && strstr(text, "FAKE_JIT_ERROR")) {
    for (unsigned i = 0; i < n; ++i)
      if (options[i] == CU_JIT_ERROR_LOG_BUFFER)
        snprintf((char*)values[i], 64, "ptxas fatal   : fake JIT error log line");
    return CUDA_ERROR_INVALID_PTX;
  }
  struct FakeModule* module = calloc(1, sizeof(struct FakeModule));
  if (!elf) {
    size_t size = strlen(text) + 1;
    module->ptx = malloc(size);
    memcpy(module->ptx, text, size);
  }
  *m = (CUmodule)module;
  ++live_modules;
  return CUDA_SUCCESS;
}
static CUresult fake_cuModuleUnload(CUmodule m) {
  RECORD(NULL);
  NEED_CONTEXT();
  free(((struct FakeModule*)m)->ptx);
  free(m);
  --live_modules;
  return CUDA_SUCCESS;
}
/* Whether `ptx` declares the kernel `name` (".entry name(" or ".entry name" and a space). */
static int declares(const char* ptx, const char* name) {
  size_t n = strlen(name);
  for (const char* p = strstr(ptx, ".entry "); p; p = strstr(p + 1, ".entry ")) {
    const char* q = p + 7;
    while (*q == ' ' || *q == '\t') ++q;
    if (strncmp(q, name, n) == 0 && (q[n] == '(' || q[n] == ' ' || q[n] == '\n' || q[n] == '\t'))
      return 1;
  }
  return 0;
}

static CUresult fake_cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  RECORD("%s", name);
  NEED_CONTEXT();
  struct FakeModule* module = (struct FakeModule*)m;
  if (module->ptx && !declares(module->ptx, name)) return CUDA_ERROR_NOT_FOUND;
  if (strlen(name) >= sizeof(module->functions[0].name)) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < module->function_count; ++i)
    if (strcmp(module->functions[i].name, name) == 0) {
      *f = (CUfunction)&module->functions[i];
      return CUDA_SUCCESS;
    }
  if (module->function_count == 16) return CUDA_ERROR_INVALID_VALUE;
  struct FakeFunction* fn = &module->functions[module->function_count++];
  strcpy(fn->name, name);
  *f = (CUfunction)fn;
  return CUDA_SUCCESS;
}
static CUresult fake_cuFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction f) {
  RECORD(NULL);
  (void)f;
  NEED_CONTEXT();
  if (a != CU_FUNC_ATTRIBUTE_NUM_REGS) return CUDA_ERROR_INVALID_VALUE;
  *v = 12;
  return CUDA_SUCCESS;
}
static CUresult fake_cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  RECORD(NULL);
  (void)f;
  NEED_CONTEXT();
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    TRACE("cuFuncSetAttribute max dynamic shared %d\n", v);
  return CUDA_SUCCESS;
}
static CUresult fake_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                    CUstream s, void** params, void** extra) {
  RECORD("%s stream %llx", ((struct FakeFunction*)f)->name, STREAM(s));
  (void)s, (void)extra;
  NEED_CONTEXT();
  const char* name = ((struct FakeFunction*)f)->name;
  TRACE("cuLaunchKernel %s\n", name);
  TRACE("cuLaunchKernel grid %ux%ux%u block %ux%ux%u shared %u\n", gx, gy, gz, bx, by, bz, shared);
  if (!params || gx == 0 || bx == 0) return CUDA_ERROR_INVALID_VALUE;
  if (strcmp(name, "vector_add") != 0) return CUDA_SUCCESS;
  float* x = (float*)(size_t) * (CUdeviceptr*)params[0];
  float* y = (float*)(size_t) * (CUdeviceptr*)params[1];
  float* out = (float*)(size_t) * (CUdeviceptr*)params[2];
  int n = *(int*)params[3];
  for (int j = 0; j < n; ++j) out[j] = x[j] + y[j];
  return CUDA_SUCCESS;
}

/* Writes what it was given into the map (rank, then each dim's size, box and byte stride) and
   traces it, so a test can see what a launch encoded. */
static CUresult fake_cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* base,
                                            const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                            const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                            CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  RECORD(NULL);
  (void)element_strides, (void)interleave, (void)l2, (void)oob;
  if (!map || rank < 1 || rank > 5 || ((size_t)base & 15) != 0) return CUDA_ERROR_INVALID_VALUE;
  memset(map, 0, sizeof(*map));
  cuuint64_t* words = (cuuint64_t*)map;
  words[0] = rank;
  for (cuuint32_t d = 0; d < rank; ++d) {
    words[1 + d] = dims[d];
    words[6 + d] = box[d];
    if (d > 0) words[11 + d - 1] = strides[d - 1];
  }
  TRACE("cuTensorMapEncodeTiled type %d rank %u dims %llu x %llu box %u x %u stride %llu swizzle %d\n", (int)type,
        rank, (unsigned long long)dims[0], (unsigned long long)(rank > 1 ? dims[1] : 1), box[0], rank > 1 ? box[1] : 1,
        (unsigned long long)(rank > 1 ? strides[0] : 0), (int)swizzle);
  return CUDA_SUCCESS;
}

struct Entry {
  const char* name;
  void* fn;
};
#define ENTRY(name) {#name, (void*)fake_##name}
static const struct Entry entries[] = {
    ENTRY(cuGetErrorName),        ENTRY(cuGetErrorString),     ENTRY(cuInit),
    ENTRY(cuDriverGetVersion),    ENTRY(cuDeviceGetCount),     ENTRY(cuDeviceGet),
    ENTRY(cuDeviceGetName),       ENTRY(cuDeviceGetAttribute), ENTRY(cuDeviceTotalMem),
    ENTRY(cuDevicePrimaryCtxRetain), ENTRY(cuDevicePrimaryCtxRelease), ENTRY(cuCtxPushCurrent),
    ENTRY(cuCtxPopCurrent),       ENTRY(cuCtxSynchronize),     ENTRY(cuMemAlloc),
    ENTRY(cuMemFree),             ENTRY(cuMemcpyHtoD),         ENTRY(cuMemcpyDtoH),
    ENTRY(cuMemsetD8),            ENTRY(cuStreamCreate),       ENTRY(cuStreamDestroy),
    ENTRY(cuStreamSynchronize),   ENTRY(cuEventCreate),        ENTRY(cuEventDestroy),
    ENTRY(cuEventRecord),         ENTRY(cuEventSynchronize),   ENTRY(cuEventElapsedTime),
    ENTRY(cuModuleLoadDataEx),    ENTRY(cuModuleUnload),       ENTRY(cuModuleGetFunction),
    ENTRY(cuFuncGetAttribute),    ENTRY(cuFuncSetAttribute),   ENTRY(cuLaunchKernel),
    ENTRY(cuTensorMapEncodeTiled),
};

/* cuda.h maps this name to cuGetProcAddress_v2, the symbol the runtime looks up. */
CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  *pfn = NULL;
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (version < 12000 || flags != CU_GET_PROC_ADDRESS_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); ++i)
    if (strcmp(entries[i].name, symbol) == 0) {
      *pfn = entries[i].fn;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}

__attribute__((destructor)) static void report_leftovers(void) {
  TRACE("at exit: %d allocations, %d modules, %d streams, %d events, %d retained contexts, "
        "context depth %d\n",
        live_allocations, live_modules, live_streams, live_events, retained, context_depth);
}
