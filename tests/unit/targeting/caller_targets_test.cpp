// The target of whoever asks: real processes with fake venvs (interpreters that are copies of
// /bin/true, pyvenv.cfg files and torch/version.py files), and a GPU report made by hand.
#include "fs/targeting/caller_targets.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

#include "tests/unit/targeting/fixtures.h"

namespace whfs::target {
namespace {

using testing::Sleeper;
using testing::TempDir;
using testing::write_torch;
using testing::write_venv;
namespace fs = std::filesystem;

GpuReport two_gpus() {
  GpuReport r;
  r.api = GpuApi::kRuntime;
  r.library = "libcudart.so.12";
  GpuDevice a;
  a.index = 0;
  a.major = 8;
  a.minor = 9;
  GpuDevice b = a;
  b.index = 1;
  b.minor = 6;
  r.devices = {a, b};
  return r;
}

class CallerTargetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::chmod(dir_.str().c_str(), 0755);
    // A 3.12 venv with torch 2.9 (CUDA 12.8) and a 3.11 venv with torch 2.7 (CUDA 12.6).
    write_venv(dir_.path() / "a", "3.12.4", "/usr/bin", false);
    write_torch(dir_.path() / "a/lib/python3.12/site-packages", "2.9.0+cu128", "12.8");
    write_venv(dir_.path() / "b", "3.11.2", "/usr/bin", false);
    write_torch(dir_.path() / "b/lib/python3.11/site-packages", "2.7.1+cu126", "12.6");
  }

  std::vector<std::string> env(const std::string& venv, std::vector<std::string> more = {}) {
    more.push_back("VIRTUAL_ENV=" + dir_.str(venv));
    more.push_back("PATH=" + dir_.str(venv) + "/bin:/usr/bin:/bin");
    return more;
  }

  // A deadline no loaded machine reaches (sanitizers, parallel tests), unless a test sets one.
  CallerTargets make(CallerTargetsConfig config = {}) {
    if (config.deadline == CallerTargetsConfig{}.deadline)
      config.deadline = std::chrono::minutes(2);
    return CallerTargets(std::move(config), two_gpus(), host_platform());
  }

  TempDir dir_;
};

TEST_F(CallerTargetsTest, EachProcessItsOwnVenvAndGpus) {
  auto targets = make();
  const Sleeper a(env("a", {"CUDA_VISIBLE_DEVICES=0"}));
  const Sleeper b(env("b", {"CUDA_VISIBLE_DEVICES=1"}));
  const Sleeper both(env("a"));
  const auto ra = targets.resolve(a.pid());
  EXPECT_EQ(ra->key, "sm89-torch2.9-cu128-cp312") << ra->why_unresolved;
  EXPECT_EQ(ra->caller["interpreter"], dir_.str("a") + "/bin/python3");
  EXPECT_EQ(ra->caller["interpreter_why"], "$VIRTUAL_ENV is " + dir_.str("a"));
  EXPECT_EQ(ra->target.torch.source, "torch 2.9.0+cu128 (" + dir_.str("a") +
                                         "/lib/python3.12/site-packages/torch/version.py)");
  EXPECT_EQ(targets.resolve(b.pid())->key, "sm86-torch2.7-cu126-cp311");
  const auto rboth = targets.resolve(both.pid());
  EXPECT_EQ(rboth->key, "sm86+sm89-torch2.9-cu128-cp312");
  ASSERT_FALSE(rboth->target.notes.empty());
  EXPECT_NE(rboth->target.notes.back().find("runs on all of them"), std::string::npos);
}

TEST_F(CallerTargetsTest, WhyThereIsNone) {
  auto targets = make();
  const Sleeper no_python({"PATH=/nowhere"});
  auto r = targets.resolve(no_python.pid());
  EXPECT_EQ(r->key, CallerTargets::kUnresolved);
  EXPECT_EQ(r->why_unresolved, "no Python interpreter: no python3 on the process's PATH (/nowhere)")
      << r->caller.dump() << " (pid " << no_python.pid() << ")";
  const Sleeper no_gpu(env("a", {"CUDA_VISIBLE_DEVICES="}));
  r = targets.resolve(no_gpu.pid());
  EXPECT_EQ(r->key, CallerTargets::kUnresolved);
  EXPECT_EQ(r->why_unresolved, "CUDA_VISIBLE_DEVICES=\"\" leaves no device") << r->caller.dump();
  r = targets.resolve(0);
  EXPECT_EQ(r->key, CallerTargets::kUnresolved);
  EXPECT_NE(r->why_unresolved.find("PID namespace"), std::string::npos);
  EXPECT_EQ(targets.stats().unresolved, 3u);
}

// One reading of a venv's files serves every process that uses it, and a torch installed or
// changed in it shows within a recheck.
TEST_F(CallerTargetsTest, OneReadingPerInterpreterUntilItsFilesChange) {
  CallerTargetsConfig config;
  config.recheck = std::chrono::milliseconds(0);  // check the stamps on every answer
  auto targets = make(config);
  {
    std::vector<std::unique_ptr<Sleeper>> many;
    for (int i = 0; i < 20; ++i) many.push_back(std::make_unique<Sleeper>(env("a")));
    for (const auto& s : many) {
      for (int i = 0; i < 50; ++i) {
        ASSERT_EQ(targets.resolve(s->pid())->key, "sm86+sm89-torch2.9-cu128-cp312");
      }
    }
  }
  auto s = targets.stats();
  EXPECT_EQ(s.resolves, 1000u);
  EXPECT_EQ(s.interpreter_reads, 1u);
  EXPECT_EQ(s.interpreter_hits, 999u);
  // torch is downgraded in place (a new file: pip replaces it).
  const Sleeper a(env("a"));
  const auto version_py = dir_.path() / "a/lib/python3.12/site-packages/torch/version.py";
  fs::remove(version_py);
  write_torch(dir_.path() / "a/lib/python3.12/site-packages", "2.8.0+cu128", "12.8");
  EXPECT_EQ(targets.resolve(a.pid())->key, "sm86+sm89-torch2.8-cu128-cp312");
  // ... and removed: its folder changed.
  fs::remove_all(dir_.path() / "a/lib/python3.12/site-packages/torch");
  const auto gone = targets.resolve(a.pid());
  EXPECT_EQ(gone->key, CallerTargets::kUnresolved);
  EXPECT_NE(gone->why_unresolved.find("torch not found"), std::string::npos);
  EXPECT_EQ(targets.stats().interpreter_reads, 3u);
}

TEST_F(CallerTargetsTest, ThePerProcessCacheAnswersWithoutReading) {
  auto targets = make();  // recheck 1 s
  const Sleeper a(env("a"));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) targets.resolve(a.pid());
  const auto warm = std::chrono::steady_clock::now() - start;
  const auto s = targets.stats();
  EXPECT_EQ(s.interpreter_reads, 1u);
  EXPECT_GE(s.process_hits, 990u);
  std::printf("1000 answers for one process: %.1f us each\n",
              std::chrono::duration<double, std::micro>(warm).count() / 1000);
}

// The files of a user's venv are read with that user's rights: a venv only root can read is
// no venv for another user, and reading it does not tell them what is in it.
TEST_F(CallerTargetsTest, ReadsAsTheCallersUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  ::chmod(dir_.str("a").c_str(), 0700);
  auto targets = make();
  const Sleeper as_root(env("a"));
  EXPECT_EQ(targets.resolve(as_root.pid())->key, "sm86+sm89-torch2.9-cu128-cp312");
  const Sleeper as_nobody(env("a"), 65534);
  const auto r = targets.resolve(as_nobody.pid());
  EXPECT_EQ(r->key, CallerTargets::kUnresolved);
  EXPECT_NE(r->why_unresolved.find("has no bin/python3"), std::string::npos) << r->why_unresolved;
  // The same venv, readable: nobody gets it too (its own reading, under its own user).
  ::chmod(dir_.str("a").c_str(), 0755);
  const Sleeper again(env("a"), 65534);
  EXPECT_EQ(targets.resolve(again.pid())->key, "sm86+sm89-torch2.9-cu128-cp312");
}

TEST_F(CallerTargetsTest, OverridesFixTheirAxisForEveryone) {
  CallerTargetsConfig config;
  config.overrides.arch = "sm90";
  config.overrides.cuda = "12.6";
  auto targets = make(config);
  const Sleeper a(env("a"));
  const Sleeper b(env("b"));
  EXPECT_EQ(targets.resolve(a.pid())->key, "sm90-torch2.9-cu126-cp312");
  EXPECT_EQ(targets.resolve(b.pid())->key, "sm90-torch2.7-cu126-cp311");
  // python= fixes the interpreter for every process.
  config.overrides.python = dir_.str("b") + "/bin/python3";
  auto fixed = make(config);
  EXPECT_EQ(fixed.resolve(a.pid())->key, "sm90-torch2.7-cu126-cp311");
  EXPECT_EQ(fixed.resolve(a.pid())->caller["interpreter_why"], "the mount's python= option");
  // current=mount: one target, whoever asks.
  CallerTargetsConfig mount;
  mount.per_caller = false;
  mount.overrides.python = dir_.str("a") + "/bin/python3";
  auto one = make(mount);
  EXPECT_EQ(one.resolve(b.pid())->key, one.resolve(0)->key);
  EXPECT_EQ(one.resolve(b.pid())->key, "sm86+sm89-torch2.9-cu128-cp312");
}

// Where openat2(2) is refused (a kernel before 5.6; systemd's RestrictSUIDSGID= filter), a
// process's files are still read: its venv and torch, as with openat2.
TEST_F(CallerTargetsTest, WithoutOpenat2ACallerIsStillResolved) {
  set_openat2_for_testing([](int, const char*, void*, std::size_t) -> long {
    errno = ENOSYS;
    return -1;
  });
  auto targets = make();
  const Sleeper a(env("a", {"CUDA_VISIBLE_DEVICES=0"}));
  const auto r = targets.resolve(a.pid());
  set_openat2_for_testing(nullptr);
  EXPECT_EQ(r->key, "sm89-torch2.9-cu128-cp312") << r->why_unresolved;
}

// FUSE request threads ask at once, for the same and for different processes, while a refresh
// replaces the GPUs (run under TSan in CI).
TEST_F(CallerTargetsTest, ManyThreadsAtOnce) {
  CallerTargetsConfig config;
  config.recheck = std::chrono::milliseconds(0);
  config.max_processes = 2;  // the per-process cache overflows all the time
  auto targets = make(config);
  const Sleeper a(env("a", {"CUDA_VISIBLE_DEVICES=0"}));
  const Sleeper b(env("b", {"CUDA_VISIBLE_DEVICES=0"}));
  const Sleeper c(env("b", {"CUDA_VISIBLE_DEVICES=1"}));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        if (targets.resolve(a.pid())->key != "sm89-torch2.9-cu128-cp312") ++wrong;
        if (targets.resolve(b.pid())->key != "sm89-torch2.7-cu126-cp311") ++wrong;
        if (targets.resolve(c.pid())->key != "sm86-torch2.7-cu126-cp311") ++wrong;
        if (t == 0 && i % 10 == 0) targets.set_gpus(two_gpus());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(targets.stats().processes, 2u);
}

TEST_F(CallerTargetsTest, NewGpusDropCachedAnswers) {
  auto targets = make();
  const Sleeper a(env("a"));
  EXPECT_EQ(targets.resolve(a.pid())->key, "sm86+sm89-torch2.9-cu128-cp312");
  GpuReport one = two_gpus();
  one.devices.pop_back();
  targets.set_gpus(one);
  EXPECT_EQ(targets.resolve(a.pid())->key, "sm89-torch2.9-cu128-cp312");
  const auto j = targets.status_json();
  EXPECT_EQ(j["mode"], "per-caller");
  EXPECT_EQ(j["gpus"].size(), 1u);
  EXPECT_FALSE(j.dump().find(dir_.str("a")) != std::string::npos);  // no process's details
}

// A fake /proc whose processes' environments are FIFOs nobody writes: reading one waits, as a
// read on a hung filesystem would.
class HungProc {
 public:
  explicit HungProc(const fs::path& dir) : dir_(dir) {}
  void add(pid_t pid) {
    const fs::path p = dir_ / std::to_string(pid);
    fs::create_directories(p);
    std::string stat = std::to_string(pid) + " (sleep) S";
    for (int i = 0; i < 49; ++i) stat += " " + std::to_string(i == 18 ? 4242 : 1);
    testing::write_file(p / "stat", stat + "\n");
    fs::create_symlink("/usr/bin/sleep", p / "exe");
    ASSERT_EQ(::mkfifo((p / "environ").c_str(), 0600), 0);
  }
  // Lets every reading go on (a writer comes and goes: the readers see the end of the file).
  void release(pid_t pid) {
    const int fd = ::open((dir_ / std::to_string(pid) / "environ").c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }

 private:
  fs::path dir_;
};

// A request waits at most the deadline for a process's files, one user has a bound on its
// readings under way, and another user is not held by it.
TEST_F(CallerTargetsTest, AHungReadingCostsTheDeadlineAndOneUserItsOwnBound) {
  HungProc proc(dir_.path() / "proc");
  for (pid_t pid = 1000; pid < 1010; ++pid) proc.add(pid);
  CallerTargetsConfig config;
  config.proc = dir_.str("proc");
  config.deadline = std::chrono::milliseconds(200);
  config.max_in_flight_per_uid = 4;
  auto targets = make(config);
  const auto start = std::chrono::steady_clock::now();
  for (pid_t pid = 1000; pid < 1004; ++pid) {
    const auto r = targets.resolve(pid, 7);
    EXPECT_EQ(r->key, CallerTargets::kUnresolved);
    EXPECT_NE(r->why_unresolved.find("took longer than 0.2 s"), std::string::npos)
        << r->why_unresolved;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  // The same process again is answered from its reading under way without a second wait (one
  // deadline per process: a path walk asks twice), then the bound; the counts below say that
  // neither waited (timed_out counts each wait).
  EXPECT_NE(targets.resolve(1000, 7)->why_unresolved.find("took longer"), std::string::npos);
  const auto refused = targets.resolve(1004, 7);
  EXPECT_NE(refused->why_unresolved.find("user 7 already has 4 detections under way"),
            std::string::npos)
      << refused->why_unresolved;
  // Another user is not refused for it.
  EXPECT_NE(targets.resolve(1005, 8)->why_unresolved.find("took longer"), std::string::npos);
  auto s = targets.stats();
  EXPECT_EQ(s.in_flight, 5u);
  EXPECT_EQ(s.refused, 1u);
  EXPECT_EQ(s.timed_out, 5u);
  // When the filesystem answers, the readings end and their answers are kept.
  for (pid_t pid = 1000; pid < 1010; ++pid) proc.release(pid);
  for (int i = 0; i < 200 && targets.stats().in_flight != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(targets.stats().in_flight, 0u);
  const auto later = targets.resolve(1004, 7);
  EXPECT_EQ(later->why_unresolved.find("detections under way"), std::string::npos);
}

// A reading left behind on a hung filesystem does not outlive what it uses: the object can go
// (at unmount) while it waits.
TEST_F(CallerTargetsTest, AReadingLeftBehindOutlivesNothing) {
  HungProc proc(dir_.path() / "proc");
  proc.add(2000);
  {
    CallerTargetsConfig config;
    config.proc = dir_.str("proc");
    config.deadline = std::chrono::milliseconds(50);
    auto targets = make(config);
    EXPECT_EQ(targets.resolve(2000, 7)->key, CallerTargets::kUnresolved);
  }
  proc.release(2000);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // ASan: no use after free
}

// One user's processes do not push everyone else's out of the per-process cache.
TEST_F(CallerTargetsTest, TheCachesAreSharedOutPerUser) {
  CallerTargetsConfig config;
  config.max_processes_per_uid = 2;
  auto targets = make(config);
  const Sleeper a(env("a"));
  const Sleeper b(env("b"));
  const Sleeper c(env("b"));
  const Sleeper d(env("a"));
  targets.resolve(a.pid(), 7);
  for (const auto* s : {&b, &c, &d}) targets.resolve(s->pid(), 9);  // user 9 only keeps 2
  EXPECT_EQ(targets.stats().processes, 3u);
  EXPECT_TRUE(targets.leads_to("sm86+sm89-torch2.9-cu128-cp312"));
  const auto hits = targets.stats().process_hits;
  targets.resolve(a.pid(), 7);  // user 7's answer is still there
  EXPECT_EQ(targets.stats().process_hits, hits + 1);
  EXPECT_FALSE(targets.leads_to("sm80-torch2.9-cu128-cp312"));
}

// A shell's hint (here the test process is the shell: its child hands over venv a) comes back
// in a new CallerTargets on the same mount point, as after a restart of the daemon.
TEST_F(CallerTargetsTest, ARestartedMountKnowsTheHooksOfRunningShells) {
  const std::string venv_key = "sm86+sm89-torch2.9-cu128-cp312";
  auto folder = [&] {
    auto f = OwnFolder::open(dir_.str("state"), true, "state_dir");
    EXPECT_TRUE(f) << f.error();
    return std::move(*f);
  };
  const std::string name = hint_file_name("/mnt/wh");
  {
    auto targets = make();
    EXPECT_EQ(targets.keep_hints_in(folder(), name, "/mnt/wh"), 0u);
    const Sleeper hook(env("a"));
    const auto adopted = targets.adopt(hook.pid(), ::geteuid());
    ASSERT_TRUE(adopted) << adopted.error();
    EXPECT_EQ(targets.resolve(::getpid())->key, venv_key);
  }
  auto restarted = make();
  EXPECT_EQ(restarted.keep_hints_in(folder(), name, "/mnt/wh"), 1u);
  const auto r = restarted.resolve(::getpid());
  EXPECT_EQ(r->key, venv_key) << r->caller.dump();
  EXPECT_EQ(restarted.status_json()["hints_restored"], 1);
  EXPECT_EQ(restarted.status_json()["hints"], 0);  // none handed over since
  // Without the book: the test process's own environment.
  EXPECT_NE(make().resolve(::getpid())->key, venv_key);
}

}  // namespace
}  // namespace whfs::target
