#include "runtime/launch.h"

#include "abi/error.h"

#include <bit>
#include <fmt/format.h>

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

void check_launch_args(const Manifest& m, std::span<const Arg> args) {
  if (args.size() != m.params.size()) {
    std::string names;
    for (const ModuleParam& p : m.params)
      names += (names.empty() ? "" : ", ") + p.name + ": " + p.type.str();
    throw LaunchArgumentError(fmt::format("kernel '{}' takes {} argument{} ({}), got {}", m.kernel,
                                          m.params.size(), m.params.size() == 1 ? "" : "s", names,
                                          args.size()));
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    const ModuleParam& p = m.params[i];
    const Arg& a = args[i];
    bool ok = p.type.is_pointer
                  ? a.is_buffer() && (!a.buffer_element() || *a.buffer_element() == p.type.element)
                  : !a.is_buffer() && a.scalar_type() == p.type.element;
    if (!ok)
      throw LaunchArgumentError(fmt::format(
          "kernel '{}' parameter '{}' (argument {} of {}) is {}{}, got {}", m.kernel, p.name, i + 1,
          args.size(), p.type.str(), p.type.is_pointer ? " and needs a buffer" : "", a.describe()));
  }
}

} // namespace tilec::rt
