#include "fs/targeting/policy.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace whfs::target {
namespace {

Target target(const std::string& arch, const std::string& torch, const std::string& cuda) {
  Target t;
  t.arch = {arch, "test", arch.empty() ? "no GPU found" : ""};
  t.torch = {torch, "test", torch.empty() ? "torch not found in /x" : ""};
  t.cuda = {cuda, "test", cuda.empty() ? "a CPU build" : ""};
  return t;
}

// The layout of one package in the dataset: arch folder -> torch folders.
const PackageFolders kLayout = {
    {"sm80", {"torch2.9-cu128", "torch2.7-cu126"}},
    {"sm89", {"torch2.9-cu128", "torch2.9-cu126", "torch2.8-cu128"}},
    {"sm120", {"torch2.9-cu128"}},
};

struct Row {
  const char* arch;
  const char* torch;
  const char* cuda;
  const char* folder;      // "" when nothing matches
  const char* reason_has;  // a piece of the reason
};

TEST(Policy, Table) {
  const Row rows[] = {
      {"sm89", "2.9", "12.8", "sm89/torch2.9-cu128", "sm89 matches the GPU exactly"},
      {"sm86", "2.9", "12.8", "sm80/torch2.9-cu128", "no sm86 folder; sm80 runs on sm86"},
      {"sm90", "2.9", "12.8", "", "no sm9x folder at or below sm90"},
      {"sm120", "2.9", "12.8", "sm120/torch2.9-cu128", "sm120 matches the GPU exactly"},
      {"sm89", "2.6", "12.8", "", "no torch2.6 folder for sm89"},
      {"sm89", "2.9", "12.6", "sm89/torch2.9-cu126", "torch2.9-cu126 matches torch 2.9"},
      {"sm89", "2.9", "12.9", "sm89/torch2.9-cu128", "cu128 is the closest older CUDA 12"},
      {"sm80", "2.9", "12.6", "sm80/torch2.9-cu128", "cu128 is newer than torch's CUDA 12.6"},
      {"sm89", "2.9", "11.8", "", "only cu12x builds for torch 2.9 in sm89"},
      {"sm89", "2.8", "12.8", "sm89/torch2.8-cu128", "torch2.8-cu128 matches"},
      {"sm75", "2.9", "12.8", "", "no sm7x folder at or below sm75"},
  };
  for (const auto& r : rows) {
    const auto c = choose_folder(target(r.arch, r.torch, r.cuda), kLayout);
    const std::string where = std::string(r.arch) + " torch " + r.torch + " cuda " + r.cuda;
    EXPECT_EQ(c.found, *r.folder != '\0') << where << ": " << c.reason;
    if (c.found) {
      EXPECT_EQ(c.path(), r.folder) << where;
    }
    EXPECT_NE(c.reason.find(r.reason_has), std::string::npos) << where << ": " << c.reason;
  }
}

TEST(Policy, NeverAcrossMajors) {
  const PackageFolders layout = {{"sm80", {"torch2.9-cu128"}}, {"sm89", {"torch2.9-cu128"}}};
  const auto c = choose_folder(target("sm90", "2.9", "12.8"), layout);
  EXPECT_FALSE(c.found);
  EXPECT_EQ(c.reason,
            "no sm9x folder at or below sm90 (only sm80, sm89, which cannot run on sm90)");
  EXPECT_FALSE(choose_folder(target("sm120", "2.9", "12.8"), {{"sm89", {"torch2.9-cu128"}}}).found);
}

TEST(Policy, HighestLowerMinorOfTheSameMajor) {
  const PackageFolders layout = {{"sm80", {"torch2.9-cu128"}}, {"sm86", {"torch2.9-cu128"}}};
  EXPECT_EQ(choose_folder(target("sm89", "2.9", "12.8"), layout).path(), "sm86/torch2.9-cu128");
  EXPECT_EQ(choose_folder(target("sm86", "2.9", "12.8"), layout).path(), "sm86/torch2.9-cu128");
  EXPECT_EQ(choose_folder(target("sm80", "2.9", "12.8"), layout).path(), "sm80/torch2.9-cu128");
}

TEST(Policy, FallsBackToACompatibleArchWhenTheExactOneLacksTheTorch) {
  const PackageFolders layout = {{"sm80", {"torch2.9-cu128"}}, {"sm89", {"torch2.7-cu126"}}};
  const auto c = choose_folder(target("sm89", "2.9", "12.8"), layout);
  ASSERT_TRUE(c.found) << c.reason;
  EXPECT_EQ(c.path(), "sm80/torch2.9-cu128");
  EXPECT_EQ(c.reason,
            "no torch2.9 folder for sm89 (it has torch2.7-cu126); sm80 runs on sm89 (same "
            "major, lower minor); torch2.9-cu128 matches torch 2.9 with CUDA 12.8");
}

TEST(Policy, CudaPreferenceExactThenOlderThenNewer) {
  const PackageFolders layout = {
      {"sm89", {"torch2.9-cu121", "torch2.9-cu124", "torch2.9-cu128", "torch2.9-cu129"}}};
  EXPECT_EQ(choose_folder(target("sm89", "2.9", "12.8"), layout).torch_folder, "torch2.9-cu128");
  EXPECT_EQ(choose_folder(target("sm89", "2.9", "12.6"), layout).torch_folder, "torch2.9-cu124");
  EXPECT_EQ(choose_folder(target("sm89", "2.9", "12.0"), layout).torch_folder, "torch2.9-cu121");
  const auto c = choose_folder(target("sm89", "2.9", "13.0"), layout);
  EXPECT_FALSE(c.found);
  EXPECT_EQ(c.reason, "only cu12x builds for torch 2.9 in sm89; CUDA 13.0 needs a cu13x build");
}

TEST(Policy, MissingAxesAndOddFolders) {
  EXPECT_EQ(choose_folder(target("", "2.9", "12.8"), kLayout).reason, "no GPU arch: no GPU found");
  EXPECT_EQ(choose_folder(target("sm89", "", "12.8"), kLayout).reason,
            "no torch version: torch not found in /x");
  EXPECT_EQ(choose_folder(target("sm89", "2.9", ""), kLayout).reason,
            "no CUDA version: a CPU build");
  const PackageFolders odd = {
      {"sm89", {"torch2.9-cu128", "torch2.9", "notes"}}, {"docs", {}}, {"sm8", {}}, {"smXY", {}}};
  const auto c = choose_folder(target("sm89", "2.9", "12.8"), odd);
  EXPECT_TRUE(c.found);
  EXPECT_EQ(c.ignored,
            (std::vector<std::string>{"docs", "sm8", "smXY", "sm89/torch2.9", "sm89/notes"}));
}

TEST(Policy, FolderNames) {
  EXPECT_EQ(parse_arch_folder("sm120")->major, 12);
  EXPECT_EQ(parse_arch_folder("sm120")->minor, 0);
  EXPECT_EQ(parse_arch_folder("sm89")->minor, 9);
  EXPECT_FALSE(parse_arch_folder("sm8"));
  EXPECT_FALSE(parse_arch_folder("sm089"));
  EXPECT_FALSE(parse_arch_folder("sm90a"));
  const auto f = parse_torch_folder("torch2.10-cu130");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->torch_minor, 10);
  EXPECT_EQ(f->cuda_major, 13);
  EXPECT_EQ(f->cuda_minor, 0);
  EXPECT_FALSE(parse_torch_folder("torch2.9-cpu"));
  EXPECT_FALSE(parse_torch_folder("torch2-cu128"));
  EXPECT_FALSE(parse_torch_folder("torch2.9-cu"));
}

TEST(Policy, Json) {
  const auto j = to_json(choose_folder(target("sm86", "2.9", "12.8"), kLayout));
  EXPECT_EQ(j["found"], true);
  EXPECT_EQ(j["folder"], "sm80/torch2.9-cu128");
  EXPECT_TRUE(j["reason"].is_string());
  EXPECT_TRUE(to_json(choose_folder(target("sm90", "2.9", "12.8"), kLayout))["folder"].is_null());
}

}  // namespace
}  // namespace whfs::target
