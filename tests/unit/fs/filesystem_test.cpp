// Filesystem's per-caller answers: the current link, the .target report (its size, its bytes,
// never cached by the kernel) and the targets/ folder's listing that must not be kept.
#include "fs/vfs/filesystem.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cache/tiered_cache.h"
#include "fs/hub/offline_hub.h"
#include "fs/namespace/targets_view.h"
#include "tests/unit/fs/filesystem_parts.h"
#include "tests/unit/namespace/fake_source.h"

namespace whfs {
namespace {

using ns::testing::dir;
using ns::testing::file;

// Each pid is its own target: 1 and 2 have keys, others are unresolved.
class FakeViews : public CallerViews {
 public:
  std::string key(pid_t pid) const {
    if (pid == 1) return "sm89-torch2.9-cu128-cp311";
    if (pid == 2) return "sm89-torch2.9-cu128-cp312";
    return "unresolved";
  }
  std::string link(const Caller& c) override {
    ++links;
    return "targets/" + key(c.pid);
  }
  std::string report(const Caller& c, const std::string& folder_key,
                     const std::string& folder_report) override {
    auto j = nlohmann::json::parse(folder_report);
    j["caller"] = {{"pid", c.pid}, {"mine", key(c.pid) == folder_key}};
    return j.dump();
  }
  int links = 0;
};

class FilesystemTest : public ::testing::Test, protected whfs::testing::FilesystemParts {
 protected:
  void SetUp() override {
    auto& c = src_.trees["c1"];
    c[""] = {dir("flash_attn", 'a')};
    c["flash_attn"] = {dir("flash_attn/sm89", 'b')};
    c["flash_attn/sm89"] = {dir("flash_attn/sm89/torch2.9-cu128", 'c')};
    c["flash_attn/sm89/torch2.9-cu128"] = {
        file("flash_attn/sm89/torch2.9-cu128/flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl", '1')};
    names_.set_synthetic_root(&view_);
    fs_.set_caller_views(&views_);
  }

  Ino at(Ino parent, const std::string& name, pid_t pid = 1) {
    auto r = fs_.lookup(parent, name, Caller{pid, 0, 0});
    EXPECT_TRUE(r) << name;
    return r ? r->ino : 0;
  }

  std::string read_all(FileHandle& h) {
    std::string out;
    EXPECT_TRUE(fs_.read(h, 0, 1 << 20, nullptr, [&](std::span<const iovec> iov) {
      for (const auto& v : iov) out.append(static_cast<const char*>(v.iov_base), v.iov_len);
    }));
    return out;
  }

  FakeViews views_;
};

TEST_F(FilesystemTest, TheLinkIsEachCallersOwn) {
  const Ino current = at(ns::kRootIno, "current");
  auto one = fs_.readlink(current, Caller{1, 0, 0});
  auto two = fs_.readlink(current, Caller{2, 0, 0});
  ASSERT_TRUE(one && two);
  EXPECT_EQ(*one, "targets/sm89-torch2.9-cu128-cp311");
  EXPECT_EQ(*two, "targets/sm89-torch2.9-cu128-cp312");
  // Its size is the caller's link's, and the kernel must not keep it.
  auto attr = fs_.getattr(current, Caller{3, 0, 0});
  ASSERT_TRUE(attr);
  EXPECT_TRUE(attr->symlink);
  EXPECT_TRUE(attr->per_caller);
  EXPECT_EQ(attr->size, std::string("targets/unresolved").size());
  // Anything else is not a link.
  const auto bad = fs_.readlink(at(ns::kRootIno, "flash_attn"), Caller{1, 0, 0});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().kind, FsErrorKind::kInvalid);
}

TEST_F(FilesystemTest, AReportIsMadeForItsReaderAndNeverCached) {
  const Ino targets = at(ns::kRootIno, "targets");
  const Ino folder = at(targets, "sm89-torch2.9-cu128-cp311");
  const Ino report = at(folder, ".target");
  for (const pid_t pid : {1, 2}) {
    auto h = fs_.open(report, false, Caller{pid, 0, 0});
    ASSERT_TRUE(h);
    EXPECT_TRUE((*h)->direct_io);
    const auto j = nlohmann::json::parse(read_all(**h));
    EXPECT_EQ(j["caller"]["mine"], pid == 1);
    EXPECT_EQ(j["packages"]["flash_attn"]["folder"], "sm89/torch2.9-cu128");
    auto attr = fs_.getattr(report, Caller{pid, 0, 0});
    ASSERT_TRUE(attr);
    EXPECT_TRUE(attr->per_caller);
    EXPECT_EQ(attr->size, j.dump().size());
  }
  // A wheel is an ordinary file: cached, the same for everyone.
  const Ino wheel = at(at(folder, "flash_attn"), "flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl");
  auto attr = fs_.getattr(wheel, Caller{2, 0, 0});
  ASSERT_TRUE(attr);
  EXPECT_FALSE(attr->per_caller);
  auto h = fs_.open(wheel, false, Caller{2, 0, 0});
  ASSERT_TRUE(h);
  EXPECT_FALSE((*h)->direct_io);
  EXPECT_TRUE((*h)->remote);
  fs_.release(**h);
}

TEST_F(FilesystemTest, TheListingOfTargetsIsNotKept) {
  const Ino targets = at(ns::kRootIno, "targets");
  auto h = fs_.opendir(targets);
  ASSERT_TRUE(h);
  EXPECT_FALSE((*h)->cacheable);  // it grows as keys are looked up
  auto root = fs_.opendir(ns::kRootIno);
  ASSERT_TRUE(root);
  EXPECT_TRUE((*root)->cacheable);
  auto folder = fs_.opendir(at(targets, "sm89-torch2.9-cu128-cp312"));
  ASSERT_TRUE(folder);
  EXPECT_TRUE((*folder)->cacheable);
}

}  // namespace
}  // namespace whfs
