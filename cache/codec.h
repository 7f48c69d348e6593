#pragma once
// Compact little-endian binary encoding for the cache's records, with bounds-checked decoding:
// a ByteReader never reads past its input; any short or malformed input makes it fail (sticky)
// and every later read returns zero/empty, so decoders check ok() once at the end.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace whfs::cache {

class ByteWriter {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u16(std::uint16_t v) { put_le(v, 2); }
  void u32(std::uint32_t v) { put_le(v, 4); }
  void u64(std::uint64_t v) { put_le(v, 8); }
  void raw(std::string_view bytes) { out_.append(bytes); }
  // u32 length, then the bytes.
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }

  const std::string& data() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void put_le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>(v >> (8 * i) & 0xff));
  }
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> in) : in_(in) {}
  explicit ByteReader(std::string_view in)
      : in_(reinterpret_cast<const std::byte*>(in.data()), in.size()) {}

  std::uint8_t u8() { return static_cast<std::uint8_t>(get_le(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(get_le(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(get_le(4)); }
  std::uint64_t u64() { return get_le(8); }
  std::string_view raw(std::size_t n);
  // A u32-length-prefixed string of at most `max_len` bytes.
  std::string_view str(std::size_t max_len);

  bool ok() const { return ok_; }
  std::size_t remaining() const { return ok_ ? in_.size() - pos_ : 0; }
  // Everything was consumed and nothing failed.
  bool done() const { return ok_ && pos_ == in_.size(); }
  void fail() { ok_ = false; }

 private:
  std::uint64_t get_le(std::size_t n);

  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace whfs::cache
