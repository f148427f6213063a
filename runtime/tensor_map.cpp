#include "runtime/tensor_map.h"

#include <fmt/format.h>

#include "abi/error.h"

namespace tilec::rt {

std::vector<ResolvedTensorMap> resolve_tensor_maps(const Manifest& m, std::span<const Arg> args) {
  std::vector<ResolvedTensorMap> out;
  auto index = [&](const std::string& name) {
    for (std::size_t i = 0; i < m.params.size(); ++i)
      if (m.params[i].name == name) return i;
    throw LaunchArgumentError(fmt::format("kernel '{}': tensor map names no parameter '{}'", m.kernel, name));
  };
  for (const ModuleTensorMap& t : m.tensor_maps) {
    auto fail = [&](const std::string& msg) {
      throw LaunchArgumentError(fmt::format("kernel '{}': the tensor map of '{}' (a TMA copy's): {}", m.kernel, t.base, msg));
    };
    const std::size_t bi = index(t.base);
    const Arg& base = args[bi];
    ResolvedTensorMap r;
    r.base = base.bits();
    r.element = m.params[bi].type.element;
    r.rank = int(t.box.size());
    r.swizzle = t.swizzle;
    const std::uint64_t eb = scalar_type_bytes(r.element);
    auto value = [&](const SpecValue& v, const char* what) {
      if (auto* i = std::get_if<std::int64_t>(&v)) return *i;
      const std::string& name = std::get<std::string>(v);
      return scalar_int_value(args[index(name)]);
    };
    std::int64_t last = 0; // the offset of the tensor's last element
    for (int d = 0; d < r.rank; ++d) {
      const std::size_t k = std::size_t(r.rank - 1 - d); // manifest order: outermost first
      const std::int64_t size = value(t.sizes[k], "size"), stride = value(t.strides[k], "stride");
      // Coordinates are signed 32-bit: a size past 2^31 - 1 could not be addressed whole.
      if (size < 1 || size >= (std::int64_t(1) << 31))
        fail(fmt::format("dim {} has size {}: a tensor map's sizes are from 1 to 2^31 - 1 (an empty tensor cannot "
                         "be described; launch no programs for it)", k, size));
      if (d == 0 && stride != 1)
        fail(fmt::format("dim {} has stride {}: the innermost dim of a tensor map is contiguous (stride 1)", k, stride));
      if (d > 0 && (stride < 0 || std::uint64_t(stride) * eb % 16 != 0 || std::uint64_t(stride) * eb >= (1ull << 40)))
        fail(fmt::format("dim {} has stride {} ({} bytes): outer strides are multiples of 16 bytes below 2^40", k,
                         stride, stride * std::int64_t(eb)));
      r.sizes[d] = std::uint64_t(size);
      r.strides[d] = std::uint64_t(stride) * eb;
      r.box[d] = std::uint32_t(t.box[k]);
      last += (size - 1) * stride;
    }
    if (base.buffer_bytes() > 0 && std::uint64_t(last + 1) * eb > base.buffer_bytes())
      fail(fmt::format("its sizes and strides reach element {}, past the buffer's {} elements", last,
                       base.buffer_bytes() / eb));
    out.push_back(r);
  }
  return out;
}

} // namespace tilec::rt
