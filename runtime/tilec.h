/* tilec's C ABI: run whole tuned ops from a folder of exported modules, from any language.
 *
 * A folder written by `tilec autotune KERNEL ... --export DIR` (or `tilec compile KERNEL -o
 * DIR`) holds, per op, a kernel card (<op>.kernel.toml) whose [run] table describes the run as
 * data (runtime/op_run.h: each launch, its grid and workspace as expressions over the sizes and
 * the config, which buffers are inputs, outputs and workspace, the modules' specialization),
 * the modules themselves, and the tuning databases. This API opens such a folder, selects the
 * config for a problem (the tuning database's nearest key, else the card's defaults: the rule
 * of the C++ runtime, runtime/tuning_db.h) and runs every launch of the op. It is C11, links
 * no LLVM (the library is the runtime alone) and throws nothing: every function that can fail
 * returns a tilec_status, and tilec_last_error() gives the calling thread's message.
 *
 *   tilec_store* store;
 *   const tilec_op* op;
 *   if (tilec_store_open("deploy", "emulate", &store) != TILEC_OK ||
 *       tilec_store_op(store, "paged_attention", &op) != TILEC_OK) {
 *     fprintf(stderr, "%s\n", tilec_last_error());
 *     return 1;
 *   }
 *   int64_t q_shape[4] = {B, HQ, SQ, D}, kv_shape[4] = {NB, BS, HKV, D}, bt_shape[2] = {B, MB}, cl_shape[1] = {B};
 *   tilec_tensor tensors[] = {
 *     {"q", q, TILEC_F32, 4, q_shape, NULL},          {"k_cache", k, TILEC_F32, 4, kv_shape, NULL},
 *     {"v_cache", v, TILEC_F32, 4, kv_shape, NULL},   {"block_table", bt, TILEC_U32, 2, bt_shape, NULL},
 *     {"context_lens", cl, TILEC_U32, 1, cl_shape, NULL}, {"out", out, TILEC_F32, 4, q_shape, NULL}};
 *   tilec_scalar scalars[] = {{"softmax_scale", 0.125}};
 *   tilec_args args = {tensors, 6, scalars, 1, NULL, 0, NULL, 0};
 *   if (tilec_op_run(op, &args, NULL, 0, NULL) != TILEC_OK) fprintf(stderr, "%s\n", tilec_last_error());
 *   tilec_store_close(store);
 *
 * On the GPU (backend "cuda") tensor data are device addresses (CUdeviceptr, in the device's
 * primary context: what PyTorch and the CUDA runtime use), the launches are queued on the
 * CUstream given (NULL: the legacy default stream) and the call returns without waiting. On the
 * emulator ("emulate") they are host pointers and the call returns when the results are there.
 * The paged-attention op's arguments are in docs/HOST_C.md.
 *
 * Thread safety: a store and its ops may be used from several threads at once; a tilec_call
 * from one thread at a time. */
#ifndef TILEC_RUNTIME_TILEC_H
#define TILEC_RUNTIME_TILEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this ABI. A program compiled against one version checks at run time that
 * tilec_abi_version() returns the same (a new version may change any struct below). */
#define TILEC_ABI_VERSION 1
int tilec_abi_version(void);

typedef enum tilec_status {
  TILEC_OK = 0,
  TILEC_ERROR_ARGUMENT = 1,  /* an argument does not fit the op: missing, wrong dtype, shape, ... (named) */
  TILEC_ERROR_NOT_FOUND = 2, /* no such folder, op or module (the message says where it looked) */
  TILEC_ERROR_MODULE = 3,    /* a manifest, kernel card or tuning database that cannot be used */
  TILEC_ERROR_BACKEND = 4,   /* no CUDA driver or device for a GPU store */
  TILEC_ERROR_DEVICE = 5,    /* a driver call or an emulated kernel failed */
  TILEC_ERROR_INTERNAL = 6   /* a bug in tilec */
} tilec_status;

/* The message of the calling thread's last failed call ("" before any). Valid until the next
 * tilec_* call on this thread. */
const char* tilec_last_error(void);

/* Element types. The values are fixed by this ABI (not tilec's internal enum). */
typedef enum tilec_dtype {
  TILEC_F32 = 0,
  TILEC_F16 = 1,
  TILEC_BF16 = 2,
  TILEC_F8E4M3 = 3,
  TILEC_F8E5M2 = 4,
  TILEC_I8 = 5,
  TILEC_I16 = 6,
  TILEC_I32 = 7,
  TILEC_I64 = 8,
  TILEC_U8 = 9,
  TILEC_U16 = 10,
  TILEC_U32 = 11,
  TILEC_U64 = 12,
  TILEC_BOOL = 13
} tilec_dtype;

/* A caller's array: row-major. `strides` (in elements) may be NULL for contiguous data; when
 * given they must describe contiguous data (a dimension of extent 1 may have any stride). */
typedef struct tilec_tensor {
  const char* name;
  void* data; /* a host pointer (emulator) or a device address (GPU); 16-byte aligned */
  tilec_dtype dtype;
  int ndim;
  const int64_t* shape;
  const int64_t* strides;
} tilec_tensor;

/* A float or integer scalar argument, by name (paged attention: softmax_scale, softcap). */
typedef struct tilec_scalar {
  const char* name;
  double value;
} tilec_scalar;

/* A size no tensor implies (paged attention: ctx, window, causal), or a config value to use
 * instead of the selected one. `string` non-NULL: a string value (a dtype's name), else `value`. */
typedef struct tilec_value {
  const char* name;
  int64_t value;
  const char* string;
} tilec_value;

/* Everything one run of an op takes. Arrays may be NULL when their count is 0. */
typedef struct tilec_args {
  const tilec_tensor* tensors;
  size_t num_tensors;
  const tilec_scalar* scalars;
  size_t num_scalars;
  const tilec_value* sizes;
  size_t num_sizes;
  const tilec_value* config;
  size_t num_config;
} tilec_args;

typedef struct tilec_store tilec_store;
typedef struct tilec_op tilec_op;
typedef struct tilec_call tilec_call;

/* Opens a folder of exported modules. `backend`: "emulate" (modules for the CPU emulator,
 * host pointers), "cuda" (device 0; TILEC_ERROR_BACKEND without a driver or device), or "auto"
 * / NULL (cuda when there is a GPU, else emulate). Every <op>.kernel.toml with a [run] table is
 * an op; every other top-level .toml holding [[entry]] tables is read as a tuning database. */
tilec_status tilec_store_open(const char* dir, const char* backend, tilec_store** out);
void tilec_store_close(tilec_store* store); /* NULL is fine; its ops and calls must be gone */
/* "host" on the emulator, else the GPU's ("sm_90"); the device configs are selected for. */
const char* tilec_store_arch(const tilec_store* store);
const char* tilec_store_device(const tilec_store* store);
/* The ops of the store, by index (0 .. count - 1); NULL past the end. */
size_t tilec_store_num_ops(const tilec_store* store);
const char* tilec_store_op_name(const tilec_store* store, size_t index);
/* The op named `name` (TILEC_ERROR_NOT_FOUND naming the ops there are); it lives as long as
 * the store. */
tilec_status tilec_store_op(const tilec_store* store, const char* name, const tilec_op** out);

/* The op's declared arguments, by index: tensors (is_output 0 for an input, 1 for an output a
 * binding may allocate, 2 for one the op updates in place: the caller's array, read and
 * written), scalars and sizes, so a binding can check names before it calls. NULL past the end. */
const char* tilec_op_tensor(const tilec_op* op, size_t index, int* is_output);
const char* tilec_op_scalar(const tilec_op* op, size_t index);
const char* tilec_op_size(const tilec_op* op, size_t index);

/* The shape and dtype tensor `name` must have for `args` (whose outputs may be missing):
 * what a binding allocates an output with. Writes at most `capacity` dims; *ndim is the rank. */
tilec_status tilec_op_tensor_shape(const tilec_op* op, const tilec_args* args, const char* name, int64_t* shape,
                                   int capacity, int* ndim, tilec_dtype* dtype);

/* Works out every size, selects the config, checks every argument and finds the modules: all
 * that can be refused is refused here, naming the argument. The call keeps the tensors'
 * addresses; destroy it with tilec_call_destroy. */
tilec_status tilec_op_prepare(const tilec_op* op, const tilec_args* args, tilec_call** out);
void tilec_call_destroy(tilec_call* call);
/* Bytes of workspace tilec_call_run needs (0: none). */
size_t tilec_call_workspace_bytes(const tilec_call* call);
/* The selected config, by index (0 .. count - 1): TILEC_ERROR_ARGUMENT past the end. */
int tilec_call_num_params(const tilec_call* call);
tilec_status tilec_call_param(const tilec_call* call, int index, const char** name, int64_t* value);
/* Any integer value of the call by name: a size, a config parameter or a let of the run. */
tilec_status tilec_call_value(const tilec_call* call, const char* name, int64_t* value);
/* One line: which tuned key the config came from, or that the defaults were used. */
const char* tilec_call_note(const tilec_call* call);
/* The launches the call makes, in order: the kernel and its grid. */
int tilec_call_num_launches(const tilec_call* call);
tilec_status tilec_call_launch(const tilec_call* call, int index, const char** kernel, uint32_t grid[3]);
/* Runs every launch. `workspace` holds `workspace_bytes` (at least tilec_call_workspace_bytes,
 * 256-byte aligned): on the GPU a device address, required when the call needs any; on the
 * emulator NULL lets tilec allocate it. `stream` is a CUstream (GPU; NULL: the default
 * stream), ignored on the emulator. */
tilec_status tilec_call_run(const tilec_call* call, void* workspace, size_t workspace_bytes, void* stream);
/* tilec_op_prepare, tilec_call_run and tilec_call_destroy in one. */
tilec_status tilec_op_run(const tilec_op* op, const tilec_args* args, void* workspace, size_t workspace_bytes,
                          void* stream);

#ifdef __cplusplus
}
#endif

#endif
