// What a local version label names, in the spellings builders use.
#include "fs/check/local_version.h"

#include <gtest/gtest.h>

namespace whfs::check {
namespace {

std::string named(std::string_view version) {
  const LocalBuild b = parse_local_build(version);
  auto pair = [](const std::optional<VersionPair>& v) {
    if (!v) return std::string("-");
    return std::to_string(v->major) + (v->minor >= 0 ? "." + std::to_string(v->minor) : "");
  };
  return "cuda " + pair(b.cuda) + " torch " + pair(b.torch) + (b.cpu ? " cpu" : "") +
         (b.rocm ? " rocm" : "");
}

TEST(LocalVersion, CommonSpellings) {
  EXPECT_EQ(named("2.8.3+cu128torch2.9"), "cuda 12.8 torch 2.9");
  EXPECT_EQ(named("2.8.3+cu12torch2.9cxx11abiTRUE"), "cuda 12 torch 2.9");
  EXPECT_EQ(named("0.21.0+torch250cu124"), "cuda 12.4 torch 2.5");
  EXPECT_EQ(named("0.21.0+torch2100cu130"), "cuda 13.0 torch 2.10");
  EXPECT_EQ(named("2.1.2+pt25cu124"), "cuda 12.4 torch 2.5");
  EXPECT_EQ(named("2.1.2+pt210cu128"), "cuda 12.8 torch 2.10");
  EXPECT_EQ(named("1.0+cu118"), "cuda 11.8 torch -");
  EXPECT_EQ(named("1.0+cu92"), "cuda 9.2 torch -");
  EXPECT_EQ(named("1.0+torch2.9.1"), "cuda - torch 2.9");
  EXPECT_EQ(named("1.0+cuda12.8.torch2.7"), "cuda 12.8 torch 2.7");
  EXPECT_EQ(named("1.0+CU128.Torch2.9"), "cuda 12.8 torch 2.9");
  EXPECT_EQ(named("1.0+cpu"), "cuda - torch - cpu");
  EXPECT_EQ(named("1.0+rocm6.2"), "cuda - torch - rocm");
}

TEST(LocalVersion, OnlyWhereAWordStarts) {
  EXPECT_EQ(named("1.0"), "cuda - torch -");
  EXPECT_EQ(named("1.0+cxx11abiTRUE"), "cuda - torch -");
  EXPECT_EQ(named("1.0+opt3.custom"), "cuda - torch -");
  EXPECT_EQ(named("1.0+cupy.torchvision"), "cuda - torch -");
  EXPECT_EQ(named("1.0+cpux"), "cuda - torch -");
}

TEST(LocalVersion, ConflictsNameTheBuildAndTheTarget) {
  EXPECT_EQ(local_version_conflict("2.8.3+cu128torch2.9", "2.9", "12.8"), std::nullopt);
  EXPECT_EQ(local_version_conflict("2.8.3+cu12torch2.9", "2.9", "12.8"), std::nullopt);
  EXPECT_EQ(local_version_conflict("2.8.3", "2.9", "12.8"), std::nullopt);
  EXPECT_EQ(local_version_conflict("2.8.3+cu128", "2.7", "12.8"), std::nullopt);
  EXPECT_EQ(local_version_conflict("2.8.3+cu126torch2.9", "2.9", "12.8"),
            "its local version +cu126torch2.9 names CUDA 12.6; the target has CUDA 12.8");
  EXPECT_EQ(local_version_conflict("2.8.3+cu11torch2.9", "2.9", "12.8"),
            "its local version +cu11torch2.9 names CUDA 11; the target has CUDA 12.8");
  EXPECT_EQ(local_version_conflict("2.8.3+cu128torch2.7", "2.9", "12.8"),
            "its local version +cu128torch2.7 names torch 2.7; the target has torch 2.9");
  EXPECT_EQ(local_version_conflict("0.21.0+torch250cu128", "2.9", "12.8"),
            "its local version +torch250cu128 names torch 2.5; the target has torch 2.9");
  EXPECT_EQ(local_version_conflict("2.8.3+cpu", "2.9", "12.8"),
            "its local version +cpu names a CPU-only build; the folder is for CUDA 12.8");
}

}  // namespace
}  // namespace whfs::check
