// A cache shared by processes and users: private by default, read-only tiers, locks a stopped
// process cannot hold forever, download claims.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "cache/block_cache.h"
#include "cache/lmdb.h"
#include "cache/tiered_cache.h"
#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::TempDir;

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

// A child process that holds an OFD write lock on `byte` of `file` (as a cache process
// stopped inside a write txn, or while opening, would) until killed.
class LockHolder {
 public:
  LockHolder(const fs::path& file, off_t byte) {
    int ready[2];
    EXPECT_EQ(::pipe(ready), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(file.c_str(), O_RDWR | O_CREAT, 0600);
      struct flock fl {};
      fl.l_type = F_WRLCK;
      fl.l_whence = SEEK_SET;
      fl.l_start = byte;
      fl.l_len = 1;
      const bool ok = fd >= 0 && ::fcntl(fd, F_OFD_SETLKW, &fl) == 0;
      (void)!::write(ready[1], ok ? "y" : "n", 1);
      ::raise(SIGSTOP);  // stopped while it holds the lock, as a paused container
      ::pause();
      ::_exit(0);
    }
    ::close(ready[1]);
    char c = 0;
    EXPECT_EQ(::read(ready[0], &c, 1), 1);
    EXPECT_EQ(c, 'y');
    ::close(ready[0]);
  }
  ~LockHolder() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  LockHolder(const LockHolder&) = delete;
  LockHolder& operator=(const LockHolder&) = delete;

 private:
  pid_t pid_ = -1;
};

class SharingTest : public ::testing::Test {
 protected:
  TempDir root_;
  fs::path dir_ = root_ / "cache";
};

TEST_F(SharingTest, ANewCacheIsPrivateWhateverTheUmask) {
  const mode_t old = ::umask(0);
  auto c = testing::open_or_die(testing::test_options(dir_));
  ::umask(old);
  const auto bytes = testing::make_bytes(3000, 1);
  testing::put_all(*c, testing::sha256_of(bytes), bytes);
  ASSERT_TRUE(c->flush());
  EXPECT_EQ(mode_of(dir_), 0700u);
  for (const char* f : {"data.mdb", "lock.mdb", "session", "session.lock", "downloads.lock"}) {
    EXPECT_EQ(mode_of(dir_ / f), 0600u) << f;
  }
}

TEST_F(SharingTest, AnExistingCacheOfOursIsMadePrivate) {
  fs::create_directories(dir_);
  ::chmod(dir_.c_str(), 0755);
  { auto c = testing::open_or_die(testing::test_options(dir_)); }
  for (const char* f : {"data.mdb", "lock.mdb"}) ::chmod((dir_ / f).c_str(), 0644);
  ::chmod(dir_.c_str(), 0755);
  auto c = testing::open_or_die(testing::test_options(dir_));
  EXPECT_EQ(mode_of(dir_), 0700u);
  EXPECT_EQ(mode_of(dir_ / "data.mdb"), 0600u);
  EXPECT_EQ(mode_of(dir_ / "lock.mdb"), 0600u);
}

// Only its owner can have written a private cache: its records may be taken at their word
// (BlockCache::owner_only). Once shared with a group, or found writable by others, it never is
// again, even when private once more: what a member wrote then is still in it.
TEST_F(SharingTest, OnlyACacheThatWasAlwaysPrivateIsOwnerOnly) {
  EXPECT_TRUE(testing::open_or_die(testing::test_options(dir_))->owner_only());
  EXPECT_TRUE(testing::open_or_die(testing::test_options(dir_))->owner_only());  // reopened
  auto shared = testing::test_options(dir_);
  shared.access.group = ::getegid();  // a group this process is in
  EXPECT_FALSE(testing::open_or_die(shared)->owner_only());
  ::chmod(dir_.c_str(), 0700);  // private again, by its owner's hand
  auto again = testing::open_or_die(testing::test_options(dir_));
  EXPECT_EQ(mode_of(dir_), 0700u);
  EXPECT_EQ(mode_of(dir_ / "data.mdb"), 0600u);
  EXPECT_FALSE(again->owner_only());

  const fs::path loose = root_ / "loose";
  { EXPECT_TRUE(testing::open_or_die(testing::test_options(loose))->owner_only()); }
  ::chmod((loose / "data.mdb").c_str(), 0640);  // an older version's mode, a umask
  EXPECT_FALSE(testing::open_or_die(testing::test_options(loose))->owner_only());
  EXPECT_FALSE(testing::open_or_die(testing::test_options(loose))->owner_only());

  auto ro = testing::test_options(dir_);
  ro.read_only = true;
  EXPECT_FALSE(testing::open_or_die(ro)->owner_only());
}

TEST_F(SharingTest, ADirectoryOthersCouldWriteOrOwnIsRefused) {
  fs::create_directories(dir_);
  for (const mode_t m : {0777, 0770, 0702}) {
    ::chmod(dir_.c_str(), m);
    auto c = BlockCache::open(testing::test_options(dir_));
    ASSERT_FALSE(c) << std::oct << m;
    EXPECT_EQ(c.error().kind, CacheError::Kind::kAccess);
    EXPECT_NE(c.error().message.find("written by"), std::string::npos) << c.error().message;
  }
  ::chmod(dir_.c_str(), 0700);
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a directory of another user";
  ASSERT_EQ(::chown(dir_.c_str(), 65534, 65534), 0);
  auto c = BlockCache::open(testing::test_options(dir_));
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().kind, CacheError::Kind::kAccess);
  EXPECT_NE(c.error().message.find("belongs to user 65534"), std::string::npos)
      << c.error().message;
}

TEST_F(SharingTest, AGroupSharedCacheIsSharedWithThatGroupOnly) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give files to another group";
  const gid_t group = 65534;  // nogroup
  Options o = testing::test_options(dir_);
  o.access.group = group;
  {
    auto c = testing::open_or_die(o);
    const auto bytes = testing::make_bytes(3000, 2);
    testing::put_all(*c, testing::sha256_of(bytes), bytes);
  }
  struct stat st {};
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 03770u);
  EXPECT_EQ(st.st_gid, group);
  for (const char* f : {"data.mdb", "lock.mdb", "session.lock"}) {
    ASSERT_EQ(::stat((dir_ / f).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0660u) << f;
    EXPECT_EQ(st.st_gid, group) << f;
  }
  // Another member's directory is fine for the group, not without it.
  ASSERT_EQ(::chown(dir_.c_str(), 65534, group), 0);
  EXPECT_TRUE(BlockCache::open(o));
  EXPECT_FALSE(BlockCache::open(testing::test_options(dir_)));
}

TEST_F(SharingTest, AReadOnlyCacheIsReadAndNeverWritten) {
  const auto bytes = testing::make_bytes(5000, 3);
  const auto id = testing::sha256_of(bytes);
  {
    auto c = testing::open_or_die(testing::test_options(dir_));
    testing::put_all(*c, id, bytes);
    ASSERT_TRUE(c->verify_content(id, bytes.size()));
    ASSERT_TRUE(c->put_listing("https://hub.example", "o/r", "c1", "", testing::kPublic, {}));
  }
  const auto before = fs::last_write_time(dir_ / "data.mdb");
  const auto session_before = fs::last_write_time(dir_ / "session");
  Options o = testing::test_options(dir_, 0);
  o.read_only = true;
  auto c = testing::open_or_die(o);
  EXPECT_TRUE(c->read_only());
  EXPECT_EQ(testing::read_all(*c, id, bytes.size()), bytes);
  EXPECT_TRUE(c->verify_content(id, bytes.size()));
  EXPECT_TRUE(c->get_listing("https://hub.example", "o/r", "c1", "", testing::kPublicOnly).value());
  const auto more = testing::make_bytes(100, 4);
  auto put = c->put_blocks(testing::sha256_of(more), more.size(), 0, more);
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().kind, CacheError::Kind::kReadOnly);
  EXPECT_TRUE(c->pin(id));
  c->unpin(id);
  EXPECT_TRUE(c->flush());
  c.reset();
  EXPECT_EQ(fs::last_write_time(dir_ / "data.mdb"), before);
  EXPECT_EQ(fs::last_write_time(dir_ / "session"), session_before);
}

TEST_F(SharingTest, AReadOnlyCacheKeepsWhatItsVerificationFoundForThisProcess) {
  // A read-only store cannot write what verification found: it answers as a writable one
  // would after writing it (a match is verified, a mismatch is gone), for this process only.
  const auto good = testing::make_bytes(5000, 12);
  const auto good_id = testing::sha256_of(good);
  const auto bad_id = testing::sha256_of(testing::make_bytes(5000, 13));
  {
    auto c = testing::open_or_die(testing::test_options(dir_));
    testing::put_all(*c, good_id, good);                          // complete, not verified
    testing::put_all(*c, bad_id, testing::make_bytes(5000, 14));  // not the bytes of its id
  }
  Options o = testing::test_options(dir_, 0);
  o.read_only = true;
  auto c = testing::open_or_die(o);
  const std::uint32_t blocks = (5000 + c->block_size() - 1) / c->block_size();
  int served = 0;
  auto count = [&](std::uint32_t, std::span<const std::byte>) { ++served; };
  auto hidden =
      c->read_blocks(good_id, good.size(), 0, blocks, count, BlockStore::ReadMode::kVerified);
  ASSERT_TRUE(hidden);
  EXPECT_EQ(served, 0);
  ASSERT_TRUE(c->verify_content(good_id, good.size()).value().verified);
  EXPECT_TRUE(c->content_state(good_id).value()->verified);
  auto shown =
      c->read_blocks(good_id, good.size(), 0, blocks, count, BlockStore::ReadMode::kVerified);
  ASSERT_TRUE(shown);
  EXPECT_TRUE(shown->empty());
  EXPECT_EQ(served, static_cast<int>(blocks));

  auto v = c->verify_content(bad_id, 5000);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().kind, CacheError::Kind::kCorrupt);
  EXPECT_FALSE(c->content_state(bad_id).value());  // gone, as a writable store drops it
  served = 0;
  auto gone = c->read_blocks(bad_id, 5000, 0, blocks, count, BlockStore::ReadMode::kPartial);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->size(), blocks);
  EXPECT_EQ(served, 0);
  c.reset();
  // Nothing was written: another process finds the store as it was.
  auto again = testing::open_or_die(o);
  EXPECT_FALSE(again->content_state(good_id).value()->verified);
  EXPECT_TRUE(again->content_state(bad_id).value()->complete());
}

TEST_F(SharingTest, AStoppedWriterElsewhereCostsAWriteNotAHang) {
  Options o = testing::test_options(dir_);
  o.lock_timeout = 300ms;
  auto c = testing::open_or_die(o);
  const auto bytes = testing::make_bytes(5000, 5);
  const auto id = testing::sha256_of(bytes);
  testing::put_all(*c, id, bytes);
  {
    LockHolder stopped(dir_ / "session.lock", 2);  // the write lock (session.h)
    const auto more = testing::make_bytes(4000, 6);
    const auto start = std::chrono::steady_clock::now();
    auto put = c->put_blocks(testing::sha256_of(more), more.size(), 0, more);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // bounded, with a wide margin
    ASSERT_FALSE(put);
    EXPECT_EQ(put.error().kind, CacheError::Kind::kBusy);
    // Reads never wait for the writer.
    auto missing = c->read_blocks(
        id, bytes.size(), 0, 1, [](auto, auto) {}, BlockStore::ReadMode::kPresence);
    ASSERT_TRUE(missing);
    EXPECT_TRUE(missing->empty());
  }
  // Once the holder is gone, writes work again (after the second in which this process's
  // threads give up at once rather than each wait out the timeout).
  std::this_thread::sleep_for(1100ms);
  const auto more = testing::make_bytes(4000, 6);
  EXPECT_TRUE(c->put_blocks(testing::sha256_of(more), more.size(), 0, more));
}

TEST_F(SharingTest, AnOpenDoesNotWaitForeverForAStoppedOpener) {
  { auto c = testing::open_or_die(testing::test_options(dir_)); }
  LockHolder stopped(dir_ / "session.lock", 0);  // the open/close gate
  Options o = testing::test_options(dir_);
  o.open_timeout = 300ms;
  const auto start = std::chrono::steady_clock::now();
  auto c = BlockCache::open(o);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().kind, CacheError::Kind::kBusy);
}

TEST_F(SharingTest, OneProcessAtATimeClaimsADownload) {
  auto a = testing::open_or_die(testing::test_options(dir_));
  auto b = testing::open_or_die(testing::test_options(dir_));  // another OFD: another process
  const auto id = testing::sha256_of(testing::make_bytes(10, 7));
  auto first = a->claim_download(id);
  ASSERT_TRUE(first && *first);
  auto second = b->claim_download(id);
  ASSERT_TRUE(second);
  EXPECT_FALSE(*second);  // held elsewhere
  const auto other = testing::sha256_of(testing::make_bytes(10, 8));
  auto unrelated = b->claim_download(other);
  ASSERT_TRUE(unrelated && *unrelated);
  first->reset();  // released
  auto third = b->claim_download(id);
  ASSERT_TRUE(third && *third);
}

TEST_F(SharingTest, ATieredCacheReadsTheLowerAndWritesTheUpper) {
  const auto good = testing::make_bytes(5000, 9);
  const auto good_id = testing::sha256_of(good);
  const auto bad_real = testing::make_bytes(5000, 10);
  const auto bad_id = testing::sha256_of(bad_real);
  const fs::path lower_dir = root_ / "lower";
  {
    auto c = testing::open_or_die(testing::test_options(lower_dir));
    testing::put_all(*c, good_id, good);
    ASSERT_TRUE(c->verify_content(good_id, good.size()));
    // A content whose blocks are not the bytes of its id (a bad image layer).
    testing::put_all(*c, bad_id, testing::make_bytes(5000, 11));
  }
  Options lo = testing::test_options(lower_dir, 0);
  lo.read_only = true;
  TieredCache t(testing::open_or_die(lo), testing::open_or_die(testing::test_options(dir_)));
  EXPECT_EQ(testing::read_all(t, good_id, good.size()), good);  // from the lower tier
  EXPECT_FALSE(t.content_state(testing::sha256_of(testing::make_bytes(1, 1))).value());
  // The bad lower content fails its hash: ignored, and downloaded into the upper tier.
  auto v = t.verify_content(bad_id, bad_real.size());
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().kind, CacheError::Kind::kCorrupt);
  EXPECT_FALSE(t.content_state(bad_id).value());  // the upper tier has nothing yet
  testing::put_all(t, bad_id, bad_real);
  EXPECT_EQ(testing::read_all(t, bad_id, bad_real.size()), bad_real);
  ASSERT_TRUE(t.put_listing("https://hub.example", "o/r", "c", "", testing::kPublic, {}));
  EXPECT_TRUE(t.get_listing("https://hub.example", "o/r", "c", "", testing::kPublicOnly).value());
}

TEST(LmdbError, ABadTxnIsNotCorruption) {
  // MDB_BAD_TXN is a txn this process may no longer use (after MDB_MAP_FULL, say): treating
  // it as a damaged store made `wheelhouse cache stats` move a live cache aside.
  EXPECT_FALSE((lmdb::Error{MDB_BAD_TXN, "x"}.is_corruption()));
  EXPECT_TRUE((lmdb::Error{MDB_CORRUPTED, "x"}.is_corruption()));
}

}  // namespace
}  // namespace whfs::cache
