#include "fs/reader/transfers.h"

#include <gtest/gtest.h>

#include <thread>

namespace whfs::reader {
namespace {

cache::ContentId id_of(char c) { return *cache::ContentId::parse("sha256:" + std::string(64, c)); }

TEST(TransfersTest, BytesConnectionsAndReadersOfOneContent) {
  Transfers t;
  const auto a = id_of('a');
  t.wait(a, "pkg/a.whl", 1000);
  t.open(a, "pkg/a.whl", 1000);
  t.open(a, "pkg/a.whl", 1000);
  t.received(a, 300);
  t.received(a, 200);
  auto s = t.snapshot();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].path, "pkg/a.whl");
  EXPECT_EQ(s[0].size, 1000u);
  EXPECT_EQ(s[0].received, 500u);
  EXPECT_EQ(s[0].connections, 2u);
  EXPECT_EQ(s[0].readers, 1u);
  t.close(a);
  t.close(a);
  t.unwait(a);
  // Still listed for a moment (consecutive GETs of one file are one transfer), idle.
  s = t.snapshot();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].connections, 0u);
  EXPECT_EQ(s[0].readers, 0u);
  EXPECT_EQ(t.received_total(), 500u);
}

TEST(TransfersTest, TheRateFollowsTheLastSeconds) {
  Transfers t;
  const auto a = id_of('b');
  t.open(a, "x", 1 << 20);
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(110));
    t.received(a, 10000);
  }
  const auto s = t.snapshot();
  ASSERT_EQ(s.size(), 1u);
  // 50000 bytes over about 0.55 s (sleeps only lengthen it).
  EXPECT_GT(s[0].rate, 20000);
  EXPECT_LT(s[0].rate, 50000 / 0.55 + 1);
}

TEST(TransfersTest, AnIdleTransferGoesAfterItsLinger) {
  Transfers t;
  const auto a = id_of('c');
  const auto b = id_of('d');
  t.open(a, "a", 10);
  t.received(a, 10);
  t.close(a);
  t.open(b, "b", 10);
  std::this_thread::sleep_for(Transfers::kLinger + std::chrono::milliseconds(200));
  const auto s = t.snapshot();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].path, "b");
  // Bytes of a content no connection is open for still count in the total.
  t.received(a, 5);
  EXPECT_EQ(t.received_total(), 15u);
}

TEST(TransfersTest, UnbalancedClosesAreIgnored) {
  Transfers t;
  const auto a = id_of('e');
  t.close(a);
  t.unwait(a);
  EXPECT_TRUE(t.snapshot().empty());
}

}  // namespace
}  // namespace whfs::reader
