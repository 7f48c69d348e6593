#pragma once
// Percent-encoding of one URL path segment (RFC 3986): unreserved characters (letters, digits,
// "-", ".", "_", "~") stay, every other byte becomes %XX: "+" -> %2B, "/" -> %2F, " " -> %20.
// The Hub's URLs (fs/hub/url.h) and the index pages' links (fs/namespace/index_pages.h).

#include <string>
#include <string_view>

namespace whfs {

std::string percent_encode(std::string_view segment);

}  // namespace whfs
