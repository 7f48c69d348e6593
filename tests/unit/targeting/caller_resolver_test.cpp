// A process's target and its caller section from facts made by hand: no process, no file.
#include "fs/targeting/caller_resolver.h"

#include <gtest/gtest.h>

#include "fs/targeting/caller_report.h"

namespace whfs::target {
namespace {

class Resolve : public ::testing::Test {
 protected:
  void SetUp() override {
    process_.pid = 4242;
    process_.exe_name = "python3.12";
    process_.env = {{"CUDA_VISIBLE_DEVICES", "1"}};
    PythonInfo py;
    py.implementation = "cpython";
    py.major = 3;
    py.minor = 12;
    py.executable = "/venv/bin/python3";
    py.glibc = "2.36";
    py.platform = "linux-x86_64";
    python_.python = py;
    TorchInfo torch;
    torch.version = "2.9.0+cu128";
    torch.major_minor = "2.9";
    torch.cuda = "12.8";
    torch.path = "/venv/lib/python3.12/site-packages/torch/version.py";
    python_.torch = torch;
    gpus_.library = "libcudart.so.12";
    GpuDevice a;
    a.major = 8;
    a.minor = 9;
    GpuDevice b = a;
    b.index = 1;
    b.minor = 6;
    gpus_.devices = {a, b};
    facts_.pid = process_.pid;
    facts_.process = &process_;
    facts_.interpreter = "/venv/bin/python3";
    facts_.interpreter_why = "$VIRTUAL_ENV is /venv";
    facts_.python = &python_;
    facts_.gpus = &gpus_;
  }

  const HostPlatform host_{"x86_64", "2.36"};
  CallerProcess process_;
  PythonFacts python_;
  GpuReport gpus_;
  CallerFacts facts_;
};

TEST_F(Resolve, TheKeyAndTheCallerSection) {
  const Resolution r = resolve_caller({}, host_, facts_);
  EXPECT_EQ(r.key, "sm86-torch2.9-cu128-cp312") << r.why_unresolved;
  EXPECT_EQ(r.caller["pid"], 4242);
  EXPECT_EQ(r.caller["process"], "python3.12");
  EXPECT_EQ(r.caller["interpreter"], "/venv/bin/python3");
  EXPECT_EQ(r.caller["interpreter_why"], "$VIRTUAL_ENV is /venv");
  EXPECT_EQ(r.caller["gpus"], "CUDA_VISIBLE_DEVICES=\"1\": device 1 (sm86)");
  EXPECT_EQ(r.caller["key"], r.key);
  EXPECT_FALSE(r.caller.contains("why_unresolved"));
  EXPECT_FALSE(r.caller.contains("environment"));
  EXPECT_FALSE(r.caller.contains("root"));
}

TEST_F(Resolve, OverridesWinAndAContainerSaysSo) {
  TargetOverrides o;
  o.arch = "sm90";
  process_.own_root = false;
  // NVIDIA_VISIBLE_DEVICES counts in a container's root only.
  process_.env = {{"NVIDIA_VISIBLE_DEVICES", "0"}};
  const Resolution r = resolve_caller(o, host_, facts_);
  EXPECT_EQ(r.key, "sm90-torch2.9-cu128-cp312");
  EXPECT_EQ(r.caller["root"], "its own (a container or chroot)");
  EXPECT_EQ(gpu_env_of(process_).nvidia_visible_devices, "0");
  process_.own_root = true;
  EXPECT_FALSE(gpu_env_of(process_).nvidia_visible_devices);
}

// The hook's environment is named with its age; the reason for no GPU is said once, in
// target.arch.missing, and the caller section points there.
TEST_F(Resolve, AHintAndNoGpu) {
  Hint hint;
  hint.by = "bash";
  hint.at = std::chrono::system_clock::time_point(std::chrono::seconds(1000));
  facts_.hint = &hint;
  facts_.now = hint.at + std::chrono::seconds(42);
  process_.env = {{"CUDA_VISIBLE_DEVICES", ""}};
  const Resolution r = resolve_caller({}, host_, facts_);
  EXPECT_EQ(r.key, kUnresolvedKey);
  EXPECT_EQ(r.why_unresolved, "CUDA_VISIBLE_DEVICES=\"\" leaves no device");
  EXPECT_EQ(r.caller["environment"], "from the shell hook (bash, 42 s ago), not its start-up one");
  EXPECT_EQ(r.caller["why_unresolved"], "(why: target.arch.missing)");
  EXPECT_EQ(r.caller["gpus"], "(why: target.arch.missing)");
  EXPECT_EQ(r.target.arch.missing, "CUDA_VISIBLE_DEVICES=\"\" leaves no device");
}

TEST_F(Resolve, NoPythonAndNoGpuProbe) {
  facts_.python = nullptr;
  facts_.interpreter.clear();
  facts_.python_error = "no Python interpreter: no python3 on the process's PATH (/nowhere)";
  facts_.gpus = nullptr;
  const Resolution r = resolve_caller({}, host_, facts_);
  EXPECT_EQ(r.key, kUnresolvedKey);
  EXPECT_EQ(r.target.arch.missing, "the GPUs were not probed");
  EXPECT_EQ(r.target.python_tag.missing.find("no Python interpreter"), 0u)
      << r.target.python_tag.missing;
  EXPECT_FALSE(r.caller.contains("interpreter"));
  EXPECT_FALSE(r.caller.contains("gpus"));
}

TEST(Unresolved, SaysWhyAndWhatWasRead) {
  CallerFacts f;
  auto r = unresolved("the kernel did not name the process", f);
  EXPECT_EQ(r->key, kUnresolvedKey);
  EXPECT_EQ(r->caller, (nlohmann::json{{"key", "unresolved"},
                                       {"why_unresolved", "the kernel did not name the process"}}));
  f.pid = 7;
  r = unresolved("gone", f);
  EXPECT_EQ(r->caller["pid"], 7);
}

TEST(TargetsStatus, CountsAndSettingsButNoProcess) {
  TargetOverrides o;
  o.cuda = "12.6";
  GpuReport none;
  none.error = "no NVIDIA driver";
  CallerTargetsStats s;
  s.resolves = 3;
  s.refused = 1;
  const auto j = status_json(false, o, HostPlatform{"x86_64", "2.36"}, none, s, "");
  EXPECT_EQ(j["mode"], "mount");
  EXPECT_EQ(j["overrides"], (nlohmann::json{{"cuda", "12.6"}}));
  EXPECT_EQ(j["gpu_error"], "no NVIDIA driver");
  EXPECT_EQ(j["gpus"].size(), 0u);
  EXPECT_EQ(j["resolves"], 3);
  EXPECT_EQ(j["refused_busy"], 1);
  EXPECT_FALSE(j.contains("hints_file"));
}

}  // namespace
}  // namespace whfs::target
