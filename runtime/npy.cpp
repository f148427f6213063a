#include "runtime/npy.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>

#include "abi/error.h"

namespace tilec::rt {

namespace {

[[noreturn]] void bad(const std::string& name, const std::string& what) {
  throw NpyError(fmt::format("{}: {}", name, what));
}

// Finds `'key': ` in the header dict and returns the position after it.
size_t find_key(const std::string& h, const std::string& key, const std::string& name) {
  for (const char* q : {"'", "\""}) {
    std::string pat = std::string(q) + key + q;
    size_t p = h.find(pat);
    if (p != std::string::npos) {
      p = h.find(':', p + pat.size());
      if (p == std::string::npos) bad(name, fmt::format("malformed .npy header: no ':' after '{}'", key));
      p++;
      while (p < h.size() && h[p] == ' ') p++;
      return p;
    }
  }
  bad(name, fmt::format("malformed .npy header: no '{}' key", key));
}

} // namespace

int64_t NpyArray::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int NpyArray::item_size() const {
  if (descr.size() < 3) return 0;
  int n = 0;
  for (size_t i = 2; i < descr.size(); ++i) {
    if (descr[i] < '0' || descr[i] > '9' || n > 64) return 0;
    n = n * 10 + (descr[i] - '0');
  }
  return n;
}

NpyArray parse_npy(const std::vector<std::byte>& bytes, const std::string& name) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) bad(name, "not a .npy file (bad magic)");
  int major = p[6];
  size_t header_len, offset;
  if (major == 1) {
    header_len = size_t(p[8]) | size_t(p[9]) << 8;
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) bad(name, "truncated .npy header");
    header_len = size_t(p[8]) | size_t(p[9]) << 8 | size_t(p[10]) << 16 | size_t(p[11]) << 24;
    offset = 12;
  } else {
    bad(name, fmt::format("unsupported .npy version {}.{}", major, int(p[7])));
  }
  if (header_len > bytes.size() - offset)
    bad(name, fmt::format("truncated .npy header: it claims {} bytes, the file has {}", header_len,
                          bytes.size() - offset));
  std::string h(reinterpret_cast<const char*>(p + offset), header_len);

  NpyArray a;
  size_t d = find_key(h, "descr", name);
  if (d >= h.size() || (h[d] != '\'' && h[d] != '"')) bad(name, "malformed .npy header: descr is not a string");
  size_t e = h.find(h[d], d + 1);
  if (e == std::string::npos) bad(name, "malformed .npy header: unterminated descr");
  a.descr = h.substr(d + 1, e - d - 1);
  // A byte order, a kind (bool, signed, unsigned, float) and the item size: "<f4", "|b1".
  if (a.descr.size() < 3 || (a.descr[0] != '<' && a.descr[0] != '|') ||
      std::string_view("biuf").find(a.descr[1]) == std::string_view::npos || a.item_size() <= 0)
    bad(name, fmt::format("unsupported dtype '{}' (little-endian numbers only)", a.descr));

  size_t f = find_key(h, "fortran_order", name);
  if (h.compare(f, 4, "True") == 0) bad(name, "Fortran-ordered arrays are not supported; save with C order");
  if (h.compare(f, 5, "False") != 0) bad(name, "malformed .npy header: fortran_order is not True/False");

  size_t s = find_key(h, "shape", name);
  if (s >= h.size() || h[s] != '(') bad(name, "malformed .npy header: shape is not a tuple");
  size_t close = h.find(')', s);
  if (close == std::string::npos) bad(name, "malformed .npy header: unterminated shape");
  std::string dims = h.substr(s + 1, close - s - 1);
  size_t i = 0;
  while (i < dims.size()) {
    while (i < dims.size() && (dims[i] == ' ' || dims[i] == ',')) i++;
    if (i >= dims.size()) break;
    int64_t v = 0;
    size_t start = i;
    while (i < dims.size() && dims[i] >= '0' && dims[i] <= '9') {
      v = v * 10 + (dims[i] - '0');
      if (v > (int64_t(1) << 40)) bad(name, "malformed .npy header: a dimension is too large");
      i++;
    }
    if (i == start) bad(name, fmt::format("malformed .npy header: bad shape '({})'", dims));
    a.shape.push_back(v);
    if (a.shape.size() > 8) bad(name, "more than 8 dimensions");
  }
  // numpy's own limit: the array's bytes, zero dimensions aside, fit a signed 64-bit size.
  int64_t bytes_of_nonzero_dims = a.item_size();
  for (int64_t dim : a.shape)
    if (dim != 0 && __builtin_mul_overflow(bytes_of_nonzero_dims, dim, &bytes_of_nonzero_dims))
      bad(name, fmt::format("malformed .npy header: shape ({}) is too large (its size overflows 64 bits)", dims));
  size_t data_off = offset + header_len;
  long double want = static_cast<long double>(a.item_size());
  for (int64_t dim : a.shape) want *= static_cast<long double>(dim);
  size_t have = bytes.size() - data_off;
  if (want > static_cast<long double>(have))
    bad(name, fmt::format("the header claims {} bytes of data ({} x {} bytes), the file holds {}",
                          static_cast<double>(want), a.count(), a.item_size(), have));
  size_t n = static_cast<size_t>(want);
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_off),
                bytes.begin() + static_cast<std::ptrdiff_t>(data_off + n));
  return a;
}

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) bad(path, fmt::format("cannot open: {}", std::strerror(errno)));
  std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(raw.size());
  std::memcpy(bytes.data(), raw.data(), raw.size());
  return parse_npy(bytes, path);
}

void write_npy(const std::string& path, const NpyArray& a) {
  std::string dims;
  for (int64_t d : a.shape) dims += fmt::format("{}, ", d);
  if (a.shape.size() > 1) dims.resize(dims.size() - 2);
  std::string h = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", a.descr, dims);
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw NpyError(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
    f.write("\x93NUMPY\x01\x00", 8);
    char len[2] = {char(h.size() & 0xff), char(h.size() >> 8)};
    f.write(len, 2);
    f.write(h.data(), static_cast<std::streamsize>(h.size()));
    f.write(reinterpret_cast<const char*>(a.data.data()), static_cast<std::streamsize>(a.data.size()));
    if (!f) throw NpyError(fmt::format("{}: write failed", path));
  }
  std::filesystem::rename(tmp, path);
}

} // namespace tilec::rt
