// Repository ids and the endpoint: what a Hub client is configured with.
#include <cctype>
#include <cstdlib>

#include "fs/hub/hub_client.h"

namespace whfs::hub {
namespace {

bool valid_repo_part(std::string_view s) {
  if (s.empty() || s.size() > 96) return false;
  if (s.front() == '-' || s.front() == '.' || s.back() == '-' || s.back() == '.') return false;
  if (s.find("--") != std::string_view::npos || s.find("..") != std::string_view::npos)
    return false;
  for (unsigned char c : s) {
    if (std::isalnum(c) == 0 && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

}  // namespace

Expected<RepoRef, std::string> parse_repo_ref(std::string_view text) {
  RepoRef ref;
  if (text.starts_with("datasets/")) {
    text.remove_prefix(9);
  } else if (text.starts_with("models/")) {
    text.remove_prefix(7);
    ref.type = RepoType::kModel;
  }
  const auto slash = text.find('/');
  if (slash == std::string_view::npos || text.find('/', slash + 1) != std::string_view::npos ||
      !valid_repo_part(text.substr(0, slash)) || !valid_repo_part(text.substr(slash + 1))) {
    return unexpected("invalid repository id \"" + std::string(text) +
                      "\": expected namespace/name (letters, digits, '_', '.', '-')");
  }
  ref.id = std::string(text);
  return ref;
}

std::string resolve_endpoint(std::string_view option) {
  std::string e(option);
  if (e.empty()) {
    const char* env = std::getenv("HF_ENDPOINT");
    e = (env != nullptr && *env != '\0') ? env : "https://huggingface.co";
  }
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

}  // namespace whfs::hub
