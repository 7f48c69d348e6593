#include "fs/targeting/torch_probe.h"

#include <optional>

#include "fs/common/text.h"

namespace whfs::target {
namespace {

bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

struct Assignment {
  std::string_view name;
  std::optional<std::string> value;  // nullopt: None
};

// `name [: annotation] = 'text' | "text" | None [# comment]` at the start of a line.
std::optional<Assignment> parse_assignment(std::string_view line) {
  std::size_t i = 0;
  while (i < line.size() && is_ident_char(line[i])) ++i;
  if (i == 0) return std::nullopt;
  Assignment a{line.substr(0, i), std::nullopt};
  std::string_view rest = line.substr(i);
  const auto eq = rest.find('=');
  if (eq == std::string_view::npos) return std::nullopt;
  const std::string_view before = trim(rest.substr(0, eq));
  if (!before.empty() && before.front() != ':') return std::nullopt;  // not `x = ...`/`x: T =`
  rest = trim(rest.substr(eq + 1));
  if (rest.starts_with("=")) return std::nullopt;  // `x == y`
  if (rest.starts_with("None")) return a;
  if (rest.empty() || (rest.front() != '\'' && rest.front() != '"')) return std::nullopt;
  const char quote = rest.front();
  const auto end = rest.find(quote, 1);
  if (end == std::string_view::npos) return std::nullopt;
  a.value = std::string(rest.substr(1, end - 1));
  return a;
}

// "2.9.0+cu128" -> "2.9"; empty when it does not start with major.minor.
std::string major_minor(std::string_view version) {
  std::size_t i = 0;
  auto digits = [&] {
    const std::size_t start = i;
    while (i < version.size() && version[i] >= '0' && version[i] <= '9') ++i;
    return i > start;
  };
  if (!digits() || i >= version.size() || version[i] != '.') return "";
  ++i;
  if (!digits()) return "";
  return std::string(version.substr(0, i));
}

}  // namespace

Expected<TorchInfo, std::string> parse_torch_version_py(std::string_view text) {
  TorchInfo t;
  bool have_version = false;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    const auto a = parse_assignment(line);
    if (!a) continue;
    if (a->name == "__version__" && a->value) {
      t.version = *a->value;
      have_version = true;
    } else if (a->name == "cuda") {
      t.cuda = a->value.value_or("");
    } else if (a->name == "hip") {
      t.hip = a->value.value_or("");
    }
  }
  if (!have_version) return unexpected(std::string("no __version__ = '...' line"));
  t.major_minor = major_minor(t.version);
  if (t.major_minor.empty()) {
    return unexpected("__version__ '" + t.version + "' does not start with major.minor");
  }
  return t;
}

Expected<TorchInfo, std::string> find_torch(const std::vector<std::string>& site_dirs,
                                            const FileReader& read) {
  for (const auto& dir : site_dirs) {
    const std::string file = dir + "/torch/version.py";
    const auto text = read(file);
    if (!text) continue;
    auto t = parse_torch_version_py(*text);
    if (!t) return unexpected(file + ": " + t.error());
    t->path = file;
    return t;
  }
  std::string dirs;
  for (const auto& d : site_dirs) dirs += (dirs.empty() ? "" : ", ") + d;
  return unexpected("torch not found in " + (dirs.empty() ? std::string("(no folders)") : dirs));
}

}  // namespace whfs::target
