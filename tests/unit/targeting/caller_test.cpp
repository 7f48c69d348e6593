#include "fs/targeting/caller.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include "fs/targeting/root_fs.h"
#include "tests/unit/targeting/fixtures.h"

namespace whfs::target {
namespace {

using testing::ScopedEnv;
using testing::Sleeper;
using testing::TempDir;
using testing::write_file;

// Waits until the child runs `name` (after its exec).
void wait_for_exe(pid_t pid, const std::string& name) {
  for (int i = 0; i < 500; ++i) {
    if (auto id = read_identity(pid); id && id->exe.ends_with("/" + name)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "process " << pid << " never ran " << name;
}

TEST(Caller, ReadsOnlyTheVariablesThatDecideTheTarget) {
  const Sleeper c({"PATH=/usr/bin:/bin", "VIRTUAL_ENV=/work/venv", "CUDA_VISIBLE_DEVICES=1",
                   "HF_TOKEN=hf_secret", "HOME=/home/u"});
  const auto p = read_caller(c.pid());
  ASSERT_TRUE(p) << p.error();
  EXPECT_EQ(p->exe_name, "sleep");
  EXPECT_EQ(p->argv, (std::vector<std::string>{"/bin/sleep", "60"}));
  EXPECT_EQ(p->var("VIRTUAL_ENV"), "/work/venv");
  EXPECT_EQ(p->var("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(p->var("HOME"), "/home/u");
  EXPECT_FALSE(p->var("HF_TOKEN"));  // never kept
  EXPECT_TRUE(p->own_root);
  EXPECT_EQ(p->root_dir, "/");
  EXPECT_EQ(p->credentials.uid, ::getuid());
  EXPECT_GT(p->start_time, 0u);
  EXPECT_FALSE(read_caller(999999999));
}

TEST(Caller, AnExecChangesTheIdentityAndAPidIsNeverConfused) {
  // fork + exec keeps the pid and the start time, not what runs.
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::usleep(300000);
    ::execl("/bin/sleep", "sleep", "60", nullptr);
    ::_exit(127);
  }
  const auto before = read_identity(pid);
  ASSERT_TRUE(before);
  wait_for_exe(pid, "sleep");
  const auto after = read_identity(pid);
  ASSERT_TRUE(after);
  EXPECT_EQ(before->start_time, after->start_time);
  EXPECT_NE(before->exe, after->exe);
  EXPECT_FALSE(*before == *after);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_FALSE(read_identity(pid));
}

TEST(Caller, SplitNul) {
  EXPECT_EQ(split_nul(std::string("a\0b\0", 4)), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(split_nul(""), std::vector<std::string>{});
}

// A root daemon reads a user's files with that user's rights, on this thread only.
TEST(ActAs, TheUsersRightsNotRoots) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  TempDir dir;
  ::chmod(dir.str().c_str(), 0755);
  write_file(dir.path() / "private" / "pyvenv.cfg", "version = 3.12\n");
  ::chmod(dir.str("private").c_str(), 0700);
  write_file(dir.path() / "group.cfg", "shared\n");
  ::chmod(dir.str("group.cfg").c_str(), 0640);
  ASSERT_EQ(::chown(dir.str("group.cfg").c_str(), 0, 4242), 0);
  auto root = RootFs::open("/");
  ASSERT_TRUE(root);
  const std::string secret = dir.str("private/pyvenv.cfg");
  ASSERT_TRUE(root->read_file(secret, 100));
  // Another thread of the daemon, started before: it keeps root's rights meanwhile.
  std::promise<void> go;
  std::future<bool> other = std::async(std::launch::async, [&] {
    go.get_future().wait();
    return root->read_file(secret, 100).has_value();
  });
  {
    const ActAs nobody(Credentials{65534, 65534, {}});
    ASSERT_TRUE(nobody.ok());
    EXPECT_FALSE(root->read_file(secret, 100));
    EXPECT_FALSE(root->stamp(secret));  // not even whether it exists
    EXPECT_FALSE(root->read_file(dir.str("group.cfg"), 100));
    go.set_value();
    EXPECT_TRUE(other.get());
  }
  {
    const ActAs member(Credentials{65534, 65534, {4242}});
    EXPECT_EQ(root->read_file(dir.str("group.cfg"), 100), "shared\n");
  }
  EXPECT_TRUE(root->read_file(secret, 100));  // back to root's rights
  {
    const ActAs same_as_root(Credentials{0, 0, {}});  // root callers: nothing changes
    EXPECT_TRUE(root->read_file(secret, 100));
  }
}

}  // namespace
}  // namespace whfs::target
