/* Paged attention with split-KV through the C ABI (runtime/tilec.h) on the emulator, from a
 * folder written by `tilec autotune --export` (tests/hosts/make_deploy.sh), checked against a
 * reference written here; then the errors a caller can make, each named. C11, no C++.
 * Usage: tilec_c_test DEPLOY_DIR */
#include "runtime/tilec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, HQ = 8, HKV = 2, SQ = 1, D = 32, BS = 8, MB = 8, NB = 30 };

static int failures = 0;

#define CHECK(cond)                                                                                                   \
  do {                                                                                                                \
    if (!(cond)) {                                                                                                    \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond, tilec_last_error());   \
      ++failures;                                                                                                     \
    }                                                                                                                 \
  } while (0)

static unsigned long long rng = 88172645463325252ull;
static float uniform(void) { /* xorshift64: [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* 256-byte aligned arrays (tilec's kernels assume 16 of every buffer, a workspace 256). */
static void* alloc(size_t bytes) {
  void* p = aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!p) abort();
  memset(p, 0, bytes);
  return p;
}

/* out[b, h, i, :] = softmax_j(scale * q . k_j) v_j over the live keys j < ctx[b]. */
static void reference(const float* q, const float* k, const float* v, const unsigned* table, const unsigned* ctx,
                      float scale, float* out) {
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < HQ; ++h)
      for (int i = 0; i < SQ; ++i) {
        const float* qr = q + ((b * HQ + h) * SQ + i) * D;
        float* o = out + ((b * HQ + h) * SQ + i) * D;
        int kvh = h / (HQ / HKV), len = (int)ctx[b];
        double scores[MB * BS], m = -INFINITY, sum = 0;
        for (int j = 0; j < len; ++j) {
          const float* kr = k + (((int)table[b * MB + j / BS] * BS + j % BS) * HKV + kvh) * D;
          double s = 0;
          for (int d = 0; d < D; ++d) s += (double)qr[d] * kr[d];
          scores[j] = s * scale;
          if (scores[j] > m) m = scores[j];
        }
        for (int d = 0; d < D; ++d) o[d] = 0;
        for (int j = 0; j < len; ++j) sum += exp(scores[j] - m);
        for (int j = 0; j < len; ++j) {
          const float* vr = v + (((int)table[b * MB + j / BS] * BS + j % BS) * HKV + kvh) * D;
          double p = exp(scores[j] - m) / sum;
          for (int d = 0; d < D; ++d) o[d] += (float)(p * vr[d]);
        }
      }
}

static int contains(const char* s, const char* part) { return strstr(s, part) != NULL; }

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DEPLOY_DIR\n", argv[0]);
    return 2;
  }
  CHECK(tilec_abi_version() == TILEC_ABI_VERSION);

  tilec_store* store = NULL;
  if (tilec_store_open(argv[1], "emulate", &store) != TILEC_OK) {
    fprintf(stderr, "tilec_store_open: %s\n", tilec_last_error());
    return 1;
  }
  CHECK(strcmp(tilec_store_arch(store), "host") == 0);
  CHECK(tilec_store_num_ops(store) == 1 && strcmp(tilec_store_op_name(store, 0), "paged_attention") == 0);
  const tilec_op* op = NULL;
  CHECK(tilec_store_op(store, "no_such_op", &op) == TILEC_ERROR_NOT_FOUND && contains(tilec_last_error(), "paged_attention"));
  if (tilec_store_op(store, "paged_attention", &op) != TILEC_OK) {
    fprintf(stderr, "tilec_store_op: %s\n", tilec_last_error());
    return 1;
  }

  const size_t q_n = B * HQ * SQ * D, kv_n = (size_t)NB * BS * HKV * D;
  float* q = alloc(q_n * 4);
  float* k = alloc(kv_n * 4);
  float* v = alloc(kv_n * 4);
  float* out = alloc(q_n * 4);
  float* want = alloc(q_n * 4);
  unsigned* table = alloc(B * MB * 4);
  unsigned* ctx = alloc(B * 4);
  for (size_t i = 0; i < q_n; ++i) q[i] = uniform();
  for (size_t i = 0; i < kv_n; ++i) k[i] = uniform(), v[i] = uniform();
  /* Pages scattered over the cache; a full context, one ending inside a page, an empty one. */
  for (int i = 0; i < B * MB; ++i) table[i] = (unsigned)((i * 7 + 3) % NB);
  ctx[0] = MB * BS;
  ctx[1] = 19;
  ctx[2] = 0;
  for (int j = 19 / BS + 1; j < MB; ++j) table[1 * MB + j] = 0xffffffffu; /* never read */
  for (int j = 0; j < MB; ++j) table[2 * MB + j] = 0xffffffffu;
  const float scale = 1.0f / sqrtf((float)D);

  int64_t q_shape[4] = {B, HQ, SQ, D}, kv_shape[4] = {NB, BS, HKV, D}, bt_shape[2] = {B, MB}, cl_shape[1] = {B};
  tilec_tensor tensors[6] = {{"q", q, TILEC_F32, 4, q_shape, NULL},
                             {"k_cache", k, TILEC_F32, 4, kv_shape, NULL},
                             {"v_cache", v, TILEC_F32, 4, kv_shape, NULL},
                             {"block_table", table, TILEC_U32, 2, bt_shape, NULL},
                             {"context_lens", ctx, TILEC_U32, 1, cl_shape, NULL},
                             {"out", out, TILEC_F32, 4, q_shape, NULL}};
  tilec_scalar scalars[1] = {{"softmax_scale", scale}};
  tilec_args args = {tensors, 6, scalars, 1, NULL, 0, NULL, 0};

  /* The output's shape and dtype, before it exists. */
  tilec_args no_out = args;
  no_out.num_tensors = 5;
  int64_t shape[8];
  int ndim = 0;
  tilec_dtype dtype = TILEC_I8;
  CHECK(tilec_op_tensor_shape(op, &no_out, "out", shape, 8, &ndim, &dtype) == TILEC_OK);
  CHECK(ndim == 4 && shape[0] == B && shape[1] == HQ && shape[2] == SQ && shape[3] == D && dtype == TILEC_F32);

  /* The tuned config (split-KV from the database), its launches and workspace. */
  tilec_call* call = NULL;
  if (tilec_op_prepare(op, &args, &call) != TILEC_OK) {
    fprintf(stderr, "tilec_op_prepare: %s\n", tilec_last_error());
    return 1;
  }
  int64_t splits = 0, batch = 0;
  CHECK(tilec_call_value(call, "num_splits", &splits) == TILEC_OK && splits == 2);
  CHECK(tilec_call_value(call, "batch", &batch) == TILEC_OK && batch == B);
  CHECK(tilec_call_value(call, "no_such_value", &batch) == TILEC_ERROR_ARGUMENT);
  CHECK(contains(tilec_call_note(call), "tuned config"));
  CHECK(tilec_call_num_params(call) == 10); /* block_n .. block_m, split_tokens, plan_programs, overlap, kv_tma */
  const char* kernel = NULL;
  uint32_t grid[3] = {0, 0, 0};
  CHECK(tilec_call_num_launches(call) == 2);
  CHECK(tilec_call_launch(call, 0, &kernel, grid) == TILEC_OK && strcmp(kernel, "paged_attention") == 0);
  CHECK(grid[0] == B && grid[1] == HKV * (HQ / HKV / 2) && grid[2] == 2); /* head_group 2, 2 splits */
  CHECK(tilec_call_launch(call, 1, &kernel, grid) == TILEC_OK && strcmp(kernel, "paged_attention_combine") == 0);
  CHECK(grid[0] == B * HQ * SQ && grid[1] == 1 && grid[2] == 1);
  size_t ws = tilec_call_workspace_bytes(call);
  CHECK(ws >= (size_t)B * HQ * SQ * 2 * (D + 2) * 4);
  printf("selected: %s\n", tilec_call_note(call));

  /* Run with a workspace of the caller's, then with one tilec allocates. */
  void* workspace = alloc(ws);
  CHECK(tilec_call_run(call, workspace, ws - 1, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "workspace"));
  CHECK(tilec_call_run(call, workspace, ws, NULL) == TILEC_OK);
  reference(q, k, v, table, ctx, scale, want);
  double worst = 0;
  for (size_t i = 0; i < q_n; ++i) {
    double e = fabs((double)out[i] - want[i]);
    if (e > worst) worst = e;
  }
  printf("max |out - reference| = %.3g\n", worst);
  CHECK(worst < 1e-4);
  memset(out, 0, q_n * 4);
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_OK);
  double again = 0;
  for (size_t i = 0; i < q_n; ++i) again = fmax(again, fabs((double)out[i] - want[i]));
  CHECK(again < 1e-4);
  tilec_call_destroy(call);

  /* The errors, each naming what is wrong. */
  tensors[0].dtype = TILEC_F16; /* q says f16 while the caches are f32: no module for that */
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) != TILEC_OK);
  tensors[0].dtype = (tilec_dtype)99; /* any int a C caller stores (the C++ side once loaded it as its enum) */
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "dtype 99"));
  tensors[0].dtype = TILEC_F32;
  tensors[3].dtype = TILEC_F32;
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "block_table") &&
        contains(tilec_last_error(), "f32"));
  tensors[3].dtype = TILEC_U32;
  int64_t bad_shape[4] = {NB, BS, HKV + 1, D}; /* its last dim would be V's head dim */
  tensors[2].shape = bad_shape;
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "v_cache") &&
        contains(tilec_last_error(), "[30, 8, 3, 32]"));
  tensors[2].shape = kv_shape;
  int64_t strides[4] = {HQ * SQ * D, SQ * D, D, 2};
  tensors[0].strides = strides;
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "contiguous"));
  tensors[0].strides = NULL;
  CHECK(tilec_op_run(op, &no_out, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "'out'"));
  args.num_scalars = 0;
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "softmax_scale"));
  args.num_scalars = 1;
  tilec_value causal = {"causal", 1, NULL}; /* nothing exported for causal=1 */
  args.sizes = &causal;
  args.num_sizes = 1;
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_NOT_FOUND && contains(tilec_last_error(), "tilec compile"));
  args.num_sizes = 0;

  /* A caller's mistakes are refused with a status and a message naming the tensor and the
   * number, never a crash (the sanitizer pass runs this program too). */
  tilec_call* refused = (tilec_call*)&args; /* set to NULL by every refusal */
  tensors[0].data = NULL;
  CHECK(tilec_op_prepare(op, &args, &refused) == TILEC_ERROR_ARGUMENT && refused == NULL &&
        contains(tilec_last_error(), "'q'") && contains(tilec_last_error(), "NULL"));
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "NULL"));
  tensors[0].data = (char*)q + 4;
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "'q'") &&
        contains(tilec_last_error(), "16-byte aligned"));
  tensors[0].data = q;
  int64_t negative[4] = {B, HQ, -SQ, D};
  tensors[0].shape = negative;
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "'q'") &&
        contains(tilec_last_error(), "dim 2 is -1"));
  int64_t huge[4] = {B, HQ, (int64_t)1 << 40, (int64_t)1 << 40};
  tensors[0].shape = huge;
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "2^48"));
  tensors[0].shape = NULL;
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "NULL shape"));
  tensors[0].shape = q_shape;
  tensors[0].ndim = 9;
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "ndim 9"));
  tensors[0].ndim = 5; /* more dims than q has, over a shape array of 4 is never read past 5 */
  int64_t five[5] = {B, HQ, SQ, D, 1};
  tensors[0].shape = five;
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "q"));
  tensors[0].ndim = 4;
  tensors[0].shape = q_shape;
  tensors[5].data = q; /* out is q: the kernel would write what it reads */
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "overlap"));
  tensors[5].data = out;
  tensors[4].name = NULL;
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "NULL name"));
  tensors[4].name = "context_lens";
  tilec_args no_array = args;
  no_array.tensors = NULL;
  CHECK(tilec_op_run(op, &no_array, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT && contains(tilec_last_error(), "NULL array"));
  CHECK(tilec_op_prepare(NULL, &args, &refused) == TILEC_ERROR_ARGUMENT);
  CHECK(tilec_op_prepare(op, &args, NULL) == TILEC_ERROR_ARGUMENT);
  CHECK(tilec_call_run(NULL, NULL, 0, NULL) == TILEC_ERROR_ARGUMENT);
  CHECK(tilec_op_run(op, &args, NULL, 0, NULL) == TILEC_OK); /* and the arguments are fine again */

  tilec_store* none = NULL;
  CHECK(tilec_store_open("/nonexistent/folder", "emulate", &none) == TILEC_ERROR_NOT_FOUND && none == NULL);

  tilec_store_close(store);
  free(q), free(k), free(v), free(out), free(want), free(table), free(ctx), free(workspace);
  if (failures) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("ok: paged attention with split-KV through the C ABI matches the reference\n");
  return 0;
}
