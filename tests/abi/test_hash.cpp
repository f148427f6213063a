// tilec's one content hash is FNV-1a 64 with tilec's own offset basis (abi/hash.h): the
// standard's published vectors from the standard basis, tilec's values pinned (a change would
// make every exported module's checksums fail), and the places that use it agree.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "abi/hash.h"
#include "abi/manifest.h"

TEST_CASE("fnv1a64 gives FNV-1a 64's published values and continues from a prefix", "[abi][hash]") {
  constexpr std::uint64_t standard_basis = 14695981039346656037ull;
  static_assert(tilec::fnv1a64("", standard_basis) == 0xcbf29ce484222325ull);
  CHECK(tilec::fnv1a64("a", standard_basis) == 0xaf63dc4c8601ec8cull);
  CHECK(tilec::fnv1a64("foobar", standard_basis) == 0x85944171f73967e8ull);
  CHECK(tilec::fnv1a64("") == 1469598103934665603ull);
  CHECK(fmt::format("{:016x}", tilec::fnv1a64("foobar")) == "88fad7c0a8ff07f2");
  CHECK(tilec::fnv1a64("bar", tilec::fnv1a64("foo")) == tilec::fnv1a64("foobar"));
  CHECK(tilec::rt::file_checksum("foobar") == fmt::format("6:{:016x}", tilec::fnv1a64("foobar")));
}
