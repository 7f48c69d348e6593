#include "fs/publish/base64.h"

#include <cstdint>

namespace whfs::publish {
namespace {

std::string encode(std::span<const std::byte> data, const char* alphabet, bool pad) {
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    const std::uint32_t v = std::to_integer<std::uint32_t>(data[i]) << 16 |
                            std::to_integer<std::uint32_t>(data[i + 1]) << 8 |
                            std::to_integer<std::uint32_t>(data[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6) out.push_back(alphabet[(v >> shift) & 63]);
  }
  const std::size_t rest = data.size() - i;
  if (rest == 0) return out;
  std::uint32_t v = std::to_integer<std::uint32_t>(data[i]) << 16;
  if (rest == 2) v |= std::to_integer<std::uint32_t>(data[i + 1]) << 8;
  out.push_back(alphabet[(v >> 18) & 63]);
  out.push_back(alphabet[(v >> 12) & 63]);
  if (rest == 2) out.push_back(alphabet[(v >> 6) & 63]);
  if (pad) out.append(rest == 1 ? "==" : "=");
  return out;
}

constexpr const char* kStandard =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr const char* kUrlSafe = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

}  // namespace

std::string base64(std::span<const std::byte> data) { return encode(data, kStandard, true); }

std::string base64(std::string_view data) {
  return base64(std::as_bytes(std::span<const char>(data.data(), data.size())));
}

std::string base64url_nopad(std::span<const std::byte> data) {
  return encode(data, kUrlSafe, false);
}

}  // namespace whfs::publish
