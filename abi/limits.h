#pragma once
// Rules that hold wherever a kernel is compiled or launched, stated once: the compiler, the
// kernels and the CLI check them through these (each caller wraps the message in its own
// error type).
#include <cstdint>
#include <string>

#include "abi/version.h"

namespace tilec {

// Why `num_warps` cannot be used, or "" when it can: a power of two from 1 to 32 (a block of
// at most 1024 threads).
inline std::string num_warps_error(int64_t num_warps) {
  if (num_warps >= 1 && num_warps <= 32 && (num_warps & (num_warps - 1)) == 0) return "";
  return "num_warps=" + std::to_string(num_warps) + ": must be a power of two from 1 to 32";
}

// The most dynamic shared memory one block may use on `arch` (with the opt-in attribute the
// runtime sets): sm_80 163 KiB, sm_86 and sm_89 99 KiB, sm_90 227 KiB; 0 for an unknown arch.
inline int64_t max_shared_bytes(const std::string& arch) {
  if (arch == "sm_80") return 163 * 1024;
  if (arch == "sm_86" || arch == "sm_89") return 99 * 1024;
  if (arch == "sm_90") return 227 * 1024;
  return 0;
}

// How many blocks of `shared_bytes` each fit one SM of `arch` by shared memory: an SM holds the
// per-block maximum plus the 1 KiB it keeps for each block (0 for an unknown arch).
inline int64_t blocks_by_shared_memory(const std::string& arch, int64_t shared_bytes) {
  const int64_t per_sm = max_shared_bytes(arch) + 1024;
  return max_shared_bytes(arch) ? per_sm / (shared_bytes + 1024) : 0;
}

// The most bytes one tensor may take: 2^44 (16 TiB), a few of which fit a process's address
// space on x86-64 Linux (2^47); no GPU holds more. Tensors past 2^31 elements are fine
// below it (64-bit offsets, ir::widen_offsets).
inline constexpr int64_t kMaxTensorBytes = int64_t(1) << 44;

} // namespace tilec
