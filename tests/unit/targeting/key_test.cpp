#include "fs/targeting/key.h"

#include <gtest/gtest.h>

#include "fs/targeting/policy.h"
#include "fs/targeting/target.h"

namespace whfs::target {
namespace {

const HostPlatform kHost{"x86_64", "2.36"};

TEST(TargetKey, RoundTripsAndLeavesOutTheHostsPlatform) {
  for (const char* text :
       {"sm89-torch2.9-cu128-cp312", "sm80+sm86+sm89-torch2.8-cu126-cp311",
        "sm120-torch2.10-cu130-cp313t", "sm89-torch2.9-cu128-cp312-glibc2.28",
        "sm89-torch2.9-cu128-cp312-noglibc-aarch64", "sm90-torch2.9-cu128-cp39-i686"}) {
    const auto k = parse_key(text, kHost);
    ASSERT_TRUE(k) << text << ": " << k.error();
    EXPECT_EQ(format_key(*k, kHost), text);
  }
  // The host's own libc and machine may be spelled out; the canonical form leaves them out.
  const auto k = parse_key("sm89-torch2.9-cu128-cp312-glibc2.36-x86_64", kHost);
  ASSERT_TRUE(k);
  EXPECT_EQ(format_key(*k, kHost), "sm89-torch2.9-cu128-cp312");
  EXPECT_EQ(k->libc, "2.36");
  EXPECT_EQ(k->machine, "x86_64");
  // On another host the same key names its platform.
  EXPECT_EQ(format_key(*k, HostPlatform{"aarch64", "2.31"}),
            "sm89-torch2.9-cu128-cp312-glibc2.36-x86_64");
}

TEST(TargetKey, BadKeysSayWhatIsWrong) {
  const std::pair<const char*, const char*> bad[] = {
      {"sm89-torch2.9", "expected <archs>-torch"},
      {"sm89+sm80-torch2.9-cu128-cp312", "lowest first"},
      {"sm89+sm89-torch2.9-cu128-cp312", "lowest first"},
      {"gpu-torch2.9-cu128-cp312", "not an arch"},
      {"sm089-torch2.9-cu128-cp312", "not an arch"},
      {"sm89-torch2.09-cu128-cp312", "not torch"},
      {"sm89-torch2-cu128-cp312", "not torch"},
      {"sm89-torch2.9-cuda12.8-cp312", "not cu<digits>"},
      {"sm89-torch2.9-cu128-py312", "not a CPython tag"},
      {"sm89-torch2.9-cu128-cp312-glibc2", "not glibc"},
      {"sm89-torch2.9-cu128-cp312-sparc", "not a known machine"},
      {"sm89-torch2.9-cu128-cp312-x86_64-glibc2.36", "unexpected"},
      {"unresolved", "expected <archs>-torch"},
  };
  for (const auto& [text, why] : bad) {
    const auto k = parse_key(text, kHost);
    ASSERT_FALSE(k) << text;
    EXPECT_NE(k.error().find(why), std::string::npos) << text << ": " << k.error();
  }
}

TEST(TargetKey, ATargetsKeyAndAKeysTarget) {
  Target t;
  t.arch.value = "sm80+sm89";
  t.torch.value = "2.9";
  t.cuda.value = "12.8";
  t.python_tag.value = "cp313t";
  t.machine = "x86_64";
  t.libc = "2.31";
  const auto k = key_of(t);
  ASSERT_TRUE(k) << k.error();
  EXPECT_EQ(format_key(*k, kHost), "sm80+sm89-torch2.9-cu128-cp313t-glibc2.31");
  const Target back = target_of(*k, kHost);
  EXPECT_EQ(back.arch.value, "sm80+sm89");
  EXPECT_EQ(back.python_tag.value, "cp313t");
  EXPECT_EQ(back.arch.source, "the key sm80+sm89-torch2.9-cu128-cp313t-glibc2.31");
  EXPECT_EQ(back.platforms.front(), "manylinux_2_31_x86_64");
  EXPECT_TRUE(back.tags.rank(Tag{"cp313", "cp313t", "manylinux_2_28_x86_64"}));
  EXPECT_FALSE(back.tags.rank(Tag{"cp313", "cp313", "manylinux_2_28_x86_64"}));
  EXPECT_FALSE(back.tags.rank(Tag{"cp313", "abi3", "linux_x86_64"}));  // no abi3 when free-threaded

  t.cuda = Axis{"", "", "torch 2.9.0+cpu is a CPU build"};
  const auto none = key_of(t);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error(), "torch 2.9.0+cpu is a CPU build");
}

// A key's folder choice is the policy's for its target: for several GPUs, a build that runs on
// all of them.
TEST(TargetKey, SeveralGpusNeedOneBuildForAll) {
  const PackageFolders layout = {{"sm80", {"torch2.9-cu128"}},
                                 {"sm86", {"torch2.9-cu128"}},
                                 {"sm89", {"torch2.9-cu128"}},
                                 {"sm90", {"torch2.9-cu128"}}};
  auto folder = [&](const char* key) {
    return choose_folder(target_of(*parse_key(key, kHost), kHost), layout);
  };
  EXPECT_EQ(folder("sm89-torch2.9-cu128-cp312").path(), "sm89/torch2.9-cu128");
  EXPECT_EQ(folder("sm86+sm89-torch2.9-cu128-cp312").path(), "sm86/torch2.9-cu128");
  const auto c = folder("sm80+sm89-torch2.9-cu128-cp312");
  EXPECT_EQ(c.path(), "sm80/torch2.9-cu128");
  EXPECT_NE(c.reason.find("runs on all of sm80+sm89"), std::string::npos) << c.reason;
  const auto none = folder("sm89+sm90-torch2.9-cu128-cp312");
  EXPECT_FALSE(none.found);
  EXPECT_NE(none.reason.find("differ in major"), std::string::npos) << none.reason;
}

}  // namespace
}  // namespace whfs::target
