// RequestSizer: ranged GETs sized from the measured rate (request_size.h).
#include "fs/reader/request_size.h"

#include <gtest/gtest.h>

namespace whfs::reader {
namespace {

using namespace std::chrono_literals;
constexpr std::uint64_t MiB = 1 << 20, KiB = 1 << 10;

TEST(RequestSizeTest, UnmeasuredLinksGetTheFirstSizeAndEveryConnectionAShare) {
  RequestSizer s({});
  EXPECT_EQ(s.rate(), 0.0);
  EXPECT_EQ(s.size_for(256 * MiB, 16), 4 * MiB);
  EXPECT_EQ(s.size_for(16 * MiB, 16), 1 * MiB);     // 16 connections, 16 requests
  EXPECT_EQ(s.size_for(100 * KiB, 16), 256 * KiB);  // never below the smallest
}

TEST(RequestSizeTest, AFastLinkAsksUpTo16MiBAndASlowOneSmallRanges) {
  RequestSizer fast({});
  fast.observe(16 * MiB, 300ms);  // ~53 MB/s per connection: a WAN with a fast CDN
  EXPECT_EQ(fast.size_for(256 * MiB, 16), 16 * MiB);
  EXPECT_EQ(fast.size_for(64 * MiB, 16), 4 * MiB);  // a share each, not 4 of 16 connections

  RequestSizer slow({});
  slow.observe(4 * MiB, 32s);  // 128 KiB/s per connection
  EXPECT_EQ(slow.size_for(64 * MiB, 16), 256 * KiB);
  for (int i = 0; i < 20; ++i) slow.observe(256 * KiB, 2s);
  EXPECT_NEAR(slow.rate(), 128.0 * KiB, 1.0);
}

TEST(RequestSizeTest, TheSizeFollowsTheLinkWithinAFewRequests) {
  RequestSizer s({});
  s.observe(4 * MiB, 32s);
  EXPECT_EQ(s.size_for(1024 * MiB, 16), 256 * KiB);
  for (int i = 0; i < 10; ++i) s.observe(8 * MiB, 100ms);  // the link got fast
  EXPECT_EQ(s.size_for(1024 * MiB, 16), 16 * MiB);
  s.observe(8 * KiB, 10s);  // too small to tell a rate: ignored
  EXPECT_EQ(s.size_for(1024 * MiB, 16), 16 * MiB);
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
