#include "fs/namespace/namespace.h"

#include <spdlog/spdlog.h>

namespace whfs::ns {
namespace {

FsErr not_found(const std::string& what) { return FsErr{FsErrorKind::kNotFound, what}; }

// Whether a node at a new commit can stand for the old one, subtree and all. Synthetic
// folders never can: what they show depends on more than their name.
bool same_content(const Node& a, const Node& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case NodeKind::kDir: {
      const auto& oid = std::get<Node::Dir>(a.what).entry.oid;
      return !oid.empty() && oid == std::get<Node::Dir>(b.what).entry.oid;
    }
    case NodeKind::kFile:
      return inode_key(a) == inode_key(b) &&
             std::get<Node::File>(a.what).entry.size == std::get<Node::File>(b.what).entry.size;
    case NodeKind::kSyntheticDir:
      return false;
    case NodeKind::kSyntheticFile:
    case NodeKind::kSymlink:
    case NodeKind::kReport:
      return inode_key(a) == inode_key(b);
  }
  return false;
}

std::shared_ptr<Node> remote_node(RemoteEntry e, const std::string& commit) {
  std::string name = e.name();
  if (e.is_dir()) {
    return std::make_shared<Node>(std::move(name), Node::Dir{{std::move(e), commit}});
  }
  return std::make_shared<Node>(std::move(name), Node::File{{std::move(e), commit}});
}

std::shared_ptr<Node> root_at(const std::string& commit) {
  auto root = std::make_shared<Node>("", Node::Dir{{RemoteEntry{}, commit}});
  root->ino = kRootIno;
  return root;
}

}  // namespace

std::shared_ptr<Node> synthetic_dir(const std::string& name, const std::string& identity,
                                    Node::Generate generate, Node::MakeMissing make_missing) {
  return std::make_shared<Node>(
      name, Node::SyntheticDir{identity, std::move(generate), std::move(make_missing)});
}

const Node::Remote* Node::remote() const {
  if (const auto* d = as<Dir>()) return d;
  return as<File>();
}

std::uint64_t Node::size() const {
  if (const auto* f = as<File>()) return f->entry.size;
  if (const auto* f = as<SyntheticFile>()) {
    if (f->alias) return f->alias->size();
    return f->bytes ? f->bytes->size() : 0;
  }
  if (const auto* r = as<Report>()) return r->folder_report ? r->folder_report->size() : 0;
  return 0;
}

Namespace::Namespace(ListingSource& source, const std::string& commit, std::int64_t mtime)
    : source_(source), tree_{commit, mtime, root_at(commit)}, inodes_(tree_.root) {}

void Namespace::set_synthetic_root(SyntheticRoot* synth) { synth_ = synth; }

std::string Namespace::commit() const {
  std::shared_lock lock(tree_mu_);
  return tree_.commit;
}

std::int64_t Namespace::mtime() const {
  std::shared_lock lock(tree_mu_);
  return tree_.mtime;
}

std::size_t Namespace::inode_count() const { return inodes_.size(); }

std::vector<Ino> Namespace::inodes_where(const std::function<bool(const Node&)>& pred) const {
  return inodes_.where(pred);
}

void Namespace::assign_inos(const std::shared_ptr<Node>& n) {
  inodes_.assign(n);
  std::lock_guard lock(n->mu);
  for (auto& [name, child] : n->children) assign_inos(child);
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
  if (const auto* made = dir->as<Node::SyntheticDir>()) {
    if (!made->generate) return children;
    auto generated = made->generate();
    if (!generated) return unexpected(generated.error());
    for (auto& n : *generated) {
      assign_inos(n);
      children[n->name] = n;
    }
    return children;
  }
  const Node::Remote& at = *dir->remote();
  auto listing = source_.list(at.commit, at.entry.path);
  if (!listing) return unexpected(listing.error());
  for (auto& e : *listing) {
    auto child = remote_node(std::move(e), at.commit);
    inodes_.assign(child);
    const std::string& name = child->name;
    children.insert_or_assign(name, std::move(child));
  }
  if (dir->ino == kRootIno && synth_ != nullptr) {
    for (auto& n : synth_->root_entries(at.commit)) {
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
  return Attr{n.ino,         n.is_dir(), n.size(), tree_.mtime, n.kind() == NodeKind::kSymlink,
              n.per_caller()};
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
    if (inodes_.referenced(child->ino)) continue;
    // The subtree, each folder's children read under its own lock (lock order: a node's mu
    // before the table's).
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
  inodes_.retire(gone);
  return names;
}

Expected<Attr, FsErr> Namespace::lookup(Ino parent, const std::string& name, uid_t uid) {
  auto dir = inodes_.find(parent);
  if (!dir) return unexpected(not_found("stale folder"));
  if (!dir->is_dir()) return unexpected(FsErr{FsErrorKind::kNotDir, name});
  if (auto r = ensure_listed(dir); !r) return unexpected(r.error());
  std::shared_ptr<Node> child;
  {
    std::lock_guard lock(dir->mu);
    const auto it = dir->children.find(name);
    if (it != dir->children.end()) child = it->second;
  }
  const auto* made_dir = dir->as<Node::SyntheticDir>();
  if (!child && made_dir != nullptr && made_dir->make_missing) {
    // Made outside the folder's lock (it may list folders); the first of two racing lookups
    // wins, and only the winner's nodes get inodes.
    MakeContext ctx;
    ctx.uid = uid;
    ctx.drop_unused = [this, dir](const std::function<bool(const std::string&)>& pick) {
      return drop_unused(dir, pick);
    };
    auto made = made_dir->make_missing(name, ctx);
    if (made) {
      std::lock_guard lock(dir->mu);
      auto [it, inserted] = dir->children.emplace(name, made);
      if (inserted) assign_inos(made);
      child = it->second;
    }
  }
  if (!child) return unexpected(not_found(name));
  inodes_.ref(child->ino);
  return attr_of(*child);
}

void Namespace::forget(Ino ino, std::uint64_t n) { inodes_.forget(ino, n); }

void Namespace::ref(Ino ino) { inodes_.ref(ino); }

Expected<Attr, FsErr> Namespace::getattr(Ino ino) {
  auto n = inodes_.find(ino);
  if (!n) return unexpected(not_found("stale inode"));
  return attr_of(*n);
}

Expected<std::shared_ptr<const Node>, FsErr> Namespace::node(Ino ino) {
  auto n = inodes_.find(ino);
  if (!n) return unexpected(not_found("stale inode"));
  return std::shared_ptr<const Node>(n);
}

Expected<std::vector<DirEntry>, FsErr> Namespace::readdir(Ino ino, bool count_refs) {
  auto dir = inodes_.find(ino);
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
    for (const auto& k : kids) inodes_.ref(k->ino);
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
    if (it == cur->children.end() || it->second->kind() != NodeKind::kDir) {
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
    if (old_child->is_dir() && new_child->kind() == old_child->kind()) {
      if (same_content(*old_child, *new_child)) {
        // Unchanged subtree: carry it over, listings and all.
        std::lock_guard lock(new_dir->mu);
        new_dir->children[name] = old_child;
        inodes_.assign(old_child);
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
  auto new_root = root_at(commit);
  Invalidations inv;
  std::vector<std::shared_ptr<Node>> dropped;
  if (auto r = diff(old_root, new_root, inv, dropped); !r) return unexpected(r.error());
  {
    std::unique_lock lock(tree_mu_);
    tree_ = Tree{commit, mtime, new_root};
  }
  inodes_.set_root(new_root);
  inodes_.retire(dropped);
  inv.inodes.push_back(kRootIno);
  // Every mtime changed (it is the commit's date): attributes of all folders are refreshed by
  // the root invalidation and the folder list above; files keep theirs until their timeout.
  return inv;
}

}  // namespace whfs::ns
