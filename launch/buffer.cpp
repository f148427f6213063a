#include "launch/buffer.h"

#include <fmt/format.h>

#include <cstring>

#include "abi/error.h"
#include "abi/float16.h"
#include "abi/float8.h"
#include "ir/convert.h"
#include "ir/error.h"

namespace tilec::launch {

namespace {

template <class T> T read_as(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T> void write_as(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

} // namespace

int64_t read_int(const std::byte* p, DType t) {
  switch (t) {
  case DType::i1:
    return read_as<uint8_t>(p) != 0;
  case DType::i8:
    return read_as<int8_t>(p);
  case DType::i16:
    return read_as<int16_t>(p);
  case DType::i32:
    return read_as<int32_t>(p);
  case DType::i64:
    return read_as<int64_t>(p);
  case DType::u8:
    return read_as<uint8_t>(p);
  case DType::u16:
    return read_as<uint16_t>(p);
  case DType::u32:
    return read_as<uint32_t>(p);
  case DType::u64:
    return static_cast<int64_t>(read_as<uint64_t>(p));
  default:
    internal_fail("read_int of a float dtype");
  }
}

float read_float(const std::byte* p, DType t) {
  switch (t) {
  case DType::f16:
    return f16_bits_to_f32(read_as<uint16_t>(p));
  case DType::bf16:
    return bf16_bits_to_f32(read_as<uint16_t>(p));
  case DType::f8e4m3:
    return f8e4m3_bits_to_f32(read_as<uint8_t>(p));
  case DType::f8e5m2:
    return f8e5m2_bits_to_f32(read_as<uint8_t>(p));
  case DType::f32:
    return read_as<float>(p);
  default:
    internal_fail("read_float of an integer dtype");
  }
}

void write_int(std::byte* p, DType t, int64_t x) {
  switch (t) {
  case DType::i1:
    return write_as<uint8_t>(p, x != 0);
  case DType::i8:
    return write_as<int8_t>(p, static_cast<int8_t>(x));
  case DType::i16:
    return write_as<int16_t>(p, static_cast<int16_t>(x));
  case DType::i32:
    return write_as<int32_t>(p, static_cast<int32_t>(x));
  case DType::i64:
  case DType::u64:
    return write_as<int64_t>(p, x);
  case DType::u8:
    return write_as<uint8_t>(p, static_cast<uint8_t>(x));
  case DType::u16:
    return write_as<uint16_t>(p, static_cast<uint16_t>(x));
  case DType::u32:
    return write_as<uint32_t>(p, static_cast<uint32_t>(x));
  default:
    internal_fail("write_int of a float dtype");
  }
}

void write_float(std::byte* p, DType t, float x) {
  switch (t) {
  case DType::f16:
    return write_as<uint16_t>(p, f32_to_f16_bits(x));
  case DType::bf16:
    return write_as<uint16_t>(p, f32_to_bf16_bits(x));
  case DType::f8e4m3:
    return write_as<uint8_t>(p, f32_to_f8e4m3_bits(x));
  case DType::f8e5m2:
    return write_as<uint8_t>(p, f32_to_f8e5m2_bits(x));
  case DType::f32:
    return write_as<float>(p, x);
  default:
    internal_fail("write_float of an integer dtype");
  }
}

void Buffer::check_index(size_t i) const {
  if (i >= count())
    throw UserError(fmt::format("buffer '{}' has {} elements, no element {}", name, count(), i));
}

double Buffer::get(size_t i) const {
  check_index(i);
  const std::byte* p = bytes.data() + i * dtype_bytes(dtype);
  if (dtype == DType::u64) return static_cast<double>(static_cast<uint64_t>(read_int(p, dtype)));
  return is_float(dtype) ? read_float(p, dtype) : static_cast<double>(read_int(p, dtype));
}

void Buffer::set(size_t i, double v) {
  check_index(i);
  std::byte* p = bytes.data() + i * dtype_bytes(dtype);
  if (is_float(dtype))
    write_float(p, dtype, ir::round_exact(v, dtype));
  else
    write_int(p, dtype, ir::float_to_int(v, dtype));
}

int64_t Buffer::get_int(size_t i) const {
  check_index(i);
  return read_int(bytes.data() + i * dtype_bytes(dtype), dtype);
}

void Buffer::set_int(size_t i, int64_t v) {
  check_index(i);
  write_int(bytes.data() + i * dtype_bytes(dtype), dtype, v);
}

} // namespace tilec::launch
