// The per-user cache: one user's entries never push another's out, each user's bound drops its
// stale entries first and then its oldest, and the bound for everyone its stale ones and then
// all.
#include "fs/targeting/user_cache.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

namespace whfs::target {
namespace {

using std::chrono::seconds;
using Cache = UserCache<int, std::string>;

const Clock::time_point t0{};  // times are given, never read

std::optional<Cache::Entry> entry(const Cache& c, int key) {
  const auto* e = c.find(key);
  return e != nullptr ? std::optional<Cache::Entry>(*e) : std::nullopt;
}

TEST(UserCache, FindPutEraseAndCounts) {
  Cache c(10, 5, seconds(1));
  EXPECT_EQ(c.find(1), nullptr);
  c.put(1, 7, "a", t0);
  c.put(2, 8, "b", t0 + seconds(1));
  const auto a = entry(c, 1);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->value, "a");
  EXPECT_EQ(a->uid, 7u);
  EXPECT_EQ(entry(c, 2)->at, t0 + seconds(1));
  // Put again under another user: the entry moves to that user.
  c.put(1, 8, "a2", t0 + seconds(2));
  EXPECT_EQ(c.count_of(7), 0u);
  EXPECT_EQ(c.count_of(8), 2u);
  EXPECT_TRUE(c.any_of([](const std::string& v) { return v == "a2"; }));
  EXPECT_FALSE(c.any_of([](const std::string& v) { return v == "a"; }));
  EXPECT_TRUE(c.erase(1));
  EXPECT_FALSE(c.erase(1));
  EXPECT_EQ(c.size(), 1u);
  c.clear();
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(c.count_of(8), 0u);
}

// At its bound a user loses its own stale entries, or else its oldest; the others keep theirs.
TEST(UserCache, AUserAtItsBoundLosesItsOwn) {
  Cache c(100, 3, seconds(10));
  c.put(100, 1, "other", t0);  // another user's, stale by the end: it stays
  c.put(1, 7, "old", t0);
  c.put(2, 7, "mid", t0 + seconds(5));
  c.put(3, 7, "new", t0 + seconds(8));
  c.put(4, 7, "x", t0 + seconds(12));  // "old" is stale: it alone goes
  EXPECT_EQ(c.find(1), nullptr);
  EXPECT_NE(c.find(2), nullptr);
  EXPECT_NE(c.find(3), nullptr);
  EXPECT_EQ(c.count_of(7), 3u);
  c.put(5, 7, "y", t0 + seconds(13));  // none stale: the oldest ("mid") goes
  EXPECT_EQ(c.find(2), nullptr);
  EXPECT_NE(c.find(3), nullptr);
  EXPECT_NE(c.find(4), nullptr);
  EXPECT_NE(c.find(5), nullptr);
  EXPECT_NE(c.find(100), nullptr);
  EXPECT_EQ(c.count_of(1), 1u);
  // Putting a key the user has already is no new entry: nothing else goes.
  c.put(5, 7, "y2", t0 + seconds(14));
  EXPECT_EQ(c.count_of(7), 3u);
  EXPECT_NE(c.find(3), nullptr);
}

TEST(UserCache, TheBoundForEveryoneDropsStaleEntriesThenAll) {
  Cache c(3, 10, seconds(10));
  c.put(1, 7, "a", t0);
  c.put(2, 8, "b", t0 + seconds(5));
  c.put(3, 9, "c", t0 + seconds(6));
  c.put(4, 7, "d", t0 + seconds(11));  // "a" is stale
  EXPECT_EQ(c.find(1), nullptr);
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(c.count_of(7), 1u);
  c.put(5, 7, "e", t0 + seconds(12));  // none stale: everything goes
  EXPECT_EQ(c.size(), 1u);
  EXPECT_NE(c.find(5), nullptr);
  EXPECT_EQ(c.count_of(8), 0u);
  EXPECT_EQ(c.count_of(7), 1u);
}

}  // namespace
}  // namespace whfs::target
