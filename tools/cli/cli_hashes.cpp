// wheelhouse hashes: a requirements file that pins the wheels of one target folder by version
// and sha256, for `pip install --no-deps --require-hashes -r FILE` (pip ignores the #sha256=
// fragments of an index for --require-hashes). The file names the folder by its key, so it
// means the same wheels in whichever shell or machine it is used, and tells pip where they are.

#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "fs/common/hash.h"
#include "fs/targeting/wheel_name.h"
#include "tools/cli/cli_commands.h"
#include "tools/cli/mount_select.h"

namespace whfs::cli {
namespace {

namespace fsys = std::filesystem;

std::string xattr(const std::string& path, const char* name) {
  char buf[256];
  const ssize_t n = ::getxattr(path.c_str(), name, buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// The sha256 of a wheel: the listing's (an attribute, no download), else its bytes.
std::string sha256_of(const std::string& path) {
  std::string h = xattr(path, "user.wheelhouse.sha256");
  if (h.size() == 64) return h;
  Hasher hasher(HashAlgo::kSha256);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return "";
  char buf[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) hasher.update(std::string_view(buf, n));
  std::fclose(f);
  const auto d = hasher.finish();
  static constexpr char kHex[] = "0123456789abcdef";
  for (const auto b : d) {
    h.push_back(kHex[static_cast<unsigned>(b) >> 4]);
    h.push_back(kHex[static_cast<unsigned>(b) & 15]);
  }
  return h;
}

}  // namespace

int run_hashes(const HashesOptions& options) {
  auto chosen = choose_mount(options.mountpoint, "wheelhouse hashes --mount DIR");
  if (!chosen) {
    std::fprintf(stderr, "wheelhouse: %s\n", chosen.error().message.c_str());
    return chosen.error().code;
  }
  HashesOptions o = options;
  o.mountpoint = chosen->path;
  if (auto st = read_status_within(o.mountpoint); !st) {
    std::fprintf(stderr, "wheelhouse: %s\n", st.error().second.c_str());
    return st.error().first;
  }
  std::string key = o.target;
  if (key.empty()) {
    // current: pinned to the key it leads this process to.
    std::error_code ec;
    const auto link = fsys::read_symlink(o.mountpoint + "/current", ec).string();
    if (ec || !link.starts_with("targets/")) {
      std::fprintf(stderr, "wheelhouse: %s/current: %s\n", o.mountpoint.c_str(),
                   ec ? ec.message().c_str() : "not a link into targets/");
      return kFailed;
    }
    key = link.substr(8);
  }
  const std::string base = o.mountpoint + "/targets/" + key;
  if (key == "unresolved" || !fsys::is_directory(base + "/all")) {
    std::fprintf(stderr,
                 "wheelhouse: no wheels for targets/%s (cat %s/current/.target says why; or "
                 "give --target KEY)\n",
                 key.c_str(), o.mountpoint.c_str());
    return kFailed;
  }
  // Projects asked for, by their normalized names (flash_attn and flash-attn are one).
  std::map<std::string, bool> wanted;
  for (const auto& p : o.packages) wanted[target::normalize_project_name(p)] = false;
  std::map<std::string, std::string> lines;  // by project
  std::error_code ec;
  for (const auto& e : fsys::directory_iterator(base + "/all", ec)) {
    const std::string file = e.path().filename().string();
    const auto w = target::parse_wheel_name(file);
    if (!w) continue;
    const std::string project = target::normalize_project_name(w->distribution);
    if (!wanted.empty()) {
      const auto it = wanted.find(project);
      if (it == wanted.end()) continue;
      it->second = true;
    }
    const std::string sha = sha256_of(e.path().string());
    if (sha.empty()) {
      std::fprintf(stderr, "wheelhouse: cannot read %s\n", e.path().c_str());
      return kFailed;
    }
    lines[project] += project + "==" + w->version + " \\\n    --hash=sha256:" + sha + "\n";
  }
  int rc = kOk;
  for (const auto& [project, found] : wanted) {
    if (!found) {
      std::fprintf(stderr, "wheelhouse: targets/%s has no wheel of %s\n", key.c_str(),
                   project.c_str());
      rc = kFailed;
    }
  }
  if (rc != kOk) return rc;
  std::printf(
      "# wheelhouse hashes: the wheels of targets/%s at commit %s\n"
      "# pip install --no-deps --require-hashes -r THIS_FILE\n"
      "--no-index\n--find-links %s/all\n",
      key.c_str(), xattr(o.mountpoint, "user.wheelhouse.commit").c_str(), base.c_str());
  for (const auto& [project, text] : lines) std::fputs(text.c_str(), stdout);
  return kOk;
}

}  // namespace whfs::cli
