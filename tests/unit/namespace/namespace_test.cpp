#include "fs/namespace/namespace.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>

#include "tests/unit/namespace/fake_source.h"

namespace whfs::ns {
namespace {

using testing::bytes_of;
using testing::dir;
using testing::FakeSource;
using testing::file;
using testing::hex;

class NamespaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& c1 = src.trees["c1"];
    c1[""] = {dir("pkg", 'a'), dir("other", 'b'), file("README.md", '1')};
    c1["pkg"] = {dir("pkg/sm89", 'c'), file("pkg/a.whl", '2')};
    c1["pkg/sm89"] = {file("pkg/sm89/x.whl", '3'), file("pkg/sm89/y.whl", '4')};
    c1["other"] = {file("other/o.whl", '5')};
  }
  FakeSource src;
};

TEST_F(NamespaceTest, ListsLazilyOneFolderAtATime) {
  Namespace ns(src, "c1", 1000);
  auto pkg = ns.lookup(kRootIno, "pkg");
  ASSERT_TRUE(pkg);
  EXPECT_TRUE(pkg->dir);
  EXPECT_EQ(src.calls, 1);  // only the root so far
  auto entries = ns.readdir(pkg->ino, false);
  ASSERT_TRUE(entries);
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].name, "a.whl");
  EXPECT_EQ((*entries)[0].attr.size, 10u);
  EXPECT_EQ((*entries)[0].attr.mtime, 1000);
  EXPECT_EQ((*entries)[1].name, "sm89");
  EXPECT_EQ(src.calls, 2);
  ASSERT_TRUE(ns.readdir(pkg->ino, false));
  EXPECT_EQ(src.calls, 2);  // listed once
}

TEST_F(NamespaceTest, ErrorsAreTyped) {
  Namespace ns(src, "c1", 0);
  auto missing = ns.lookup(kRootIno, "nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, FsErrorKind::kNotFound);
  auto readme = ns.lookup(kRootIno, "README.md");
  ASSERT_TRUE(readme);
  auto under_file = ns.lookup(readme->ino, "x");
  ASSERT_FALSE(under_file);
  EXPECT_EQ(under_file.error().kind, FsErrorKind::kNotDir);
  EXPECT_EQ(ns.readdir(readme->ino, false).error().kind, FsErrorKind::kNotDir);
  EXPECT_EQ(ns.getattr(987654).error().kind, FsErrorKind::kNotFound);
}

TEST_F(NamespaceTest, AFailedListingIsRetriedLater) {
  Namespace ns(src, "c1", 0);
  src.fail = true;
  auto r = ns.lookup(kRootIno, "pkg");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, FsErrorKind::kIo);
  src.fail = false;
  EXPECT_TRUE(ns.lookup(kRootIno, "pkg"));
}

TEST_F(NamespaceTest, ConcurrentLookupsListAFolderOnce) {
  Namespace ns(src, "c1", 0);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      if (ns.lookup(kRootIno, "README.md")) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 8);
  EXPECT_EQ(src.calls, 1);
}

TEST_F(NamespaceTest, SwitchKeepsUnchangedInodesAndInvalidatesChangedOnes) {
  Namespace ns(src, "c1", 0);
  const Ino pkg = ns.lookup(kRootIno, "pkg")->ino;
  const Ino a = ns.lookup(pkg, "a.whl")->ino;
  const Ino sm89 = ns.lookup(pkg, "sm89")->ino;
  const Ino x = ns.lookup(sm89, "x.whl")->ino;
  const Ino y = ns.lookup(sm89, "y.whl")->ino;
  const Ino readme = ns.lookup(kRootIno, "README.md")->ino;
  const Ino other = ns.lookup(kRootIno, "other")->ino;
  ASSERT_TRUE(ns.readdir(other, false));

  // c2: pkg/sm89/x.whl changed, y.whl removed, z.whl added; other/ unchanged (same tree id).
  auto& c2 = src.trees["c2"];
  c2[""] = {dir("pkg", 'A'), dir("other", 'b'), file("README.md", '1')};
  c2["pkg"] = {dir("pkg/sm89", 'C'), file("pkg/a.whl", '2')};
  c2["pkg/sm89"] = {file("pkg/sm89/x.whl", '9'), file("pkg/sm89/z.whl", '8')};
  src.last_folders.clear();
  auto inv = ns.switch_to("c2", 2000);
  ASSERT_TRUE(inv);
  EXPECT_EQ(ns.commit(), "c2");
  // Only the folders that were listed and changed were listed again; other/ was carried over.
  EXPECT_EQ(src.last_folders, (std::vector<std::string>{"c2:", "c2:pkg", "c2:pkg/sm89"}));

  EXPECT_EQ(ns.lookup(kRootIno, "README.md")->ino, readme);
  EXPECT_EQ(ns.lookup(kRootIno, "pkg")->ino, pkg);
  EXPECT_EQ(ns.lookup(pkg, "a.whl")->ino, a);
  EXPECT_EQ(ns.lookup(pkg, "sm89")->ino, sm89);
  const Ino x2 = ns.lookup(sm89, "x.whl")->ino;
  EXPECT_NE(x2, x);  // new content, new inode
  EXPECT_FALSE(ns.lookup(sm89, "y.whl"));
  EXPECT_TRUE(ns.node(y));  // the kernel still holds the removed y.whl
  EXPECT_TRUE(ns.lookup(sm89, "z.whl"));
  EXPECT_EQ(ns.getattr(readme)->mtime, 2000);

  auto has_entry = [&](Ino parent, const std::string& name) {
    for (const auto& [p, n] : inv->entries) {
      if (p == parent && n == name) return true;
    }
    return false;
  };
  auto has_inode = [&](Ino ino) {
    return std::find(inv->inodes.begin(), inv->inodes.end(), ino) != inv->inodes.end();
  };
  EXPECT_TRUE(has_entry(sm89, "x.whl"));
  EXPECT_TRUE(has_entry(sm89, "y.whl"));
  // A name that appeared: the kernel may hold a negative entry for it from c1.
  EXPECT_TRUE(has_entry(sm89, "z.whl"));
  EXPECT_FALSE(has_entry(pkg, "a.whl"));
  EXPECT_FALSE(has_entry(kRootIno, "README.md"));
  EXPECT_TRUE(has_inode(sm89));
  EXPECT_TRUE(has_inode(kRootIno));
  EXPECT_FALSE(has_inode(other));

  // The old x.whl stays readable (an open file) until the kernel forgets it.
  auto old_x = ns.node(x);
  ASSERT_TRUE(old_x);
  EXPECT_EQ((*old_x)->remote()->entry.lfs_sha256, hex('3', 64));
  ns.forget(x, 1);
  EXPECT_FALSE(ns.node(x));
}

TEST_F(NamespaceTest, SwitchToTheSameCommitIsANoOp) {
  Namespace ns(src, "c1", 0);
  ASSERT_TRUE(ns.lookup(kRootIno, "pkg"));
  const int calls = src.calls;
  auto inv = ns.switch_to("c1", 0);
  ASSERT_TRUE(inv);
  EXPECT_TRUE(inv->entries.empty());
  EXPECT_EQ(src.calls, calls);
}

TEST_F(NamespaceTest, ForgetOfALiveInodeKeepsIt) {
  Namespace ns(src, "c1", 0);
  const Ino readme = ns.lookup(kRootIno, "README.md")->ino;
  ns.forget(readme, 5);
  EXPECT_TRUE(ns.getattr(readme));  // still in the current tree
  ns.forget(kRootIno, 100);
  EXPECT_TRUE(ns.getattr(kRootIno));
}

// A synthetic folder at the root, filled on first listing.
class FakeSynthetic : public SyntheticRoot {
 public:
  std::vector<std::shared_ptr<Node>> root_entries(const std::string& commit) override {
    auto d = synthetic_dir(
        "current", "current", [commit]() -> Expected<std::vector<std::shared_ptr<Node>>, FsErr> {
          auto bytes = std::make_shared<const std::string>("{\"commit\":\"" + commit + "\"}");
          auto f = std::make_shared<Node>(
              ".target", Node::SyntheticFile{"current/.target:" + *bytes, bytes, nullptr});
          return std::vector<std::shared_ptr<Node>>{f};
        });
    return {d};
  }
};

TEST_F(NamespaceTest, SyntheticFoldersAreRebuiltOnSwitch) {
  FakeSynthetic synth;
  Namespace ns(src, "c1", 0);
  ns.set_synthetic_root(&synth);
  const Ino cur = ns.lookup(kRootIno, "current")->ino;
  auto t1 = ns.lookup(cur, ".target");
  ASSERT_TRUE(t1);
  EXPECT_EQ(bytes_of(**ns.node(t1->ino)), "{\"commit\":\"c1\"}");
  src.trees["c2"] = src.trees["c1"];
  src.trees["c2"][""][0] = dir("pkg", 'Z');
  ASSERT_TRUE(ns.switch_to("c2", 0));
  EXPECT_EQ(ns.lookup(kRootIno, "current")->ino, cur);
  auto t2 = ns.lookup(cur, ".target");
  ASSERT_TRUE(t2);
  EXPECT_EQ(bytes_of(**ns.node(t2->ino)), "{\"commit\":\"c2\"}");
}

TEST_F(NamespaceTest, AListingThatThrowsLeavesTheFolderListableAgain) {
  // An exception out of a listing (an allocation failure, a bug) must not leave the folder
  // marked "being listed": every later lookup in it would wait forever.
  Namespace ns(src, "c1", 0);
  const Ino pkg = ns.lookup(kRootIno, "pkg")->ino;
  src.throw_once = true;
  EXPECT_THROW((void)ns.lookup(pkg, "a.whl"), std::runtime_error);
  auto again = std::async(std::launch::async, [&] { return ns.lookup(pkg, "a.whl"); });
  ASSERT_EQ(again.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "the folder stayed marked as being listed";
  EXPECT_TRUE(again.get());
}

TEST_F(NamespaceTest, TheCommitCanBeReadWhileARefreshReplacesTheTree) {
  // getxattr user.wheelhouse.commit (and the status) read the commit while SIGHUP's refresh
  // swaps the tree: the value must be a copy, not a reference into the tree being freed.
  // (TSan reports the old reference as a data race; ASan as a use after free.)
  for (int i = 0; i < 50; ++i) {
    const std::string c = "commit-number-" + std::to_string(i) + "-with-a-long-name-to-allocate";
    src.trees[c] = src.trees["c1"];
  }
  Namespace ns(src, "c1", 0);
  std::atomic<bool> stop{false};
  std::thread readers([&] {
    std::size_t total = 0;
    do {
      total += ns.commit().size();
    } while (!stop);
    EXPECT_GT(total, 0u);
  });
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 50; ++i) {
      const std::string c = "commit-number-" + std::to_string(i) + "-with-a-long-name-to-allocate";
      ASSERT_TRUE(ns.switch_to(c, i));
      EXPECT_EQ(ns.commit(), c);
    }
  }
  stop = true;
  readers.join();
}

}  // namespace
}  // namespace whfs::ns
