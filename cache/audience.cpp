#include "cache/audience.h"

#include "fs/common/hash.h"

namespace whfs::cache {

std::string credential_audience(std::string_view endpoint, std::string_view token) {
  if (token.empty()) return std::string(kPublicAudience);
  std::string material = "wheelhouse-fs audience";
  material += '\0';
  material += endpoint;
  material += '\0';
  material += token;
  return "id:" + sha256_hex(material).substr(0, 32);
}

namespace {

std::vector<std::string> readable_of(const std::string& own) {
  if (own == kPublicAudience) return {own};
  return {own, std::string(kPublicAudience)};
}

}  // namespace

AccessScope::AccessScope(std::string own) : own_(std::move(own)), readable_(readable_of(own_)) {}

}  // namespace whfs::cache
