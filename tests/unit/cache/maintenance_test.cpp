// The CLI's maintenance calls, run while another process (a mount) writes to the cache.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <thread>

#include "cache/block_cache.h"
#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

using testing::TempDir;

bool listed(const std::vector<ContentInfo>& all, const ContentId& id) {
  return std::any_of(all.begin(), all.end(), [&](const ContentInfo& i) { return i.id == id; });
}

class MaintenanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = testing::open_or_die(testing::test_options(dir_.path(), 8 << 20, 2));
    writer_ = testing::spawn_helper({"write-loop", dir_.path().string(), "77"});
    ASSERT_GT(writer_, 0);
    // Wait until the writer is at work, so everything below runs alongside it.
    for (int i = 0; i < 5000 && cache_->stats().value().usage.contents < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_GE(cache_->stats().value().usage.contents, 3u) << "the writer never wrote";
  }
  bool writer_alive() { return ::waitpid(writer_, nullptr, WNOHANG) == 0; }
  void TearDown() override {
    ::kill(writer_, SIGKILL);
    testing::wait_exit(writer_);
  }
  std::pair<ContentId, std::vector<std::byte>> add(std::uint64_t key, bool wrong_id = false) {
    auto bytes = testing::self_describing(key, 5 * cache_->block_size() + 9, cache_->block_size());
    const auto id = testing::sha256_of(wrong_id ? testing::make_bytes(3, key) : bytes);
    testing::put_all(*cache_, id, bytes);
    return {id, bytes};
  }

  TempDir dir_;
  std::unique_ptr<BlockCache> cache_;
  pid_t writer_ = -1;
};

TEST_F(MaintenanceTest, StatsListVerifyEvictClearWhileAnotherProcessWrites) {
  const auto [good, good_bytes] = add(5001);
  const auto [bad, bad_bytes] = add(5002, /*wrong_id=*/true);
  const auto [other, other_bytes] = add(5003);

  auto st = cache_->stats();
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(st->block_size, cache_->block_size());
  EXPECT_GE(st->usage.contents, 3u);
  EXPECT_GT(st->usage.footprint_bytes, 3u * 5 * cache_->block_size());
  EXPECT_LE(st->file_bytes, 8u << 20);
  EXPECT_GT(st->disk_bytes, 0u);

  auto all = cache_->list_contents();
  ASSERT_TRUE(all);
  EXPECT_TRUE(listed(*all, good) && listed(*all, bad) && listed(*all, other));
  const auto info =
      std::find_if(all->begin(), all->end(), [&, id = good](auto& i) { return i.id == id; });
  EXPECT_EQ(info->size, good_bytes.size());
  EXPECT_EQ(info->state, (ContentState{6, 6, false}));

  auto report = cache_->verify_all();
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_EQ(report->corrupt, 1u);  // ours; the writer's contents are all genuine
  EXPECT_TRUE(cache_->content_state(good).value()->verified);
  EXPECT_FALSE(cache_->content_state(bad).value());

  EXPECT_TRUE(cache_->evict(other).value());
  EXPECT_FALSE(cache_->content_state(other).value());

  ASSERT_TRUE(cache_->put_revision("e", "r", "main", testing::kPublic, "c",
                                   std::chrono::system_clock::now()));
  ASSERT_TRUE(cache_->clear());
  EXPECT_FALSE(cache_->content_state(good).value());
  EXPECT_FALSE(cache_->get_revision("e", "r", "main", testing::kPublicOnly).value());
  EXPECT_GE(cache_->stats()->counters.corrupt_contents, 1u);  // counters survive a clear
  // The store keeps working for both processes.
  testing::put_all(*cache_, good, good_bytes);
  EXPECT_EQ(testing::read_all(*cache_, good, good_bytes.size()), good_bytes);
  const auto writer_contents = cache_->stats().value().usage.contents;
  for (int i = 0; i < 5000 && cache_->stats().value().usage.contents < writer_contents + 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_GE(cache_->stats().value().usage.contents, writer_contents + 2);
  EXPECT_TRUE(writer_alive());
}

}  // namespace
}  // namespace whfs::cache
