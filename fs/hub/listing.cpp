#include "fs/hub/listing.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "fs/common/hash.h"

namespace whfs::hub {
namespace {

using nlohmann::json;

HubError bad(std::string message) {
  return HubError{HubErrorKind::kBadResponse, std::move(message), 0, "", "", ""};
}

const json* field(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::optional<std::uint64_t> as_size(const json* v) {
  if (v == nullptr || !v->is_number_unsigned()) return std::nullopt;
  return v->get<std::uint64_t>();
}

// A remote name as it may appear in a log line: control characters (a newline would forge a
// second line) shown as '?'.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 120)) {
    const auto u = static_cast<unsigned char>(c);
    out.push_back(u < 0x20 || u == 0x7f ? '?' : c);
  }
  return out;
}

// One JSON tree entry -> RemoteEntry, or a reason to skip it.
Expected<RemoteEntry, std::string> to_entry(const json& item, std::string_view folder,
                                            bool recursive) {
  if (!item.is_object()) return unexpected(std::string("entry is not an object"));
  const json* type = field(item, "type");
  const json* path = field(item, "path");
  if (type == nullptr || !type->is_string() || path == nullptr || !path->is_string()) {
    return unexpected(std::string("entry without a string type and path"));
  }
  const auto& p = path->get_ref<const std::string&>();
  const auto& t = type->get_ref<const std::string&>();
  if (auto why = check_remote_path(p, folder, recursive)) {
    return unexpected("\"" + printable(p) + "\": " + *why);
  }
  RemoteEntry e;
  e.path = p;
  if (t == "directory") {
    e.type = RemoteEntry::Type::kDirectory;
  } else if (t == "file") {
    e.type = RemoteEntry::Type::kFile;
  } else {
    return unexpected("\"" + printable(p) + "\": type \"" + printable(t) + "\"");
  }
  if (const json* oid = field(item, "oid");
      oid != nullptr && oid->is_string() && is_hex(oid->get_ref<const std::string&>(), 40)) {
    e.oid = oid->get<std::string>();
  }
  if (e.type == RemoteEntry::Type::kDirectory) return e;

  auto size = as_size(field(item, "size"));
  if (const json* lfs = field(item, "lfs"); lfs != nullptr && !lfs->is_null()) {
    if (!lfs->is_object()) return unexpected("\"" + printable(p) + "\": lfs is not an object");
    const json* lfs_oid = field(*lfs, "oid");
    if (lfs_oid == nullptr || !lfs_oid->is_string() ||
        !is_hex(lfs_oid->get_ref<const std::string&>(), 64)) {
      return unexpected("\"" + printable(p) + "\": lfs.oid is not a sha256");
    }
    e.lfs_sha256 = lfs_oid->get<std::string>();
    // The top-level size is the real size on today's Hub; lfs.size is the safer source.
    if (auto lfs_size = as_size(field(*lfs, "size"))) size = lfs_size;
  }
  if (!size) return unexpected("\"" + printable(p) + "\": no size");
  if (*size > kMaxFileSize) {
    // Past off_t (a negative st_size) and past 2^32 cache blocks long before that.
    return unexpected("\"" + printable(p) + "\": size " + std::to_string(*size) +
                      " is above the largest file served (1 TiB)");
  }
  e.size = *size;
  if (e.oid.empty() && e.lfs_sha256.empty()) {
    return unexpected("\"" + printable(p) + "\": no content id (oid)");
  }
  if (const json* xet = field(item, "xetHash");
      xet != nullptr && xet->is_string() && is_hex(xet->get_ref<const std::string&>(), 64)) {
    e.xet_hash = xet->get<std::string>();
  }
  return e;
}

}  // namespace

std::optional<std::string> check_remote_path(std::string_view path, std::string_view folder,
                                             bool recursive) {
  if (path.empty()) return "empty path";
  if (path.find('\0') != std::string_view::npos) return "contains NUL";
  if (std::any_of(path.begin(), path.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u < 0x20 || u == 0x7f;
      })) {
    return "contains a control character (a newline, a tab, ...)";
  }
  if (path.front() == '/') return "absolute path";
  std::string_view rest = path;
  if (!folder.empty()) {
    if (path.size() <= folder.size() + 1 || !path.starts_with(folder) ||
        path[folder.size()] != '/') {
      return "outside the folder asked for";
    }
    rest = path.substr(folder.size() + 1);
  }
  if (!recursive && rest.find('/') != std::string_view::npos) return "not a direct child";
  std::size_t start = 0;
  while (start <= rest.size()) {
    auto slash = rest.find('/', start);
    if (slash == std::string_view::npos) slash = rest.size();
    const auto seg = rest.substr(start, slash - start);
    if (seg.empty()) return "empty path segment";
    if (seg == "." || seg == "..") return R"("." or ".." segment)";
    if (seg.size() > 255) return "name over 255 bytes";
    start = slash + 1;
  }
  return std::nullopt;
}

Expected<TreePage, HubError> parse_tree_page(std::string_view body, std::string_view folder,
                                             bool recursive) {
  const json doc = json::parse(body.begin(), body.end(), nullptr, false);
  if (doc.is_discarded()) return unexpected(bad("tree listing is not valid JSON"));
  if (!doc.is_array()) return unexpected(bad("tree listing is not a JSON array"));
  if (doc.size() > kMaxEntriesPerPage) {
    return unexpected(bad("tree listing page has " + std::to_string(doc.size()) +
                          " entries, more than the " + std::to_string(kMaxEntriesPerPage) +
                          " a page may hold"));
  }
  TreePage page;
  std::unordered_set<std::string> seen;
  for (const json& item : doc) {
    auto entry = to_entry(item, folder, recursive);
    if (!entry) {
      page.skipped.push_back(std::move(entry).error());
      continue;
    }
    if (!seen.insert(entry->path).second) continue;  // a repeated path: keep the first
    page.entries.push_back(std::move(entry).value());
  }
  return page;
}

Expected<RevisionInfo, HubError> parse_revision_info(std::string_view body) {
  const json doc = json::parse(body.begin(), body.end(), nullptr, false);
  if (doc.is_discarded()) return unexpected(bad("revision info is not valid JSON"));
  if (!doc.is_object()) return unexpected(bad("revision info is not a JSON object"));
  const json* sha = field(doc, "sha");
  if (sha == nullptr || !sha->is_string() || !is_hex(sha->get_ref<const std::string&>(), 40)) {
    return unexpected(bad("revision info has no 40-hex \"sha\""));
  }
  RevisionInfo info;
  info.commit = sha->get<std::string>();
  if (const json* lm = field(doc, "lastModified"); lm != nullptr && lm->is_string()) {
    info.last_modified = lm->get<std::string>();
  }
  const json* priv = field(doc, "private");
  const json* gated = field(doc, "gated");
  info.is_public = priv != nullptr && priv->is_boolean() && !priv->get<bool>() &&
                   gated != nullptr && gated->is_boolean() && !gated->get<bool>();
  return info;
}

std::optional<std::string> parse_link_next(std::string_view header) {
  std::size_t i = 0;
  while (i < header.size()) {
    const auto open = header.find('<', i);
    if (open == std::string_view::npos) return std::nullopt;
    const auto close = header.find('>', open);
    if (close == std::string_view::npos) return std::nullopt;
    const auto url = header.substr(open + 1, close - open - 1);
    // Parameters run to the next "," outside quotes.
    std::size_t j = close + 1;
    bool quoted = false;
    std::size_t end = j;
    for (; end < header.size(); ++end) {
      if (header[end] == '"') quoted = !quoted;
      if (header[end] == ',' && !quoted) break;
    }
    const auto params = header.substr(j, end - j);
    std::size_t k = 0;
    while ((k = params.find("rel", k)) != std::string_view::npos) {
      std::size_t v = k + 3;
      while (v < params.size() && params[v] == ' ') ++v;
      if (v < params.size() && params[v] == '=') {
        ++v;
        while (v < params.size() && params[v] == ' ') ++v;
        std::string_view value = params.substr(v);
        if (!value.empty() && value.front() == '"') {
          value = value.substr(1, value.find('"', 1) - 1);
        } else {
          value = value.substr(0, value.find_first_of("; "));
        }
        // rel may hold several space-separated relation types.
        std::size_t s = 0;
        while (s <= value.size()) {
          auto sp = value.find(' ', s);
          if (sp == std::string_view::npos) sp = value.size();
          if (value.substr(s, sp - s) == "next") return std::string(url);
          s = sp + 1;
        }
      }
      k = v;
    }
    i = end + 1;
  }
  return std::nullopt;
}

}  // namespace whfs::hub
