#include "fs/common/hash.h"

#include <openssl/evp.h>

#include <stdexcept>
#include <string>

namespace whfs {

struct Hasher::Ctx {
  EVP_MD_CTX* md = nullptr;
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Hasher::Hasher(HashAlgo algo) : ctx_(std::make_unique<Ctx>()) {
  ctx_->md = EVP_MD_CTX_new();
  const EVP_MD* md = algo == HashAlgo::kSha256 ? EVP_sha256() : EVP_sha1();
  if (ctx_->md == nullptr || EVP_DigestInit_ex(ctx_->md, md, nullptr) != 1) {
    throw std::runtime_error("OpenSSL digest init failed");
  }
}

Hasher::~Hasher() = default;
Hasher::Hasher(Hasher&&) noexcept = default;
Hasher& Hasher::operator=(Hasher&&) noexcept = default;

void Hasher::update(std::span<const std::byte> data) {
  EVP_DigestUpdate(ctx_->md, data.data(), data.size());
}

void Hasher::update(std::string_view data) { EVP_DigestUpdate(ctx_->md, data.data(), data.size()); }

std::vector<std::uint8_t> Hasher::finish() {
  std::vector<std::uint8_t> out(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_->md, out.data(), &len);
  out.resize(len);
  return out;
}

Hasher git_blob_hasher(std::uint64_t size) {
  Hasher h(HashAlgo::kSha1);
  const std::string header = "blob " + std::to_string(size);
  h.update(std::string_view(header.c_str(), header.size() + 1));  // with the NUL
  return h;
}

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::optional<std::vector<std::uint8_t>> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::vector<std::uint8_t> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return out;
}

bool is_hex(std::string_view s, std::size_t len) {
  if (s.size() != len) return false;
  for (char c : s) {
    if (hex_value(c) < 0) return false;
  }
  return true;
}

std::string sha256_hex(std::string_view data) {
  Hasher h(HashAlgo::kSha256);
  h.update(data);
  return to_hex(h.finish());
}

}  // namespace whfs
