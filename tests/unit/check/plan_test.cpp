// Where a wheel goes, whether it fits its target, and what to do with what is already there.
#include "fs/check/plan.h"

#include <gtest/gtest.h>

namespace whfs::check {
namespace {

const target::HostPlatform kHost{"x86_64", "2.36"};

target::Target key(const std::string& text) {
  auto k = target::parse_key(text, kHost);
  EXPECT_TRUE(k) << k.error();
  return target::target_of(*k, kHost);
}

target::WheelName wheel(const std::string& file) {
  auto w = target::parse_wheel_name(file);
  EXPECT_TRUE(w) << file;
  return *w;
}

TEST(PublishPlan, TheFolderComesFromTheTarget) {
  auto f = target_folder(key("sm89-torch2.9-cu128-cp312"));
  ASSERT_TRUE(f) << f.error();
  EXPECT_EQ(f->folder, "sm89/torch2.9-cu128");
  EXPECT_EQ(f->why, "sm89, torch 2.9, CUDA 12.8: the key sm89-torch2.9-cu128-cp312");
  EXPECT_EQ(target_folder(key("sm120-torch2.10-cu130-cp313t"))->folder, "sm120/torch2.10-cu130");

  target::Target t = key("sm89-torch2.9-cu128-cp312");
  t.arch.source = "the CUDA runtime (GPU 0)";
  t.torch.source = t.cuda.source = "/venv/lib/python3.12/site-packages/torch/version.py";
  EXPECT_EQ(target_folder(t)->why,
            "sm89: the CUDA runtime (GPU 0); torch 2.9, CUDA 12.8: "
            "/venv/lib/python3.12/site-packages/torch/version.py");
}

TEST(PublishPlan, OneArchOnlyAndEveryAxisKnown) {
  auto several = target_folder(key("sm80+sm89-torch2.9-cu128-cp312"));
  ASSERT_FALSE(several);
  EXPECT_NE(several.error().find("several GPU archs (sm80+sm89)"), std::string::npos);
  target::Target t = key("sm89-torch2.9-cu128-cp312");
  t.torch = target::Axis{"", "", "torch not found in /usr/lib/python3/dist-packages"};
  EXPECT_EQ(target_folder(t).error(), "torch not found in /usr/lib/python3/dist-packages");
}

TEST(PublishPlan, TheWheelMustRunOnTheTarget) {
  const auto t = key("sm89-torch2.9-cu128-cp311");
  EXPECT_EQ(misfit(wheel("a-1.0+cu128torch2.9-cp311-cp311-linux_x86_64.whl"), t), std::nullopt);
  EXPECT_EQ(misfit(wheel("a-1.0-cp39-abi3-manylinux_2_28_x86_64.whl"), t), std::nullopt);
  EXPECT_EQ(misfit(wheel("a-1.0-py3-none-any.whl"), t), std::nullopt);
  EXPECT_EQ(misfit(wheel("a-1.0+cu128torch2.9-cp312-cp312-linux_x86_64.whl"), t),
            "its tags cp312-cp312-linux_x86_64 do not run on the target's Python cp311 on "
            "x86_64 glibc 2.36");
  EXPECT_EQ(misfit(wheel("a-1.0-cp311-cp311-manylinux_2_39_x86_64.whl"), t),
            "its tags cp311-cp311-manylinux_2_39_x86_64 do not run on the target's Python cp311 "
            "on x86_64 glibc 2.36");
  EXPECT_EQ(misfit(wheel("a-1.0-cp311-cp311-linux_aarch64.whl"), t),
            "its tags cp311-cp311-linux_aarch64 do not run on the target's Python cp311 on "
            "x86_64 glibc 2.36");
  EXPECT_EQ(misfit(wheel("a-1.0+cu128torch2.7-cp311-cp311-linux_x86_64.whl"), t),
            "its local version +cu128torch2.7 names torch 2.7; the target has torch 2.9");
}

TEST(PublishPlan, ThePathIsPackageFolderAndFileName) {
  WheelFacts w;
  w.file_name = "flash_attn-2.8.3+cu128torch2.9-cp312-cp312-linux_x86_64.whl";
  w.name = wheel(w.file_name);
  EXPECT_EQ(repo_path(w, *target_folder(key("sm89-torch2.9-cu128-cp312"))),
            "flash_attn/sm89/torch2.9-cu128/"
            "flash_attn-2.8.3+cu128torch2.9-cp312-cp312-linux_x86_64.whl");
}

TEST(PublishPlan, WhatIsAlreadyThereDecides) {
  const Content local{1234, std::string(64, 'a'), std::string(40, 'b')};
  RemoteEntry lfs{
      "p/x.whl", RemoteEntry::Type::kFile, 1234, std::string(40, 'c'), std::string(64, 'a'), ""};
  EXPECT_EQ(decide(local, nullptr, false).action, Action::kUpload);
  EXPECT_EQ(decide(local, &lfs, false).action, Action::kSame);
  EXPECT_EQ(decide(local, &lfs, true).action, Action::kSame);  // nothing to replace
  RemoteEntry other = lfs;
  other.lfs_sha256 = std::string(64, 'd');
  const Decision refused = decide(local, &other, false);
  EXPECT_EQ(refused.action, Action::kConflict);
  EXPECT_EQ(refused.reason,
            "another file is there (1234 bytes, sha256 dddddddddddd); --replace replaces it");
  EXPECT_EQ(decide(local, &other, true).action, Action::kReplace);
  // A plain (non-LFS) file is compared by its git blob id.
  RemoteEntry plain{"p/x.whl", RemoteEntry::Type::kFile, 1234, std::string(40, 'b'), "", ""};
  EXPECT_EQ(decide(local, &plain, false).action, Action::kSame);
  plain.oid = std::string(40, 'e');
  EXPECT_EQ(decide(local, &plain, false).action, Action::kConflict);
  RemoteEntry folder{"p/x.whl", RemoteEntry::Type::kDirectory, 0, std::string(40, 'f'), "", ""};
  EXPECT_EQ(decide(local, &folder, true).action, Action::kConflict);
}

}  // namespace
}  // namespace whfs::check
