#include "fs/targeting/target.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fs/targeting/policy.h"
#include "tests/unit/targeting/fixtures.h"

namespace whfs::target {
namespace {

// Facts as the readers give them: a CPython 3.12 (glibc 2.36) with torch 2.9 (CUDA 12.8), and
// a machine whose one GPU the process may use.
class Compose : public ::testing::Test {
 protected:
  void SetUp() override {
    python_.implementation = "cpython";
    python_.major = 3;
    python_.minor = 12;
    python_.executable = "/work/venv/bin/python";
    python_.glibc = "2.36";
    python_.platform = "linux-x86_64";
    torch_.version = "2.9.0+cu128";
    torch_.major_minor = "2.9";
    torch_.cuda = "12.8";
    torch_.path = "/work/venv/lib/python3.12/site-packages/torch/version.py";
    gpus_.api = GpuApi::kRuntime;
    gpus_.library = "libcudart.so.12";
    GpuDevice d;
    d.major = 8;
    d.minor = 9;
    gpus_.devices = {d};
    visible_ = visible_gpus(gpus_, GpuEnv{});
    facts_.python = &python_;
    facts_.torch = &torch_;
    facts_.machine_gpus = &gpus_;
    facts_.visible = &visible_;
    facts_.host = HostPlatform{"x86_64", "2.31"};
  }

  PythonInfo python_;
  TorchInfo torch_;
  GpuReport gpus_;
  VisibleGpus visible_;
  TargetFacts facts_;
};

// The package layouts of the issue: sm80/sm89/sm120 folders.
const PackageFolders kLayout = {{"sm80", {"torch2.9-cu128"}},
                                {"sm89", {"torch2.9-cu128", "torch2.9-cu126"}},
                                {"sm120", {"torch2.9-cu128"}}};

TEST_F(Compose, EverythingFromTheFacts) {
  const Target t = compose_target({}, facts_);
  EXPECT_EQ(t.arch.value, "sm89");
  EXPECT_EQ(
      t.arch.source,
      "CUDA_VISIBLE_DEVICES unset: device 0 (sm89), through the CUDA runtime libcudart.so.12");
  EXPECT_EQ(t.torch.value, "2.9");
  EXPECT_EQ(t.torch.source, "torch 2.9.0+cu128 (" + torch_.path + ")");
  EXPECT_EQ(t.cuda.value, "12.8");
  EXPECT_EQ(t.python_tag.value, "cp312");
  EXPECT_EQ(t.python_tag.source, "the interpreter /work/venv/bin/python (CPython 3.12)");
  EXPECT_EQ(t.machine, "x86_64");
  EXPECT_EQ(t.libc, "2.36");  // the interpreter's root, not the host
  EXPECT_EQ(t.platforms.front(), "manylinux_2_36_x86_64");
  EXPECT_TRUE(t.tags.rank(Tag{"cp312", "cp312", "linux_x86_64"}));
  EXPECT_FALSE(t.tags.rank(Tag{"cp311", "cp311", "linux_x86_64"}));
  EXPECT_TRUE(t.notes.empty());
  EXPECT_EQ(choose_folder(t, kLayout).path(), "sm89/torch2.9-cu128");
  EXPECT_EQ(summary(t), "sm89, torch 2.9, CUDA 12.8, cp312");
}

TEST_F(Compose, TorchVariants) {
  torch_.version = "2.9.0+cpu";
  torch_.cuda = "";
  auto t = compose_target({}, facts_);
  EXPECT_EQ(t.torch.value, "2.9");
  EXPECT_FALSE(t.cuda.has_value());
  EXPECT_EQ(t.cuda.missing,
            "torch 2.9.0+cpu is a CPU build: its version.py has cuda = None (set cuda= to "
            "override)");
  facts_.torch = nullptr;
  facts_.torch_error = "torch not found in /work/venv/lib/python3.12/site-packages";
  t = compose_target({}, facts_);
  EXPECT_EQ(t.torch.missing, facts_.torch_error);
  EXPECT_EQ(t.cuda.missing, facts_.torch_error);
  EXPECT_EQ(t.arch.value, "sm89");
}

TEST_F(Compose, OverridesEachOnTheirOwn) {
  TargetOverrides o;
  o.cuda = "cu126";
  auto t = compose_target(o, facts_);
  EXPECT_EQ(t.cuda.value, "12.6");
  EXPECT_EQ(t.cuda.source, "override cuda=cu126 (mount option or WHEELHOUSE_CUDA)");
  EXPECT_EQ(t.torch.value, "2.9");  // still from the facts
  o = {};
  o.arch = "8.6";
  t = compose_target(o, facts_);
  EXPECT_EQ(t.arch.value, "sm86");
  EXPECT_TRUE(t.gpus.empty());
  o = {};
  o.arch = "sm89+sm80";
  EXPECT_EQ(compose_target(o, facts_).arch.value, "sm80+sm89");
  o = {};
  o.python_tag = "3.13t";
  t = compose_target(o, facts_);
  EXPECT_EQ(t.python_tag.value, "cp313t");
  EXPECT_TRUE(t.tags.rank(Tag{"cp313", "cp313t", "manylinux_2_36_x86_64"}));
}

TEST_F(Compose, NoInterpreterUsesTheHostsPlatformForAnOverriddenTag) {
  TargetOverrides o;
  o.arch = "sm120";
  o.torch = "2.9";
  o.cuda = "12.8";
  o.python_tag = "cp312";
  TargetFacts none;
  none.python_error = "not read: torch, cuda and python_tag are all overridden";
  none.host = HostPlatform{"x86_64", "2.31"};
  const auto t = compose_target(o, none);
  EXPECT_FALSE(t.python);
  EXPECT_EQ(t.libc, "2.31");
  EXPECT_EQ(t.platforms.front(), "manylinux_2_31_x86_64");
  EXPECT_EQ(choose_folder(t, kLayout).path(), "sm120/torch2.9-cu128");
}

TEST_F(Compose, BadOverridesAreReportedNotReplaced) {
  TargetOverrides o;
  o.arch = "ampere";
  o.torch = "2.9.0+cu128";
  const auto t = compose_target(o, facts_);
  EXPECT_FALSE(t.arch.has_value());
  EXPECT_EQ(t.arch.missing,
            "arch=ampere: expected smXY as in the folder names (sm89, sm120) or a compute "
            "capability (8.9)");
  EXPECT_FALSE(t.torch.has_value());
  EXPECT_NE(t.torch.missing.find("torch=2.9.0+cu128: expected major.minor"), std::string::npos);
}

TEST_F(Compose, NoPythonNoGpu) {
  facts_.python = nullptr;
  facts_.torch = nullptr;
  facts_.python_error = "no python3 on the process's PATH (/nowhere)";
  GpuReport none;
  none.error = "no CUDA library could be loaded";
  const VisibleGpus nothing = visible_gpus(none, GpuEnv{});
  facts_.machine_gpus = &none;
  facts_.visible = &nothing;
  const auto t = compose_target({}, facts_);
  EXPECT_EQ(t.python_tag.missing,
            "no Python interpreter: no python3 on the process's PATH (/nowhere)");
  EXPECT_TRUE(t.tags.empty());
  EXPECT_EQ(t.torch.missing, t.python_tag.missing);
  EXPECT_EQ(t.arch.missing, "no GPU found on this machine: no CUDA library could be loaded");
  EXPECT_EQ(choose_folder(t, kLayout).reason, "no GPU arch: " + t.arch.missing);
}

TEST_F(Compose, DebugAndOtherPythonsAreNotGuessed) {
  python_.abiflags = "d";
  EXPECT_NE(compose_target({}, facts_).python_tag.missing.find("ABI flags"), std::string::npos);
  python_.abiflags = "";
  python_.implementation = "pypy";
  EXPECT_NE(compose_target({}, facts_).python_tag.missing.find("CPython wheels"),
            std::string::npos);
}

TEST_F(Compose, Json) {
  TargetOverrides o;
  o.python_tag = "cp311";
  const auto j = to_json(compose_target(o, facts_));
  EXPECT_EQ(j["arch"]["value"], "sm89");
  EXPECT_EQ(j["python_tag"]["value"], "cp311");
  EXPECT_EQ(j["python_tag"]["source"],
            "override python_tag=cp311 (mount option or WHEELHOUSE_PYTHON_TAG)");
  EXPECT_EQ(j["torch_install"]["version"], "2.9.0+cu128");
  EXPECT_EQ(j["gpus"][0]["arch"], "sm89");
  EXPECT_EQ(j["python"]["version"], "3.12");
  EXPECT_EQ(j["glibc"], "2.36");
  EXPECT_EQ(j["platforms"].size(), 36u);
  const auto missing = to_json(Target{});
  EXPECT_TRUE(missing["arch"]["value"].is_null());
  EXPECT_TRUE(missing["arch"]["missing"].is_string());
  EXPECT_TRUE(missing["python"].is_null());
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
  EXPECT_EQ(*normalize_python_tag("cp313t"), "cp313t");
  EXPECT_EQ(*normalize_python_tag("3.13t"), "cp313t");
  EXPECT_FALSE(normalize_python_tag("py3"));
  EXPECT_FALSE(normalize_python_tag("cp27"));
  EXPECT_FALSE(normalize_python_tag("t"));
  EXPECT_FALSE(normalize_python_tag("cp3"));
  EXPECT_EQ(*normalize_arch("sm89+8.0+sm89"), "sm80+sm89");
  EXPECT_EQ(*normalize_arch("sm120+sm89"), "sm89+sm120");
  EXPECT_FALSE(normalize_arch("sm89+"));

  TargetOverrides o;
  EXPECT_TRUE(validate_overrides(o));
  o.cuda = "twelve";
  const auto v = validate_overrides(o);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error(), "cuda=twelve: expected major.minor such as 12.8 (or the folder form cu128)");
}

}  // namespace
}  // namespace whfs::target
