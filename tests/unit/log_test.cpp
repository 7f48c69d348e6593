// The daemon's log (fs/common/log.h): the recent problems kept for `wheelhouse status`.
#include "fs/common/log.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

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
