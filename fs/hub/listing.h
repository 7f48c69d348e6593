#pragma once
// Pure functions over response bytes: tree pages, revision info, Link headers, remote path
// checks. No I/O, so they are unit-tested and fuzzed directly (tests/fuzz/).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/common/expected.h"
#include "fs/common/remote_entry.h"
#include "fs/hub/hub_error.h"

namespace whfs::hub {

// Bounds on what a listing may make the daemon hold: the Hub sends 1000 entries a page.
inline constexpr std::size_t kMaxEntriesPerPage = 10000;
// Files above this are invalid entries (skipped): st_size and the cache's block numbers stay
// far from overflowing, and no wheel comes near it.
inline constexpr std::uint64_t kMaxFileSize = std::uint64_t{1} << 40;

struct TreePage {
  std::vector<RemoteEntry> entries;
  std::vector<std::string> skipped;  // one reason per entry left out, for a warning each
};

// Parses one page of GET /api/datasets/{repo}/tree/{sha}/{folder} (a JSON array). Entries
// whose path is not a safe child of `folder` (a direct child unless `recursive`) are skipped
// with a reason; malformed JSON or a non-array body is an error.
Expected<TreePage, HubError> parse_tree_page(std::string_view body, std::string_view folder,
                                             bool recursive);

// Why a remote path may not become a local name, or nullopt when it is fine: NUL or another
// control character, empty segments, ".", "..", a segment over 255 bytes, a leading "/", or
// outside `folder`.
std::optional<std::string> check_remote_path(std::string_view path, std::string_view folder,
                                             bool recursive);

struct RevisionInfo {
  std::string commit;         // 40 hex
  std::string last_modified;  // ISO-8601 as sent, may be empty
  bool is_public = false;     // "private": false and "gated": false, both sent
};

// Parses GET /api/datasets/{repo}/revision/{rev}: requires "sha" as 40 hex. A repository is
// public only when the body says both "private": false and "gated": false.
Expected<RevisionInfo, HubError> parse_revision_info(std::string_view body);

// The URL of rel="next" in a Link header (RFC 8288), or nullopt.
std::optional<std::string> parse_link_next(std::string_view header);

}  // namespace whfs::hub
