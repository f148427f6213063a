#pragma once
// Zero-filled bytes whose large arrays take memory only where they are written.
//
// A KV cache sized as a serving engine sizes it (most of a GPU's memory) is mostly pages no
// sequence uses. An array of at least kLazyBytes is an anonymous private mapping: the kernel
// hands out zero pages on first read and commits a page only when it is written, so a
// buffer of tens of gigabytes whose live pages are few costs the memory of those pages.
// Smaller arrays are plain heap memory.
#include <cstddef>
#include <vector>

namespace tilec {

class ByteArray {
public:
  // Arrays from this size up are mapped lazily.
  static constexpr std::size_t kLazyBytes = std::size_t(1) << 20;

  ByteArray() = default;
  explicit ByteArray(std::size_t n); // n zero bytes
  explicit ByteArray(const std::vector<std::byte>& v);
  ByteArray(const ByteArray& o);
  ByteArray(ByteArray&& o) noexcept;
  ByteArray& operator=(const ByteArray& o);
  ByteArray& operator=(ByteArray&& o) noexcept;
  ~ByteArray();

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::byte* begin() { return data_; }
  std::byte* end() { return data_ + size_; }
  const std::byte* begin() const { return data_; }
  const std::byte* end() const { return data_ + size_; }
  std::byte& operator[](std::size_t i) { return data_[i]; }
  const std::byte& operator[](std::size_t i) const { return data_[i]; }

  // n bytes of value v (a fresh array: writing zeros to a lazy one commits no page).
  void assign(std::size_t n, std::byte v);
  std::vector<std::byte> to_vector() const { return {begin(), end()}; }
  bool operator==(const ByteArray& o) const;

  // Whether the array is a lazily committed mapping.
  bool lazy() const { return lazy_; }
  // The bytes of the pages that hold memory of their own now (written; not the shared zero
  // page reads map): the whole size for heap arrays.
  std::size_t resident_bytes() const;

private:
  void allocate(std::size_t n);
  void release();
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool lazy_ = false;
};

} // namespace tilec
