#include "fs/namespace/inode_table.h"

#include <type_traits>
#include <variant>

#include "fs/namespace/namespace.h"

namespace whfs::ns {

std::string inode_key(const Node& n) {
  std::string key(1, static_cast<char>('0' + static_cast<int>(n.kind())));
  key.push_back('\0');
  return std::visit(
      [&](const auto& w) -> std::string {
        using W = std::decay_t<decltype(w)>;
        if constexpr (std::is_same_v<W, Node::Dir>) {
          return key + w.entry.path;
        } else if constexpr (std::is_same_v<W, Node::File>) {
          return key + w.entry.path + '\0' + (w.entry.is_lfs() ? w.entry.lfs_sha256 : w.entry.oid);
        } else {
          return key + w.identity;
        }
      },
      n.what);
}

InodeTable::InodeTable(const std::shared_ptr<Node>& root) {
  root->ino = kRootIno;
  slots_[kRootIno] = Slot{root, 1, false};
  by_key_[inode_key(*root)] = kRootIno;
}

void InodeTable::assign(const std::shared_ptr<Node>& n) {
  std::lock_guard lock(mu_);
  const std::string key = inode_key(*n);
  if (const auto it = by_key_.find(key); it != by_key_.end()) {
    n->ino = it->second;
    auto& slot = slots_[n->ino];
    slot.node = n;  // a folder at a new commit takes over its path's inode
    slot.stale = false;
    return;
  }
  n->ino = next_++;
  by_key_[key] = n->ino;
  slots_[n->ino] = Slot{n, 0, false};
}

std::shared_ptr<Node> InodeTable::find(Ino ino) const {
  std::lock_guard lock(mu_);
  const auto it = slots_.find(ino);
  return it == slots_.end() ? nullptr : it->second.node;
}

void InodeTable::set_root(const std::shared_ptr<Node>& root) {
  std::lock_guard lock(mu_);
  slots_[kRootIno].node = root;
}

void InodeTable::ref(Ino ino) {
  std::lock_guard lock(mu_);
  if (const auto it = slots_.find(ino); it != slots_.end()) ++it->second.nlookup;
}

void InodeTable::forget(Ino ino, std::uint64_t n) {
  if (ino == kRootIno) return;
  std::lock_guard lock(mu_);
  const auto it = slots_.find(ino);
  if (it == slots_.end()) return;
  auto& slot = it->second;
  slot.nlookup = n >= slot.nlookup ? 0 : slot.nlookup - n;
  if (slot.nlookup == 0 && slot.stale) {
    by_key_.erase(inode_key(*slot.node));
    slots_.erase(it);
  }
}

bool InodeTable::referenced(Ino ino) const {
  std::lock_guard lock(mu_);
  const auto it = slots_.find(ino);
  return it != slots_.end() && it->second.nlookup != 0;
}

void InodeTable::retire(const std::vector<std::shared_ptr<Node>>& nodes) {
  std::lock_guard lock(mu_);
  for (const auto& n : nodes) {
    const auto it = slots_.find(n->ino);
    if (it == slots_.end() || it->second.node != n) continue;
    if (it->second.nlookup == 0) {
      by_key_.erase(inode_key(*n));
      slots_.erase(it);
    } else {
      it->second.stale = true;
    }
  }
}

std::size_t InodeTable::size() const {
  std::lock_guard lock(mu_);
  return slots_.size();
}

std::vector<Ino> InodeTable::where(const std::function<bool(const Node&)>& pred) const {
  std::vector<Ino> out;
  std::lock_guard lock(mu_);
  for (const auto& [ino, slot] : slots_) {
    if (slot.node && pred(*slot.node)) out.push_back(ino);
  }
  return out;
}

}  // namespace whfs::ns
