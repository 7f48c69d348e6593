// The one errno table: every error kind's errno pinned, so that a changed or new kind cannot
// slip into EIO unnoticed.
#include "fs/fuse/errno_table.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <map>

namespace whfs::fuse {
namespace {

TEST(ErrnoTable, EveryKindHasItsErrno) {
  const std::map<FsErrorKind, int> expected = {
      {FsErrorKind::kNotFound, ENOENT}, {FsErrorKind::kNotDir, ENOTDIR},
      {FsErrorKind::kIsDir, EISDIR},    {FsErrorKind::kReadOnly, EROFS},
      {FsErrorKind::kIo, EIO},          {FsErrorKind::kCorrupt, EIO},
      {FsErrorKind::kAccess, EACCES},   {FsErrorKind::kTimedOut, EIO},
      {FsErrorKind::kNoAttr, ENODATA},  {FsErrorKind::kRange, ERANGE},
      {FsErrorKind::kInvalid, EINVAL},  {FsErrorKind::kInterrupted, EINTR},
  };
  ASSERT_EQ(expected.size(), kAllFsErrorKinds.size()) << "a kind without a pinned errno";
  for (const FsErrorKind kind : kAllFsErrorKinds) {
    ASSERT_TRUE(expected.count(kind)) << static_cast<int>(kind);
    EXPECT_EQ(to_errno(kind), expected.at(kind)) << static_cast<int>(kind);
  }
}

TEST(ErrnoTable, TheListOfKindsIsComplete) {
  // The kinds are numbered in order; the list holds each once, up to the last one declared.
  for (std::size_t i = 0; i < kAllFsErrorKinds.size(); ++i) {
    EXPECT_EQ(static_cast<std::size_t>(kAllFsErrorKinds[i]), i);
  }
  EXPECT_EQ(kAllFsErrorKinds.back(), FsErrorKind::kInterrupted);
}

}  // namespace
}  // namespace whfs::fuse
