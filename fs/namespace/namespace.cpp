#include "fs/namespace/namespace.h"

#include <spdlog/spdlog.h>

namespace whfs::ns {
namespace {

FsErr not_found(const std::string& what) { return FsErr{FsErrorKind::kNotFound, what}; }

// The inode key: folders by path, files by path and content, synthetic nodes by identity.
std::string key_of(const Node& n) {
  std::string key(1, static_cast<char>('0' + static_cast<int>(n.kind)));
  key.push_back('\0');
  switch (n.kind) {
    case NodeKind::kDir:
      return key + n.entry.path;
    case NodeKind::kFile:
      return key + n.entry.path + '\0' + (n.entry.is_lfs() ? n.entry.lfs_sha256 : n.entry.oid);
    case NodeKind::kSyntheticDir:
    case NodeKind::kSyntheticFile:
    case NodeKind::kSymlink:
      return key + n.identity;
  }
  return key;
}

// Whether a node at a new commit can stand for the old one, subtree and all. Synthetic
// folders never can: what they show depends on more than their name.
bool same_content(const Node& a, const Node& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case NodeKind::kDir:
      return !a.entry.oid.empty() && a.entry.oid == b.entry.oid;
    case NodeKind::kFile:
      return key_of(a) == key_of(b) && a.entry.size == b.entry.size;
    case NodeKind::kSyntheticDir:
      return false;
    case NodeKind::kSyntheticFile:
    case NodeKind::kSymlink:
      return a.identity == b.identity;
  }
  return false;
}

}  // namespace

std::shared_ptr<Node> synthetic_dir(const std::string& name, const std::string& identity) {
  auto d = std::make_shared<Node>();
  d->kind = NodeKind::kSyntheticDir;
  d->name = name;
  d->identity = identity;
  return d;
}

std::uint64_t Node::size() const {
  if (kind == NodeKind::kFile) return entry.size;
  if (kind == NodeKind::kSyntheticFile) {
    if (alias) return alias->size();
    return bytes ? bytes->size() : 0;
  }
  return 0;
}

Namespace::Namespace(ListingSource& source, std::string commit, std::int64_t mtime)
    : source_(source) {
  auto root = std::make_shared<Node>();
  root->ino = kRootIno;
  root->kind = NodeKind::kDir;
  root->commit = commit;
  tree_ = Tree{std::move(commit), mtime, root};
  inodes_[kRootIno] = InodeSlot{root, 1, false};
  ino_by_key_[key_of(*root)] = kRootIno;
}

void Namespace::set_synthetic_root(SyntheticRoot* synth) { synth_ = synth; }

std::string Namespace::commit() const {
  std::shared_lock lock(tree_mu_);
  return tree_.commit;
}

std::int64_t Namespace::mtime() const {
  std::shared_lock lock(tree_mu_);
  return tree_.mtime;
}

std::size_t Namespace::inode_count() const {
  std::lock_guard lock(table_mu_);
  return inodes_.size();
}

std::vector<Ino> Namespace::inodes_where(const std::function<bool(const Node&)>& pred) const {
  std::vector<Ino> out;
  std::lock_guard lock(table_mu_);
  for (const auto& [ino, slot] : inodes_) {
    if (slot.node && pred(*slot.node)) out.push_back(ino);
  }
  return out;
}

std::shared_ptr<Node> Namespace::find_node(Ino ino) const {
  std::lock_guard lock(table_mu_);
  const auto it = inodes_.find(ino);
  return it == inodes_.end() ? nullptr : it->second.node;
}

void Namespace::assign_ino(const std::shared_ptr<Node>& n) {
  std::lock_guard lock(table_mu_);
  const std::string key = key_of(*n);
  const auto it = ino_by_key_.find(key);
  if (it != ino_by_key_.end()) {
    n->ino = it->second;
    auto& slot = inodes_[n->ino];
    slot.node = n;  // a folder at a new commit takes over its path's inode
    slot.stale = false;
    return;
  }
  n->ino = next_ino_++;
  ino_by_key_[key] = n->ino;
  inodes_[n->ino] = InodeSlot{n, 0, false};
}

void Namespace::assign_inos(const std::shared_ptr<Node>& n) {
  assign_ino(n);
  // A synthetic folder may come with its children already made.
  std::lock_guard lock(n->mu);
  for (auto& [name, child] : n->children) assign_inos(child);
}

std::shared_ptr<Node> Namespace::make_child(RemoteEntry e, const std::string& commit) {
  auto n = std::make_shared<Node>();
  n->kind = e.is_dir() ? NodeKind::kDir : NodeKind::kFile;
  n->name = e.name();
  n->entry = std::move(e);
  n->commit = commit;
  assign_ino(n);
  return n;
}

Expected<void, FsErr> Namespace::ensure_listed(const std::shared_ptr<Node>& dir) {
  {
    std::unique_lock lock(dir->mu);
    while (dir->listing) dir->listed_cv.wait(lock);  // another thread lists it: share its result
    if (dir->listed) return {};
    dir->listing = true;
  }
  // Whatever happens below (an error, an exception), the folder stops being "listing" and its
  // waiters wake: a folder left marked would make every later lookup in it wait forever.
  std::map<std::string, std::shared_ptr<Node>> children;
  bool ok = false;
  struct Done {
    const std::shared_ptr<Node>& dir;
    std::map<std::string, std::shared_ptr<Node>>& children;
    bool& ok;
    ~Done() {
      std::lock_guard lock(dir->mu);
      dir->listing = false;
      if (ok) {
        dir->children = std::move(children);
        dir->listed = true;
      }
      dir->listed_cv.notify_all();
    }
  } done{dir, children, ok};
  // No lock is held across the listing (network or cache I/O).
  auto listed = list_children(dir);
  if (!listed) return unexpected(listed.error());
  children = std::move(*listed);
  ok = true;
  return {};
}

Expected<std::map<std::string, std::shared_ptr<Node>>, FsErr> Namespace::list_children(
    const std::shared_ptr<Node>& dir) {
  std::map<std::string, std::shared_ptr<Node>> children;
  if (dir->kind == NodeKind::kSyntheticDir) {
    if (!dir->generate) return children;
    auto made = dir->generate();
    if (!made) return unexpected(made.error());
    for (auto& n : *made) {
      assign_inos(n);
      children[n->name] = n;
    }
    return children;
  }
  auto listing = source_.list(dir->commit, dir->entry.path);
  if (!listing) return unexpected(listing.error());
  for (auto& e : *listing) {
    auto child = make_child(std::move(e), dir->commit);
    const std::string& name = child->name;
    children.insert_or_assign(name, std::move(child));
  }
  if (dir->ino == kRootIno && synth_ != nullptr) {
    for (auto& n : synth_->root_entries(dir->commit)) {
      if (children.count(n->name) != 0) {
        spdlog::warn(
            "the repository has its own top-level \"{}\"; it is hidden by the synthetic folder "
            "of that name",
            n->name);
      }
      assign_inos(n);
      children[n->name] = n;
    }
  }
  return children;
}

Attr Namespace::attr_of(const Node& n) const {
  std::shared_lock lock(tree_mu_);
  return Attr{n.ino, n.is_dir(), n.size(), tree_.mtime, n.kind == NodeKind::kSymlink, n.per_caller};
}

std::vector<std::string> Namespace::drop_unused(
    const std::shared_ptr<Node>& dir, const std::function<bool(const std::string&)>& pick) {
  std::vector<std::string> names;
  // The folder's lock is held throughout: no lookup can find (and reference) a child while it
  // goes. A child the kernel holds no reference to has none below it either (a dentry holds
  // its parent), so its whole subtree goes with it.
  std::lock_guard dir_lock(dir->mu);
  std::vector<std::shared_ptr<Node>> candidates;
  for (const auto& [name, child] : dir->children) {
    if (pick(name)) candidates.push_back(child);
  }
  std::vector<std::shared_ptr<Node>> gone;
  for (const auto& child : candidates) {
    {
      std::lock_guard lock(table_mu_);
      const auto it = inodes_.find(child->ino);
      if (it != inodes_.end() && it->second.nlookup != 0) continue;
    }
    // The subtree, each folder's children read under its own lock (lock order: a node's mu
    // before table_mu_).
    std::vector<std::shared_ptr<Node>> todo{child};
    while (!todo.empty()) {
      auto n = std::move(todo.back());
      todo.pop_back();
      if (n->is_dir() && n != dir) {
        std::lock_guard lock(n->mu);
        for (const auto& [nm, c] : n->children) todo.push_back(c);
      }
      gone.push_back(std::move(n));
    }
    names.push_back(child->name);
    dir->children.erase(child->name);
  }
  std::lock_guard lock(table_mu_);
  for (const auto& n : gone) {
    const auto it = inodes_.find(n->ino);
    if (it == inodes_.end() || it->second.node != n) continue;  // the inode shows another node
    if (it->second.nlookup == 0) {
      ino_by_key_.erase(key_of(*n));
      inodes_.erase(it);
    } else {
      it->second.stale = true;
    }
  }
  return names;
}

Expected<Attr, FsErr> Namespace::lookup(Ino parent, const std::string& name, uid_t uid) {
  auto dir = find_node(parent);
  if (!dir) return unexpected(not_found("stale folder"));
  if (!dir->is_dir()) return unexpected(FsErr{FsErrorKind::kNotDir, name});
  if (auto r = ensure_listed(dir); !r) return unexpected(r.error());
  std::shared_ptr<Node> child;
  {
    std::lock_guard lock(dir->mu);
    const auto it = dir->children.find(name);
    if (it != dir->children.end()) child = it->second;
  }
  if (!child && dir->make_missing) {
    // Made outside the folder's lock (it may list folders); the first of two racing lookups
    // wins, and only the winner's nodes get inodes.
    MakeContext ctx;
    ctx.uid = uid;
    ctx.drop_unused = [this, dir](const std::function<bool(const std::string&)>& pick) {
      return drop_unused(dir, pick);
    };
    auto made = dir->make_missing(name, ctx);
    if (made) {
      std::lock_guard lock(dir->mu);
      auto [it, inserted] = dir->children.emplace(name, made);
      if (inserted) assign_inos(made);
      child = it->second;
    }
  }
  if (!child) return unexpected(not_found(name));
  {
    std::lock_guard lock(table_mu_);
    inodes_[child->ino].nlookup++;
  }
  return attr_of(*child);
}

void Namespace::forget(Ino ino, std::uint64_t n) {
  if (ino == kRootIno) return;
  std::lock_guard lock(table_mu_);
  const auto it = inodes_.find(ino);
  if (it == inodes_.end()) return;
  auto& slot = it->second;
  slot.nlookup = n >= slot.nlookup ? 0 : slot.nlookup - n;
  if (slot.nlookup == 0 && slot.stale) {
    ino_by_key_.erase(key_of(*slot.node));
    inodes_.erase(it);
  }
}

void Namespace::ref(Ino ino) {
  std::lock_guard lock(table_mu_);
  const auto it = inodes_.find(ino);
  if (it != inodes_.end()) it->second.nlookup++;
}

Expected<Attr, FsErr> Namespace::getattr(Ino ino) {
  auto n = find_node(ino);
  if (!n) return unexpected(not_found("stale inode"));
  return attr_of(*n);
}

Expected<std::shared_ptr<const Node>, FsErr> Namespace::node(Ino ino) {
  auto n = find_node(ino);
  if (!n) return unexpected(not_found("stale inode"));
  return std::shared_ptr<const Node>(n);
}

Expected<std::vector<DirEntry>, FsErr> Namespace::readdir(Ino ino, bool count_refs) {
  auto dir = find_node(ino);
  if (!dir) return unexpected(not_found("stale folder"));
  if (!dir->is_dir()) return unexpected(FsErr{FsErrorKind::kNotDir, dir->name});
  if (auto r = ensure_listed(dir); !r) return unexpected(r.error());
  std::vector<std::shared_ptr<Node>> kids;
  {
    std::lock_guard lock(dir->mu);
    kids.reserve(dir->children.size());
    for (const auto& [name, child] : dir->children) kids.push_back(child);
  }
  std::vector<DirEntry> out;
  out.reserve(kids.size());
  for (const auto& k : kids) out.push_back(DirEntry{k->name, attr_of(*k)});
  if (count_refs) {
    std::lock_guard lock(table_mu_);
    for (const auto& k : kids) inodes_[k->ino].nlookup++;
  }
  return out;
}

Expected<std::shared_ptr<Node>, FsErr> Namespace::dir_at(const std::string& path) {
  std::shared_ptr<Node> cur;
  {
    std::shared_lock lock(tree_mu_);
    cur = tree_.root;
  }
  std::size_t start = 0;
  while (start < path.size()) {
    auto slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    const std::string name = path.substr(start, slash - start);
    if (auto r = ensure_listed(cur); !r) return unexpected(r.error());
    std::lock_guard lock(cur->mu);
    const auto it = cur->children.find(name);
    if (it == cur->children.end() || it->second->kind != NodeKind::kDir) {
      return unexpected(not_found(path));
    }
    auto next = it->second;
    cur = next;
    start = slash + 1;
  }
  if (auto r = ensure_listed(cur); !r) return unexpected(r.error());
  return cur;
}

Expected<void, FsErr> Namespace::diff(const std::shared_ptr<Node>& old_dir,
                                      const std::shared_ptr<Node>& new_dir, Invalidations& inv,
                                      std::vector<std::shared_ptr<Node>>& dropped) {
  std::map<std::string, std::shared_ptr<Node>> old_children;
  {
    std::lock_guard lock(old_dir->mu);
    if (!old_dir->listed) return {};  // the kernel has nothing from it
    old_children = old_dir->children;
  }
  if (auto r = ensure_listed(new_dir); !r) return r;
  std::map<std::string, std::shared_ptr<Node>> new_children;
  {
    std::lock_guard lock(new_dir->mu);
    new_children = new_dir->children;
  }
  bool names_changed = old_children.size() != new_children.size();
  for (const auto& [name, old_child] : old_children) {
    const auto it = new_children.find(name);
    if (it == new_children.end()) {
      inv.entries.emplace_back(old_dir->ino, name);
      dropped.push_back(old_child);
      names_changed = true;
      continue;
    }
    auto& new_child = it->second;
    if (old_child->is_dir() && new_child->kind == old_child->kind) {
      if (same_content(*old_child, *new_child)) {
        // Unchanged subtree: carry it over, listings and all.
        std::lock_guard lock(new_dir->mu);
        new_dir->children[name] = old_child;
        assign_ino(old_child);
        continue;
      }
      inv.inodes.push_back(new_child->ino);  // same inode (by path): drop its caches
      if (auto r = diff(old_child, new_child, inv, dropped); !r) return r;
      continue;
    }
    if (same_content(*old_child, *new_child)) {
      std::lock_guard lock(new_dir->mu);
      new_dir->children[name] = old_child;
      continue;
    }
    inv.entries.emplace_back(old_dir->ino, name);
    if (old_child->ino != new_child->ino) dropped.push_back(old_child);
    names_changed = true;
  }
  for (const auto& [name, new_child] : new_children) {
    // A name that appeared: the kernel may hold a negative entry for it (fuse_ops' lookup).
    if (old_children.count(name) == 0) inv.entries.emplace_back(old_dir->ino, name);
  }
  if (names_changed) inv.inodes.push_back(new_dir->ino);
  return {};
}

Expected<Invalidations, FsErr> Namespace::switch_to(const std::string& commit, std::int64_t mtime,
                                                    bool force) {
  std::lock_guard one_at_a_time(switch_mu_);
  std::shared_ptr<Node> old_root;
  {
    std::shared_lock lock(tree_mu_);
    if (tree_.commit == commit && !force) return Invalidations{};
    old_root = tree_.root;
  }
  auto new_root = std::make_shared<Node>();
  new_root->kind = NodeKind::kDir;
  new_root->commit = commit;
  new_root->ino = kRootIno;
  Invalidations inv;
  std::vector<std::shared_ptr<Node>> dropped;
  if (auto r = diff(old_root, new_root, inv, dropped); !r) return unexpected(r.error());
  {
    std::unique_lock lock(tree_mu_);
    tree_ = Tree{commit, mtime, new_root};
  }
  {
    std::lock_guard lock(table_mu_);
    inodes_[kRootIno].node = new_root;
    for (const auto& n : dropped) {
      const auto it = inodes_.find(n->ino);
      if (it == inodes_.end() || it->second.node != n) continue;
      if (it->second.nlookup == 0) {
        ino_by_key_.erase(key_of(*n));
        inodes_.erase(it);
      } else {
        it->second.stale = true;
      }
    }
  }
  inv.inodes.push_back(kRootIno);
  // Every mtime changed (it is the commit's date): attributes of all folders are refreshed by
  // the root invalidation and the folder list above; files keep theirs until their timeout.
  return inv;
}

}  // namespace whfs::ns
