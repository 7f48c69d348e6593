// A group-shared cache directory whose names a member of the group replaced: a symbolic link
// or a hard link to a file outside the cache, a FIFO, a directory. The process that opens the
// cache (a root daemon, in production) must neither change that other file nor hang: it opens
// the cache (having used nothing of the planted name's target) or refuses with one line.
// Also: the files' modes whatever the umask, a read-only tier's owner check, and the bounded
// waits of mark_suspect and close_clean.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>

#include "cache/block_cache.h"
#include "cache/session.h"
#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::TempDir;

enum class Plant { kSymlink, kFifo, kHardLink, kDirectory };
enum class When { kBeforeFirstOpen, kAfterFirstOpen };

const char* plant_name(Plant p) {
  switch (p) {
    case Plant::kSymlink:
      return "Symlink";
    case Plant::kFifo:
      return "Fifo";
    case Plant::kHardLink:
      return "HardLink";
    case Plant::kDirectory:
      return "Directory";
  }
  return "?";
}

void PrintTo(Plant p, std::ostream* os) { *os << plant_name(p); }
void PrintTo(When w, std::ostream* os) {
  *os << (w == When::kBeforeFirstOpen ? "before the first open" : "after the first open");
}

// The group the cache is shared with: one the victim file does not have (root may give files
// to any group; another user, to one of their own).
gid_t share_group() { return ::geteuid() == 0 ? 65534 : ::getegid(); }

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// What must not change about the victim file.
struct Snapshot {
  mode_t mode = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  off_t size = 0;
  std::int64_t mtime_ns = 0;
  std::string content;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return {st.st_mode & 07777,
          st.st_uid,
          st.st_gid,
          st.st_size,
          st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
          slurp(p)};
}

std::ostream& operator<<(std::ostream& os, const Snapshot& s) {
  return os << "mode " << std::oct << s.mode << std::dec << " uid " << s.uid << " gid " << s.gid
            << " size " << s.size << " mtime " << s.mtime_ns << " content '" << s.content << "'";
}

using PlantCase = std::tuple<std::string, Plant, When>;

class PlantedNameTest : public ::testing::TestWithParam<PlantCase> {
 protected:
  void SetUp() override {
    {
      // Empty under data.mdb's name: LMDB makes a new store in an empty file (and refuses to
      // parse one that is not LMDB), so that is the victim it would write.
      std::ofstream out(victim_);
      if (std::get<0>(GetParam()) != "data.mdb") {
        out << "a root-only file outside the cache: not to be touched\n";
      }
    }
    ASSERT_EQ(::chmod(victim_.c_str(), 0600), 0);
    const struct timespec old[2] = {{1600000000, 0}, {1600000000, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, victim_.c_str(), old, 0), 0);
    before_ = snapshot(victim_);
  }

  Options options() const {
    Options o = testing::test_options(dir_);
    o.access.group = share_group();
    o.open_timeout = 2000ms;
    return o;
  }

  void plant(const fs::path& at, Plant how) {
    std::error_code ec;
    fs::remove(at, ec);
    switch (how) {
      case Plant::kSymlink:
        fs::create_symlink(victim_, at);
        break;
      case Plant::kFifo:
        ASSERT_EQ(::mkfifo(at.c_str(), 0660), 0);
        break;
      case Plant::kHardLink:
        ASSERT_EQ(::link(victim_.c_str(), at.c_str()), 0) << std::strerror(errno);
        break;
      case Plant::kDirectory:
        fs::create_directory(at);
        std::ofstream(at / "inside") << "x";  // not empty: it cannot simply be removed
        break;
    }
  }

  // Opens the cache, stores and reads a content, closes it. Never waits on the FIFO for
  // long: a thread opens it for writing (which frees a reader blocked in open(2)) for as
  // long as the cache takes.
  void open_use_close(const fs::path& fifo) {
    std::atomic<bool> done{false};
    std::atomic<bool> unstuck{false};
    std::thread unsticker([&] {
      const auto start = std::chrono::steady_clock::now();
      while (!done) {
        std::this_thread::sleep_for(20ms);
        if (std::chrono::steady_clock::now() - start < 10s) continue;
        unstuck = true;
        // A reader frees a writer blocked in open(2); a writer, a reader.
        const int rd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
        const int wr = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
        std::this_thread::sleep_for(20ms);
        if (wr >= 0) ::close(wr);
        if (rd >= 0) ::close(rd);
      }
    });
    auto c = BlockCache::open(options());
    if (c) {
      const auto bytes = testing::make_bytes(5000, 7);
      const auto id = testing::sha256_of(bytes);
      testing::put_all(**c, id, bytes);
      EXPECT_EQ(testing::read_all(**c, id, bytes.size()), bytes);
      EXPECT_TRUE((*c)->flush());
      c->reset();
    } else {
      const std::string& m = c.error().message;
      EXPECT_FALSE(m.empty());
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      EXPECT_NE(m.find(std::get<0>(GetParam())), std::string::npos)
          << "the refusal names the planted file: " << m;
    }
    done = true;
    unsticker.join();
    EXPECT_FALSE(unstuck) << "opening the cache waited on a FIFO for more than 10 s";
  }

  TempDir root_;
  fs::path dir_ = root_ / "cache";
  fs::path victim_ = root_ / "victim";
  Snapshot before_;
};

TEST_P(PlantedNameTest, TheFileOutsideIsUntouchedAndTheOpenEndsWithinBounds) {
  const auto& [name, how, when] = GetParam();
  if (when == When::kAfterFirstOpen) {
    auto c = testing::open_or_die(options());
    const auto bytes = testing::make_bytes(3000, 1);
    testing::put_all(*c, testing::sha256_of(bytes), bytes);
  } else {
    // A fresh directory shared with the group, which a member prepared before the first open.
    fs::create_directories(dir_);
    ASSERT_EQ(::chown(dir_.c_str(), -1, share_group()), 0);
    ASSERT_EQ(::chmod(dir_.c_str(), 03770), 0);
  }
  plant(dir_ / name, how);
  open_use_close(dir_ / name);
  EXPECT_EQ(snapshot(victim_), before_) << "the victim file changed";
  EXPECT_EQ(mode_of(dir_), 03770u) << "a shared cache directory is sticky";
  // Opening again ends the same way (nothing left half-done).
  open_use_close(dir_ / name);
  EXPECT_EQ(snapshot(victim_), before_) << "the victim file changed";
}

INSTANTIATE_TEST_SUITE_P(
    EveryNameOfTheCache, PlantedNameTest,
    ::testing::Combine(::testing::Values("session.lock", "downloads.lock", "session", "session.tmp",
                                         "data.mdb", "lock.mdb"),
                       ::testing::Values(Plant::kSymlink, Plant::kFifo, Plant::kHardLink,
                                         Plant::kDirectory),
                       ::testing::Values(When::kBeforeFirstOpen, When::kAfterFirstOpen)),
    [](const ::testing::TestParamInfo<PlantCase>& param) {
      std::string n = std::get<0>(param.param);
      for (char& ch : n) {
        if (ch == '.') ch = '_';
      }
      return n + "_" + plant_name(std::get<1>(param.param)) +
             (std::get<2>(param.param) == When::kBeforeFirstOpen ? "_BeforeFirstOpen"
                                                                 : "_AfterFirstOpen");
    });

class CacheFileModeTest : public ::testing::Test {
 protected:
  TempDir root_;
  fs::path dir_ = root_ / "cache";
};

TEST_F(CacheFileModeTest, EveryFileOfASharedCacheIs0660OfTheGroupWhateverTheUmask) {
  for (const mode_t mask : {022, 077}) {
    SCOPED_TRACE(mask);
    std::error_code ec;
    fs::remove_all(dir_, ec);
    Options o = testing::test_options(dir_);
    o.access.group = share_group();
    const mode_t old = ::umask(mask);
    {
      auto c = testing::open_or_die(o);
      const auto bytes = testing::make_bytes(3000, 2);
      testing::put_all(*c, testing::sha256_of(bytes), bytes);
    }
    ::umask(old);
    EXPECT_EQ(mode_of(dir_), 03770u);
    for (const char* f : {"data.mdb", "lock.mdb", "session", "session.lock", "downloads.lock"}) {
      struct stat st {};
      ASSERT_EQ(::stat((dir_ / f).c_str(), &st), 0) << f;
      EXPECT_EQ(st.st_mode & 07777, 0660u) << f;
      EXPECT_EQ(st.st_gid, share_group()) << f;
    }
  }
}

TEST_F(CacheFileModeTest, AnOldSharedDirectoryIsMadeStickyByItsOwner) {
  Options o = testing::test_options(dir_);
  o.access.group = share_group();
  { auto c = testing::open_or_die(o); }
  ASSERT_EQ(::chmod(dir_.c_str(), 02770), 0);  // as an older version left it
  { auto c = testing::open_or_die(o); }
  EXPECT_EQ(mode_of(dir_), 03770u);
}

TEST(ReadOnlyTierOwner, ARootDaemonParsesOnlyADataFileOfRootOrOfItsGroup) {
  if (::geteuid() != 0) GTEST_SKIP() << "the owner check is a root daemon's";
  TempDir root;
  const fs::path dir = root / "lower";
  { auto c = testing::open_or_die(testing::test_options(dir)); }
  Options ro = testing::test_options(dir, 0);
  ro.read_only = true;
  const fs::path data = dir / "data.mdb";
  auto refused = [&](const Options& o, const char* what) {
    auto c = BlockCache::open(o);
    EXPECT_FALSE(c) << what;
    if (c) return;
    EXPECT_EQ(c.error().message.find('\n'), std::string::npos) << c.error().message;
    EXPECT_NE(c.error().message.find("data.mdb"), std::string::npos) << c.error().message;
  };
  EXPECT_TRUE(BlockCache::open(ro));  // root's own
  ASSERT_EQ(::chown(data.c_str(), 12345, 12345), 0);
  refused(ro, "owned by another user");
  Options grouped = ro;
  grouped.access.group = 12345;
  EXPECT_TRUE(BlockCache::open(grouped)) << "the group the cache is shared with";
  ASSERT_EQ(::chown(data.c_str(), 0, 0), 0);
  ASSERT_EQ(::chmod(data.c_str(), 0602), 0);
  refused(ro, "writable by everyone");
  ASSERT_EQ(::chmod(data.c_str(), 0600), 0);
  fs::rename(data, dir / "real.mdb");
  fs::create_symlink("real.mdb", data);
  refused(ro, "a symbolic link");
  fs::remove(data);
  ASSERT_EQ(::link((dir / "real.mdb").c_str(), data.c_str()), 0);
  refused(ro, "a hard link");
}

// A child process that holds the OFD write lock on the open/close gate (byte 0 of
// session.lock) and sleeps, as a daemon paused while it opened or closed the cache.
class GateHolder {
 public:
  explicit GateHolder(const fs::path& lock_file) {
    int ready[2];
    EXPECT_EQ(::pipe(ready), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(lock_file.c_str(), O_RDWR);
      struct flock fl {};
      fl.l_type = F_WRLCK;
      fl.l_whence = SEEK_SET;
      fl.l_start = 0;
      fl.l_len = 1;
      const bool ok = fd >= 0 && ::fcntl(fd, F_OFD_SETLKW, &fl) == 0;
      (void)!::write(ready[1], ok ? "y" : "n", 1);
      for (;;) ::sleep(1000);
    }
    ::close(ready[1]);
    char c = 0;
    EXPECT_EQ(::read(ready[0], &c, 1), 1);
    EXPECT_EQ(c, 'y');
    ::close(ready[0]);
  }
  ~GateHolder() { release(); }
  void release() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  GateHolder(const GateHolder&) = delete;
  GateHolder& operator=(const GateHolder&) = delete;

 private:
  pid_t pid_ = -1;
};

std::string first_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

// mark_suspect and close_clean wait for the gate at most the session's open_timeout, and
// then leave the record as it is.
TEST(SessionGate, MarkSuspectAndCloseCleanDoNotWaitForeverForAPausedProcess) {
  TempDir root;
  const fs::path dir = root / "cache";
  std::ofstream(root / "boot_id") << "boot-A\n";
  const Session::Config config{dir, root / "boot_id", 600s, DirAccess{}, 300ms};
  auto s = Session::acquire(config);
  ASSERT_TRUE(s) << s.error().message;
  ASSERT_TRUE(s->mark_open());
  ASSERT_EQ(first_line(dir / "session"), "wheelhouse-fs-session/1 boot-A open");
  GateHolder paused(dir / "session.lock");
  for (const char* what : {"mark_suspect", "close_clean"}) {
    SCOPED_TRACE(what);
    const auto start = std::chrono::steady_clock::now();
    auto call = std::async(std::launch::async, [&] {
      if (std::string(what) == "mark_suspect") {
        s->mark_suspect();
      } else {
        s->close_clean();
      }
    });
    const bool returned = call.wait_for(10s) == std::future_status::ready;
    EXPECT_TRUE(returned) << what << " waited for the paused process";
    if (!returned) {
      paused.release();  // lets the call finish, so that the test ends
      call.get();
      return;
    }
    call.get();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_EQ(first_line(dir / "session"), "wheelhouse-fs-session/1 boot-A open")
        << "left as it was";
  }
}

}  // namespace
}  // namespace whfs::cache
