#include "fs/target/target.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fs/target/policy.h"
#include "tests/unit/target/fixtures.h"

namespace whfs::target {
namespace {

using testing::ScopedEnv;
using testing::TempDir;

// A machine made of fakes: a CPython 3.12 (glibc 2.36) whose site-packages holds a torch
// install and the fake libcudart where pip puts torch's CUDA runtime.
class Detect : public ::testing::Test {
 protected:
  void SetUp() override {
    site_ = dir_.path() / "site-packages";
    std::filesystem::create_directories(site_);
    python_ = testing::write_fake_python(dir_.path(), 12, 36, site_);
    const auto lib = site_ / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12";
    std::filesystem::create_directories(lib.parent_path());
    std::filesystem::copy_file(FAKE_CUDART_PATH, lib);
    bundled_cudart_ = lib.string();
    // Only the fakes: no system CUDA library takes part.
    options_.gpu.system_runtimes = {};
    options_.gpu.drivers = {};
    options_.gpu.nvml = {};
  }

  TargetOverrides overrides() const {
    TargetOverrides o;
    o.python = python_;
    return o;
  }

  TempDir dir_;
  std::filesystem::path site_;
  std::string python_;
  std::string bundled_cudart_;
  DetectOptions options_;
  ScopedEnv devices_{"FAKE_CUDA_DEVICES", std::nullopt};
  ScopedEnv error_{"FAKE_CUDA_ERROR", std::nullopt};
};

// The package layouts of the issue: sm80/sm89/sm120 folders.
const PackageFolders kLayout = {{"sm80", {"torch2.9-cu128"}},
                                {"sm89", {"torch2.9-cu128", "torch2.9-cu126"}},
                                {"sm120", {"torch2.9-cu128"}}};

TEST_F(Detect, EverythingFromTheMachine) {
  testing::write_torch(site_, "2.9.0+cu128", "12.8");
  ScopedEnv env("FAKE_CUDA_DEVICES", "8.9");
  const Target t = detect_target(overrides(), options_);
  EXPECT_EQ(t.arch.value, "sm89");
  EXPECT_EQ(t.arch.source, "device 0 through the CUDA runtime " + bundled_cudart_);
  EXPECT_EQ(t.torch.value, "2.9");
  EXPECT_EQ(t.torch.source, "torch 2.9.0+cu128 (" + (site_ / "torch/version.py").string() + ")");
  EXPECT_EQ(t.cuda.value, "12.8");
  EXPECT_EQ(t.python_tag.value, "cp312");
  EXPECT_EQ(t.python_tag.source, "interpreter " + python_ + " (CPython 3.12)");
  EXPECT_EQ(t.platforms.front(), "manylinux_2_36_x86_64");
  EXPECT_TRUE(t.tags.rank(Tag{"cp312", "cp312", "linux_x86_64"}));
  EXPECT_FALSE(t.tags.rank(Tag{"cp311", "cp311", "linux_x86_64"}));
  EXPECT_TRUE(t.notes.empty());
  EXPECT_EQ(choose_folder(t, kLayout).path(), "sm89/torch2.9-cu128");
}

TEST_F(Detect, Sm86UsesSm80AndSm90UsesNothing) {
  testing::write_torch(site_, "2.9.0+cu128", "12.8");
  {
    ScopedEnv env("FAKE_CUDA_DEVICES", "8.6");
    EXPECT_EQ(choose_folder(detect_target(overrides(), options_), kLayout).path(),
              "sm80/torch2.9-cu128");
  }
  ScopedEnv env("FAKE_CUDA_DEVICES", "9.0");
  const auto c = choose_folder(detect_target(overrides(), options_), kLayout);
  EXPECT_FALSE(c.found);
  EXPECT_NE(c.reason.find("no sm9x folder at or below sm90"), std::string::npos) << c.reason;
}

TEST_F(Detect, TorchVariants) {
  ScopedEnv env("FAKE_CUDA_DEVICES", "8.9");
  testing::write_torch(site_, "2.9.0+cu126", "12.6");
  auto t = detect_target(overrides(), options_);
  EXPECT_EQ(choose_folder(t, kLayout).path(), "sm89/torch2.9-cu126");

  testing::write_torch(site_, "2.7.1+cu128", "12.8");
  t = detect_target(overrides(), options_);
  EXPECT_EQ(t.torch.value, "2.7");
  EXPECT_EQ(choose_folder(t, kLayout).reason,
            "no torch2.7 folder for sm89 (it has torch2.9-cu128, torch2.9-cu126); no torch2.7 "
            "folder for sm80 (it has torch2.9-cu128)");

  testing::write_torch(site_, "2.9.0+cpu", "");
  t = detect_target(overrides(), options_);
  EXPECT_EQ(t.torch.value, "2.9");
  EXPECT_FALSE(t.cuda.has_value());
  EXPECT_EQ(t.cuda.missing,
            "torch 2.9.0+cpu is a CPU build: its version.py has cuda = None (set cuda= to "
            "override)");

  std::filesystem::remove_all(site_ / "torch");
  t = detect_target(overrides(), options_);
  EXPECT_EQ(t.torch.missing, "torch not found in " + site_.string());
  EXPECT_EQ(t.cuda.missing, t.torch.missing);
  EXPECT_EQ(t.arch.value, "sm89");  // the GPU is still found through torch's runtime folder
}

TEST_F(Detect, OverridesEachOnTheirOwn) {
  testing::write_torch(site_, "2.9.0+cu128", "12.8");
  ScopedEnv env("FAKE_CUDA_DEVICES", "8.9");
  auto o = overrides();
  o.cuda = "cu126";
  auto t = detect_target(o, options_);
  EXPECT_EQ(t.cuda.value, "12.6");
  EXPECT_EQ(t.cuda.source, "override cuda=cu126 (mount option or WHEELHOUSE_CUDA)");
  EXPECT_EQ(t.torch.value, "2.9");  // still detected
  EXPECT_EQ(t.arch.value, "sm89");

  o = overrides();
  o.arch = "8.6";
  t = detect_target(o, options_);
  EXPECT_EQ(t.arch.value, "sm86");
  EXPECT_FALSE(t.gpu);  // no probe when the arch is given

  o = overrides();
  o.python_tag = "cp310";
  t = detect_target(o, options_);
  EXPECT_EQ(t.python_tag.value, "cp310");
  EXPECT_TRUE(t.tags.rank(Tag{"cp310", "cp310", "manylinux_2_36_x86_64"}));  // this machine's glibc
  EXPECT_FALSE(t.tags.rank(Tag{"cp312", "cp312", "linux_x86_64"}));
}

TEST_F(Detect, AllOverriddenAsksNothing) {
  TargetOverrides o;
  o.python = "/nonexistent/python";
  o.arch = "sm120";
  o.torch = "2.9";
  o.cuda = "12.8";
  o.python_tag = "cp312";
  const auto t = detect_target(o, options_);
  EXPECT_FALSE(t.python);
  EXPECT_FALSE(t.gpu);
  EXPECT_EQ(t.arch.value, "sm120");
  EXPECT_EQ(t.python_tag.value, "cp312");
  EXPECT_FALSE(t.tags.empty());  // platforms from this process
  EXPECT_EQ(choose_folder(t, kLayout).path(), "sm120/torch2.9-cu128");
}

TEST_F(Detect, BadOverridesAreReportedNotReplaced) {
  testing::write_torch(site_, "2.9.0+cu128", "12.8");
  ScopedEnv env("FAKE_CUDA_DEVICES", "8.9");
  auto o = overrides();
  o.arch = "ampere";
  o.torch = "2.9.0+cu128";
  const auto t = detect_target(o, options_);
  EXPECT_FALSE(t.arch.has_value());
  EXPECT_EQ(t.arch.missing,
            "arch=ampere: expected smXY as in the folder names (sm89, sm120) or a compute "
            "capability (8.9)");
  EXPECT_FALSE(t.torch.has_value());
  EXPECT_NE(t.torch.missing.find("torch=2.9.0+cu128: expected major.minor"), std::string::npos);
  EXPECT_FALSE(t.gpu);
}

TEST_F(Detect, NoPythonNoGpu) {
  ScopedEnv env("FAKE_CUDA_DEVICES", "");
  auto o = overrides();
  o.python = dir_.str("missing-python");
  o.cudart = FAKE_CUDART_PATH;
  const auto t = detect_target(o, options_);
  EXPECT_NE(t.python_tag.missing.find("no Python interpreter: python interpreter '"),
            std::string::npos)
      << t.python_tag.missing;
  EXPECT_TRUE(t.tags.empty());
  EXPECT_EQ(t.torch.missing, t.python_tag.missing);
  EXPECT_NE(t.arch.missing.find("no CUDA device is visible"), std::string::npos) << t.arch.missing;
  EXPECT_EQ(choose_folder(t, kLayout).reason, "no GPU arch: " + t.arch.missing);
}

TEST_F(Detect, HeterogeneousNodeIsANote) {
  testing::write_torch(site_, "2.9.0+cu128", "12.8");
  ScopedEnv env("FAKE_CUDA_DEVICES", "8.9,8.6");
  const auto t = detect_target(overrides(), options_);
  EXPECT_EQ(t.arch.value, "sm89");
  ASSERT_EQ(t.notes.size(), 1u);
  EXPECT_NE(t.notes[0].find("devices differ: 0 sm89, 1 sm86; using device 0"), std::string::npos);
}

TEST_F(Detect, Json) {
  testing::write_torch(site_, "2.9.0+cu128", "12.8");
  ScopedEnv env("FAKE_CUDA_DEVICES", "8.9");
  auto o = overrides();
  o.python_tag = "cp311";
  const auto j = to_json(detect_target(o, options_));
  EXPECT_EQ(j["arch"]["value"], "sm89");
  EXPECT_EQ(j["python_tag"]["value"], "cp311");
  EXPECT_EQ(j["python_tag"]["source"],
            "override python_tag=cp311 (mount option or WHEELHOUSE_PYTHON_TAG)");
  EXPECT_EQ(j["torch_install"]["version"], "2.9.0+cu128");
  EXPECT_EQ(j["gpu"]["devices"][0]["arch"], "sm89");
  EXPECT_EQ(j["gpu"]["runtime_version"], "12.8");
  EXPECT_EQ(j["python"]["version"], "3.12");
  EXPECT_EQ(j["platforms"].size(), 36u);

  const auto missing = to_json(Target{});
  EXPECT_TRUE(missing["arch"]["value"].is_null());
  EXPECT_TRUE(missing["arch"]["missing"].is_string());
  EXPECT_EQ(missing["gpu"]["skipped"], "arch is overridden");
}

TEST(Overrides, NormalizedOrExplained) {
  EXPECT_EQ(*normalize_arch("sm89"), "sm89");
  EXPECT_EQ(*normalize_arch("sm_90"), "sm90");
  EXPECT_EQ(*normalize_arch("12.0"), "sm120");
  EXPECT_FALSE(normalize_arch("sm8"));
  EXPECT_FALSE(normalize_arch("8.10"));
  EXPECT_FALSE(normalize_arch("sm90a"));
  EXPECT_EQ(*normalize_torch("2.9"), "2.9");
  EXPECT_EQ(*normalize_torch("2.10.1"), "2.10");
  EXPECT_FALSE(normalize_torch("2"));
  EXPECT_FALSE(normalize_torch("latest"));
  EXPECT_EQ(*normalize_cuda("12.8"), "12.8");
  EXPECT_EQ(*normalize_cuda("12.8.1"), "12.8");
  EXPECT_EQ(*normalize_cuda("cu130"), "13.0");
  EXPECT_FALSE(normalize_cuda("12"));
  EXPECT_FALSE(normalize_cuda("cu1"));
  EXPECT_EQ(*normalize_python_tag("cp312"), "cp312");
  EXPECT_EQ(*normalize_python_tag("3.9"), "cp39");
  EXPECT_FALSE(normalize_python_tag("py3"));
  EXPECT_FALSE(normalize_python_tag("cp27"));

  TargetOverrides o;
  EXPECT_TRUE(validate_overrides(o));
  o.cuda = "twelve";
  const auto v = validate_overrides(o);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error(), "cuda=twelve: expected major.minor such as 12.8 (or the folder form cu128)");
}

TEST(Overrides, DefaultOptionsReadCudaVisibleDevices) {
  const auto with = default_detect_options([](const char* name) -> const char* {
    return std::string_view(name) == "CUDA_VISIBLE_DEVICES" ? "1,0" : nullptr;
  });
  EXPECT_EQ(with.gpu.cuda_visible_devices, "1,0");
  const auto without = default_detect_options([](const char*) -> const char* { return nullptr; });
  EXPECT_FALSE(without.gpu.cuda_visible_devices);
  EXPECT_EQ(without.gpu.drivers, std::vector<std::string>{"libcuda.so.1"});
}

}  // namespace
}  // namespace whfs::target
