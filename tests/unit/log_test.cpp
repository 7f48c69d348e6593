// The daemon's log (fs/common/log.h): the recent problems kept for `wheelhouse status`, and its
// log file: created private, never through a link or in a folder others can change, rotated.
#include "fs/common/log.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace whfs {
namespace {

const Problem* find(const std::vector<Problem>& ps, const std::string& message) {
  for (const auto& p : ps) {
    if (p.message == message) return &p;
  }
  return nullptr;
}

TEST(LogTest, ARepeatedProblemIsOneEntryWithItsCount) {
  ASSERT_TRUE(setup_logging("info"));
  const auto lines_before = log_line_counts();
  for (int i = 0; i < 17; ++i) spdlog::warn("the cache is read-only: downloads stay in memory");
  spdlog::error("another problem");
  spdlog::info("not a problem");
  const auto ps = recent_problems();
  const Problem* ro = find(ps, "the cache is read-only: downloads stay in memory");
  ASSERT_NE(ro, nullptr);
  EXPECT_EQ(ro->count, 17u);
  EXPECT_EQ(ro->level, "warning");
  EXPECT_LE(ro->first, ro->last);
  EXPECT_EQ(find(ps, "not a problem"), nullptr);
  ASSERT_EQ(ps.back().message, "another problem");
  EXPECT_EQ(ps.back().level, "error");
  EXPECT_EQ(ps.back().count, 1u);
  // A repeat moves to the end: the list is in order of each problem's last time.
  spdlog::warn("the cache is read-only: downloads stay in memory");
  const auto again = recent_problems();
  EXPECT_EQ(again.back().message, "the cache is read-only: downloads stay in memory");
  EXPECT_EQ(again.back().count, 18u);
  const auto lines = log_line_counts();
  EXPECT_EQ(lines[spdlog::level::warn] - lines_before[spdlog::level::warn], 18u);
  EXPECT_EQ(lines[spdlog::level::info] - lines_before[spdlog::level::info], 1u);
}

TEST(LogTest, OnlyTheLastTwentyDistinctProblemsAreKept) {
  ASSERT_TRUE(setup_logging("info"));
  for (int i = 0; i < 30; ++i) spdlog::warn("problem {}", i);
  const auto ps = recent_problems();
  ASSERT_EQ(ps.size(), 20u);
  EXPECT_EQ(ps.front().message, "problem 10");
  EXPECT_EQ(ps.back().message, "problem 29");
}

}  // namespace
}  // namespace whfs

// ---- the daemon's own files: LogFile, OwnFolder ------------------------------------------

namespace whfs {
namespace {

namespace fsys = std::filesystem;

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

mode_t mode_of(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

class OwnFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/whfs-ownfile-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    victim_ = dir_ + "/victim";
    std::ofstream(victim_) << "root's secret\n";
    ::chmod(victim_.c_str(), 0600);
  }
  void TearDown() override { fsys::remove_all(dir_); }

  Expected<std::unique_ptr<LogFile>, std::string> open(const std::string& path,
                                                       std::uint64_t rotate_at = kLogRotateAt) {
    return LogFile::open(path, rotate_at, "log_file=" + path);
  }
  static void need_root() {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (files of another user are made)";
  }

  std::string dir_;
  std::string victim_;
};

TEST_F(OwnFileTest, ALogIsCreatedPrivateWhateverTheUmask) {
  const mode_t old = ::umask(0);
  auto f = open(dir_ + "/logs/wh.log");  // the missing folder is made, 0700
  ::umask(old);
  ASSERT_TRUE(f) << f.error();
  (*f)->write("a line\n");
  EXPECT_EQ(mode_of(dir_ + "/logs/wh.log"), 0600u);
  EXPECT_EQ(mode_of(dir_ + "/logs"), 0700u);
  EXPECT_EQ(slurp(dir_ + "/logs/wh.log"), "a line\n");
  // An existing log of this user is appended to.
  f->reset();
  auto again = open(dir_ + "/logs/wh.log");
  ASSERT_TRUE(again) << again.error();
  (*again)->write("another\n");
  EXPECT_EQ(slurp(dir_ + "/logs/wh.log"), "a line\nanother\n");
}

TEST_F(OwnFileTest, ALinkANonFileAndAnotherNameOfAFileAreRefused) {
  const std::string log = dir_ + "/wh.log";
  ASSERT_EQ(::symlink(victim_.c_str(), log.c_str()), 0);
  auto f = open(log);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error(), "log_file=" + log + ": it is a symbolic link (not followed)");
  ASSERT_EQ(::unlink(log.c_str()), 0);
  ASSERT_EQ(::link(victim_.c_str(), log.c_str()), 0);
  EXPECT_EQ(open(log).error(),
            "log_file=" + log + ": it has 2 hard links (another name could be anything)");
  ASSERT_EQ(::unlink(log.c_str()), 0);
  ASSERT_EQ(::mkfifo(log.c_str(), 0600), 0);  // opened without waiting for a reader
  EXPECT_EQ(open(log).error(), "log_file=" + log + ": it is not a regular file");
  ASSERT_EQ(::unlink(log.c_str()), 0);
  ASSERT_EQ(::mkdir(log.c_str(), 0700), 0);
  EXPECT_EQ(open(log).error(), "log_file=" + log + ": it is not a regular file");
  EXPECT_EQ(slurp(victim_), "root's secret\n");
  EXPECT_EQ(mode_of(victim_), 0600u);
  EXPECT_EQ(open("wh.log").error(), "log_file=wh.log: not an absolute path to a file");
}

TEST_F(OwnFileTest, AnotherUsersFileIsRefused) {
  need_root();
  const std::string log = dir_ + "/wh.log";
  std::ofstream(log) << "theirs\n";
  ASSERT_EQ(::chown(log.c_str(), 65534, 65534), 0);
  EXPECT_EQ(open(log).error(),
            "log_file=" + log + ": it belongs to uid 65534, not to this daemon's user (uid 0)");
  EXPECT_EQ(slurp(log), "theirs\n");
}

TEST_F(OwnFileTest, AFolderOthersCanChangeIsRefusedUnlessSticky) {
  need_root();
  const std::string open_dir = dir_ + "/open";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  auto f = open(open_dir + "/wh.log");
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error(), "log_file=" + open_dir + "/wh.log: folder " + open_dir +
                           " is not safe for a file of this daemon: other users can write in it "
                           "(mode 0777); give a folder that only this user or root can write (or "
                           "a sticky one, like /tmp)");
  EXPECT_FALSE(fsys::exists(open_dir + "/wh.log"));
  // A folder above it counts as much: it could be renamed away and replaced.
  ASSERT_EQ(::mkdir((open_dir + "/sub").c_str(), 0755), 0);
  EXPECT_NE(open(open_dir + "/sub/wh.log").error().find("folder " + open_dir + " is not safe"),
            std::string::npos);
  // Sticky, like /tmp: others may add names there, not take this user's away.
  ASSERT_EQ(::chmod(open_dir.c_str(), 01777), 0);
  auto sticky = open(open_dir + "/wh.log");
  ASSERT_TRUE(sticky) << sticky.error();
  // A folder of another user, even 0755: its owner can replace what it holds.
  const std::string theirs = dir_ + "/theirs";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  EXPECT_NE(open(theirs + "/wh.log")
                .error()
                .find("folder " + theirs +
                      " is not safe for a file of this daemon: it "
                      "belongs to uid 65534"),
            std::string::npos);
  // A link to a folder is followed here, and the folders it leads through are checked.
  ASSERT_EQ(::symlink(theirs.c_str(), (dir_ + "/via").c_str()), 0);
  EXPECT_NE(open(dir_ + "/via/wh.log").error().find("folder " + theirs + " is not safe"),
            std::string::npos);
  ASSERT_EQ(::symlink("open", (dir_ + "/rel").c_str()), 0);
  auto via = open(dir_ + "/rel/wh2.log");
  ASSERT_TRUE(via) << via.error();
  EXPECT_TRUE(fsys::exists(open_dir + "/wh2.log"));
}

TEST_F(OwnFileTest, RotationKeepsThreePrivateFiles) {
  const std::string log = dir_ + "/wh.log";
  auto f = open(log, 4096);
  ASSERT_TRUE(f) << f.error();
  const std::string line(99, 'x');
  std::uint64_t total = 0;
  for (int i = 0; i < 300; ++i) {
    (*f)->write(line + "\n");
    total += 100;
  }
  std::uint64_t kept = 0;
  for (const std::string name : {"wh.log", "wh.1.log", "wh.2.log", "wh.3.log"}) {
    SCOPED_TRACE(name);
    const std::string p = dir_ + "/" + name;
    ASSERT_TRUE(fsys::exists(p));
    EXPECT_EQ(mode_of(p), 0600u);
    EXPECT_LE(fsys::file_size(p), 4096u);
    kept += fsys::file_size(p);
  }
  EXPECT_FALSE(fsys::exists(dir_ + "/wh.4.log"));
  EXPECT_EQ(fsys::file_size(dir_ + "/wh.1.log"), 4000u);
  EXPECT_EQ(rotated_name("wheelhousefs.log", 2), "wheelhousefs.2.log");
  EXPECT_EQ(rotated_name("wh", 1), "wh.1");
  EXPECT_EQ(rotated_name(".log", 1), ".log.1");
  EXPECT_EQ(kept % 100, 0u);
  EXPECT_LT(kept, total);
  EXPECT_EQ((*f)->rotation_problem(), "");
}

TEST_F(OwnFileTest, RotationNeverFollowsALinkPlantedBetweenRotations) {
  const std::string log = dir_ + "/wh.log";
  auto f = open(log, 1000);
  ASSERT_TRUE(f) << f.error();
  const std::string line(99, 'y');
  for (int i = 0; i < 15; ++i) (*f)->write(line + "\n");
  ASSERT_TRUE(fsys::exists(dir_ + "/wh.1.log"));
  // Links planted at an old log's name and, once the log is moved away, at the log's own name.
  ASSERT_EQ(::symlink(victim_.c_str(), (dir_ + "/wh.2.log").c_str()), 0);
  ASSERT_EQ(::rename(log.c_str(), (dir_ + "/moved").c_str()), 0);
  ASSERT_EQ(::symlink(victim_.c_str(), log.c_str()), 0);
  for (int i = 0; i < 15; ++i) (*f)->write(line + "\n");
  EXPECT_EQ((*f)->rotation_problem(), log + ": it is a symbolic link (not followed)");
  EXPECT_EQ(slurp(victim_), "root's secret\n");
  EXPECT_EQ(mode_of(victim_), 0600u);
  // The lines went on to the file open until then, with one line saying why.
  EXPECT_NE(slurp(dir_ + "/moved")
                .find("cannot rotate the log: " + log + ": it is a symbolic link (not followed)"),
            std::string::npos);
  // Once the name is free again, the next rotation makes a new private log there.
  ASSERT_EQ(::unlink(log.c_str()), 0);
  for (int i = 0; i < 15; ++i) (*f)->write(line + "\n");
  EXPECT_EQ((*f)->rotation_problem(), "");
  EXPECT_FALSE(fsys::is_symlink(log));
  EXPECT_EQ(mode_of(log), 0600u);
  EXPECT_EQ(slurp(victim_), "root's secret\n");
}

TEST_F(OwnFileTest, ADetachedDaemonLogsThroughItsLogFile) {
  ASSERT_TRUE(setup_logging("info"));
  auto f = open(dir_ + "/wh.log");
  ASSERT_TRUE(f) << f.error();
  auto where = log_detached(std::move(*f), "");
  ASSERT_TRUE(where) << where.error();
  EXPECT_EQ(*where, dir_ + "/wh.log");
  spdlog::info("through the own file sink");
  EXPECT_NE(slurp(dir_ + "/wh.log").find("info ["), std::string::npos);
  EXPECT_NE(slurp(dir_ + "/wh.log").find("through the own file sink\n"), std::string::npos);
  ASSERT_TRUE(setup_logging("info"));  // back to stderr for the other tests
}

}  // namespace
}  // namespace whfs
