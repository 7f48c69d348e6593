#include "cache/codec.h"

namespace whfs::cache {

std::uint64_t ByteReader::get_le(std::size_t n) {
  if (!ok_ || in_.size() - pos_ < n) {
    ok_ = false;
    return 0;
  }
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    v |= static_cast<std::uint64_t>(in_[pos_ + i]) << (8 * i);
  }
  pos_ += n;
  return v;
}

std::string_view ByteReader::raw(std::size_t n) {
  if (!ok_ || in_.size() - pos_ < n) {
    ok_ = false;
    return {};
  }
  std::string_view out(reinterpret_cast<const char*>(in_.data() + pos_), n);
  pos_ += n;
  return out;
}

std::string_view ByteReader::str(std::size_t max_len) {
  const std::uint32_t len = u32();
  if (len > max_len) {
    ok_ = false;
    return {};
  }
  return raw(len);
}

}  // namespace whfs::cache
