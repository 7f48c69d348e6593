// Crash and power-loss bookkeeping, damaged stores, and the format record.

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>

#include "cache/block_cache.h"
#include "cache/lmdb.h"
#include "cache/records.h"
#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// The first line, with its newline.
std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line + "\n";
}

void write_file(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

class SessionTest : public ::testing::Test {
 protected:
  SessionTest() { set_boot("boot-A"); }
  void set_boot(const std::string& id) { write_file(root_ / "boot_id", id + "\n"); }
  Options options() {
    Options o = testing::test_options(dir_);
    o.boot_id_file = root_ / "boot_id";
    return o;
  }
  // A cache with one content in it, closed cleanly; returns the content.
  std::pair<ContentId, std::vector<std::byte>> populate() {
    auto c = testing::open_or_die(options());
    auto bytes = testing::make_bytes(20 * c->block_size(), 1);
    const auto id = testing::sha256_of(bytes);
    testing::put_all(*c, id, bytes);
    EXPECT_TRUE(c->verify_content(id, bytes.size()).value().verified);
    return {id, bytes};
  }
  // What a power loss leaves behind: the store was open (never closed) in another boot.
  void simulate_unclean_reboot() {
    write_file(dir_ / "session", "wheelhouse-fs-session/1 boot-A open\n");
    set_boot("boot-B");
  }
  void scribble(std::size_t first_page, std::size_t pages) {
    std::fstream f(dir_ / "data.mdb", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(first_page * 4096));
    const auto junk = testing::make_bytes(pages * 4096, 99);
    f.write(reinterpret_cast<const char*>(junk.data()), static_cast<std::streamsize>(junk.size()));
  }
  std::vector<fs::path> moved_aside() {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(root_.path())) {
      if (e.path().filename().string().starts_with("cache.corrupt-")) out.push_back(e.path());
    }
    return out;
  }

  TempDir root_;
  fs::path dir_ = root_ / "cache";
};

TEST_F(SessionTest, CleanCloseIsRecorded) {
  {
    auto c = testing::open_or_die(options());
    EXPECT_EQ(read_file(dir_ / "session"), "wheelhouse-fs-session/1 boot-A open\n");
  }
  EXPECT_EQ(read_file(dir_ / "session"), "wheelhouse-fs-session/1 boot-A clean\n");
}

TEST_F(SessionTest, GarbageMetaPagesAfterPowerLossStartAnEmptyCache) {
  const auto [id, bytes] = populate();
  simulate_unclean_reboot();
  scribble(0, 2);  // both meta pages
  auto c = BlockCache::open(options());
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_FALSE((*c)->content_state(id).value());
  const auto aside = moved_aside();
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_TRUE(fs::exists(aside[0] / "data.mdb"));
  // The new cache works.
  testing::put_all(**c, id, bytes);
  EXPECT_EQ(testing::read_all(**c, id, bytes.size()), bytes);
}

TEST_F(SessionTest, GarbageDataPagesAfterPowerLossStartAnEmptyCache) {
  const auto [id, bytes] = populate();
  simulate_unclean_reboot();
  const auto pages = fs::file_size(dir_ / "data.mdb") / 4096;
  scribble(2, pages - 2);  // every page but the meta pages
  auto c = BlockCache::open(options());
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_FALSE((*c)->content_state(id).value());
  EXPECT_EQ(moved_aside().size(), 1u);
}

TEST_F(SessionTest, UncleanRebootWithIntactStoreKeepsIt) {
  const auto [id, bytes] = populate();
  simulate_unclean_reboot();
  auto c = testing::open_or_die(options());
  EXPECT_EQ(testing::read_all(*c, id, bytes.size()), bytes);
  EXPECT_TRUE(c->content_state(id).value()->verified);
  EXPECT_TRUE(moved_aside().empty());
  EXPECT_EQ(read_file(dir_ / "session"), "wheelhouse-fs-session/1 boot-B open\n");
}

// A cache directory that cannot be renamed (a mount point) has its damaged files moved into a
// directory inside it, named by the time and pid: one that someone put there beforehand (a
// link to a directory elsewhere) is not used.
TEST_F(SessionTest, DamagedFilesAreNeverMovedThroughAPlantedLink) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make the cache directory a mount point";
  populate();
  simulate_unclean_reboot();
  scribble(0, 2);
  if (::mount(dir_.c_str(), dir_.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    GTEST_SKIP() << "cannot bind-mount: " << std::strerror(errno);
  }
  struct Unmount {
    fs::path dir;
    ~Unmount() { ::umount2(dir.c_str(), MNT_DETACH); }
  } unmount{dir_};
  // A directory a member of the group made (on the same mount: a rename can reach it).
  const fs::path elsewhere = dir_ / "members-own";
  fs::create_directories(elsewhere);
  // Every name the next seconds could give (corrupt-<UTC time>-<pid>) is a link to it.
  const std::time_t now = std::time(nullptr);
  for (std::time_t t = now - 2; t < now + 30; ++t) {
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
    fs::create_directory_symlink(
        elsewhere, dir_ / ("corrupt-" + std::string(buf) + "-" + std::to_string(::getpid())));
  }
  auto c = BlockCache::open(options());
  if (!c) {
    EXPECT_EQ(c.error().message.find('\n'), std::string::npos) << c.error().message;
    EXPECT_NE(c.error().message.find("cannot move the damaged cache"), std::string::npos)
        << c.error().message;
  }
  EXPECT_TRUE(fs::is_empty(elsewhere)) << "files were moved through a planted link";
}

TEST_F(SessionTest, DamageLmdbSeesAtOpenIsMovedAsideEvenAfterACleanClose) {
  populate();
  scribble(0, 2);
  auto c = BlockCache::open(options());
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(moved_aside().size(), 1u);
}

TEST_F(SessionTest, UnknownFormatIsAClearError) {
  populate();
  testing::put_raw(dir_, kMetaDb, kFormatKey,
                   encode(FormatRecord{"wheelhouse-fs-cache/99", 0, 0, 0}));
  auto c = BlockCache::open(options());
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().kind, CacheError::Kind::kFormat);
  EXPECT_NE(c.error().message.find(dir_.string()), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("wheelhouse-fs-cache/99"), std::string::npos);
  EXPECT_NE(c.error().message.find("wheelhouse cache clear --cache-dir " + dir_.string()),
            std::string::npos);
  EXPECT_TRUE(moved_aside().empty());  // not ours to destroy
  ASSERT_TRUE(BlockCache::remove_store(dir_));
  auto fresh = BlockCache::open(options());
  ASSERT_TRUE(fresh) << fresh.error().message;
}

TEST_F(SessionTest, ForeignLmdbStoreIsAFormatError) {
  {
    auto env = lmdb::Env::open((fs::create_directories(dir_), dir_.string()), {.max_dbs = 4});
    ASSERT_TRUE(env);
    auto txn = lmdb::Txn::begin(*env, 0);
    auto main_db = txn->open_dbi(nullptr, 0);
    ASSERT_TRUE(main_db);
    ASSERT_TRUE(txn->put(*main_db, lmdb::as_bytes("meta"), lmdb::as_bytes("not a db")));
    ASSERT_TRUE(txn->commit());
  }
  write_file(dir_ / "session", "wheelhouse-fs-session/1 boot-A clean\n");
  auto c = BlockCache::open(options());
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().kind, CacheError::Kind::kFormat) << c.error().message;
}

TEST_F(SessionTest, RemoveStoreRefusesWhileInUse) {
  auto c = testing::open_or_die(options());
  EXPECT_FALSE(BlockCache::remove_store(dir_));
  c.reset();
  EXPECT_TRUE(BlockCache::remove_store(dir_));
  EXPECT_FALSE(fs::exists(dir_ / "data.mdb"));
}

TEST_F(SessionTest, RejectsBadOptions) {
  Options o = options();
  o.cap_bytes = 1000;
  EXPECT_EQ(BlockCache::open(o).error().kind, CacheError::Kind::kInvalidArgument);
  o = options();
  o.low_water_percent = 95;
  EXPECT_EQ(BlockCache::open(o).error().kind, CacheError::Kind::kInvalidArgument);
  o = options();
  o.dir.clear();
  EXPECT_EQ(BlockCache::open(o).error().kind, CacheError::Kind::kInvalidArgument);
}

TEST_F(SessionTest, CapIsStoredAndFollowedByOpenersWithout) {
  {
    Options o = options();
    o.cap_bytes = 3 << 20;
    testing::open_or_die(o);
  }
  Options keep = options();
  keep.cap_bytes = 0;
  auto c = testing::open_or_die(keep);
  EXPECT_EQ(c->stats()->cap_bytes, 3u << 20);
}

}  // namespace
}  // namespace whfs::cache
