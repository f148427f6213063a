// The .npy reader (runtime/npy.h): what it accepts, what it rejects and how it says so.
#include "runtime/npy.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "tests/runtime/helpers.h"

using namespace tilec::rt;

namespace {

// A version 1.0 .npy file with `header` (padded like numpy's) followed by `data`.
std::vector<std::byte> npy_bytes(std::string header, const std::string& data) {
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string file = std::string("\x93NUMPY\x01\x00", 8);
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>(header.size() >> 8);
  file += header + data;
  std::vector<std::byte> bytes(file.size());
  std::memcpy(bytes.data(), file.data(), file.size());
  return bytes;
}

std::string error_of(const std::vector<std::byte>& bytes) {
  try {
    parse_npy(bytes, "a.npy");
  } catch (const NpyError& e) {
    return e.what();
  }
  return "no error";
}

} // namespace

TEST_CASE("an .npy array reads, writes and reads back", "[runtime][npy]") {
  NpyArray a = parse_npy(npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 1), }",
                                   std::string("\x01\x00\x00\x00\xff\xff\xff\xff", 8)),
                         "a.npy");
  CHECK(a.descr == "<i4");
  CHECK(a.shape == std::vector<int64_t>{2, 1});
  CHECK(a.count() == 2);
  CHECK(a.data.size() == 8);
  test::TempDir dir;
  std::string path = (dir.path / "a.npy").string();
  write_npy(path, a);
  NpyArray back = read_npy(path);
  CHECK(back.descr == a.descr);
  CHECK(back.shape == a.shape);
  CHECK(back.data == a.data);
}

TEST_CASE("malformed .npy files are NpyErrors naming the file", "[runtime][npy]") {
  CHECK_THAT(error_of({}), Catch::StartsWith("a.npy: not a .npy file"));
  CHECK_THAT(error_of(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "abcd")),
             Catch::StartsWith("a.npy: unsupported dtype '>f4'"));
  CHECK_THAT(error_of(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", "abcd")),
             Catch::Contains("Fortran-ordered"));
  CHECK_THAT(error_of(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", "abcd")),
             Catch::Contains("the header claims 8 bytes of data"));
}

// Found by input fuzzing (fuzz/corpus/npy/regression_*): a kind that is no number was
// accepted and could not be written back; a huge shape overflowed the element count.
TEST_CASE("an .npy dtype must be a number and its size must fit 64 bits", "[runtime][npy]") {
  CHECK_THAT(error_of(npy_bytes("{\"descr\": \"<'4\", \"fortran_order\": False, \"shape\": (1,), }", "abcd")),
             Catch::StartsWith("a.npy: unsupported dtype '<'4'"));
  CHECK_THAT(error_of(npy_bytes("{'descr': '<x4', 'fortran_order': False, 'shape': (1,), }", "abcd")),
             Catch::StartsWith("a.npy: unsupported dtype '<x4'"));
  CHECK_THAT(error_of(npy_bytes("{'descr': '<u8', 'fortran_order': False, 'shape': (1099511627776, "
                                "1099511627776, 0), }",
                                "")),
             Catch::StartsWith("a.npy: malformed .npy header: shape") && Catch::Contains("too large"));
  CHECK_THAT(error_of(npy_bytes("{'descr': '<u8', 'fortran_order': False, 'shape': (1099511625552, "
                                "11625552, 2), }",
                                "")),
             Catch::Contains("too large"));
  NpyArray empty = parse_npy(npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (0, 1099511627776), }", ""),
                             "a.npy");
  CHECK(empty.count() == 0);
  CHECK(empty.data.empty());
}
