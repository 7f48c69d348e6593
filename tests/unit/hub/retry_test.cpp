#include "fs/hub/retry.h"

#include <gtest/gtest.h>

namespace whfs::hub {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(Retry, BackoffDoublesUpToTheCapWithJitter) {
  RetryPolicy p;  // 1 s doubling, cap 8 s
  EXPECT_EQ(backoff_delay(p, 0, 0.999999).count(), 999);
  EXPECT_EQ(backoff_delay(p, 0, 0.0), milliseconds(500));
  EXPECT_EQ(backoff_delay(p, 1, 0.0), milliseconds(1000));
  EXPECT_EQ(backoff_delay(p, 2, 0.0), milliseconds(2000));
  EXPECT_EQ(backoff_delay(p, 3, 0.0), milliseconds(4000));
  EXPECT_EQ(backoff_delay(p, 4, 0.0), milliseconds(4000));  // capped at 8 s, halved by jitter
  EXPECT_EQ(backoff_delay(p, 40, 1.0), milliseconds(8000));
  for (int r = 0; r < 8; ++r) {
    for (double u : {0.0, 0.3, 0.7, 1.0}) {
      const auto d = backoff_delay(p, r, u);
      EXPECT_GE(d, milliseconds(500));
      EXPECT_LE(d, milliseconds(8000));
    }
  }
}

TEST(Retry, ServerHints) {
  EXPECT_EQ(server_retry_hint("7", ""), seconds(7));
  EXPECT_EQ(server_retry_hint("", "\"api\";r=0;t=37"), seconds(37));
  EXPECT_EQ(server_retry_hint("3", "\"api\";r=0;t=37"), seconds(37));  // RateLimit wins
  EXPECT_EQ(server_retry_hint("3", "\"api\";r=5;t=37"), seconds(3));   // quota left: not the cause
  EXPECT_EQ(server_retry_hint("Wed, 21 Oct 2015 07:28:00 GMT", ""), std::nullopt);
  EXPECT_EQ(server_retry_hint("-1", ""), std::nullopt);
  EXPECT_EQ(server_retry_hint("", "garbage"), std::nullopt);
}

TEST(Retry, RetryableStatuses) {
  for (int s : {408, 429, 500, 502, 503, 504}) EXPECT_TRUE(retryable_status(s)) << s;
  for (int s : {200, 206, 301, 400, 401, 403, 404, 416, 501})
    EXPECT_FALSE(retryable_status(s)) << s;
}

}  // namespace
}  // namespace whfs::hub
