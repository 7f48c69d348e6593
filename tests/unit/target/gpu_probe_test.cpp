#include "fs/target/gpu_probe.h"

#include <gtest/gtest.h>

#include "fs/target/cuda_errors.h"
#include "tests/unit/target/fixtures.h"

namespace whfs::target {
namespace {

using testing::ScopedEnv;
using testing::TempDir;

// Only the fakes: the machine's own CUDA libraries, if any, stay out of the tests.
GpuProbeOptions fake_runtime_only() {
  GpuProbeOptions o;
  o.cudart = FAKE_CUDART_PATH;
  o.system_runtimes = {};
  o.drivers = {};
  o.nvml = {};
  return o;
}

class GpuProbe : public ::testing::Test {
 protected:
  // Every variable the fakes read starts unset.
  ScopedEnv devices_{"FAKE_CUDA_DEVICES", std::nullopt};
  ScopedEnv runtime_error_{"FAKE_CUDA_ERROR", std::nullopt};
  ScopedEnv driver_error_{"FAKE_CU_ERROR", std::nullopt};
  ScopedEnv nvml_error_{"FAKE_NVML_ERROR", std::nullopt};
  ScopedEnv crash_{"FAKE_CUDA_CRASH", std::nullopt};
  ScopedEnv hang_{"FAKE_CUDA_HANG", std::nullopt};
  ScopedEnv runtime_version_{"FAKE_CUDA_RUNTIME_VERSION", std::nullopt};
  ScopedEnv driver_version_{"FAKE_CUDA_DRIVER_VERSION", std::nullopt};
};

TEST_F(GpuProbe, RuntimeReportsOneDevice) {
  ScopedEnv env("FAKE_CUDA_DEVICES", "8.9");
  const auto r = probe_gpus(fake_runtime_only());
  ASSERT_TRUE(r.found()) << r.error;
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].arch(), "sm89");
  EXPECT_EQ(r.api, GpuApi::kRuntime);
  EXPECT_EQ(r.library, FAKE_CUDART_PATH);
  EXPECT_EQ(cuda_version_text(r.runtime_version), "12.8");
  EXPECT_EQ(cuda_version_text(r.driver_version), "12.9");
  EXPECT_EQ(r.heterogeneity_note(), "");
  ASSERT_EQ(r.attempts.size(), 1u);
  EXPECT_EQ(r.attempts[0].outcome, "found 1 device");
}

TEST_F(GpuProbe, HeterogeneousNodeIsReported) {
  ScopedEnv env("FAKE_CUDA_DEVICES", "8.9,8.6,8.9");
  const auto r = probe_gpus(fake_runtime_only());
  ASSERT_EQ(r.devices.size(), 3u);
  EXPECT_EQ(r.devices[1].arch(), "sm86");
  EXPECT_EQ(r.heterogeneity_note(),
            "devices differ: 0 sm89, 1 sm86, 2 sm89; using device 0 (sm89); set "
            "CUDA_VISIBLE_DEVICES or arch= to choose another");
}

TEST_F(GpuProbe, NoDeviceInWords) {
  ScopedEnv env("FAKE_CUDA_DEVICES", "");
  const auto r = probe_gpus(fake_runtime_only());
  EXPECT_FALSE(r.found());
  EXPECT_NE(r.error.find("cudaGetDeviceCount failed: no CUDA device is visible"), std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("cudaErrorNoDevice"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("no CUDA-capable device is detected"), std::string::npos) << r.error;
}

TEST_F(GpuProbe, InsufficientDriverInWords) {
  ScopedEnv devices("FAKE_CUDA_DEVICES", "8.9");
  ScopedEnv error("FAKE_CUDA_ERROR", "35");
  ScopedEnv driver("FAKE_CUDA_DRIVER_VERSION", "12020");
  const auto r = probe_gpus(fake_runtime_only());
  EXPECT_FALSE(r.found());
  EXPECT_EQ(r.error, std::string("CUDA runtime ") + FAKE_CUDART_PATH +
                         ": cudaGetDeviceCount failed: the NVIDIA driver is too old for this "
                         "CUDA runtime (update the driver or use a runtime of an older CUDA) "
                         "(cudaErrorInsufficientDriver) [\"CUDA driver version is insufficient "
                         "for CUDA runtime version\"]; this runtime is CUDA 12.8, the driver "
                         "supports up to CUDA 12.2");
}

// What a real libcudart says on a machine without the driver: "insufficient driver" with a
// driver version of 0. Two runtimes that say the same are reported once.
TEST_F(GpuProbe, NoDriverAtAll) {
  ScopedEnv error("FAKE_CUDA_ERROR", "35");
  ScopedEnv driver("FAKE_CUDA_DRIVER_VERSION", "0");
  TempDir dir;
  const auto copy = dir.path() / "libcudart.so.12";
  std::filesystem::copy_file(FAKE_CUDART_PATH, copy);
  auto o = fake_runtime_only();
  o.system_runtimes = {copy.string()};
  const auto r = probe_gpus(o);
  EXPECT_EQ(r.error, std::string("CUDA runtime ") + FAKE_CUDART_PATH + ", " + copy.string() +
                         ": cudaGetDeviceCount failed: no NVIDIA driver was found "
                         "(cudaDriverGetVersion gives 0, so the runtime reports "
                         "cudaErrorInsufficientDriver); is the driver installed and libcuda.so.1 "
                         "on the library path?");
}

TEST_F(GpuProbe, DriverApiWhenTheRuntimeIsMissing) {
  ScopedEnv env("FAKE_CUDA_DEVICES", "9.0");
  ScopedEnv name("FAKE_GPU_NAME", "NVIDIA H100");
  auto o = fake_runtime_only();
  o.cudart = "/nonexistent/libcudart.so.12";
  o.drivers = {FAKE_CUDA_PATH};
  const auto r = probe_gpus(o);
  ASSERT_TRUE(r.found()) << r.error;
  EXPECT_EQ(r.api, GpuApi::kDriver);
  EXPECT_EQ(r.devices[0].arch(), "sm90");
  EXPECT_EQ(r.devices[0].name, "NVIDIA H100");
  ASSERT_EQ(r.attempts.size(), 2u);
  EXPECT_FALSE(r.attempts[0].loaded);
  EXPECT_NE(r.attempts[0].outcome.find("cannot be loaded"), std::string::npos);
}

TEST_F(GpuProbe, DriverApiWhenTheRuntimeFails) {
  ScopedEnv env("FAKE_CUDA_DEVICES", "8.6");
  ScopedEnv error("FAKE_CUDA_ERROR", "35");
  auto o = fake_runtime_only();
  o.drivers = {FAKE_CUDA_PATH};
  const auto r = probe_gpus(o);
  ASSERT_TRUE(r.found()) << r.error;
  EXPECT_EQ(r.api, GpuApi::kDriver);
  EXPECT_EQ(r.devices[0].arch(), "sm86");
  EXPECT_NE(r.attempts[0].outcome.find("cudaErrorInsufficientDriver"), std::string::npos);
}

TEST_F(GpuProbe, DriverErrorInWords) {
  ScopedEnv error("FAKE_CUDA_ERROR", "100");
  ScopedEnv cu_error("FAKE_CU_ERROR", "100");
  auto o = fake_runtime_only();
  o.drivers = {FAKE_CUDA_PATH};
  const auto r = probe_gpus(o);
  EXPECT_FALSE(r.found());
  // Both answers are kept: the runtime's and the driver's.
  EXPECT_NE(r.error.find("cudaErrorNoDevice"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find(std::string("CUDA driver API ") + FAKE_CUDA_PATH +
                         ": cuInit failed: no CUDA device is visible"),
            std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("CUDA_ERROR_NO_DEVICE"), std::string::npos) << r.error;
}

TEST_F(GpuProbe, NvmlHonoursCudaVisibleDevices) {
  ScopedEnv env("FAKE_CUDA_DEVICES", "8.9,8.6");
  auto o = fake_runtime_only();
  o.cudart = "";
  o.nvml = {FAKE_NVML_PATH};
  o.cuda_visible_devices = "1";
  auto r = probe_gpus(o);
  ASSERT_TRUE(r.found()) << r.error;
  EXPECT_EQ(r.api, GpuApi::kNvml);
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].arch(), "sm86");
  EXPECT_EQ(r.devices[0].index, 0);  // CUDA renumbers the visible devices from 0
  EXPECT_EQ(r.devices[0].name, "Fake GPU 1");

  o.cuda_visible_devices = "GPU-8f6c2a1e";
  r = probe_gpus(o);
  EXPECT_FALSE(r.found());
  EXPECT_NE(r.error.find("by UUID"), std::string::npos) << r.error;

  o.cuda_visible_devices = "";
  r = probe_gpus(o);
  EXPECT_FALSE(r.found());
  EXPECT_NE(r.error.find("none of them visible under CUDA_VISIBLE_DEVICES"), std::string::npos)
      << r.error;
}

TEST_F(GpuProbe, NvmlErrorInWords) {
  ScopedEnv error("FAKE_NVML_ERROR", "9");
  auto o = fake_runtime_only();
  o.cudart = "";
  o.nvml = {FAKE_NVML_PATH};
  const auto r = probe_gpus(o);
  EXPECT_FALSE(r.found());
  EXPECT_NE(r.error.find("nvmlInit_v2 failed: the NVIDIA kernel driver is not loaded "
                         "(NVML_ERROR_DRIVER_NOT_LOADED) [\"Driver Not Loaded\"]"),
            std::string::npos)
      << r.error;
}

TEST_F(GpuProbe, ACrashingRuntimeCostsOnlyAChild) {
  ScopedEnv env("FAKE_CUDA_DEVICES", "8.9");
  ScopedEnv crash("FAKE_CUDA_CRASH", "1");
  auto o = fake_runtime_only();
  o.drivers = {FAKE_CUDA_PATH};
  const auto r = probe_gpus(o);
  ASSERT_TRUE(r.found()) << r.error;  // the driver API answered after the runtime crashed
  EXPECT_EQ(r.api, GpuApi::kDriver);
  EXPECT_TRUE(r.attempts[0].loaded);
  EXPECT_NE(r.attempts[0].outcome.find("was killed by signal 6"), std::string::npos)
      << r.attempts[0].outcome;
}

TEST_F(GpuProbe, AHangingRuntimeIsKilledAtTheDeadline) {
  ScopedEnv hang("FAKE_CUDA_HANG", "1");
  auto o = fake_runtime_only();
  o.timeout = std::chrono::milliseconds(300);
  const auto r = probe_gpus(o);
  EXPECT_FALSE(r.found());
  EXPECT_NE(r.error.find("did not finish within 0.3 s and was killed"), std::string::npos)
      << r.error;
}

TEST_F(GpuProbe, NotACudaLibrary) {
  auto o = fake_runtime_only();
  o.cudart = FAKE_NVML_PATH;
  const auto r = probe_gpus(o);
  EXPECT_FALSE(r.found());
  EXPECT_NE(r.error.find("is not a usable CUDA runtime: the library has no cudaGetDeviceCount"),
            std::string::npos)
      << r.error;
}

TEST_F(GpuProbe, NothingLoadableListsWhatWasTried) {
  GpuProbeOptions o;
  o.cudart = "/nonexistent/libcudart.so";
  o.system_runtimes = {"libwhfs-no-cudart.so.12"};
  o.drivers = {"libwhfs-no-cuda.so.1"};
  o.nvml = {"libwhfs-no-nvml.so.1"};
  const auto r = probe_gpus(o);
  EXPECT_FALSE(r.found());
  EXPECT_EQ(r.error,
            "no CUDA library could be loaded (tried /nonexistent/libcudart.so, "
            "libwhfs-no-cudart.so.12, libwhfs-no-cuda.so.1, libwhfs-no-nvml.so.1); is the "
            "NVIDIA driver installed?");
  EXPECT_EQ(r.attempts.size(), 4u);
}

TEST_F(GpuProbe, TorchsBundledRuntimeComesAfterTheOptionAndBeforeTheSystem) {
  TempDir dir;
  const auto lib = dir.path() / "site" / "nvidia" / "cuda_runtime" / "lib";
  testing::write_file(lib / "libcudart.so.12", "");
  testing::write_file(dir.path() / "site" / "nvidia" / "cu13" / "lib" / "libcudart.so.13", "");
  GpuProbeOptions o;
  o.cudart = "/opt/libcudart.so";
  o.site_dirs = {dir.str("site")};
  const auto c = gpu_library_candidates(o);
  ASSERT_GE(c.size(), 8u);
  EXPECT_EQ(c[0].second, "/opt/libcudart.so");
  EXPECT_EQ(c[1].second, (lib / "libcudart.so.12").string());
  EXPECT_EQ(c[2].second, dir.str("site/nvidia/cu13/lib/libcudart.so.13"));
  EXPECT_EQ(c[3].second, "libcudart.so.13");
  EXPECT_EQ(c[c.size() - 2], std::make_pair(GpuApi::kDriver, std::string("libcuda.so.1")));
  EXPECT_EQ(c.back(), std::make_pair(GpuApi::kNvml, std::string("libnvidia-ml.so.1")));
}

TEST_F(GpuProbe, TorchsBundledRuntimeIsUsed) {
  ScopedEnv env("FAKE_CUDA_DEVICES", "12.0");
  TempDir dir;
  const auto lib = dir.path() / "site" / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12";
  std::filesystem::create_directories(lib.parent_path());
  std::filesystem::copy_file(FAKE_CUDART_PATH, lib);
  auto o = fake_runtime_only();
  o.cudart = "";
  o.site_dirs = {dir.str("site")};
  const auto r = probe_gpus(o);
  ASSERT_TRUE(r.found()) << r.error;
  EXPECT_EQ(r.library, lib.string());
  EXPECT_EQ(r.devices[0].arch(), "sm120");
}

TEST(VisibleDevices, FollowsCudasRules) {
  using V = std::vector<int>;
  EXPECT_EQ(*visible_device_indices(std::nullopt, 3), (V{0, 1, 2}));
  EXPECT_EQ(*visible_device_indices("", 3), V{});
  EXPECT_EQ(*visible_device_indices("2,0", 3), (V{2, 0}));
  EXPECT_EQ(*visible_device_indices(" 1 , 2", 3), (V{1, 2}));
  EXPECT_EQ(*visible_device_indices("1,7,0", 3), V{1});  // stops at the first invalid entry
  EXPECT_EQ(*visible_device_indices("-1", 3), V{});
  EXPECT_EQ(*visible_device_indices("0,0", 3), V{0});
  EXPECT_FALSE(visible_device_indices("MIG-abc", 3));
}

TEST(CudaErrors, CommonCodesInWords) {
  EXPECT_NE(describe_cuda_runtime_error(3).find("cudaErrorInitializationError"), std::string::npos);
  EXPECT_NE(describe_cuda_runtime_error(34).find("stub"), std::string::npos);
  EXPECT_NE(describe_cuda_driver_error(3).find("CUDA_ERROR_NOT_INITIALIZED"), std::string::npos);
  EXPECT_NE(describe_cuda_driver_error(803).find("different versions"), std::string::npos);
  EXPECT_EQ(describe_cuda_runtime_error(12345), "CUDA runtime error 12345");
  EXPECT_EQ(describe_nvml_error(12345), "NVML error 12345");
  EXPECT_EQ(cuda_version_text(13000), "13.0");
  EXPECT_EQ(cuda_version_text(0), "");
}

}  // namespace
}  // namespace whfs::target
