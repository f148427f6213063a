/* A C host for rmsnorm (docs/TUTORIAL.md, "7. From C and Python"): runs the kernel by name from
 * an exported folder through the C ABI (runtime/tilec.h, libtilec.so) on the emulator, on its
 * own f16 arrays, and checks every value against RMSNorm computed in double. The runtime works
 * out rows and cols from the arrays' shapes, selects the tuned config for them (the nearest
 * tuned row count) and launches its module on the grid the kernel declares.
 *
 *   rmsnorm_c DEPLOY_DIR ROWS COLS      exit 0 when every value agrees */
#include "runtime/tilec.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* f16 bits of a value that f16 holds exactly (here: multiples of 1/256 below 2 in magnitude). */
static uint16_t f16_bits(float v) {
  uint16_t sign = v < 0 ? 0x8000 : 0;
  float a = fabsf(v);
  if (a == 0) return sign;
  int e = 0;
  float m = frexpf(a, &e); /* a = m * 2^e, 0.5 <= m < 1 */
  return (uint16_t)(sign | (uint16_t)((e + 14) << 10) | (uint16_t)((m * 2 - 1) * 1024));
}

static double f16_value(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return h & 0x8000 ? -v : v;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s DEPLOY_DIR ROWS COLS\n", argv[0]);
    return 2;
  }
  const int64_t rows = atoll(argv[2]), cols = atoll(argv[3]);
  const float eps = 1e-5f;
  uint16_t* x = malloc(sizeof(uint16_t) * (size_t)(rows * cols) + 16); /* malloc: 16-byte aligned */
  uint16_t* w = malloc(sizeof(uint16_t) * (size_t)cols + 16);
  uint16_t* out = malloc(sizeof(uint16_t) * (size_t)(rows * cols) + 16);
  for (int64_t i = 0; i < rows * cols; ++i) x[i] = f16_bits((float)((i * 37) % 401 - 200) / 256.0f);
  for (int64_t j = 0; j < cols; ++j) w[j] = f16_bits((float)(j % 9 + 1) / 8.0f);

  tilec_store* store = NULL;
  const tilec_op* op = NULL;
  if (tilec_store_open(argv[1], "emulate", &store) != TILEC_OK || tilec_store_op(store, "rmsnorm", &op) != TILEC_OK) {
    fprintf(stderr, "%s\n", tilec_last_error());
    return 1;
  }
  const int64_t x_shape[2] = {rows, cols}, w_shape[1] = {cols};
  const tilec_tensor tensors[3] = {{"x", x, TILEC_F16, 2, x_shape, NULL},
                                   {"w", w, TILEC_F16, 1, w_shape, NULL},
                                   {"out", out, TILEC_F16, 2, x_shape, NULL}};
  const tilec_scalar scalars[1] = {{"eps", eps}};
  const tilec_args args = {tensors, 3, scalars, 1, NULL, 0, NULL, 0};
  if (tilec_op_run(op, &args, NULL, 0, NULL) != TILEC_OK) {
    fprintf(stderr, "%s\n", tilec_last_error());
    return 1;
  }
  int bad = 0;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += f16_value(x[r * cols + c]) * f16_value(x[r * cols + c]);
    const double inv = 1 / sqrt(sum / (double)cols + eps);
    for (int64_t c = 0; c < cols; ++c) {
      const double want = f16_value(x[r * cols + c]) * inv * f16_value(w[c]), got = f16_value(out[r * cols + c]);
      const double err = fabs(got - want);
      worst = err > worst ? err : worst;
      if (err > 1e-3 + 4e-3 * fabs(want) && bad++ < 5)
        fprintf(stderr, "out[%lld, %lld] = %g, expected %g\n", (long long)r, (long long)c, got, want);
    }
  }
  printf("rmsnorm [%lld, %lld] from %s through the C ABI: %s (max |out - reference| = %.3g)\n", (long long)rows,
         (long long)cols, argv[1], bad ? "MISMATCH" : "ok", worst);
  tilec_store_close(store);
  free(x), free(w), free(out);
  return bad ? 1 : 0;
}
