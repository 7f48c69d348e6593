#include "fs/wheel/wheel_metadata.h"

#include "fs/common/base64.h"
#include "fs/common/hash.h"
#include "fs/common/text.h"
#include "fs/targeting/wheel_name.h"
#include "fs/wheel/record.h"

namespace whfs::wheel {
namespace {

// `s` without spaces and tabs at either end.
std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The value of the header `line` (its line end removed) when its name is `key` (in lower
// case), trimmed of spaces and tabs; nullopt when it is another header or none.
std::optional<std::string_view> header_value(std::string_view line, std::string_view key) {
  const auto colon = line.find(':');
  if (colon != key.size() || lower(line.substr(0, colon)) != key) return std::nullopt;
  return trim_blanks(line.substr(colon + 1));
}

}  // namespace

std::optional<std::string> metadata_header(std::string_view text, std::string_view name) {
  const std::string key = lower(name);
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;  // the body starts
    if (const auto value = header_value(line, key)) return std::string(*value);
  }
  return std::nullopt;
}

std::string requires_python_of(std::string_view metadata) {
  return metadata_header(metadata, "Requires-Python").value_or("");
}

std::string served_metadata(std::string_view metadata) {
  std::string out;
  out.reserve(metadata.size());
  bool headers = true;
  while (!metadata.empty()) {
    const auto nl = metadata.find('\n');
    const std::string_view line =
        metadata.substr(0, nl == std::string_view::npos ? metadata.size() : nl + 1);
    metadata.remove_prefix(line.size());
    std::string_view bare = line;
    while (!bare.empty() && (bare.back() == '\n' || bare.back() == '\r')) bare.remove_suffix(1);
    if (headers && bare.empty()) headers = false;
    const auto value = headers ? header_value(bare, "name") : std::nullopt;
    if (!value) {
      out.append(line);
      continue;
    }
    out.append(bare.substr(0, 5)).append(" ").append(target::normalize_project_name(*value));
    out.append(line.substr(bare.size()));  // the line's own ending
  }
  return out;
}

std::optional<std::string> record_sha256(std::string_view record, std::string_view member) {
  const auto lines = parse_record(record);
  if (!lines) return std::nullopt;  // a malformed RECORD vouches for nothing
  for (const auto& line : *lines) {
    if (line.path != member) continue;
    const std::string_view hash = line.hash;
    if (!hash.starts_with("sha256=")) return std::nullopt;
    const auto raw = base64url_decode(hash.substr(7));
    if (!raw || raw->size() != 32) return std::nullopt;
    return to_hex(*raw);
  }
  return std::nullopt;
}

}  // namespace whfs::wheel
