#include "fs/targeting/gpu_probe.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "fs/targeting/cuda_errors.h"
#include "tests/unit/targeting/fixtures.h"

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
  ScopedEnv bus_{"FAKE_CUDA_PCI_BUS", std::nullopt};
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
  EXPECT_EQ(r.devices[0].name, "Fake GPU");  // from cudaGetDeviceProperties
  EXPECT_EQ(r.devices[0].uuid, "GPU-fa4e0000-0000-0000-0000-000000000000");
  ASSERT_EQ(r.attempts.size(), 1u);
  EXPECT_EQ(r.attempts[0].outcome, "found 1 device");
}

// The probe lists the machine's devices: which of them a process may use is decided per
// process (visible_gpus), not by the daemon's own environment.
TEST_F(GpuProbe, EveryDeviceWhateverTheDaemonsCudaVisibleDevices) {
  ScopedEnv env("FAKE_CUDA_DEVICES", "8.9,8.6,8.9");
  ScopedEnv bus("FAKE_CUDA_PCI_BUS", "7,3,5");
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", "1");
  ScopedEnv order("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  for (const char* driver : {"", FAKE_CUDA_PATH}) {
    auto o = fake_runtime_only();
    if (*driver != '\0') {
      o.cudart = "";
      o.drivers = {driver};
    }
    const auto r = probe_gpus(o);
    ASSERT_EQ(r.devices.size(), 3u) << r.error;
    EXPECT_TRUE(r.cuda_order());
    EXPECT_EQ(r.devices[1].arch(), "sm86");
    EXPECT_EQ(r.devices[1].pci_bus, 3);
    EXPECT_EQ(r.devices[2].uuid, "GPU-fa4e0000-0000-0000-0000-000000000002");
  }
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

TEST_F(GpuProbe, NvmlListsInPciOrder) {
  ScopedEnv env("FAKE_CUDA_DEVICES", "8.9,8.6");
  ScopedEnv bus("FAKE_CUDA_PCI_BUS", "4,2");
  auto o = fake_runtime_only();
  o.cudart = "";
  o.nvml = {FAKE_NVML_PATH};
  const auto r = probe_gpus(o);
  ASSERT_TRUE(r.found()) << r.error;
  EXPECT_EQ(r.api, GpuApi::kNvml);
  EXPECT_FALSE(r.cuda_order());
  ASSERT_EQ(r.devices.size(), 2u);
  EXPECT_EQ(r.devices[0].arch(), "sm86");  // bus 2 first
  EXPECT_EQ(r.devices[0].pci_bus, 2);
  EXPECT_EQ(r.devices[0].uuid, "GPU-fa4e0000-0000-0000-0000-000000000001");
  EXPECT_EQ(r.devices[1].name, "Fake GPU 0");
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

// A root daemon loads what the mount's owner chose (cudart=) and the system's libraries,
// never a runtime from a user's site-packages.
TEST_F(GpuProbe, OnlyTheOptionAndTheSystemsLibraries) {
  GpuProbeOptions o;
  o.cudart = "/opt/libcudart.so";
  const auto c = gpu_library_candidates(o);
  ASSERT_EQ(c.size(), 7u);
  EXPECT_EQ(c[0].second, "/opt/libcudart.so");
  EXPECT_EQ(c[1].second, "libcudart.so.13");
  EXPECT_EQ(c[c.size() - 2], std::make_pair(GpuApi::kDriver, std::string("libcuda.so.1")));
  EXPECT_EQ(c.back(), std::make_pair(GpuApi::kNvml, std::string("libnvidia-ml.so.1")));
}

TEST(TrustedLibrary, RootLoadsOnlyWhatOnlyRootCanChange) {
  if (::geteuid() != 0) GTEST_SKIP() << "the check applies to a daemon running as root";
  TempDir dir;
  testing::write_file(dir.path() / "lib" / "libcudart.so", "");
  EXPECT_TRUE(check_trusted_library(dir.str("lib/libcudart.so")));
  EXPECT_TRUE(check_trusted_library(""));
  ::chmod(dir.str("lib").c_str(), 0777);
  auto r = check_trusted_library(dir.str("lib/libcudart.so"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("writable by others"), std::string::npos) << r.error();
  ::chmod(dir.str("lib").c_str(), 0755);
  ASSERT_EQ(::chown(dir.str("lib/libcudart.so").c_str(), 1234, 1234), 0);
  EXPECT_FALSE(check_trusted_library(dir.str("lib/libcudart.so")));
}

// ---- visible_gpus: a process's share of the machine's devices -------------------------------

GpuDevice device(int index, int major, int minor, int bus) {
  GpuDevice d;
  d.index = index;
  d.major = major;
  d.minor = minor;
  d.pci_bus = bus;
  char uuid[64];
  std::snprintf(uuid, sizeof uuid, "GPU-%08d-0000-0000-0000-000000000000", index);
  d.uuid = uuid;
  return d;
}

// Three devices in CUDA's default order (fastest first): sm90 on bus 9, sm89 on bus 2, sm86 on
// bus 5. PCI order is therefore sm89, sm86, sm90.
GpuReport machine(GpuApi api = GpuApi::kRuntime) {
  GpuReport r;
  r.api = api;
  r.library = "libcudart.so.12";
  r.devices = {device(0, 9, 0, 9), device(1, 8, 9, 2), device(2, 8, 6, 5)};
  return r;
}

std::string archs(const VisibleGpus& v) { return arch_set(v.devices); }

GpuEnv genv(std::optional<std::string> cuda_visible = {}, std::optional<std::string> order = {},
            std::optional<std::string> nvidia_visible = {}) {
  GpuEnv e;
  e.cuda_visible_devices = std::move(cuda_visible);
  e.cuda_device_order = std::move(order);
  e.nvidia_visible_devices = std::move(nvidia_visible);
  return e;
}

TEST(VisibleGpus, CudaVisibleDevicesByIndexInEitherOrder) {
  const auto m = machine();
  EXPECT_EQ(archs(visible_gpus(m, genv())), "sm86+sm89+sm90");
  EXPECT_EQ(archs(visible_gpus(m, genv("1"))), "sm89");
  EXPECT_EQ(archs(visible_gpus(m, genv("2, 1"))), "sm86+sm89");
  // PCI_BUS_ID: index 0 is the lowest bus.
  EXPECT_EQ(archs(visible_gpus(m, genv("0", "PCI_BUS_ID"))), "sm89");
  EXPECT_EQ(archs(visible_gpus(m, genv("2", "PCI_BUS_ID"))), "sm90");
}

TEST(VisibleGpus, CudasListRules) {
  const auto m = machine();
  // Read up to the first invalid entry; repeats end it too; empty means none.
  EXPECT_EQ(archs(visible_gpus(m, genv("2,7,0"))), "sm86");
  EXPECT_EQ(archs(visible_gpus(m, genv("1,1,0"))), "sm89");
  EXPECT_EQ(archs(visible_gpus(m, genv("-1"))), "");
  const auto none = visible_gpus(m, genv(""));
  EXPECT_TRUE(none.devices.empty());
  EXPECT_EQ(none.why, "CUDA_VISIBLE_DEVICES=\"\" leaves no device");
}

TEST(VisibleGpus, UuidsAndTheirPrefixes) {
  const auto m = machine();
  EXPECT_EQ(archs(visible_gpus(m, genv("GPU-00000002-0000-0000-0000-000000000000"))), "sm86");
  EXPECT_EQ(archs(visible_gpus(m, genv("GPU-00000001"))), "sm89");
  // An ambiguous prefix ends the list, as in CUDA.
  EXPECT_EQ(archs(visible_gpus(m, genv("GPU-0000000"))), "");
}

TEST(VisibleGpus, UncertainMappingsKeepEveryCandidate) {
  // A MIG instance: its GPU is not known, so every device counts (a folder for all of them
  // runs on whichever it is).
  auto v = visible_gpus(machine(), genv("MIG-4b3c"));
  EXPECT_EQ(archs(v), "sm86+sm89+sm90");
  ASSERT_EQ(v.notes.size(), 1u);
  EXPECT_NE(v.notes[0].find("MIG"), std::string::npos) << v.notes[0];
  // NVML alone gives PCI order, not CUDA's default order: on a node whose devices differ an
  // index cannot be mapped.
  auto nvml = machine(GpuApi::kNvml);
  v = visible_gpus(nvml, genv("1"));
  EXPECT_EQ(archs(v), "sm86+sm89+sm90");
  EXPECT_FALSE(v.notes.empty());
  // ... unless the process asked for PCI order, or the devices are all alike.
  EXPECT_EQ(archs(visible_gpus(nvml, genv("1", "PCI_BUS_ID"))), "sm86");
  nvml.devices = {device(0, 8, 9, 1), device(1, 8, 9, 2)};
  v = visible_gpus(nvml, genv("1"));
  EXPECT_EQ(v.devices.size(), 1u);
  EXPECT_TRUE(v.notes.empty());
}

TEST(VisibleGpus, AContainersShareComesFirst) {
  const auto m = machine();
  // NVIDIA_VISIBLE_DEVICES numbers the host's devices in PCI order: 1 is sm86 (bus 5).
  EXPECT_EQ(archs(visible_gpus(m, genv({}, {}, "1"))), "sm86");
  EXPECT_EQ(archs(visible_gpus(m, genv({}, {}, "0,2"))), "sm89+sm90");
  EXPECT_EQ(archs(visible_gpus(m, genv({}, {}, "all"))), "sm86+sm89+sm90");
  auto v = visible_gpus(m, genv({}, {}, "none"));
  EXPECT_TRUE(v.devices.empty());
  EXPECT_EQ(v.why, "NVIDIA_VISIBLE_DEVICES=none: the container was given no GPU");
  // Then CUDA_VISIBLE_DEVICES within the share, in CUDA's order (fastest first).
  EXPECT_EQ(archs(visible_gpus(m, genv("0", {}, "0,2"))), "sm90");
  EXPECT_EQ(archs(visible_gpus(m, genv({}, {}, "GPU-00000001-0000-0000-0000-000000000000"))),
            "sm89");
}

TEST(VisibleGpus, NoGpuSaysWhy) {
  GpuReport none;
  none.error = "no CUDA library could be loaded";
  const auto v = visible_gpus(none, genv());
  EXPECT_TRUE(v.devices.empty());
  EXPECT_EQ(v.why, "no GPU found on this machine: no CUDA library could be loaded");
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
