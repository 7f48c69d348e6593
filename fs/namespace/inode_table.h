#pragma once
// The inode table: the node each inode number shows, and how many references the kernel holds
// to it. A node's number follows from its key (inode_key): folders by path, files by path and
// content, synthetic nodes by identity. A node whose key is in the table takes over that
// number, so a folder keeps its inode across commits and a file as long as its content.

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace whfs::ns {

using Ino = std::uint64_t;
inline constexpr Ino kRootIno = 1;

struct Node;

// The key a node's inode number follows (pure).
std::string inode_key(const Node& n);

class InodeTable {
 public:
  // `root` gets kRootIno, with one reference that is never forgotten.
  explicit InodeTable(const std::shared_ptr<Node>& root);

  // Numbers `n`: the number of its key (which then shows `n`), else a new one.
  void assign(const std::shared_ptr<Node>& n);
  std::shared_ptr<Node> find(Ino ino) const;
  // The root of a new tree.
  void set_root(const std::shared_ptr<Node>& root);

  // The kernel's references: one more, `n` fewer (an inode out of the tree goes with its
  // last), and whether it holds any.
  void ref(Ino ino);
  void forget(Ino ino, std::uint64_t n);
  bool referenced(Ino ino) const;
  // Nodes out of the tree: each goes now if the kernel holds no reference to it, else with
  // the last one. A number that shows another node by now is left alone.
  void retire(const std::vector<std::shared_ptr<Node>>& nodes);

  std::size_t size() const;
  // The inodes whose node satisfies `pred` (called under the table's lock).
  std::vector<Ino> where(const std::function<bool(const Node&)>& pred) const;

 private:
  struct Slot {
    std::shared_ptr<Node> node;
    std::uint64_t nlookup = 0;
    bool stale = false;  // out of the current tree: dropped when the kernel forgets it
  };

  mutable std::mutex mu_;  // guards everything below
  std::unordered_map<Ino, Slot> slots_;
  std::unordered_map<std::string, Ino> by_key_;
  Ino next_ = kRootIno + 1;
};

}  // namespace whfs::ns
