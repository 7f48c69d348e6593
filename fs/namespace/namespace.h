#pragma once
// The names the mount shows: a pinned remote tree, listed lazily one folder at a time, plus
// synthetic entries (current and targets/, see targets_view.h), behind an inode table
// (inode_table.h).
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
#include <utility>
#include <variant>
#include <vector>

#include "fs/common/expected.h"
#include "fs/common/fs_error.h"
#include "fs/common/remote_entry.h"
#include "fs/namespace/inode_table.h"

namespace whfs::ns {

// Where folder listings come from (the Hub, through the persisted listings of the cache).
class ListingSource {
 public:
  virtual ~ListingSource() = default;
  // Direct children of `folder` ("" = root) at `commit`.
  virtual Expected<std::vector<RemoteEntry>, FsErr> list(const std::string& commit,
                                                         const std::string& folder) = 0;
};

struct Node;

// What a folder that makes names on demand (Node::SyntheticDir::make_missing) is told of the
// lookup.
struct MakeContext {
  uid_t uid = 0;  // who looks the name up (the FUSE request's user)
  // Drops children of the folder that `pick` names and the kernel holds no reference to
  // (subtree and all); returns the names dropped.
  std::function<std::vector<std::string>(const std::function<bool(const std::string&)>& pick)>
      drop_unused;
};

// The kinds of node, in the order of Node::What's alternatives.
enum class NodeKind : std::uint8_t {
  kDir,
  kFile,
  kSyntheticDir,
  kSyntheticFile,
  kSymlink,
  kReport
};

struct Node {
  using Generate = std::function<Expected<std::vector<std::shared_ptr<Node>>, FsErr>()>;
  using MakeMissing = std::function<std::shared_ptr<Node>(const std::string&, const MakeContext&)>;

  // A node of the remote tree: its listing entry (entry.path = repo path) and the commit it
  // was listed at.
  struct Remote {
    RemoteEntry entry;
    std::string commit;
  };
  struct Dir : Remote {};   // a folder of the remote tree
  struct File : Remote {};  // a file of it
  // A folder the mount makes. `identity` (for the inode key) says what makes its content.
  struct SyntheticDir {
    std::string identity;
    Generate generate;  // its children, made when first listed (null: set by its maker)
    // For a folder whose names are made on demand (targets/): the child for a name that is not
    // there yet, or null (ENOENT). It joins the folder's children.
    MakeMissing make_missing;
  };
  // A file the mount makes: its bytes, or the remote file it shows (`alias`: a wheel of a
  // target folder).
  struct SyntheticFile {
    std::string identity;
    std::shared_ptr<const std::string> bytes;
    std::shared_ptr<const Node> alias;
  };
  // What depends on the process that asks: the filesystem answers its size, link and content
  // per caller, and the kernel must not keep its attributes.
  struct Link {  // `current`: leads each process to the folder of its own target
    std::string identity;
  };
  struct Report {  // a target folder's .target: the folder's report, and the caller's own target
    std::string identity;
    std::shared_ptr<const std::string> folder_report;
    std::string key;  // the target key of its folder
  };
  using What = std::variant<Dir, File, SyntheticDir, SyntheticFile, Link, Report>;

  Node(std::string name_, What what_) : name(std::move(name_)), what(std::move(what_)) {}

  Ino ino = 0;
  const std::string name;  // the name in its folder ("" for the root)
  const What what;

  NodeKind kind() const { return static_cast<NodeKind>(what.index()); }
  template <class T>
  const T* as() const {
    return std::get_if<T>(&what);
  }
  const Remote* remote() const;  // a Dir's or a File's; null for the others
  bool is_dir() const { return kind() == NodeKind::kDir || kind() == NodeKind::kSyntheticDir; }
  bool per_caller() const { return kind() == NodeKind::kSymlink || kind() == NodeKind::kReport; }
  std::uint64_t size() const;

  // Folders: the children, once listed. Guarded by mu; listing happens outside the lock.
  mutable std::mutex mu;
  std::condition_variable listed_cv;
  bool listed = false;
  bool listing = false;
  std::map<std::string, std::shared_ptr<Node>> children;
};

// A synthetic folder node (its children come from `generate`, or are set by its maker).
std::shared_ptr<Node> synthetic_dir(const std::string& name, const std::string& identity,
                                    Node::Generate generate = {},
                                    Node::MakeMissing make_missing = {});

struct Attr {
  Ino ino = 0;
  bool dir = false;
  std::uint64_t size = 0;
  std::int64_t mtime = 0;  // seconds since the epoch
  bool symlink = false;
  bool per_caller = false;  // not to be cached by the kernel (see Node::per_caller())
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
  // through Node::SyntheticDir::generate when first listed.
  virtual std::vector<std::shared_ptr<Node>> root_entries(const std::string& commit) = 0;
};

class Namespace {
 public:
  Namespace(ListingSource& source, const std::string& commit, std::int64_t mtime);

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

  Expected<void, FsErr> ensure_listed(const std::shared_ptr<Node>& dir);
  std::vector<std::string> drop_unused(const std::shared_ptr<Node>& dir,
                                       const std::function<bool(const std::string&)>& pick);
  Expected<std::map<std::string, std::shared_ptr<Node>>, FsErr> list_children(
      const std::shared_ptr<Node>& dir);
  // Numbers `n` and, for a synthetic folder made with its children, those below it.
  void assign_inos(const std::shared_ptr<Node>& n);
  Attr attr_of(const Node& n) const;
  Expected<void, FsErr> diff(const std::shared_ptr<Node>& old_dir,
                             const std::shared_ptr<Node>& new_dir, Invalidations& inv,
                             std::vector<std::shared_ptr<Node>>& dropped);

  ListingSource& source_;
  SyntheticRoot* synth_ = nullptr;

  mutable std::shared_mutex tree_mu_;  // guards tree_ (the pointer swap of a refresh)
  Tree tree_;

  // Lock order: a Node's mu before the table's; tree_mu_ is never held with either.
  InodeTable inodes_;

  std::mutex switch_mu_;  // one refresh at a time
};

}  // namespace whfs::ns
