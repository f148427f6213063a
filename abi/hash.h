#pragma once
// The one content hash of tilec: 64-bit FNV-1a's algorithm. Module names and IR hashes
// (ir::content_hash), code-file checksums in manifests and the module cache's keys all use it.
// Its offset basis is tilec's own, 1469598103934665603: the standard's 14695981039346656037
// with the last digit lost when the first copy was written. Every module exported since carries
// checksums and names made with it, so it stays (a different basis would refuse them all).
#include <cstdint>
#include <string_view>

namespace tilec {

inline constexpr std::uint64_t kFnv1aOffset = 1469598103934665603ull; // see above

// FNV-1a 64 of `data`, continuing from `h` (the offset basis for a fresh hash).
constexpr std::uint64_t fnv1a64(std::string_view data, std::uint64_t h = kFnv1aOffset) {
  for (char c : data) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

} // namespace tilec
