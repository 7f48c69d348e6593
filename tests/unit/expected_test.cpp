#include "fs/common/expected.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace whfs {
namespace {

Expected<int, std::string> half(int v) {
  if (v % 2 != 0) return unexpected(std::string("odd"));
  return v / 2;
}

TEST(Expected, ValueAndError) {
  auto ok = half(4);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 2);
  auto bad = half(3);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error(), "odd");
}

TEST(Expected, MoveOnlyValue) {
  Expected<std::unique_ptr<int>, std::string> p = std::make_unique<int>(7);
  ASSERT_TRUE(p);
  std::unique_ptr<int> owned = std::move(p).value();
  EXPECT_EQ(*owned, 7);
}

TEST(Expected, Void) {
  Expected<void, std::string> ok;
  EXPECT_TRUE(ok);
  Expected<void, std::string> bad = unexpected(std::string("no"));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error(), "no");
}

}  // namespace
}  // namespace whfs
