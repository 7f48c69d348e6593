// kill -9 at random moments: the cache must reopen and serve only correct bytes.

#include <gtest/gtest.h>
#include <signal.h>

#include <random>
#include <thread>

#include "cache/block_cache.h"
#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

using testing::TempDir;

// Every stored block is genuine, the books (usage, present counts) add up exactly, and every
// complete content hashes right.
void check_cache(const std::filesystem::path& dir, int round) {
  SCOPED_TRACE("round " + std::to_string(round));
  Options o = testing::test_options(dir, 0);
  auto c = testing::open_or_die(o);
  const std::uint32_t bs = c->block_size();
  auto contents = c->list_contents();
  ASSERT_TRUE(contents) << contents.error().message;
  const auto before = c->stats().value();
  std::uint64_t blocks = 0;
  for (const ContentInfo& info : *contents) {
    // A complete content is handed out only once verified: verify what the writer completed
    // but did not get to verify before it was killed.
    if (info.state.complete() && !info.state.verified) {
      auto v = c->verify_content(info.id, info.size);
      ASSERT_TRUE(v) << info.id.to_string() << ": " << v.error().message;
      EXPECT_TRUE(v->verified) << info.id.to_string();
    }
    std::uint32_t delivered = 0;
    auto missing = c->read_blocks(
        info.id, info.size, 0, info.state.total,
        [&](std::uint32_t i, std::span<const std::byte> data) {
          ++delivered;
          EXPECT_TRUE(testing::block_is_genuine(data, i, bs))
              << info.id.to_string() << " block " << i;
        },
        BlockStore::ReadMode::kPartial);
    ASSERT_TRUE(missing) << missing.error().message;
    EXPECT_EQ(delivered, info.state.present) << info.id.to_string();
    blocks += info.state.present;
  }
  const auto after = c->stats().value();
  EXPECT_EQ(after.counters.corrupt_blocks, before.counters.corrupt_blocks);
  EXPECT_EQ(after.usage.blocks, blocks);
  EXPECT_EQ(after.usage.contents, contents->size());
  auto report = c->verify_all();
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_EQ(report->corrupt, 0u);
}

TEST(CrashTest, KilledWriterLeavesAConsistentCache) {
  TempDir dir;
  std::mt19937 rng(20240601);
  std::uint64_t contents_seen = 0;
  for (int round = 0; round < 20; ++round) {
    const pid_t child =
        testing::spawn_helper({"write-loop", dir.path().string(), std::to_string(round + 1)});
    ASSERT_GT(child, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + rng() % 220));
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    ASSERT_EQ(testing::wait_exit(child), 128 + SIGKILL) << "the writer died on its own";
    check_cache(dir.path(), round);
    if (HasFatalFailure()) return;
    auto c = testing::open_or_die(testing::test_options(dir.path(), 0));
    contents_seen += c->list_contents()->size();
  }
  EXPECT_GT(contents_seen, 0u) << "the writers never got to write anything";
}

}  // namespace
}  // namespace whfs::cache
