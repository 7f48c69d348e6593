#include "fs/targeting/pep440.h"

#include <gtest/gtest.h>

namespace whfs::target {
namespace {

TEST(Pep440, ParsesTheParts) {
  auto v = parse_pep440("1!2.8.3rc1.post2.dev3+cu128torch2.9");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->epoch, 1u);
  EXPECT_EQ(v->release, (std::vector<std::uint64_t>{2, 8, 3}));
  EXPECT_EQ(v->pre_kind, 2);
  EXPECT_EQ(v->pre_number, 1u);
  EXPECT_EQ(v->post, 2u);
  EXPECT_EQ(v->dev, 3u);
  EXPECT_EQ(v->local, (std::vector<std::string>{"cu128torch2", "9"}));
  EXPECT_FALSE(parse_pep440("abc"));
  EXPECT_FALSE(parse_pep440("1.0+"));
  EXPECT_FALSE(parse_pep440("1.0 beta"));
}

// Each version sorts strictly before the next (PEP 440's examples plus local versions).
TEST(Pep440, OrdersAsPep440Says) {
  const char* ordered[] = {"1.0.dev0",
                           "1.0a1",
                           "1.0a2.dev1",
                           "1.0a2",
                           "1.0b1",
                           "1.0rc1",
                           "1.0",
                           "1.0+abc",
                           "1.0+1",
                           "1.0.post1",
                           "1.1",
                           "2.8.3",
                           "2.8.3+cu126torch2.9",
                           "2.8.3+cu128torch2.9",
                           "2.10",
                           "1!0.1"};
  for (std::size_t i = 0; i + 1 < std::size(ordered); ++i) {
    EXPECT_LT(compare_versions(ordered[i], ordered[i + 1]), 0)
        << ordered[i] << " < " << ordered[i + 1];
    EXPECT_GT(compare_versions(ordered[i + 1], ordered[i]), 0)
        << ordered[i + 1] << " > " << ordered[i];
  }
}

TEST(Pep440, EqualSpellings) {
  EXPECT_EQ(compare_versions("2.9", "2.9.0"), 0);
  EXPECT_EQ(compare_versions("1.0alpha1", "1.0a1"), 0);
  EXPECT_EQ(compare_versions("v1.0", "1.0"), 0);
  EXPECT_EQ(compare_versions("1.0-rc1", "1.0rc1"), 0);
}

TEST(Pep440, TextThatIsNoVersionSortsFirstAndTotally) {
  EXPECT_LT(compare_versions("junk", "0.0.1"), 0);
  EXPECT_LT(compare_versions("junk-a", "junk-b"), 0);
  EXPECT_EQ(compare_versions("junk", "junk"), 0);
}

}  // namespace
}  // namespace whfs::target
