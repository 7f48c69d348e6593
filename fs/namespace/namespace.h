#pragma once
// The names the mount shows: a pinned remote tree, listed lazily one folder at a time, plus
// synthetic entries (current and targets/, see targets_view.h), behind an inode table.
//
// Inode identity is (path, content): a file whose content is the same at a new commit keeps
// its inode and its kernel page cache; a changed file gets a new inode, so a process that
// opened the old one keeps reading the old content and never shares pages with the new one.
// Folders keep their inode by path. A refresh that moves to a new commit lists, at the new
// commit, only the folders that were listed before and whose tree id changed, carries
// unchanged subtrees over as they are, and reports what the kernel must forget.

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "fs/common/expected.h"
#include "fs/common/fs_error.h"
#include "fs/common/remote_entry.h"

namespace whfs::ns {

using Ino = std::uint64_t;
inline constexpr Ino kRootIno = 1;

// Where folder listings come from (the Hub, through the persisted listings of the cache).
class ListingSource {
 public:
  virtual ~ListingSource() = default;
  // Direct children of `folder` ("" = root) at `commit`.
  virtual Expected<std::vector<RemoteEntry>, FsErr> list(const std::string& commit,
                                                         const std::string& folder) = 0;
};

struct Node;

// What a folder that makes names on demand (Node::make_missing) is told of the lookup.
struct MakeContext {
  uid_t uid = 0;  // who looks the name up (the FUSE request's user)
  // Drops children of the folder that `pick` names and the kernel holds no reference to
  // (subtree and all); returns the names dropped.
  std::function<std::vector<std::string>(const std::function<bool(const std::string&)>& pick)>
      drop_unused;
};

enum class NodeKind : std::uint8_t { kDir, kFile, kSyntheticDir, kSyntheticFile, kSymlink };

struct Node {
  Ino ino = 0;
  NodeKind kind = NodeKind::kDir;
  std::string name;    // the name in its folder ("" for the root)
  RemoteEntry entry;   // remote files and folders: the listing entry (entry.path = repo path)
  std::string commit;  // the commit this node was listed at
  std::shared_ptr<const std::string> bytes;  // synthetic files: their content
  std::shared_ptr<const Node> alias;         // a current/ entry: the remote file it shows
  std::string identity;  // synthetic nodes: what makes their content (for the inode key)
  // Synthetic folders: produces the children on first listing.
  std::function<Expected<std::vector<std::shared_ptr<Node>>, FsErr>()> generate;
  // Synthetic folders whose names are made on demand (targets/): the child for a name that is
  // not there yet, or null (ENOENT). It joins the folder's children.
  std::function<std::shared_ptr<Node>(const std::string& name, const MakeContext& ctx)>
      make_missing;
  // What it shows depends on the process that asks (the current symlink, a .target report):
  // the filesystem answers its size, link and content per caller, and the kernel must not
  // keep its attributes.
  bool per_caller = false;
  std::string key;  // a .target report: the target key of its folder

  bool is_dir() const { return kind == NodeKind::kDir || kind == NodeKind::kSyntheticDir; }
  std::uint64_t size() const;

  // Folders: the children, once listed. Guarded by mu; listing happens outside the lock.
  mutable std::mutex mu;
  std::condition_variable listed_cv;
  bool listed = false;
  bool listing = false;
  std::map<std::string, std::shared_ptr<Node>> children;
};

// A synthetic folder node (its children come from `generate`, or are set by its maker).
std::shared_ptr<Node> synthetic_dir(const std::string& name, const std::string& identity);

struct Attr {
  Ino ino = 0;
  bool dir = false;
  std::uint64_t size = 0;
  std::int64_t mtime = 0;  // seconds since the epoch
  bool symlink = false;
  bool per_caller = false;  // not to be cached by the kernel (see Node::per_caller)
};

struct DirEntry {
  std::string name;
  Attr attr;
};

// What the kernel must drop after a refresh (executed by the FUSE adapter).
struct Invalidations {
  std::vector<std::pair<Ino, std::string>> entries;  // (parent, name)
  std::vector<Ino> inodes;                           // attributes, data and readdir caches
};

// Adds synthetic entries (current, targets/) to the root of every tree; see targets_view.h.
class SyntheticRoot {
 public:
  virtual ~SyntheticRoot() = default;
  // Nodes to show in the root of the tree at `commit`. Synthetic folders fill themselves
  // through Node::generate when first listed.
  virtual std::vector<std::shared_ptr<Node>> root_entries(const std::string& commit) = 0;
};

class Namespace {
 public:
  Namespace(ListingSource& source, std::string commit, std::int64_t mtime);

  // By value: a refresh may replace the tree (and free its commit string) at any moment.
  std::string commit() const;
  std::int64_t mtime() const;

  // Looks up a name and counts a kernel reference to the result; `uid` asks (for folders that
  // make names on demand).
  Expected<Attr, FsErr> lookup(Ino parent, const std::string& name, uid_t uid = 0);
  void forget(Ino ino, std::uint64_t n);
  // Counts one more kernel reference (a readdirplus entry the kernel took).
  void ref(Ino ino);
  Expected<Attr, FsErr> getattr(Ino ino);
  // A snapshot of a folder (listing it first if needed). Entries for readdirplus count a
  // kernel reference each when `count_refs`.
  Expected<std::vector<DirEntry>, FsErr> readdir(Ino ino, bool count_refs);
  // The node behind an inode (files: what open() needs).
  Expected<std::shared_ptr<const Node>, FsErr> node(Ino ino);
  // Lists a remote folder by path in the current tree ("" = root).
  Expected<std::shared_ptr<Node>, FsErr> dir_at(const std::string& path);

  // Moves to a new commit (see the header comment); returns what the kernel must forget.
  // With `force`, rebuilds even at the same commit (the target of current/ changed).
  Expected<Invalidations, FsErr> switch_to(const std::string& commit, std::int64_t mtime,
                                           bool force = false);

  void set_synthetic_root(SyntheticRoot* synth);

  std::size_t inode_count() const;
  // The inodes whose node satisfies `pred` (called under the inode table's lock).
  std::vector<Ino> inodes_where(const std::function<bool(const Node&)>& pred) const;

 private:
  struct Tree {
    std::string commit;
    std::int64_t mtime = 0;
    std::shared_ptr<Node> root;
  };
  struct InodeSlot {
    std::shared_ptr<Node> node;
    std::uint64_t nlookup = 0;
    bool stale = false;  // no longer in the current tree: dropped when the kernel forgets it
  };

  Expected<void, FsErr> ensure_listed(const std::shared_ptr<Node>& dir);
  std::vector<std::string> drop_unused(const std::shared_ptr<Node>& dir,
                                       const std::function<bool(const std::string&)>& pick);
  Expected<std::map<std::string, std::shared_ptr<Node>>, FsErr> list_children(
      const std::shared_ptr<Node>& dir);
  std::shared_ptr<Node> make_child(RemoteEntry e, const std::string& commit);
  void assign_ino(const std::shared_ptr<Node>& n);
  void assign_inos(const std::shared_ptr<Node>& n);
  Attr attr_of(const Node& n) const;
  std::shared_ptr<Node> find_node(Ino ino) const;
  Expected<void, FsErr> diff(const std::shared_ptr<Node>& old_dir,
                             const std::shared_ptr<Node>& new_dir, Invalidations& inv,
                             std::vector<std::shared_ptr<Node>>& dropped);

  ListingSource& source_;
  SyntheticRoot* synth_ = nullptr;

  mutable std::shared_mutex tree_mu_;  // guards tree_ (the pointer swap of a refresh)
  Tree tree_;

  // Lock order: a Node's mu before table_mu_; tree_mu_ is never held with either.
  mutable std::mutex table_mu_;  // guards the inode table
  std::unordered_map<Ino, InodeSlot> inodes_;
  std::unordered_map<std::string, Ino> ino_by_key_;
  Ino next_ino_ = kRootIno + 1;

  std::mutex switch_mu_;  // one refresh at a time
};

}  // namespace whfs::ns
