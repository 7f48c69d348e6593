// targets/<key>/ and the current link over a small wheelhouse: folders made on first lookup,
// refused names, a bound on their number, one inode per wheel across folders.
#include "fs/namespace/targets_view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "fs/namespace/target_folder.h"
#include "tests/unit/namespace/fake_source.h"

namespace whfs::ns {
namespace {

using testing::bytes_of;
using testing::dir;
using testing::FakeSource;
using testing::file;

const target::HostPlatform kHost{"x86_64", "2.36"};

class TargetsViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& c = src_.trees["c1"];
    c[""] = {dir("flash_attn", 'a'), file("README.md", '0')};
    c["flash_attn"] = {dir("flash_attn/sm80", 'b'), dir("flash_attn/sm89", 'c')};
    c["flash_attn/sm80"] = {dir("flash_attn/sm80/torch2.9-cu128", 'd')};
    c["flash_attn/sm89"] = {dir("flash_attn/sm89/torch2.9-cu128", 'e')};
    c["flash_attn/sm80/torch2.9-cu128"] = {
        file("flash_attn/sm80/torch2.9-cu128/flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl", '1'),
        file("flash_attn/sm80/torch2.9-cu128/flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl", '2')};
    c["flash_attn/sm89/torch2.9-cu128"] = {
        file("flash_attn/sm89/torch2.9-cu128/flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl", '3'),
        file("flash_attn/sm89/torch2.9-cu128/flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl", '4')};
  }

  // The entries of a path in `names` ("" = root).
  std::vector<std::string> ls(Namespace& names, Ino ino) {
    std::vector<std::string> out;
    auto entries = names.readdir(ino, false);
    if (!entries) return {"error: " + entries.error().message};
    for (const auto& e : *entries) out.push_back(e.name);
    return out;
  }

  FakeSource src_;
};

TEST_F(TargetsViewTest, TheRootShowsTheLinkAndTheFolderOfKeys) {
  TargetsView view(src_, kHost);
  Namespace names(src_, "c1", 1000);
  names.set_synthetic_root(&view);
  EXPECT_EQ(ls(names, kRootIno),
            (std::vector<std::string>{"README.md", "current", "flash_attn", "targets"}));
  const auto current = names.lookup(kRootIno, "current");
  ASSERT_TRUE(current);
  EXPECT_TRUE(current->symlink);
  EXPECT_TRUE(current->per_caller);
  const auto targets = names.lookup(kRootIno, "targets");
  ASSERT_TRUE(targets);
  EXPECT_EQ(ls(names, targets->ino), std::vector<std::string>{"unresolved"});
  const auto unresolved = names.lookup(targets->ino, "unresolved");
  ASSERT_TRUE(unresolved);
  // Empty index folders: a site-wide find-links to current/all/ names a folder for a process
  // whose target is not known too (pip warns on every run about a location that is not).
  EXPECT_EQ(ls(names, unresolved->ino), (std::vector<std::string>{".target", "all", "simple"}));
  const auto all = names.lookup(unresolved->ino, "all");
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->dir);
  EXPECT_EQ(ls(names, all->ino), std::vector<std::string>{});
}

TEST_F(TargetsViewTest, AKeysFolderIsMadeOnFirstLookup) {
  TargetsView view(src_, kHost);
  Namespace names(src_, "c1", 1000);
  names.set_synthetic_root(&view);
  const auto targets = names.lookup(kRootIno, "targets");
  ASSERT_TRUE(targets);
  const auto k311 = names.lookup(targets->ino, "sm89-torch2.9-cu128-cp311");
  ASSERT_TRUE(k311);
  EXPECT_TRUE(k311->dir);
  EXPECT_EQ(ls(names, targets->ino),
            (std::vector<std::string>{"sm89-torch2.9-cu128-cp311", "unresolved"}));
  EXPECT_EQ(ls(names, k311->ino),
            (std::vector<std::string>{".target", "all", "flash_attn", "simple"}));
  const auto pkg = names.lookup(k311->ino, "flash_attn");
  ASSERT_TRUE(pkg);
  EXPECT_EQ(ls(names, pkg->ino),
            std::vector<std::string>{"flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl"});
  // The folder's report: the key's target and its choice; read per caller (per_caller).
  const auto report = names.lookup(k311->ino, ".target");
  ASSERT_TRUE(report);
  EXPECT_TRUE(report->per_caller);
  const auto node = names.node(report->ino);
  ASSERT_TRUE(node);
  const auto* folder_report = (*node)->as<Node::Report>();
  ASSERT_NE(folder_report, nullptr);
  EXPECT_EQ(folder_report->key, "sm89-torch2.9-cu128-cp311");
  const auto j = nlohmann::json::parse(bytes_of(**node));
  EXPECT_EQ(j["packages"]["flash_attn"]["folder"], "sm89/torch2.9-cu128");
  EXPECT_EQ(j["target"]["arch"]["source"], "the key sm89-torch2.9-cu128-cp311");
  // Two GPUs: the folder that runs on both.
  const auto both = names.lookup(targets->ino, "sm80+sm89-torch2.9-cu128-cp312");
  ASSERT_TRUE(both);
  const auto both_pkg = names.lookup(both->ino, "flash_attn");
  ASSERT_TRUE(both_pkg);
  const auto wheel = names.lookup(both_pkg->ino, "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl");
  ASSERT_TRUE(wheel);
  const auto* alias = (*names.node(wheel->ino))->as<Node::SyntheticFile>();
  ASSERT_NE(alias, nullptr);
  EXPECT_EQ(alias->alias->remote()->entry.path,
            "flash_attn/sm80/torch2.9-cu128/flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl");
}

// The metadata of a wheel, made up, counting the asks.
class FakeMetadata : public IndexMetadataSource {
 public:
  Expected<IndexMetadata, std::string> metadata(const RemoteEntry& entry,
                                                const std::string&) override {
    ++asked;
    if (entry.name().find("cp312") != std::string::npos) return unexpected(std::string("down"));
    auto bytes = std::make_shared<const std::string>("Metadata-Version: 2.1\nName: flash_attn\n");
    return IndexMetadata{bytes, std::string(64, 'm'), ">=3.9,<4"};
  }
  int asked = 0;
};

TEST_F(TargetsViewTest, AnIndexForInstallers) {
  FakeMetadata meta;
  TargetsView view(src_, kHost, &meta);
  Namespace names(src_, "c1", 1000);
  names.set_synthetic_root(&view);
  const auto targets = names.lookup(kRootIno, "targets");
  const auto key = names.lookup(targets->ino, "sm89-torch2.9-cu128-cp311");
  const auto all = names.lookup(key->ino, "all");
  ASSERT_TRUE(all);
  EXPECT_EQ(ls(names, all->ino),
            std::vector<std::string>{"flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl"});
  const auto simple = names.lookup(key->ino, "simple");
  ASSERT_TRUE(simple);
  // Listing simple/ and reading its root page ask for no metadata.
  EXPECT_EQ(ls(names, simple->ino), (std::vector<std::string>{"flash-attn", "index.html"}));
  const auto root_page = names.lookup(simple->ino, "index.html");
  const std::string root = bytes_of(**names.node(root_page->ino));
  EXPECT_NE(root.find("<a href=\"flash-attn/\">flash-attn</a>"), std::string::npos) << root;
  EXPECT_EQ(meta.asked, 0);
  // The project's page: the wheel (the same inode as in the package folder), its .metadata and
  // the attributes pip reads.
  const auto project = names.lookup(simple->ino, "flash-attn");
  EXPECT_EQ(ls(names, project->ino),
            (std::vector<std::string>{"flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl",
                                      "flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl.metadata",
                                      "index.html"}));
  EXPECT_EQ(meta.asked, 1);
  const auto page = names.lookup(project->ino, "index.html");
  const std::string html = bytes_of(**names.node(page->ino));
  EXPECT_NE(html.find("href=\"flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl#sha256=" +
                      std::string(64, '3') + "\""),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("data-requires-python=\"&gt;=3.9,&lt;4\""), std::string::npos) << html;
  EXPECT_NE(html.find("data-core-metadata=\"sha256=" + std::string(64, 'm') + "\""),
            std::string::npos);
  const std::string wheel = "flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl";
  EXPECT_EQ(names.lookup(project->ino, wheel)->ino,
            names.lookup(names.lookup(key->ino, "flash_attn")->ino, wheel)->ino);
  // Without metadata (it could not be read), the wheel is linked alone.
  const auto k312 = names.lookup(targets->ino, "sm89-torch2.9-cu128-cp312");
  const auto p312 = names.lookup(names.lookup(k312->ino, "simple")->ino, "flash-attn");
  EXPECT_EQ(
      ls(names, p312->ino),
      (std::vector<std::string>{"flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl", "index.html"}));
  const std::string bare = bytes_of(**names.node(names.lookup(p312->ino, "index.html")->ino));
  EXPECT_EQ(bare.find("data-core-metadata"), std::string::npos);
  // A target with no wheel: an empty index.
  const auto k90 = names.lookup(targets->ino, "sm90-torch2.9-cu128-cp311");
  EXPECT_EQ(ls(names, names.lookup(k90->ino, "simple")->ino),
            std::vector<std::string>{"index.html"});
}

TEST_F(TargetsViewTest, OneWheelIsOneInodeInEveryFolder) {
  TargetsView view(src_, kHost);
  Namespace names(src_, "c1", 1000);
  names.set_synthetic_root(&view);
  const auto targets = names.lookup(kRootIno, "targets");
  const std::string name = "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl";
  auto wheel_in = [&](const std::string& key) {
    const auto k = names.lookup(targets->ino, key);
    const auto pkg = names.lookup(k->ino, "flash_attn");
    return names.lookup(pkg->ino, name)->ino;
  };
  // Both keys choose sm89's build: the same file, the same inode; their folders differ.
  EXPECT_EQ(wheel_in("sm89-torch2.9-cu128-cp312"), wheel_in("sm89-torch2.9-cu128-cp312-glibc2.36"));
  EXPECT_NE(names.lookup(targets->ino, "sm89-torch2.9-cu128-cp312")->ino,
            names.lookup(targets->ino, "sm89-torch2.9-cu128-cp312-glibc2.36")->ino);
}

TEST_F(TargetsViewTest, WhatIsNotAKeyIsNotThere) {
  TargetsView view(src_, kHost);
  Namespace names(src_, "c1", 1000);
  names.set_synthetic_root(&view);
  const auto targets = names.lookup(kRootIno, "targets");
  for (const char* bad : {"sm89", "sm89+sm80-torch2.9-cu128-cp311", "..", "current", ".target",
                          "sm89-torch2.9-cu128-cp311-sparc"}) {
    const auto r = names.lookup(targets->ino, bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().kind, FsErrorKind::kNotFound);
  }
  EXPECT_EQ(ls(names, targets->ino), std::vector<std::string>{"unresolved"});
}

// A process that looks up made-up keys cannot make the mount build folders without end.
TEST_F(TargetsViewTest, TheNumberOfFoldersIsBounded) {
  TargetsView view(src_, kHost, nullptr, 3);
  Namespace names(src_, "c1", 1000);
  names.set_synthetic_root(&view);
  const auto targets = names.lookup(kRootIno, "targets");
  for (int minor = 10; minor < 13; ++minor) {
    EXPECT_TRUE(names.lookup(targets->ino, "sm89-torch2.9-cu128-cp3" + std::to_string(minor)));
  }
  EXPECT_FALSE(names.lookup(targets->ino, "sm89-torch2.9-cu128-cp313"));
  EXPECT_TRUE(names.lookup(targets->ino, "sm89-torch2.9-cu128-cp311"));  // existing ones stay
}

// One user's made-up keys spend its own share only; the folders the kernel let go of make room
// again; where current/ leads is never refused.
TEST_F(TargetsViewTest, OneUserCannotSpendTheFoldersOfAll) {
  TargetsView view(src_, kHost, nullptr, 6, 2);
  view.set_current_keys([](const std::string& key) { return key == "sm80-torch2.9-cu128-cp311"; });
  Namespace names(src_, "c1", 1000);
  names.set_synthetic_root(&view);
  const auto targets = names.lookup(kRootIno, "targets");
  const auto key = [](int minor) { return "sm89-torch2.9-cu128-cp3" + std::to_string(minor); };
  ASSERT_TRUE(names.lookup(targets->ino, key(10), 7));
  ASSERT_TRUE(names.lookup(targets->ino, key(11), 7));
  EXPECT_FALSE(names.lookup(targets->ino, key(12), 7));  // user 7's share is spent
  EXPECT_TRUE(names.lookup(targets->ino, key(12), 8));   // user 8's is not
  EXPECT_TRUE(names.lookup(targets->ino, "sm80-torch2.9-cu128-cp311", 7));  // current/'s
  // The kernel forgets one of user 7's folders: it goes, and makes room for another.
  const auto ten = names.lookup(targets->ino, key(10), 7);
  ASSERT_TRUE(ten);
  names.forget(ten->ino, 2);
  const std::size_t before = names.inode_count();
  EXPECT_TRUE(names.lookup(targets->ino, key(13), 7));
  EXPECT_LE(names.inode_count(), before);  // the old folder's inodes went with it
  const auto listed = ls(names, targets->ino);
  EXPECT_EQ(std::count(listed.begin(), listed.end(), key(10)), 0);
  EXPECT_EQ(std::count(listed.begin(), listed.end(), key(11)), 1);
  // Looked up again later, it is made anew (its share permitting).
  EXPECT_FALSE(names.lookup(targets->ino, key(10), 7));
}

TEST_F(TargetsViewTest, RacingLookupsOfANewKeyGetOneFolder) {
  TargetsView view(src_, kHost);
  Namespace names(src_, "c1", 1000);
  names.set_synthetic_root(&view);
  const auto targets = names.lookup(kRootIno, "targets");
  std::vector<std::future<Ino>> inos;
  for (int i = 0; i < 8; ++i) {
    inos.push_back(std::async(std::launch::async, [&] {
      const auto k = names.lookup(targets->ino, "sm89-torch2.9-cu128-cp312");
      return k ? names.lookup(k->ino, "flash_attn")->ino : Ino{0};
    }));
  }
  const Ino first = inos.front().get();
  EXPECT_NE(first, 0u);
  for (std::size_t i = 1; i < inos.size(); ++i) EXPECT_EQ(inos[i].get(), first);
  // Every inode handed out is in the table, with the node that is in the tree.
  const auto k = names.lookup(targets->ino, "sm89-torch2.9-cu128-cp312");
  EXPECT_EQ((*names.node(k->ino))->name, "sm89-torch2.9-cu128-cp312");
}

}  // namespace
}  // namespace whfs::ns
