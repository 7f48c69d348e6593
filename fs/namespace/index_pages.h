#pragma once
// The pages of a PEP 503 "simple" repository, as files: the root lists projects by their
// normalized names, each project's page links its wheels (relative links, beside the page) with
// the wheel's sha256 and, where known, its Requires-Python and the sha256 of its METADATA file
// (PEP 658/714: pip then reads <wheel>.metadata instead of downloading the wheel to resolve).
// Pure: names and attributes are HTML-escaped and links percent-encoded.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace whfs::ns {

struct PageLink {
  std::string file;                            // the wheel's file name
  std::string sha256;                          // "" when the listing has none
  std::string requires_python;                 // "" when unknown or none
  std::optional<std::string> metadata_sha256;  // the .metadata file beside it, when there is one
};

std::string simple_root_page(const std::vector<std::string>& projects);
std::string simple_project_page(std::string_view project, const std::vector<PageLink>& links);

// &, <, >, " and ' as entities. (Links are percent-encoded: fs/common/percent.h.)
std::string html_escape(std::string_view text);

}  // namespace whfs::ns
