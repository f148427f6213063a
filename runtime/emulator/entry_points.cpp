// The tilec_emu_* entry points that need no machinery of their own: thread and block ids, the
// float conversions, device_print and device_assert.
#include "runtime/emulator/internal.h"

#include "abi/device_print.h"
#include "abi/float16.h"
#include "abi/float8.h"

#include <cstdlib>

using namespace tilec::rt::emu;

extern "C" {

uint32_t tilec_emu_thread_id(tilec_emu_thread* t) { return t->tid; }
uint32_t tilec_emu_block_dim(tilec_emu_thread* t) { return std::uint32_t(t->worker->threads.size()); }
uint32_t tilec_emu_block_id(tilec_emu_thread* t, uint32_t axis) { return axis < 3 ? t->worker->block[axis] : 0; }
uint32_t tilec_emu_num_blocks(tilec_emu_thread* t, uint32_t axis) {
  const tilec::rt::Dim3& g = t->worker->launch->grid;
  return axis == 0 ? g.x : axis == 1 ? g.y : axis == 2 ? g.z : 1;
}

// The one f16/bf16 conversion of the project (abi/float16.h): round to nearest even, NaN stays NaN.
// (A wgmma result's tag converted is a read of its register before the wait: wgmma.cpp.)
float tilec_emu_f16_to_f32(tilec_emu_thread*, uint16_t bits) { return tilec::f16_bits_to_f32(bits); }
uint16_t tilec_emu_f32_to_f16(tilec_emu_thread* t, float f) {
  check_untagged(t, &f, 4, "conversion to f16");
  return tilec::f32_to_f16_bits(f);
}
float tilec_emu_bf16_to_f32(tilec_emu_thread*, uint16_t bits) { return tilec::bf16_bits_to_f32(bits); }
uint16_t tilec_emu_f32_to_bf16(tilec_emu_thread* t, float f) {
  check_untagged(t, &f, 4, "conversion to bf16");
  return tilec::f32_to_bf16_bits(f);
}
void tilec_emu_print_op(tilec_emu_thread* t) { ++t->print_ops; }

void tilec_emu_print(tilec_emu_thread* t, const char* prefix, const char* shape, int64_t element, int32_t kind,
                     int64_t ivalue, float fvalue) {
  std::vector<std::int64_t> dims;
  for (const char* p = shape; *p;) {
    char* end = nullptr;
    dims.push_back(std::strtoll(p, &end, 10));
    p = *end == 'x' ? end + 1 : end;
  }
  tilec_emu_worker& w = *t->worker;
  Launch& l = *w.launch;
  std::string text = tilec::device_print_line(w.block, dims, element, prefix, tilec::PrintedValue(kind), ivalue, fvalue);
  std::uint64_t block = w.block[0] + std::uint64_t(l.grid.x) * (w.block[1] + std::uint64_t(l.grid.y) * w.block[2]);
  std::lock_guard lock(l.print_mutex);
  l.prints.push_back({block, t->print_ops, element, std::move(text)});
}

void tilec_emu_assert_fail(tilec_emu_thread* t, const char* where) {
  fail_thread(t, "device_assert failed at {}", where);
}

// fp8 -> f16 is exact (both formats fit), so the f16 conversion adds no rounding.
uint32_t tilec_emu_fp8x2_to_f16x2(tilec_emu_thread*, uint16_t pair, uint32_t format) {
  const tilec::Fp8Format& f = format == 0 ? tilec::kE4M3 : tilec::kE5M2;
  auto half = [&](unsigned byte) { return uint32_t(tilec::f32_to_f16_bits(tilec::fp8_bits_to_f32(uint8_t(byte), f))); };
  return half(pair & 0xff) | (half(pair >> 8) << 16);
}
uint16_t tilec_emu_f32x2_to_fp8x2(tilec_emu_thread* t, float hi, float lo, uint32_t format) {
  check_untagged(t, &hi, 4, "conversion to fp8");
  check_untagged(t, &lo, 4, "conversion to fp8");
  const tilec::Fp8Format& f = format == 0 ? tilec::kE4M3 : tilec::kE5M2;
  return uint16_t(tilec::f32_to_fp8_bits(lo, f) | (tilec::f32_to_fp8_bits(hi, f) << 8));
}

} // extern "C"
