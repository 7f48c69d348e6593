#pragma once
// Base64 as the publish path needs it: the standard alphabet with padding for the Hub's JSON
// (a preupload sample, a regular file's content in the commit), and the URL-safe alphabet
// without padding that a wheel's RECORD uses for its hashes (PEP 376, PEP 427).

#include <span>
#include <string>
#include <string_view>

namespace whfs::publish {

std::string base64(std::span<const std::byte> data);
std::string base64(std::string_view data);

std::string base64url_nopad(std::span<const std::byte> data);

}  // namespace whfs::publish
