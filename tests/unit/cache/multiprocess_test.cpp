// Several processes, each in its own PID namespace (like containers bind-mounting the cache
// directory), writing the same and different contents at once.

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "cache/block_cache.h"
#include "cache/lmdb.h"
#include "cache/records.h"
#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

bool unshare_works() {
  const pid_t pid = [] {
    char a0[] = "/usr/bin/unshare", a1[] = "--pid", a2[] = "--fork", a3[] = "/bin/true";
    char* argv[] = {a0, a1, a2, a3, nullptr};
    pid_t p = -1;
    return ::posix_spawn(&p, argv[0], nullptr, nullptr, argv, nullptr) == 0 ? p : -1;
  }();
  return pid > 0 && testing::wait_exit(pid) == 0;
}

TEST(MultiProcessTest, WritersInSeparatePidNamespacesShareOneCache) {
  ASSERT_TRUE(unshare_works())
      << "`unshare --pid --fork` is not permitted here (it needs root or unprivileged user "
         "namespaces); this test cannot run without it";
  TempDir dir;
  const fs::path cache = dir / "cache";
  constexpr int kChildren = 3, kOwn = 20, kShared = 10;
  const fs::path go = dir / "go";
  std::vector<pid_t> children;
  for (int i = 0; i < kChildren; ++i) {
    children.push_back(testing::spawn_helper(
        {"write-set", cache.string(), std::to_string(i + 1), std::to_string(kOwn),
         std::to_string(kShared), std::to_string(64 << 20), go.string()},
        /*new_pid_namespace=*/true, dir / ("out" + std::to_string(i))));
    ASSERT_GT(children.back(), 0);
  }
  std::ofstream(go) << "go\n";  // all start writing at once
  for (int i = 0; i < kChildren; ++i) {
    EXPECT_EQ(testing::wait_exit(children[i]), 0) << "child " << i;
    std::ifstream out(dir / ("out" + std::to_string(i)));
    std::string line;
    std::getline(out, line);
    // Each is PID 1 of its namespace: the same PID in every child, which plain LMDB refuses.
    EXPECT_EQ(line, "pid 1");
  }
  auto c = testing::open_or_die(testing::test_options(cache, 0));
  auto contents = c->list_contents();
  ASSERT_TRUE(contents);
  EXPECT_EQ(contents->size(), static_cast<std::size_t>(kChildren * kOwn + kShared));
  for (const ContentInfo& info : *contents) {
    EXPECT_TRUE(info.state.complete() && info.state.verified) << info.id.to_string();
    auto missing = c->read_blocks(
        info.id, info.size, 0, info.state.total,
        [&](std::uint32_t i, std::span<const std::byte> d) {
          EXPECT_TRUE(testing::block_is_genuine(d, i, c->block_size()));
        },
        BlockStore::ReadMode::kPartial);
    ASSERT_TRUE(missing);
    EXPECT_TRUE(missing->empty());
  }
  const auto st = c->stats().value();
  EXPECT_EQ(st.usage.contents, contents->size());
  EXPECT_EQ(st.counters.corrupt_blocks + st.counters.corrupt_contents, 0u);
}

TEST(MultiProcessTest, ReaderAdoptsAMapGrownByAnotherProcess) {
  TempDir dir;
  auto c = testing::open_or_die(testing::test_options(dir.path(), 2 << 20, 2));
  const auto mine = testing::self_describing(7, 10 * c->block_size(), c->block_size());
  testing::put_all(*c, testing::sha256_of(mine), mine);
  ASSERT_TRUE(c->verify_content(testing::sha256_of(mine), mine.size()));
  // Another process raises the cap and writes far past this process's 2 MiB map.
  const pid_t child = testing::spawn_helper(
      {"write-set", dir.path().string(), "5", "60", "0", std::to_string(16 << 20), "-"});
  ASSERT_EQ(testing::wait_exit(child), 0);
  auto contents = c->list_contents();  // MDB_MAP_RESIZED inside, adopted
  ASSERT_TRUE(contents) << contents.error().message;
  EXPECT_EQ(contents->size(), 61u);
  for (const ContentInfo& info : *contents) {
    auto missing = c->read_blocks(
        info.id, info.size, 0, info.state.total, [](auto, auto) {}, BlockStore::ReadMode::kPartial);
    ASSERT_TRUE(missing) << missing.error().message;
    EXPECT_TRUE(missing->empty());
  }
  const auto st = c->stats().value();
  EXPECT_EQ(st.cap_bytes, 16u << 20);  // the last opener's cap
  EXPECT_GT(st.map_bytes, 2u << 20);
  const auto more = testing::self_describing(8, 10 * c->block_size(), c->block_size());
  testing::put_all(*c, testing::sha256_of(more), more);
}

// Walks every DB of the store with cursors (as the power-loss check does): false on any error.
bool structure_ok(const fs::path& dir) {
  auto env = lmdb::Env::open(dir.string(), {.max_dbs = 16, .flags = MDB_RDONLY | MDB_NOTLS});
  if (!env) return false;
  auto txn = lmdb::Txn::begin(*env, MDB_RDONLY);
  if (!txn) return false;
  for (const char* name :
       {kMetaDb, kBlocksDb, kContentsDb, kLruDb, kLeasesDb, kRevisionsDb, kListingsDb}) {
    auto dbi = txn->open_dbi(name, 0);
    if (!dbi) return false;
    auto cur = lmdb::Cursor::open(*txn, *dbi);
    if (!cur) return false;
    for (auto e = cur->first();; e = cur->next()) {
      if (!e) return false;
      if (!*e) break;
    }
  }
  return true;
}

TEST(MultiProcessTest, KilledWritersInAnotherPidNamespaceNeverLetTwoWritersIn) {
  // LMDB's robust writer mutex records its owner by thread id. Two daemons started the same
  // way in two PID namespaces have the same thread ids, and a thread killed while it waited
  // for the mutex could make the kernel think the other side's live writer died: two writers
  // at once, a broken store. Our own OFD lock around every write txn means no thread ever
  // waits on that mutex. Here one side writes from 4 threads without stopping while the other
  // side (4 threads with the same ids, in its own namespace) is started and SIGKILLed again
  // and again, its threads mostly waiting for the write lock.
  ASSERT_TRUE(unshare_works()) << "`unshare --pid --fork` is not permitted here";
  TempDir dir;
  const fs::path cache = dir / "cache";
  { auto c = testing::open_or_die(testing::test_options(cache, 64 << 20, 2)); }
  const fs::path steady_out = dir / "steady.out";
  pid_t steady =
      testing::spawn_helper({"write-threads", cache.string(), "1", "4"}, true, steady_out);
  ASSERT_GT(steady, 0);
  // However the test ends (a failed ASSERT returns early), the writers do not outlive it.
  pid_t victim = -1;
  struct KillOnExit {
    const pid_t& steady;
    const pid_t& victim;
    ~KillOnExit() {
      for (pid_t p : {steady, victim}) {
        if (p > 0 && ::kill(p, SIGKILL) == 0) ::waitpid(p, nullptr, 0);
      }
    }
  } kill_on_exit{steady, victim};
  auto output = [&] {
    std::ifstream in(steady_out);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  std::mt19937_64 rng(42);
  constexpr int kRounds = 60;
  for (int round = 0; round < kRounds; ++round) {
    victim = testing::spawn_helper(
        {"write-threads", cache.string(), std::to_string(2 + round), "4"}, true);
    ASSERT_GT(victim, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + rng() % 120));
    ::kill(victim, SIGKILL);
    EXPECT_EQ(testing::wait_exit(victim), 128 + SIGKILL) << "round " << round;
    victim = -1;
    ASSERT_EQ(::waitpid(steady, nullptr, WNOHANG), 0)
        << "the steady writer died, round " << round << ": " << output();
  }
  ::kill(steady, SIGKILL);
  testing::wait_exit(steady);
  steady = -1;
  ASSERT_TRUE(structure_ok(cache)) << "the store's B-trees are damaged";
  auto c = testing::open_or_die(testing::test_options(cache, 0));
  auto report = c->verify_all();
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_EQ(report->corrupt, 0u);
  EXPECT_GT(report->checked, 0u);
  auto contents = c->list_contents();
  ASSERT_TRUE(contents);
  for (const ContentInfo& info : *contents) {
    std::uint32_t seen = 0;
    auto missing = c->read_blocks(
        info.id, info.size, 0, info.state.total,
        [&](std::uint32_t i, std::span<const std::byte> d) {
          ++seen;
          EXPECT_TRUE(testing::block_is_genuine(d, i, c->block_size())) << info.id.to_string();
        },
        BlockStore::ReadMode::kPartial);
    ASSERT_TRUE(missing);
  }
  const auto st = c->stats().value();
  EXPECT_EQ(st.counters.corrupt_blocks, 0u);
  std::printf("%d rounds, %llu contents checked\n", kRounds,
              static_cast<unsigned long long>(report->checked));
}

}  // namespace
}  // namespace whfs::cache
