#include "fs/targeting/root_fs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>

#include "tests/unit/targeting/fixtures.h"

namespace whfs::target {
namespace {

using testing::TempDir;
using testing::write_file;
namespace fs = std::filesystem;

// How paths are resolved: by the kernel's openat2, or, where openat2 is refused (a stand-in
// that fails as a kernel before 5.6 or a seccomp filter does), one name at a time.
enum class Resolver { kOpenat2, kEnosys, kEperm };

std::atomic<int> g_refused_calls{0};
long refuse_enosys(int, const char*, void*, std::size_t) {
  ++g_refused_calls;
  errno = ENOSYS;
  return -1;
}
long refuse_eperm(int, const char*, void*, std::size_t) {
  ++g_refused_calls;
  errno = EPERM;
  return -1;
}

// Sets the resolver for the test, and back after it.
class WithResolver {
 public:
  explicit WithResolver(Resolver r) {
    g_refused_calls = 0;
    set_openat2_for_testing(r == Resolver::kEnosys  ? refuse_enosys
                            : r == Resolver::kEperm ? refuse_eperm
                                                    : nullptr);
  }
  ~WithResolver() { set_openat2_for_testing(nullptr); }
  WithResolver(const WithResolver&) = delete;
  WithResolver& operator=(const WithResolver&) = delete;
};

std::string resolver_name(const ::testing::TestParamInfo<Resolver>& info) {
  switch (info.param) {
    case Resolver::kOpenat2:
      return "Openat2";
    case Resolver::kEnosys:
      return "WalkOnEnosys";
    case Resolver::kEperm:
      return "WalkOnEperm";
  }
  return "?";
}

// A folder standing for another process's root, with a secret outside it.
class RootFsTest : public ::testing::TestWithParam<Resolver> {
 protected:
  void SetUp() override {
    write_file(dir_.path() / "secret", "outside");
    write_file(dir_.path() / "root" / "etc" / "os-release", "inside");
    auto r = RootFs::open(dir_.str("root"));
    ASSERT_TRUE(r) << r.error();
    root_ = std::move(*r);
  }
  void TearDown() override {
    // The stand-in was asked: the walk answered, not the kernel's openat2.
    if (GetParam() != Resolver::kOpenat2) {
      EXPECT_GT(g_refused_calls.load(), 0);
    }
  }
  fs::path in(const std::string& p) const { return dir_.path() / "root" / p; }

  WithResolver resolver_{GetParam()};
  TempDir dir_;
  RootFs root_;
};

TEST_P(RootFsTest, ReadsInsideTheRoot) {
  EXPECT_EQ(root_.read_file("/etc/os-release", 100), "inside");
  EXPECT_EQ(root_.read_file("etc/os-release", 100), "inside");
  EXPECT_EQ(root_.read_head("/etc/os-release", 3), "ins");
  EXPECT_FALSE(root_.read_file("/etc/os-release", 3));  // larger than allowed
  EXPECT_FALSE(root_.read_file("/missing", 100));
  EXPECT_TRUE(root_.is_dir("/etc"));
  EXPECT_FALSE(root_.is_dir("/etc/os-release"));
  EXPECT_EQ(root_.list("/etc"), std::vector<std::string>{"os-release"});
}

// Whatever the process's files say, the daemon never reads outside the process's root:
// ".." stops at the root, and absolute or relative links resolve inside it.
TEST_P(RootFsTest, NeverEscapesTheRoot) {
  EXPECT_FALSE(root_.read_file("/../secret", 100));
  EXPECT_FALSE(root_.read_file("/etc/../../secret", 100));
  fs::create_symlink(dir_.str("secret"), in("abs"));  // the daemon's path to the secret
  fs::create_symlink("../../secret", in("etc/rel"));
  EXPECT_FALSE(root_.read_file("/abs", 100));
  EXPECT_FALSE(root_.read_file("/etc/rel", 100));
  // The same links that stay inside work.
  fs::create_symlink("/etc/os-release", in("good"));
  fs::create_symlink("../etc/os-release", in("etc/good2"));
  EXPECT_EQ(root_.read_file("/good", 100), "inside");
  EXPECT_EQ(root_.read_file("/etc/good2", 100), "inside");
  EXPECT_EQ(root_.resolve("/good"), "/etc/os-release");
  EXPECT_EQ(root_.resolve("/etc/rel"), std::nullopt);  // /secret does not exist in the root
  // /proc/self/... style magic links are not followed.
  fs::create_symlink("/proc/self/root/etc/passwd", in("magic"));
  EXPECT_FALSE(root_.read_file("/magic", 1 << 20));
}

TEST_P(RootFsTest, HostileFilesCannotStallOrFlood) {
  ASSERT_EQ(::mkfifo(in("fifo").c_str(), 0644), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(root_.read_file("/fifo", 100));  // never waits for a writer
  EXPECT_FALSE(root_.read_head("/fifo", 4));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  fs::create_symlink("loop2", in("loop1"));
  fs::create_symlink("loop1", in("loop2"));
  EXPECT_FALSE(root_.read_file("/loop1", 100));
  EXPECT_EQ(root_.resolve("/loop1"), std::nullopt);
  fs::create_directories(in("etc/dir.cfg"));
  EXPECT_FALSE(root_.read_file("/etc/dir.cfg", 100));
}

TEST_P(RootFsTest, StampsChangeWithTheFile) {
  const auto a = root_.stamp("/etc/os-release");
  ASSERT_TRUE(a);
  EXPECT_EQ(root_.stamp("/etc/os-release"), a);
  write_file(in("etc/os-release"), "inside, longer");
  EXPECT_NE(root_.stamp("/etc/os-release"), a);
  EXPECT_FALSE(root_.stamp("/missing"));
}

// The mount's own filesystem (here: /dev/shm's, standing for it) is never entered: not by a
// path, a symlink to it, a folder on the way, nor as the root itself; other mounts on the way
// are crossed as usual.
INSTANTIATE_TEST_SUITE_P(Resolvers, RootFsTest,
                         ::testing::Values(Resolver::kOpenat2, Resolver::kEnosys, Resolver::kEperm),
                         resolver_name);

class RootFsRefused : public ::testing::TestWithParam<Resolver> {
 protected:
  WithResolver resolver_{GetParam()};
};

TEST_P(RootFsRefused, APathIntoTheRefusedFilesystemIsNotFollowed) {
  struct stat shm {
  }, top{};
  if (::stat("/dev/shm", &shm) != 0 || ::stat("/", &top) != 0 || shm.st_dev == top.st_dev ||
      ::access("/dev/shm", W_OK) != 0) {
    GTEST_SKIP() << "needs a writable /dev/shm on a filesystem of its own";
  }
  const fs::path inside = fs::path("/dev/shm") / ("whfs-root-fs-" + std::to_string(::getpid()));
  fs::create_directories(inside / "venv" / "bin");
  write_file(inside / "venv" / "pyvenv.cfg", "home = /usr/bin\n");
  TempDir dir;
  fs::create_symlink(inside, dir.path() / "link");
  write_file(dir.path() / "plain", "plain");

  auto open = RootFs::open("/", shm.st_dev);
  ASSERT_TRUE(open) << open.error();
  const RootFs& root = *open;
  EXPECT_EQ(root.read_file(dir.str("plain"), 100), "plain");
  EXPECT_FALSE(root.met_refused());
  // /proc is another mount on the way, not the refused one: crossed as usual.
  EXPECT_TRUE(root.read_file("/proc/self/status", 1 << 20));
  EXPECT_FALSE(root.met_refused());
  EXPECT_FALSE(root.read_file((inside / "venv" / "pyvenv.cfg").string(), 100));
  EXPECT_TRUE(root.met_refused());
  EXPECT_FALSE(root.read_file(dir.str("link") + "/venv/pyvenv.cfg", 100));
  EXPECT_FALSE(root.is_dir(dir.str("link") + "/venv"));
  EXPECT_FALSE(root.stamp("/dev/shm"));
  EXPECT_TRUE(root.list("/dev/shm").empty());
  EXPECT_EQ(root.resolve(dir.str("link") + "/venv"), std::nullopt);
  // The same paths without a refused filesystem.
  auto plain = RootFs::open("/");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->read_file(dir.str("link") + "/venv/pyvenv.cfg", 100), "home = /usr/bin\n");
  // A root inside it is refused outright.
  const auto in_root = RootFs::open(inside.string(), shm.st_dev);
  ASSERT_FALSE(in_root);
  EXPECT_NE(in_root.error().find("inside this mount"), std::string::npos);
  fs::remove_all(inside);
}

INSTANTIATE_TEST_SUITE_P(Resolvers, RootFsRefused,
                         ::testing::Values(Resolver::kOpenat2, Resolver::kEnosys, Resolver::kEperm),
                         resolver_name);

TEST(NormalizePath, FoldsDotsAndSlashes) {
  EXPECT_EQ(normalize_path("/a/./b//c/../d"), "/a/b/d");
  EXPECT_EQ(normalize_path("/../.."), "/");
  EXPECT_EQ(normalize_path("a/b"), "/a/b");
  EXPECT_EQ(parent_of("/usr/bin/python3"), "/usr/bin");
  EXPECT_EQ(parent_of("/python3"), "/");
}

}  // namespace
}  // namespace whfs::target
