// The hint book and its file: hints of running shells come back in a new book on the same mount
// point, and only theirs (a dead pid, another start time, user or root is dropped); a malformed
// or foreign file, or a link, is ignored and never followed.
#include "fs/targeting/hint_book.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "fs/targeting/caller.h"
#include "tests/unit/targeting/fixtures.h"

namespace whfs::target {
namespace {

using testing::Sleeper;
using testing::TempDir;
using testing::write_file;
namespace fs = std::filesystem;

constexpr const char* kMount = "/mnt/wheelhouse";

// A hint for the running process `pid`, as adopt() takes it (times in whole seconds: the file
// keeps seconds).
Hint hint_of(pid_t pid, const std::string& venv = "/opt/venv") {
  Hint h;
  h.pid = pid;
  h.start_time = read_identity(pid)->start_time;
  h.uid = ::geteuid();
  h.root = *read_root(pid);
  h.env = {{"VIRTUAL_ENV", venv}, {"PATH", venv + "/bin:/usr/bin"}};
  h.cwd = "/home/someone";
  h.by = "wheelhouse-hint";
  h.at = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  return h;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class HintBookTest : public ::testing::Test {
 protected:
  OwnFolder folder() {
    auto f = OwnFolder::open(dir_.str("state"), true, "state_dir");
    EXPECT_TRUE(f) << f.error();
    return std::move(*f);
  }
  // A new book on the file, as a daemon mounted again on kMount makes it.
  std::unique_ptr<HintBook> reopened(std::size_t* taken = nullptr, std::size_t max = 64) {
    auto book = std::make_unique<HintBook>(max);
    const std::size_t n = book->keep_in(folder(), name_, kMount);
    if (taken != nullptr) *taken = n;
    return book;
  }
  fs::path file() const { return dir_.path() / "state" / name_; }

  TempDir dir_;
  const std::string name_ = hint_file_name(kMount);
};

TEST_F(HintBookTest, AHintOfARunningShellComesBack) {
  const Sleeper shell({});
  const Hint h = hint_of(shell.pid());
  {
    auto book = reopened();
    ASSERT_TRUE(book->put(h));
    EXPECT_EQ(book->file(), file().string());
  }
  struct stat st {};
  ASSERT_EQ(::stat(file().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::stat(file().parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  std::size_t taken = 0;
  auto again = reopened(&taken);
  EXPECT_EQ(taken, 1u);
  const auto found = again->find(h.pid, h.start_time, h.uid);
  ASSERT_TRUE(found);
  EXPECT_EQ(*found, h);
  EXPECT_FALSE(again->find(h.pid, h.start_time + 1, h.uid));
  EXPECT_FALSE(again->find(h.pid, h.start_time, h.uid + 1));
  // Another mount point has a file of its own.
  EXPECT_NE(hint_file_name("/mnt/other"), name_);
  HintBook other(64);
  EXPECT_EQ(other.keep_in(folder(), hint_file_name("/mnt/other"), "/mnt/other"), 0u);
}

TEST_F(HintBookTest, OnlyTheSameProcessUserAndRoot) {
  const Sleeper alive({});
  auto dead = std::make_unique<Sleeper>(std::vector<std::string>{});
  const Hint dead_hint = hint_of(dead->pid(), "/dead");
  dead.reset();  // killed and reaped: its pid names no process (or, one day, another one)
  Hint later = hint_of(::getpid(), "/later");
  later.start_time += 1;  // a later process with the same pid
  Hint user = hint_of(::getpid(), "/user");
  user.uid += 1;
  const Sleeper another({});
  Hint root = hint_of(another.pid(), "/root");
  root.root.ino += 1;
  const Hint good = hint_of(alive.pid(), "/good");
  // The file as an earlier daemon left it.
  write_file(file(), hints_to_text(kMount, read_boot_id(), {dead_hint, later, user, root, good}));
  ::chmod(file().c_str(), 0600);
  ::chmod(file().parent_path().c_str(), 0700);
  std::size_t taken = 0;
  auto book = reopened(&taken);
  EXPECT_EQ(taken, 1u) << read_text(file());
  EXPECT_EQ(book->size(), 1u);
  EXPECT_TRUE(book->find(good.pid, good.start_time, good.uid));
  // The file holds only what was taken.
  const auto left = hints_from_text(read_text(file()), kMount, read_boot_id());
  ASSERT_TRUE(left) << left.error();
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ(left->front(), good);
}

TEST_F(HintBookTest, AMalformedOrForeignFileIsIgnoredAndNeverFollowed) {
  const Sleeper shell({});
  const Hint h = hint_of(shell.pid());
  for (const std::string& text :
       {std::string("{not json"), std::string("[]"), std::string(R"({"version":2})"),
        hints_to_text("/mnt/other", read_boot_id(), {h}),
        hints_to_text(kMount, "another boot", {h}),
        std::string(R"({"version":1,"mountpoint":"/mnt/wheelhouse","hints":[{"pid":-1}]})")}) {
    SCOPED_TRACE(text);
    fs::remove_all(dir_.path() / "state");
    write_file(file(), text);
    ::chmod(file().c_str(), 0600);
    ::chmod(file().parent_path().c_str(), 0700);
    std::size_t taken = 1;
    auto book = reopened(&taken);
    EXPECT_EQ(taken, 0u);
    EXPECT_TRUE(book->empty());
    // The next hint replaces it with a good file.
    ASSERT_TRUE(book->put(h));
    const auto back = hints_from_text(read_text(file()), kMount, read_boot_id());
    ASSERT_TRUE(back) << back.error();
    EXPECT_EQ(back->size(), 1u);
  }
  // A link in its place is not followed, neither to read nor to write.
  fs::remove_all(dir_.path() / "state");
  fs::create_directories(dir_.path() / "state");
  ::chmod(file().parent_path().c_str(), 0700);
  const auto elsewhere = dir_.path() / "elsewhere.json";
  write_file(elsewhere, hints_to_text(kMount, read_boot_id(), {h}));
  fs::create_symlink(elsewhere, file());
  std::size_t taken = 1;
  auto book = reopened(&taken);
  EXPECT_EQ(taken, 0u);
  ASSERT_TRUE(book->put(hint_of(shell.pid(), "/changed")));
  EXPECT_TRUE(fs::is_symlink(file()));
  EXPECT_EQ(read_text(elsewhere), hints_to_text(kMount, read_boot_id(), {h}));
  // Another user's file (root only: chown).
  if (::geteuid() == 0) {
    fs::remove(file());
    write_file(file(), hints_to_text(kMount, read_boot_id(), {h}));
    ASSERT_EQ(::chown(file().c_str(), 65534, 65534), 0);
    EXPECT_EQ(reopened(&taken)->size(), 0u);
    EXPECT_EQ(taken, 0u);
  }
}

TEST_F(HintBookTest, TheFileGoesWithTheLastShell) {
  auto shell = std::make_unique<Sleeper>(std::vector<std::string>{});
  auto book = reopened();
  ASSERT_TRUE(book->put(hint_of(shell->pid())));
  ASSERT_TRUE(fs::exists(file()));
  book->drop_gone();
  EXPECT_EQ(book->size(), 1u);  // still running
  shell.reset();
  book->drop_gone();
  EXPECT_TRUE(book->empty());
  EXPECT_FALSE(fs::exists(file()));
}

TEST_F(HintBookTest, EachUserHasItsBound) {
  const Sleeper a({}), b({}), c({});
  auto book = reopened(nullptr, 2);
  ASSERT_TRUE(book->put(hint_of(a.pid())));
  ASSERT_TRUE(book->put(hint_of(b.pid())));
  ASSERT_TRUE(book->put(hint_of(b.pid(), "/another")));  // a shell's next hint replaces its own
  const auto refused = book->put(hint_of(c.pid()));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), "user " + std::to_string(::geteuid()) +
                                 " has 2 shells with a hint "
                                 "already");
  {
    // The bound holds for a file too (one written with another bound).
    auto big = std::make_unique<HintBook>(64);
    big->keep_in(folder(), "big.json", kMount);
    ASSERT_TRUE(big->put(hint_of(a.pid())));
    ASSERT_TRUE(big->put(hint_of(b.pid())));
    ASSERT_TRUE(big->put(hint_of(c.pid())));
  }
  HintBook small(2);
  EXPECT_EQ(small.keep_in(folder(), "big.json", kMount), 2u);
}

TEST(HintText, KeepsOnlyWhatDecidesATarget) {
  Hint h;
  h.pid = 42;
  h.start_time = 7;
  h.uid = 1000;
  h.root = {2049, 2};
  h.env = {{"VIRTUAL_ENV", "/v"}};
  h.cwd = "/w";
  h.by = "wheelhouse-hint";
  h.at = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  auto back = hints_from_text(hints_to_text("/m", "b1", {h}), "/m", "b1");
  ASSERT_TRUE(back) << back.error();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ(back->front(), h);
  // A variable no target reads is not taken from a file.
  const std::string extra =
      R"({"version":1,"mountpoint":"/m","boot":"b1","hints":[{"pid":42,"start_time":7,"uid":1000,)"
      R"("root_dev":2049,"root_ino":2,"env":{"VIRTUAL_ENV":"/v","LD_PRELOAD":"/x"},)"
      R"("cwd":"/w","by":"wheelhouse-hint","at":1700000000}]})";
  back = hints_from_text(extra, "/m", "b1");
  ASSERT_TRUE(back) << back.error();
  EXPECT_EQ(back->front(), h);
  // A path that is not UTF-8, or a hint too large, stays out of the file (not the whole book).
  Hint odd = h;
  odd.pid = 43;
  odd.cwd = "/w\xff";
  Hint huge = h;
  huge.pid = 44;
  huge.env["PYTHONPATH"] = std::string(kMaxSavedHint, 'x');
  back = hints_from_text(hints_to_text("/m", "b1", {odd, h, huge}), "/m", "b1");
  ASSERT_TRUE(back) << back.error();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ(back->front().pid, 42);
  // Why a text is not a book, in one line.
  EXPECT_EQ(hints_from_text("", "/m", "b1").error(), "it is not JSON");
  EXPECT_EQ(hints_from_text(hints_to_text("/m", "b1", {h}), "/n", "b1").error(),
            R"(it is the book of another mount point, "/m")");
  EXPECT_EQ(hints_from_text(R"({"version":1,"mountpoint":"/m","boot":"b1","hints":[{"pid":"1"}]})",
                            "/m", "b1")
                .error(),
            "hint 1: pid is not a number of 0 or more");
  // Written before a reboot: its pids and start times may name other processes now.
  EXPECT_EQ(hints_from_text(hints_to_text("/m", "b0", {h}), "/m", "b1").error(),
            "it was written before the machine last started");
}

TEST(HintText, WhereTheBooksAre) {
  auto env = [](std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const char* name) -> const char* {
      const auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  };
  EXPECT_EQ(default_state_dir(env({{"XDG_RUNTIME_DIR", "/run/user/1000"}}), true),
            "/run/wheelhouse-fs");
  EXPECT_EQ(default_state_dir(env({{"XDG_RUNTIME_DIR", "/run/user/1000"}, {"HOME", "/h"}}), false),
            "/run/user/1000/wheelhouse-fs");
  EXPECT_EQ(default_state_dir(env({{"XDG_RUNTIME_DIR", "relative"}, {"HOME", "/h"}}), false),
            "/h/.cache/wheelhouse-fs/state");
  EXPECT_EQ(default_state_dir(env({{"XDG_CACHE_HOME", "/c"}, {"HOME", "/h"}}), false),
            "/c/wheelhouse-fs/state");
  EXPECT_EQ(default_state_dir(env({}), false), "");
  EXPECT_EQ(hint_file_name("/mnt/wheelhouse"), hint_file_name("/mnt/wheelhouse"));
  EXPECT_EQ(hint_file_name("/mnt/wheelhouse").size(), std::string("hints-.json").size() + 16);
}

}  // namespace
}  // namespace whfs::target
