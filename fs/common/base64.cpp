#include "fs/common/base64.h"

#include <cstdint>

namespace whfs {
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

// The value of a character of the URL-safe alphabet; -1 for any other.
int url_safe_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

}  // namespace

std::string base64(std::span<const std::byte> data) { return encode(data, kStandard, true); }

std::string base64(std::string_view data) {
  return base64(std::as_bytes(std::span<const char>(data.data(), data.size())));
}

std::string base64url_nopad(std::span<const std::byte> data) {
  return encode(data, kUrlSafe, false);
}

std::optional<std::vector<std::uint8_t>> base64url_decode(std::string_view text) {
  std::size_t pad = 0;
  while (pad < text.size() && pad < 3 && text[text.size() - 1 - pad] == '=') ++pad;
  if (pad > 0 && (pad > 2 || text.size() % 4 != 0)) return std::nullopt;
  text.remove_suffix(pad);
  if (text.size() % 4 == 1) return std::nullopt;
  std::vector<std::uint8_t> out;
  out.reserve(text.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char c : text) {
    const int v = url_safe_value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6 | static_cast<std::uint32_t>(v)) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<std::uint8_t>((acc >> bits) & 0xff));
    }
  }
  return out;
}

}  // namespace whfs
