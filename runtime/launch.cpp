#include "runtime/launch.h"

#include "abi/arg_errors.h"
#include "abi/error.h"

#include <bit>
#include <fmt/format.h>
#include <vector>

namespace tilec::rt {

Arg::Arg(float v) : Arg(ScalarType::f32, std::bit_cast<std::uint32_t>(v)) {}

Arg Arg::buffer(std::uint64_t address, std::size_t bytes) {
  Arg a(ScalarType::i64, address);
  a.buffer_ = true;
  a.bytes_ = bytes;
  return a;
}

Arg Arg::buffer(std::uint64_t address, std::size_t bytes, ScalarType element) {
  Arg a = buffer(address, bytes);
  a.element_ = element;
  return a;
}

std::string Arg::describe() const {
  if (buffer_ && element_) return fmt::format("a buffer of {} ({} bytes)", scalar_type_name(*element_), bytes_);
  if (buffer_) return fmt::format("a buffer ({} bytes)", bytes_);
  return fmt::format("a scalar {}", scalar_type_name(type_));
}

// An integer scalar argument's value, sign-extended from its type (zero-extended: unsigned).
std::int64_t scalar_int_value(const Arg& a) {
  std::uint64_t b = a.bits();
  switch (a.scalar_type()) {
  case ScalarType::i1: return std::int64_t(b & 1);
  case ScalarType::i8: return std::int8_t(b);
  case ScalarType::i16: return std::int16_t(b);
  case ScalarType::i32: return std::int32_t(b);
  case ScalarType::u8: return std::int64_t(b & 0xff);
  case ScalarType::u16: return std::int64_t(b & 0xffff);
  case ScalarType::u32: return std::int64_t(b & 0xffffffff);
  default: return std::int64_t(b);
  }
}

void check_launch_args(const Manifest& m, std::span<const Arg> args) {
  // The wording every launcher shares (abi/arg_errors.h), after "kernel '<name>': ".
  auto fail = [&](const std::string& msg) {
    throw LaunchArgumentError(fmt::format("kernel '{}': {}", m.kernel, msg));
  };
  auto fits = [&](std::size_t i, std::size_t k) {
    const ParamType& t = m.params[i].type;
    const Arg& a = args[k];
    if (t.is_pointer) return a.is_buffer() && (!a.buffer_element() || *a.buffer_element() == t.element);
    return !a.is_buffer() && a.scalar_type() == t.element;
  };
  if (args.size() != m.params.size()) {
    std::vector<ParamName> params;
    for (const ModuleParam& p : m.params) params.push_back({p.name, p.type.str()});
    std::vector<std::string> extra;
    for (std::size_t k = m.params.size(); k < args.size(); ++k) extra.push_back(args[k].describe());
    fail(argument_count_mismatch(params, args.size(), extra, fits));
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    const ModuleParam& p = m.params[i];
    const Arg& a = args[i];
    if (!fits(i, i)) {
      std::string given = a.describe();
      if (p.type.is_pointer && !a.is_buffer()) given += ", not a buffer";
      if (!p.type.is_pointer && a.is_buffer()) given += ", not a scalar";
      fail(param_given(p.name, p.type.str(), given));
    }
    // Generated code assumes 16-byte aligned buffers (ir/SEMANTICS.md): vector accesses.
    if (p.type.is_pointer && a.bits() % 16 != 0)
      throw LaunchArgumentError(fmt::format("kernel '{}' parameter '{}': the buffer at address {:#x} is not 16-byte "
                                            "aligned, which tilec's code assumes of every pointer argument",
                                            m.kernel, p.name, a.bits()));
    // The code treats pointer parameters as noalias: a written buffer overlaps no other.
    if (p.type.is_pointer && a.buffer_bytes() > 0)
      for (std::size_t j = 0; j < i; ++j) {
        const Arg& o = args[j];
        if (!m.params[j].type.is_pointer || o.buffer_bytes() == 0) continue;
        if (p.read_only && m.params[j].read_only) continue;
        bool overlap = a.bits() < o.bits() + o.buffer_bytes() && o.bits() < a.bits() + a.buffer_bytes();
        if (overlap)
          throw LaunchArgumentError(fmt::format(
              "kernel '{}': buffers '{}' and '{}' overlap and the kernel writes {}; tilec's code assumes a "
              "written buffer overlaps no other (pass separate buffers)",
              m.kernel, m.params[j].name, p.name, p.read_only ? "'" + m.params[j].name + "'" : "'" + p.name + "'"));
      }
    // 32-bit offsets reach 2^31 elements; a larger buffer needs a module compiled for it.
    if (p.type.is_pointer && !p.offsets64) {
      const std::size_t elem = scalar_type_bytes(p.type.element);
      if (a.buffer_bytes() / elem > kMaxElements32)
        throw LaunchArgumentError(fmt::format(
            "kernel '{}' parameter '{}' is given {} elements of {}; this module computes offsets into it in 32 "
            "bits, which reach {} (2^31): compile it for large buffers (tilec compile --large-buffers {})",
            m.kernel, p.name, a.buffer_bytes() / elem, scalar_type_name(p.type.element), kMaxElements32, p.name));
    }
    if (auto it = m.fixed.find(p.name); it != m.fixed.end()) {
      std::int64_t v = scalar_int_value(a);
      if (v != it->second)
        throw LaunchArgumentError(fmt::format(
            "kernel '{}' parameter '{}' = {}: this module was compiled with it fixed at {} (its [fixed] table); "
            "compile one for this value", m.kernel, p.name, v, it->second));
    }
    if (auto it = m.divisibility.find(p.name); it != m.divisibility.end()) {
      std::int64_t v = scalar_int_value(a);
      if (v % it->second != 0)
        throw LaunchArgumentError(fmt::format(
            "kernel '{}' parameter '{}' = {}: this module was compiled for values divisible by {} (its "
            "[divisibility] table); compile one without that assumption for this value",
            m.kernel, p.name, v, it->second));
    }
  }
}

} // namespace tilec::rt
