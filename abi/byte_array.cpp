#include "abi/byte_array.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "abi/error.h"

namespace tilec {

namespace {

std::size_t page_bytes() {
  static const std::size_t p = std::size_t(sysconf(_SC_PAGESIZE));
  return p;
}

bool all_zero(const std::byte* p, std::size_t n) {
  // Compares 8 bytes at a time; unaligned tails byte by byte.
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w) return false;
  }
  for (; i < n; ++i)
    if (p[i] != std::byte{0}) return false;
  return true;
}

} // namespace

void ByteArray::allocate(std::size_t n) {
  size_ = n;
  lazy_ = n >= kLazyBytes;
  if (n == 0) return;
  if (!lazy_) {
    data_ = new std::byte[n]();
    return;
  }
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    size_ = 0;
    lazy_ = false;
    throw rt::Error(fmt::format("cannot reserve {} bytes of address space for a buffer: {}", n,
                                       std::strerror(errno)));
  }
  data_ = static_cast<std::byte*>(p);
}

void ByteArray::release() {
  if (data_) {
    if (lazy_)
      munmap(data_, size_);
    else
      delete[] data_;
  }
  data_ = nullptr;
  size_ = 0;
  lazy_ = false;
}

ByteArray::ByteArray(std::size_t n) { allocate(n); }

ByteArray::ByteArray(const std::vector<std::byte>& v) {
  allocate(v.size());
  if (!v.empty()) std::memcpy(data_, v.data(), v.size());
}

ByteArray::ByteArray(const ByteArray& o) {
  allocate(o.size_);
  if (!lazy_) {
    if (size_) std::memcpy(data_, o.data_, size_);
    return;
  }
  // Page by page, skipping the zero ones: the copy commits only the pages the source wrote.
  const std::size_t page = page_bytes();
  for (std::size_t at = 0; at < size_; at += page) {
    std::size_t n = std::min(page, size_ - at);
    if (!all_zero(o.data_ + at, n)) std::memcpy(data_ + at, o.data_ + at, n);
  }
}

ByteArray::ByteArray(ByteArray&& o) noexcept : data_(o.data_), size_(o.size_), lazy_(o.lazy_) {
  o.data_ = nullptr;
  o.size_ = 0;
  o.lazy_ = false;
}

ByteArray& ByteArray::operator=(const ByteArray& o) {
  if (this != &o) *this = ByteArray(o);
  return *this;
}

ByteArray& ByteArray::operator=(ByteArray&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    size_ = o.size_;
    lazy_ = o.lazy_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.lazy_ = false;
  }
  return *this;
}

ByteArray::~ByteArray() { release(); }

void ByteArray::assign(std::size_t n, std::byte v) {
  *this = ByteArray(n);
  if (v != std::byte{0} && n) std::memset(data_, int(v), n);
}

bool ByteArray::operator==(const ByteArray& o) const {
  return size_ == o.size_ && (size_ == 0 || std::memcmp(data_, o.data_, size_) == 0);
}

std::size_t ByteArray::resident_bytes() const {
  if (!lazy_) return size_;
  const std::size_t page = page_bytes();
  std::vector<unsigned char> in((size_ + page - 1) / page);
  if (mincore(data_, size_, in.data()) != 0) return size_;
  std::size_t pages = 0;
  for (unsigned char c : in) pages += c & 1;
  return std::min(size_, pages * page);
}

} // namespace tilec
