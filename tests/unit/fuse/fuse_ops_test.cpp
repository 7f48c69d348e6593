// The FUSE op table, request by request: what each op decodes, asks the Filesystem and replies,
// through a fake of libfuse's calls (fake_fuse.h). The mounted tests cover the kernel's side.
#include <fcntl.h>
#include <gtest/gtest.h>

#include "cache/tiered_cache.h"
#include "fs/hub/offline_hub.h"
#include "fs/namespace/targets_view.h"
#include "fs/vfs/filesystem.h"
#include "tests/unit/fs/filesystem_parts.h"
#include "tests/unit/fuse/fake_fuse.h"
#include "tests/unit/namespace/fake_source.h"

namespace whfs::fuse {
namespace {

using ns::testing::dir;
using ns::testing::file;

class FuseOpsTest : public ::testing::Test, protected whfs::testing::FilesystemParts {
 protected:
  void SetUp() override {
    auto& c = src_.trees["c1"];
    c[""] = {dir("flash_attn", 'a'), file("README.md", 'e')};
    c["flash_attn"] = {dir("flash_attn/sm89", 'b')};
    c["flash_attn/sm89"] = {};
    names_.set_synthetic_root(&view_);
    session_.fs = &fs_;
    session_.entry_timeout = 3600;
    session_.attr_timeout = 600;
  }

  fuse_req request() {
    fuse_req r;
    r.session = &session_;
    r.ctx.pid = 1;
    return r;
  }
  fuse_req lookup(fuse_ino_t parent, const char* name) {
    fuse_req r = request();
    ops_.lookup(&r, parent, name);
    EXPECT_EQ(r.replies, 1);
    return r;
  }
  fuse_ino_t ino_of(fuse_ino_t parent, const char* name) {
    fuse_req r = lookup(parent, name);
    EXPECT_EQ(r.reply, "entry") << name;
    EXPECT_NE(r.entry.ino, 0u) << name;
    return r.entry.ino;
  }

  FuseMount::SessionData session_;
  const fuse_lowlevel_ops ops_ = make_ops();
};

TEST_F(FuseOpsTest, LookupRepliesTheEntryWithTheSessionsTimeouts) {
  fuse_req r = lookup(FUSE_ROOT_ID, "flash_attn");
  ASSERT_EQ(r.reply, "entry");
  EXPECT_NE(r.entry.ino, 0u);
  EXPECT_EQ(r.entry.entry_timeout, 3600);
  EXPECT_EQ(r.entry.attr_timeout, 600);
  EXPECT_EQ(r.entry.attr.st_mode, static_cast<mode_t>(S_IFDIR | 0555));
  r = lookup(FUSE_ROOT_ID, "README.md");
  EXPECT_EQ(r.entry.attr.st_mode, static_cast<mode_t>(S_IFREG | 0444));
}

TEST_F(FuseOpsTest, TheCallersLinkIsNeverCachedByTheKernel) {
  fuse_req r = lookup(FUSE_ROOT_ID, "current");
  ASSERT_EQ(r.reply, "entry");
  EXPECT_EQ(r.entry.attr.st_mode & S_IFMT, static_cast<mode_t>(S_IFLNK));
  EXPECT_EQ(r.entry.attr_timeout, 0);
  EXPECT_EQ(r.entry.entry_timeout, 3600);  // the name is everyone's
}

TEST_F(FuseOpsTest, AMissingNameOfThePinnedTreeIsANegativeEntry) {
  // pip probes names that are not there; the kernel keeps the answer until the commit changes.
  fuse_req r = lookup(FUSE_ROOT_ID, "no_such_package");
  ASSERT_EQ(r.reply, "entry");
  EXPECT_EQ(r.entry.ino, 0u);
  EXPECT_EQ(r.entry.entry_timeout, 3600);
  const fuse_ino_t sm89 = ino_of(ino_of(FUSE_ROOT_ID, "flash_attn"), "sm89");
  r = lookup(sm89, "torch9.9-cu999");
  ASSERT_EQ(r.reply, "entry");
  EXPECT_EQ(r.entry.ino, 0u);
}

TEST_F(FuseOpsTest, AMissingNameOfASyntheticFolderIsENOENT) {
  // targets/ makes names on demand, and current/ differs by caller: no negative entries.
  const fuse_ino_t targets = ino_of(FUSE_ROOT_ID, "targets");
  fuse_req r = lookup(targets, "not-a-key");
  ASSERT_EQ(r.reply, "err");
  EXPECT_EQ(r.err, ENOENT);
}

TEST_F(FuseOpsTest, ALookupUnderAFileIsENOTDIR) {
  const fuse_ino_t readme = ino_of(FUSE_ROOT_ID, "README.md");
  fuse_req r = lookup(readme, "x");
  ASSERT_EQ(r.reply, "err");
  EXPECT_EQ(r.err, ENOTDIR);
}

TEST_F(FuseOpsTest, GetattrOfAnUnknownInodeIsENOENT) {
  fuse_req r = request();
  ops_.getattr(&r, 987654, nullptr);
  ASSERT_EQ(r.reply, "err");
  EXPECT_EQ(r.err, ENOENT);
  r = request();
  ops_.getattr(&r, FUSE_ROOT_ID, nullptr);
  ASSERT_EQ(r.reply, "attr");
  EXPECT_EQ(r.attr_timeout, 600);
}

TEST_F(FuseOpsTest, EveryWriteIsEROFS) {
  fuse_req r = request();
  ops_.mkdir(&r, FUSE_ROOT_ID, "d", 0755);
  EXPECT_EQ(r.err, EROFS);
  r = request();
  ops_.unlink(&r, FUSE_ROOT_ID, "README.md");
  EXPECT_EQ(r.err, EROFS);
  r = request();
  ops_.setxattr(&r, FUSE_ROOT_ID, "user.x", "1", 1, 0);
  EXPECT_EQ(r.err, EROFS);
  // Opening a file for writing is refused at open.
  r = request();
  fuse_file_info fi{};
  fi.flags = O_WRONLY;
  ops_.open(&r, ino_of(FUSE_ROOT_ID, "README.md"), &fi);
  ASSERT_EQ(r.reply, "err");
  EXPECT_EQ(r.err, EROFS);
}

TEST_F(FuseOpsTest, ReadlinkOfAFolderIsEINVALAndAMissingXattrENODATA) {
  fuse_req r = request();
  ops_.readlink(&r, ino_of(FUSE_ROOT_ID, "flash_attn"));
  ASSERT_EQ(r.reply, "err");
  EXPECT_EQ(r.err, EINVAL);
  r = request();
  ops_.getxattr(&r, FUSE_ROOT_ID, "user.wheelhouse.nothing", 100);
  ASSERT_EQ(r.reply, "err");
  EXPECT_EQ(r.err, ENODATA);
}

TEST_F(FuseOpsTest, XattrsAnswerTheirSizeThenTheirBytes) {
  fuse_req r = request();
  ops_.getxattr(&r, FUSE_ROOT_ID, "user.wheelhouse.commit", 0);
  ASSERT_EQ(r.reply, "xattr");
  EXPECT_EQ(r.xattr_size, 2u);
  r = request();
  ops_.getxattr(&r, FUSE_ROOT_ID, "user.wheelhouse.commit", 100);
  ASSERT_EQ(r.reply, "buf");
  EXPECT_EQ(r.bytes, "c1");
  r = request();
  ops_.getxattr(&r, FUSE_ROOT_ID, "user.wheelhouse.commit", 1);
  ASSERT_EQ(r.reply, "err");
  EXPECT_EQ(r.err, ERANGE);
}

TEST_F(FuseOpsTest, ReaddirListsDotsThenTheFolder) {
  fuse_req r = request();
  fuse_file_info fi{};
  ops_.opendir(&r, FUSE_ROOT_ID, &fi);
  ASSERT_EQ(r.reply, "open");
  r = request();
  ops_.readdir(&r, FUSE_ROOT_ID, 4096, 0, &fi);
  ASSERT_EQ(r.reply, "buf");
  const auto names = testing::names_in(r.bytes);
  ASSERT_GE(names.size(), 4u);
  EXPECT_EQ(names[0], ".");
  EXPECT_EQ(names[1], "..");
  EXPECT_NE(std::find(names.begin(), names.end(), "flash_attn"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "current"), names.end());
  r = request();
  ops_.releasedir(&r, FUSE_ROOT_ID, &fi);
  EXPECT_EQ(r.err, 0);
}

TEST_F(FuseOpsTest, AReadTheHubCannotServeIsEIO) {
  // The read path decides the kind (the Hub failed for a listed file's bytes) and the op table
  // only maps it.
  const fuse_ino_t readme = ino_of(FUSE_ROOT_ID, "README.md");
  fuse_req r = request();
  fuse_file_info fi{};
  fi.flags = O_RDONLY;
  ops_.open(&r, readme, &fi);
  ASSERT_EQ(r.reply, "open");
  EXPECT_EQ(fi.fh, r.fi.fh);
  r = request();
  ops_.read(&r, readme, 100, 0, &fi);
  ASSERT_EQ(r.reply, "err");
  EXPECT_EQ(r.err, EIO);
  r = request();
  ops_.release(&r, readme, &fi);
  EXPECT_EQ(r.err, 0);
}

// An exception once the read has replied is logged, and no second reply follows.
TEST_F(FuseOpsTest, AReadThatThrowsAfterItsReplyRepliesOnce) {
  const fuse_ino_t targets = ino_of(FUSE_ROOT_ID, "targets");
  const fuse_ino_t unresolved = ino_of(targets, "unresolved");
  const fuse_ino_t report = ino_of(unresolved, ".target");
  fuse_req r = request();
  fuse_file_info fi{};
  fi.flags = O_RDONLY;
  ops_.open(&r, report, &fi);
  ASSERT_EQ(r.reply, "open");
  r = request();
  r.throw_after_reply = true;
  ops_.read(&r, report, 100, 0, &fi);
  EXPECT_EQ(r.reply, "iov");
  EXPECT_EQ(r.replies, 1);
  EXPECT_FALSE(r.bytes.empty());
  r = request();
  ops_.release(&r, report, &fi);
  EXPECT_EQ(r.err, 0);
}

TEST_F(FuseOpsTest, ForgetAnswersWithoutAReply) {
  const fuse_ino_t readme = ino_of(FUSE_ROOT_ID, "README.md");
  fuse_req r = request();
  ops_.forget(&r, readme, 1);
  EXPECT_EQ(r.reply, "none");
  EXPECT_EQ(r.replies, 1);
}

}  // namespace
}  // namespace whfs::fuse
