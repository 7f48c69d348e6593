#include "fs/wheel/record.h"

#include <charconv>

namespace whfs::wheel {
namespace {

// The fields of one CSV line ("a,"b,c",d"); nullopt when a quote is not closed.
std::optional<std::vector<std::string>> csv_fields(std::string_view line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c != '"') {
        fields.back().push_back(c);
      } else if (i + 1 < line.size() && line[i + 1] == '"') {
        fields.back().push_back('"');  // "" inside quotes is one quote
        ++i;
      } else {
        quoted = false;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back().push_back(c);
    }
  }
  if (quoted) return std::nullopt;
  return fields;
}

}  // namespace

Expected<std::vector<RecordLine>, std::string> parse_record(std::string_view text) {
  std::vector<RecordLine> out;
  std::size_t number = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = "RECORD line " + std::to_string(number);
    auto fields = csv_fields(line);
    if (!fields) return unexpected(where + " has an unterminated quote");
    if (fields->size() > 3) return unexpected(where + " has more than three fields");
    fields->resize(3);
    RecordLine r{std::move((*fields)[0]), std::move((*fields)[1]), std::nullopt};
    if (r.path.empty()) return unexpected(where + " names no file");
    const std::string& size = (*fields)[2];
    if (!size.empty()) {
      std::uint64_t v = 0;
      const auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), v);
      if (ec != std::errc() || end != size.data() + size.size()) {
        return unexpected(where + ": size \"" + size + "\" is not a number");
      }
      r.size = v;
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace whfs::wheel
