#pragma once
// The n-byte little-endian integer at `at` of a byte buffer (chars or std::bytes): the zip,
// ELF and fat-binary readers' one decoder. The caller has checked that the bytes are there.

#include <cstddef>
#include <cstdint>

namespace whfs::wheel {

template <class Bytes>
std::uint64_t little_endian(const Bytes& b, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) {
    v = v << 8 | static_cast<std::uint8_t>(b[at + static_cast<std::size_t>(i)]);
  }
  return v;
}

}  // namespace whfs::wheel
