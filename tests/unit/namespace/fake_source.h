#pragma once
// A ListingSource made of maps (commit -> folder -> entries) that counts its calls and can be
// told to fail or throw; and short ways to write entries and read nodes.

#include <atomic>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "fs/namespace/namespace.h"

namespace whfs::ns::testing {

inline std::string hex(char c, std::size_t n) { return std::string(n, c); }

inline RemoteEntry dir(const std::string& path, char oid) {
  RemoteEntry e;
  e.path = path;
  e.type = RemoteEntry::Type::kDirectory;
  e.oid = hex(oid, 40);
  return e;
}

inline RemoteEntry file(const std::string& path, char sha, std::uint64_t size = 10) {
  RemoteEntry e;
  e.path = path;
  e.size = size;
  e.oid = hex('0', 40);
  e.lfs_sha256 = hex(sha, 64);
  return e;
}

// The bytes of a synthetic file; of a .target report, the folder's report.
inline std::string bytes_of(const Node& n) {
  if (const auto* f = n.as<Node::SyntheticFile>(); f != nullptr && f->bytes) return *f->bytes;
  if (const auto* r = n.as<Node::Report>(); r != nullptr && r->folder_report) {
    return *r->folder_report;
  }
  return "";
}

// Listings per commit and folder, counting the calls.
class FakeSource : public ListingSource {
 public:
  Expected<std::vector<RemoteEntry>, FsErr> list(const std::string& commit,
                                                 const std::string& folder) override {
    calls++;
    std::lock_guard lock(mu);
    last_folders.push_back(commit + ":" + folder);
    if (throw_once.exchange(false)) throw std::runtime_error("listing blew up");
    if (fail) return unexpected(FsErr{FsErrorKind::kIo, "listing failed"});
    const auto c = trees.find(commit);
    if (c == trees.end()) return unexpected(FsErr{FsErrorKind::kNotFound, commit});
    const auto f = c->second.find(folder);
    if (f == c->second.end()) return unexpected(FsErr{FsErrorKind::kNotFound, folder});
    return f->second;
  }
  std::map<std::string, std::map<std::string, std::vector<RemoteEntry>>> trees;
  std::atomic<int> calls{0};
  std::atomic<bool> fail{false};
  std::atomic<bool> throw_once{false};
  std::mutex mu;
  std::vector<std::string> last_folders;
};

}  // namespace whfs::ns::testing
