#include "abi/byte_array.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <optional>

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

// Per page of [p, p + n): whether the process ever gave it memory of its own: present and
// mapped by this process alone (not the shared zero page a read of an untouched page maps),
// or swapped out. Read from /proc/self/pagemap; nullopt where it cannot be read.
std::optional<std::vector<bool>> owned_pages(const std::byte* p, std::size_t n) {
  const std::size_t page = page_bytes();
  const std::size_t first = std::uintptr_t(p) / page, count = (n + page - 1) / page;
  FILE* f = std::fopen("/proc/self/pagemap", "rb");
  if (!f) return std::nullopt;
  std::vector<std::uint64_t> entries(count);
  bool ok = std::fseek(f, long(first * 8), SEEK_SET) == 0 && std::fread(entries.data(), 8, count, f) == count;
  std::fclose(f);
  if (!ok) return std::nullopt;
  std::vector<bool> owned(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t e = entries[i];
    const bool present = e >> 63 & 1, swapped = e >> 62 & 1, exclusive = e >> 56 & 1;
    owned[i] = (present && exclusive) || swapped;
  }
  return owned;
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
  // Page by page, only those the source ever wrote (never reading the others, which would
  // map them) and of those the ones not all zero: the copy commits what the source holds.
  const std::size_t page = page_bytes();
  const std::uintptr_t skew = std::uintptr_t(o.data_) % page; // 0: mappings are page-aligned
  std::optional<std::vector<bool>> owned = owned_pages(o.data_, size_);
  for (std::size_t at = 0, i = 0; at < size_; at += page, ++i) {
    std::size_t n = std::min(page, size_ - at);
    if (owned && skew == 0 && !(*owned)[i]) continue;
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
  if (auto owned = owned_pages(data_, size_)) {
    std::size_t pages = 0;
    for (bool b : *owned) pages += b;
    return std::min(size_, pages * page);
  }
  std::vector<unsigned char> in((size_ + page - 1) / page);
  if (mincore(data_, size_, in.data()) != 0) return size_;
  std::size_t pages = 0;
  for (unsigned char c : in) pages += c & 1;
  return std::min(size_, pages * page);
}

} // namespace tilec
