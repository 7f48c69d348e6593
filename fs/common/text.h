#pragma once
// The small string helpers the tree needs, once each (ASCII only: the texts they see are
// protocol fields, file names and config lines).

#include <string>
#include <string_view>
#include <vector>

namespace whfs {

// Without spaces, tabs, CR and LF at either end.
std::string_view trim(std::string_view s);

// ASCII lower case.
std::string lower(std::string_view s);

// The items with `sep` between them.
std::string join(const std::vector<std::string>& items, std::string_view sep);

// The fields between `sep`s, empty ones kept: "a,,b" -> {"a", "", "b"}; "" -> {""}.
std::vector<std::string_view> split(std::string_view s, char sep);

// The same without the empty fields: "/usr//bin/" -> {"usr", "bin"}.
std::vector<std::string_view> split_nonempty(std::string_view s, char sep);

// The name of `names` nearest to `word` when near enough to be a slip (one edit for a word
// under 5 letters, else two; '-' and '_' alike, so cache-dir is cache_dir); else "".
std::string nearest_name(std::string_view word, const std::vector<std::string>& names);

}  // namespace whfs
