#pragma once
// Block arithmetic of the read path, as pure functions.

#include <algorithm>
#include <cstdint>
#include <vector>

namespace whfs::reader {

struct BlockRange {
  std::uint32_t first = 0;
  std::uint32_t count = 0;
  std::uint32_t end() const { return first + count; }
  bool operator==(const BlockRange&) const = default;
};

inline std::uint32_t block_count(std::uint64_t size, std::uint32_t block) {
  return static_cast<std::uint32_t>((size + block - 1) / block);
}

// The blocks holding bytes [offset, offset + length) of a content of `size` bytes (clipped to
// the end); empty when nothing is left to read.
inline BlockRange blocks_for(std::uint64_t offset, std::uint64_t length, std::uint64_t size,
                             std::uint32_t block) {
  if (offset >= size || length == 0) return {};
  const std::uint64_t end = std::min(size, offset + length);
  const auto first = static_cast<std::uint32_t>(offset / block);
  const auto last = static_cast<std::uint32_t>((end - 1) / block);
  return {first, last - first + 1};
}

// Groups block indices, in the order given, into runs of consecutive ascending blocks, each at
// most `max_blocks` long: adjacent missing blocks become one ranged request.
inline std::vector<BlockRange> coalesce(const std::vector<std::uint32_t>& blocks,
                                        std::uint32_t max_blocks) {
  std::vector<BlockRange> out;
  for (std::uint32_t b : blocks) {
    if (!out.empty() && out.back().end() == b && out.back().count < max_blocks) {
      out.back().count++;
    } else {
      out.push_back({b, 1});
    }
  }
  return out;
}

// Splits a run into pieces of at most `max_blocks`.
inline std::vector<BlockRange> split(BlockRange r, std::uint32_t max_blocks) {
  std::vector<BlockRange> out;
  while (r.count > 0) {
    const std::uint32_t n = std::min(r.count, max_blocks);
    out.push_back({r.first, n});
    r.first += n;
    r.count -= n;
  }
  return out;
}

}  // namespace whfs::reader
