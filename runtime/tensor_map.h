#pragma once
// The tensor maps a module's TMA copies read (the manifest's [[tensor_maps]]), resolved for one
// launch from its arguments: what the CUDA launch encodes with cuTensorMapEncodeTiled and the
// emulator's launch hands the kernel as tilec_emu_tensor_map (abi/emu_abi.h).
#include <cstdint>
#include <span>
#include <vector>

#include "abi/manifest.h"
#include "runtime/launch.h"

namespace tilec::rt {

struct ResolvedTensorMap {
  std::uint64_t base = 0;         // the tensor's first element
  ScalarType element = ScalarType::f32;
  int rank = 0;
  std::uint64_t sizes[5] = {};    // elements, innermost first
  std::uint64_t strides[5] = {};  // bytes, innermost first ([0]: the element's size)
  std::uint32_t box[5] = {};      // innermost first
  int swizzle = 0;                // bytes: 0, 32, 64 or 128
};

// One per entry of m.tensor_maps, from `args` (already checked against m.params). Throws
// LaunchArgumentError naming the map's base parameter when the arguments cannot describe a
// tensor a copy engine reads: a size below 1 or from 2^31 (coordinates are signed 32-bit), an
// innermost stride other than 1, an outer stride that is not a multiple of 16 bytes or reaches
// 2^40, or a tensor reaching past its buffer. Launchers call it only for a grid with programs.
std::vector<ResolvedTensorMap> resolve_tensor_maps(const Manifest& m, std::span<const Arg> args);

} // namespace tilec::rt
