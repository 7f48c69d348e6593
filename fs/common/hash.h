#pragma once
// Streaming SHA-256 and SHA-1 (OpenSSL EVP) and hex helpers. The Hub names content by the
// SHA-256 of LFS files and by the git blob SHA-1 ("blob <size>\0" + bytes) of the others; the
// cache verifies whole contents against them.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace whfs {

enum class HashAlgo { kSha256, kSha1 };

class Hasher {
 public:
  explicit Hasher(HashAlgo algo);
  ~Hasher();
  Hasher(Hasher&&) noexcept;
  Hasher& operator=(Hasher&&) noexcept;
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  void update(std::span<const std::byte> data);
  void update(std::string_view data);
  // Raw digest (32 or 20 bytes); the hasher is spent afterwards.
  std::vector<std::uint8_t> finish();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// A hasher primed with the git blob header for a blob of `size` bytes.
Hasher git_blob_hasher(std::uint64_t size);

std::string to_hex(std::span<const std::uint8_t> bytes);
// nullopt unless `hex` is an even-length string of [0-9a-fA-F].
std::optional<std::vector<std::uint8_t>> from_hex(std::string_view hex);
bool is_hex(std::string_view s, std::size_t len);

std::string sha256_hex(std::string_view data);

}  // namespace whfs
