#pragma once
// NumPy .npy files (format version 1.0/2.0, little-endian, C order): the
// kernel inputs and outputs that cross the command line.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "abi/error.h"

namespace tilec::rt {

// A .npy file that cannot be read or is malformed (bad input: exit code 2).
class NpyError : public Error {
public:
  using Error::Error;
};

struct NpyArray {
  std::string descr;          // "<f4", "<f2", "<u4", "<i4", "<u2" (bf16 bits), "|b1", ...
  std::vector<int64_t> shape;
  std::vector<std::byte> data;

  int64_t count() const;
  int item_size() const; // from descr
};

// Reads a .npy file. Throws NpyError naming the file and
// what is wrong: not an .npy file, an unsupported version, dtype or order, a
// malformed header, or a header that claims more data than the file holds.
NpyArray read_npy(const std::string& path);
// Parses .npy bytes (what read_npy does after reading the file); `name` is used in errors.
NpyArray parse_npy(const std::vector<std::byte>& bytes, const std::string& name);
// Writes atomically (a temporary file renamed into place).
void write_npy(const std::string& path, const NpyArray& a);

} // namespace tilec::rt
