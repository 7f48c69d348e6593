#pragma once
// The filesystem in domain types: what each FUSE operation means here, independent of
// libfuse. The FUSE adapter (fs/fuse/) decodes a request, calls one method, and replies.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fs/common/cancel.h"
#include "fs/common/expected.h"
#include "fs/common/fs_error.h"
#include "fs/namespace/namespace.h"
#include "fs/reader/reader.h"

namespace whfs {

using ns::Ino;

// The process behind a request, as the kernel names it (pid 0: outside the mount's PID
// namespace).
struct Caller {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Answers for what depends on who asks (ns::Node::per_caller()): where `current` leads and what a
// .target report says to the process that reads it.
class CallerViews {
 public:
  virtual ~CallerViews() = default;
  // The link text of `current` for this process: "targets/<key>".
  virtual std::string link(const Caller& caller) = 0;
  // The .target report of the folder of `key` (`folder_report`, the same for everyone) as
  // this process reads it.
  virtual std::string report(const Caller& caller, const std::string& key,
                             const std::string& folder_report) = 0;
  // The same, only if known now; else nullopt, and the answer is being prepared for the
  // request that follows. For the sizes in a lookup's attributes, which must never wait: the
  // kernel holds every other process's lookup of that name until this one is answered.
  virtual std::optional<std::string> link_now(const Caller& caller) { return link(caller); }
  // The shell hook's hint: the caller hands its environment to its parent (CallerTargets::
  // adopt); the parent's link now, or why not.
  virtual Expected<std::string, std::string> adopt(const Caller& caller) {
    (void)caller;
    return unexpected(std::string("this mount has no per-process current/"));
  }
  virtual std::optional<std::string> report_now(const Caller& caller, const std::string& key,
                                                const std::string& folder_report) {
    return report(caller, key, folder_report);
  }
};

struct FileHandle {
  std::shared_ptr<const ns::Node> node;      // what was opened
  std::unique_ptr<reader::OpenFile> remote;  // remote bytes (files and target folder entries)
  std::shared_ptr<const std::string> bytes;  // a synthetic file's bytes for this opener
  bool direct_io = false;                    // per caller: never in the page cache
};

struct DirHandle {
  std::vector<ns::DirEntry> entries;  // a snapshot taken at opendir
  // The kernel may keep the listing (false for targets/, which grows as keys are looked up).
  bool cacheable = true;
};

struct FsStats {
  std::uint64_t block_size = 4096;
  std::uint64_t blocks = 0;
  std::uint64_t files = 0;
};

struct FilesystemConfig {
  // A read fails once the downloads it needs made no progress for this long (the mount's
  // read_timeout).
  std::chrono::seconds read_timeout{};
  std::string repo;
  std::string revision;
  std::uint64_t cache_cap = 0;
};

class Filesystem {
 public:
  Filesystem(ns::Namespace& names, reader::Reader& reader, FilesystemConfig config);

  Expected<ns::Attr, FsErr> lookup(Ino parent, const std::string& name, const Caller& caller);
  // Whether a name missing from this folder stays missing until the commit changes: a folder of
  // the pinned tree, not a synthetic one (its names depend on the caller, or are made on
  // demand). The kernel may then keep the negative entry; a commit change invalidates it
  // (Namespace::switch_to lists the names that appeared).
  bool absence_is_pinned(Ino parent);
  void forget(Ino ino, std::uint64_t n) { names_.forget(ino, n); }
  Expected<ns::Attr, FsErr> getattr(Ino ino, const Caller& caller);
  // The text of a symbolic link, for this caller.
  Expected<std::string, FsErr> readlink(Ino ino, const Caller& caller);
  Expected<std::unique_ptr<DirHandle>, FsErr> opendir(Ino ino);
  // A readdirplus entry handed to the kernel counts as a lookup.
  void count_lookup(Ino ino) { names_.ref(ino); }
  Expected<std::unique_ptr<FileHandle>, FsErr> open(Ino ino, bool for_writing,
                                                    const Caller& caller);
  // `cancel` (may be null) is raised when the caller goes away while the read waits.
  Expected<void, FsErr> read(FileHandle& fh, std::uint64_t offset, std::size_t size,
                             CancelFlag* cancel, reader::Reader::ReplyFn reply);
  void release(FileHandle& fh);
  // The value of an extended attribute (user.wheelhouse.*), and their names.
  // On the root, besides the mount's facts: user.wheelhouse.key (where current/ leads the
  // caller: the key alone) and user.wheelhouse.hint (the shell hook's channel: the caller's
  // environment for its parent; the parent's link, or "! why" when no hint was taken).
  Expected<std::string, FsErr> getxattr(Ino ino, const std::string& name, const Caller& caller);
  Expected<std::vector<std::string>, FsErr> listxattr(Ino ino);
  FsStats statfs();
  // The inodes that show this content (a corrupt download: the kernel must drop their pages).
  std::vector<Ino> inodes_with_content(const cache::ContentId& id);

  // The JSON behind user.wheelhouse.status on the root (set by the mount).
  void set_status_provider(std::function<std::string()> provider) { status_ = std::move(provider); }
  // Who answers for per-caller nodes (set by the mount before it serves; null: none exist).
  void set_caller_views(CallerViews* views) { callers_ = views; }

 private:
  // A per-caller node's size for this caller (its link or its report).
  void per_caller_attr(const ns::Node& node, ns::Attr& attr, const Caller& caller);
  std::string report_of(const ns::Node& node, const Caller& caller);

  ns::Namespace& names_;
  reader::Reader& reader_;
  FilesystemConfig config_;
  std::function<std::string()> status_;
  CallerViews* callers_ = nullptr;
};

// The content a remote file node reads (a wheel of a target folder reads its alias's).
std::optional<reader::FileContent> content_of(const ns::Node& node);

}  // namespace whfs
