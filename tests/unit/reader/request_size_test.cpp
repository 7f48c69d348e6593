// RequestSizer: ranged GETs sized from the measured rate (request_size.h).
#include "fs/reader/request_size.h"

#include <gtest/gtest.h>

namespace whfs::reader {
namespace {

using namespace std::chrono_literals;
constexpr std::uint64_t kMiB = 1 << 20, kKiB = 1 << 10;

TEST(RequestSizeTest, UnmeasuredLinksGetTheFirstSizeAndEveryConnectionAShare) {
  RequestSizer s({});
  EXPECT_EQ(s.rate(), 0.0);
  EXPECT_EQ(s.size_for(256 * kMiB, 16), 4 * kMiB);
  EXPECT_EQ(s.size_for(16 * kMiB, 16), 1 * kMiB);     // 16 connections, 16 requests
  EXPECT_EQ(s.size_for(100 * kKiB, 16), 256 * kKiB);  // never below the smallest
}

TEST(RequestSizeTest, AFastLinkAsksUpTo16MiBAndASlowOneSmallRanges) {
  RequestSizer fast({});
  fast.observe(16 * kMiB, 300ms);  // ~53 MB/s per connection: a WAN with a fast CDN
  EXPECT_EQ(fast.size_for(256 * kMiB, 16), 16 * kMiB);
  EXPECT_EQ(fast.size_for(64 * kMiB, 16), 4 * kMiB);  // a share each, not 4 of 16 connections

  RequestSizer slow({});
  slow.observe(4 * kMiB, 32s);  // 128 KiB/s per connection
  EXPECT_EQ(slow.size_for(64 * kMiB, 16), 256 * kKiB);
  for (int i = 0; i < 20; ++i) slow.observe(256 * kKiB, 2s);
  EXPECT_NEAR(slow.rate(), 128.0 * kKiB, 1.0);
}

TEST(RequestSizeTest, TheSizeFollowsTheLinkWithinAFewRequests) {
  RequestSizer s({});
  s.observe(4 * kMiB, 32s);
  EXPECT_EQ(s.size_for(1024 * kMiB, 16), 256 * kKiB);
  for (int i = 0; i < 10; ++i) s.observe(8 * kMiB, 100ms);  // the link got fast
  EXPECT_EQ(s.size_for(1024 * kMiB, 16), 16 * kMiB);
  s.observe(8 * kKiB, 10s);  // too small to tell a rate: ignored
  EXPECT_EQ(s.size_for(1024 * kMiB, 16), 16 * kMiB);
}

TEST(RequestSizeTest, BoundsThatCrossAreHeldToTheLargest) {
  RequestSizer::Config c;
  c.max = 4000;
  c.min = 4000;
  c.initial = 4000;
  RequestSizer s(c);
  EXPECT_EQ(s.size_for(1 << 20, 4), 4000u);
}

}  // namespace
}  // namespace whfs::reader
