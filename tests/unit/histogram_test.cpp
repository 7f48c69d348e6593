#include "fs/common/histogram.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace whfs {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(LatencyHistogramTest, EachObservationLandsInTheFirstBucketAboveIt) {
  LatencyHistogram h;
  h.observe(microseconds(50));           // <= 100 us
  h.observe(microseconds(100));          // the bound itself is inside
  h.observe(milliseconds(3));            // <= 10 ms
  h.observe(std::chrono::seconds(120));  // above every bound
  const auto s = h.snapshot();
  ASSERT_EQ(s.counts.size(), LatencyHistogram::kBounds.size() + 1);
  EXPECT_EQ(s.counts[0], 2u);
  EXPECT_EQ(s.counts[4], 1u);
  EXPECT_EQ(s.counts.back(), 1u);
  EXPECT_EQ(s.count, 4u);
  EXPECT_NEAR(s.sum_seconds, 120.00315, 1e-9);
}

TEST(LatencyHistogramTest, ConcurrentObservationsAreAllCounted) {
  LatencyHistogram h;
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) h.observe(microseconds(i % 3000));
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(h.snapshot().count, 40000u);
}

}  // namespace
}  // namespace whfs
