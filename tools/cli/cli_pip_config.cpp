// wheelhouse pip-config: the pip configuration that makes a plain `pip install` in any venv take
// the wheelhouse's wheel for that venv; printed, or added to an existing file (--append), where
// only its own keys of [global] change.

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tools/cli/cli_commands.h"
#include "tools/cli/file_replace.h"
#include "tools/cli/mount_select.h"

namespace whfs::cli {
namespace {

constexpr const char* kFindLinks = "find-links";
constexpr const char* kPreferBinary = "prefer-binary";

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// pip reads find_links and find-links, FIND-LINKS alike.
std::string normalized_key(std::string k) {
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) {
    return c == '_' ? '-' : static_cast<char>(std::tolower(c));
  });
  return k;
}

// A wheelhouse folder of find-links (this one's, or another mount's from an earlier run).
bool is_wheelhouse_link(const std::string& token) {
  return token.ends_with("/current/all/") || token.ends_with("/current/all");
}

bool is_section(const std::string& l) { return !l.empty() && l[0] == '['; }
bool is_continuation(const std::string& l) {
  return !l.empty() && (l[0] == ' ' || l[0] == '\t') && !trim(l).empty();
}
bool is_comment(const std::string& l) {
  const std::string t = trim(l);
  return t.empty() || t[0] == '#' || t[0] == ';';
}

// The key of a "key = value" (or "key: value") line, and where its value starts.
bool key_of(const std::string& l, std::string* key, std::size_t* value_at) {
  if (l.empty() || l[0] == ' ' || l[0] == '\t' || is_comment(l) || is_section(l)) return false;
  const auto d = l.find_first_of("=:");
  if (d == std::string::npos) return false;
  *key = trim(l.substr(0, d));
  *value_at = d + 1;
  return !key->empty();
}

std::string find_links_lines(const std::string& spelled, const std::vector<std::string>& tokens) {
  if (tokens.size() == 1) return spelled + " = " + tokens.front();
  std::string out = spelled + " =";
  for (const auto& t : tokens) out += "\n    " + t;
  return out;
}

// `text` with find-links (the mount's folder added, earlier wheelhouse folders dropped, other
// folders kept) and prefer-binary = true under [global]; everything else as it was.
std::string merged(const std::string& text, const std::string& folder) {
  std::vector<std::string> lines;
  {
    std::size_t pos = 0;
    while (pos < text.size()) {
      const auto nl = text.find('\n', pos);
      const auto end = nl == std::string::npos ? text.size() : nl;
      lines.push_back(text.substr(pos, end - pos));
      pos = end + 1;
    }
  }
  // [global]: its header line, and the line after its last key or comment.
  std::size_t header = lines.size();
  std::size_t section_end = lines.size();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (!is_section(lines[i])) continue;
    if (header == lines.size()) {
      if (trim(lines[i]) == "[global]") header = i;
    } else {
      section_end = i;
      break;
    }
  }
  std::vector<std::string> out;
  if (header == lines.size()) {
    out = lines;
    while (!out.empty() && trim(out.back()).empty()) out.pop_back();
    if (!out.empty()) out.emplace_back("");
    out.emplace_back("[global]");
    out.push_back(find_links_lines(kFindLinks, {folder}));
    out.push_back(std::string(kPreferBinary) + " = true");
  } else {
    out.assign(lines.begin(), lines.begin() + static_cast<std::ptrdiff_t>(header) + 1);
    bool wrote_links = false;
    bool wrote_binary = false;
    std::vector<std::string> body;
    for (std::size_t i = header + 1; i < section_end; ++i) {
      std::string key;
      std::size_t value_at = 0;
      if (!key_of(lines[i], &key, &value_at)) {
        body.push_back(lines[i]);
        continue;
      }
      const std::string norm = normalized_key(key);
      if (norm != kFindLinks && norm != kPreferBinary) {
        body.push_back(lines[i]);
        continue;
      }
      // Its value: the rest of the line and the indented lines after it.
      std::string value = lines[i].substr(value_at);
      while (i + 1 < section_end && is_continuation(lines[i + 1])) value += "\n" + lines[++i];
      if (norm == kPreferBinary) {
        if (!wrote_binary) body.push_back(key + " = true");
        wrote_binary = true;
        continue;
      }
      std::vector<std::string> tokens;
      std::istringstream words(value);
      for (std::string t; words >> t;) {
        if (!is_wheelhouse_link(t)) tokens.push_back(t);
      }
      tokens.push_back(folder);
      if (!wrote_links) body.push_back(find_links_lines(key, tokens));
      wrote_links = true;
    }
    // The keys it lacked, after its last line that is not blank.
    std::size_t at = body.size();
    while (at > 0 && trim(body[at - 1]).empty()) --at;
    std::vector<std::string> add;
    if (!wrote_links) add.push_back(find_links_lines(kFindLinks, {folder}));
    if (!wrote_binary) add.push_back(std::string(kPreferBinary) + " = true");
    body.insert(body.begin() + static_cast<std::ptrdiff_t>(at), add.begin(), add.end());
    out.insert(out.end(), body.begin(), body.end());
    out.insert(out.end(), lines.begin() + static_cast<std::ptrdiff_t>(section_end), lines.end());
  }
  std::string result;
  for (const auto& l : out) result += l + "\n";
  return result;
}

}  // namespace

int run_pip_config(const std::string& mount_arg, const std::string& append) {
  auto m = choose_mount(mount_arg, "wheelhouse pip-config --mount DIR");
  if (!m) {
    std::fprintf(stderr, "wheelhouse: %s\n", m.error().message.c_str());
    return m.error().code;
  }
  const std::string folder = m->path + (m->path == "/" ? "" : "/") + "current/all/";
  if (append.empty()) {
    std::printf(
        "# wheelhouse-fs: `pip install flash-attn` in any venv takes the wheelhouse's wheel for\n"
        "# that venv (its Python, torch, CUDA and this machine's GPU). Add these lines with\n"
        "# `wheelhouse pip-config --append /etc/pip.conf` (or ~/.config/pip/pip.conf, or the file\n"
        "# of PIP_CONFIG_FILE): it keeps what the file holds.\n"
        "[global]\n"
        "find-links = %s\n"
        "# a wheel is preferred to a newer source release, which would compile for hours\n"
        "prefer-binary = true\n",
        folder.c_str());
    return kOk;
  }
  struct stat st {};
  if (::lstat(append.c_str(), &st) != 0 && errno == ENOENT) {
    const std::string text =
        "# wheelhouse-fs (wheelhouse pip-config): pip takes the wheelhouse's wheel for each venv\n"
        "[global]\nfind-links = " +
        folder + "\nprefer-binary = true\n";
    if (auto err = create_new(append, text, 0644)) {
      std::fprintf(stderr, "wheelhouse: %s\n", err->c_str());
      return kFailed;
    }
    std::printf("%s: created with find-links = %s and prefer-binary = true\n", append.c_str(),
                folder.c_str());
    return kOk;
  }
  EditedFile file;
  if (auto err = read_for_edit(append, file)) {
    std::fprintf(stderr, "wheelhouse: %s\n", err->c_str());
    return kFailed;
  }
  const std::string text = merged(file.text, folder);
  if (text == file.text) {
    std::printf("%s: has find-links = %s and prefer-binary = true already\n", append.c_str(),
                folder.c_str());
    return kOk;
  }
  if (auto err = replace_edited(append, file, text)) {
    std::fprintf(stderr, "wheelhouse: %s\n", err->c_str());
    return kFailed;
  }
  std::printf(
      "%s: find-links has %s and prefer-binary = true under [global]; its other lines "
      "are kept\n",
      append.c_str(), folder.c_str());
  return kOk;
}

}  // namespace whfs::cli
