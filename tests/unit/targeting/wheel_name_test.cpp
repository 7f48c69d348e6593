#include "fs/targeting/wheel_name.h"

#include <gtest/gtest.h>

namespace whfs::target {
namespace {

using Tags = std::vector<std::string>;

TEST(WheelName, ParsesTheDatasetsNames) {
  auto w = parse_wheel_name("flash_attn-2.8.3+cu128torch2.9-cp312-cp312-linux_x86_64.whl");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->distribution, "flash_attn");
  EXPECT_EQ(w->version, "2.8.3+cu128torch2.9");
  EXPECT_EQ(w->build, "");
  EXPECT_EQ(w->python_tags, Tags{"cp312"});
  EXPECT_EQ(w->abi_tags, Tags{"cp312"});
  EXPECT_EQ(w->platform_tags, Tags{"linux_x86_64"});

  w = parse_wheel_name("nvdiffrec_render-0.1.0+cu128torch2.9-cp39-abi3-manylinux_2_28_x86_64.whl");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->abi_tags, Tags{"abi3"});
  EXPECT_EQ(w->platform_tags, Tags{"manylinux_2_28_x86_64"});

  w = parse_wheel_name("o_voxel-0.0.1+cu128torch2.9-py3-none-any.whl");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->distribution, "o_voxel");
  EXPECT_EQ(w->python_tags, Tags{"py3"});
}

TEST(WheelName, BuildTagAndCompressedTagSets) {
  auto w = parse_wheel_name("six-1.16.0-1b-py2.py3-none-any.whl");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->build, "1b");
  EXPECT_EQ(w->python_tags, (Tags{"py2", "py3"}));
  EXPECT_EQ(w->python_tags.size() * w->abi_tags.size() * w->platform_tags.size(), 2u);

  w = parse_wheel_name("numpy-2.0.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->platform_tags, (Tags{"manylinux_2_17_x86_64", "manylinux2014_x86_64"}));
}

TEST(WheelName, TagsAreLowercased) {
  auto w = parse_wheel_name("Foo-1.0-CP312-CP312-LINUX_X86_64.whl");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->distribution, "Foo");  // the name keeps its spelling; tags compare lowercased
  EXPECT_EQ(w->python_tags, Tags{"cp312"});
  EXPECT_EQ(w->platform_tags, Tags{"linux_x86_64"});
}

TEST(WheelName, RejectsMalformedNames) {
  for (const char* bad : {
           "",
           ".whl",
           "foo-1.0-py3-none-any",          // no .whl
           "foo-1.0-py3-none-any.WHL",      // pip wants .whl exactly
           "foo-1.0-py3-none.whl",          // four fields
           "foo-1.0-a-b-py3-none-any.whl",  // seven fields
           "foo-1.0-x1-py3-none-any.whl",   // build tag must start with a digit
           "foo-1.0-py3-none-any.tar.gz",
           "-1.0-py3-none-any.whl",          // empty name
           "foo--py3-none-any.whl",          // empty version
           "foo-1.0-py3..py2-none-any.whl",  // empty tag in a set
           "foo-1.0-py3-none-.whl",          // empty platform
           "dir/foo-1.0-py3-none-any.whl",   // a path
           "foo-1.0-py3-none-any\x01.whl",
           "foo-1.0+a+b-py3-none-any.whl",  // two local parts
           "foo-1.0-py3-none-linux x86.whl",
       }) {
    EXPECT_FALSE(parse_wheel_name(bad)) << bad;
  }
}

TEST(WheelName, RefusesTagSetsThatExpandTooFar) {
  std::string py = "py30";
  for (int i = 1; i < 20; ++i) py += ".py3" + std::to_string(i);
  std::string plat = "a0";
  for (int i = 1; i < 20; ++i) plat += ".a" + std::to_string(i);
  EXPECT_FALSE(parse_wheel_name("foo-1.0-" + py + "-none-" + plat + ".whl"));  // 400 triples
  EXPECT_TRUE(parse_wheel_name("foo-1.0-" + py + "-none-any.whl"));            // 20
}

TEST(WheelName, NormalizesProjectNames) {
  EXPECT_EQ(normalize_project_name("Flash_Attn"), "flash-attn");
  EXPECT_EQ(normalize_project_name("flash-attn"), "flash-attn");
  EXPECT_EQ(normalize_project_name("a.-_b"), "a-b");
  EXPECT_EQ(normalize_project_name("o_voxel"), "o-voxel");
}

}  // namespace
}  // namespace whfs::target
