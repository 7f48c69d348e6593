#pragma once
// The GPUs of this machine through the CUDA runtime, loaded with dlopen at run time (nothing
// CUDA at build time), with the driver API and NVML as fallbacks. Each library is loaded and
// asked in its own forked child with a deadline, so one that crashes, hangs or calls exit()
// costs a child, not the daemon (see child_process.h).

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/common/expected.h"

namespace whfs::target {

enum class GpuApi { kRuntime, kDriver, kNvml };
const char* to_string(GpuApi api);  // "CUDA runtime", "CUDA driver API", "NVML"

struct GpuProbeOptions {
  std::string cudart;                  // option cudart=PATH: tried first
  std::vector<std::string> site_dirs;  // the target Python's folders, import order
  // Looked up by the dynamic loader (LD_LIBRARY_PATH, ld.so.cache). CUDA 11's soname is
  // libcudart.so.11.0. Tests replace these lists to keep the machine's libraries out.
  std::vector<std::string> system_runtimes = {"libcudart.so.13", "libcudart.so.12",
                                              "libcudart.so.11.0", "libcudart.so"};
  std::vector<std::string> drivers = {"libcuda.so.1"};
  std::vector<std::string> nvml = {"libnvidia-ml.so.1"};
  // CUDA_VISIBLE_DEVICES as the daemon sees it. The runtime and the driver apply it
  // themselves (they read the environment the child inherits); NVML lists every GPU, so the
  // probe applies it to NVML's answer.
  std::optional<std::string> cuda_visible_devices;
  std::chrono::milliseconds timeout{30000};  // per library: a cold driver start takes seconds
};

struct GpuDevice {
  int index = 0;  // the CUDA ordinal (after CUDA_VISIBLE_DEVICES)
  int major = 0;
  int minor = 0;
  std::string name;  // from the driver API or NVML; the runtime path leaves it empty
  std::string arch() const { return "sm" + std::to_string(major) + std::to_string(minor); }
};

struct GpuAttempt {
  GpuApi api = GpuApi::kRuntime;
  std::string library;
  bool loaded = false;  // the library loaded (its answer, even an error, is in `outcome`)
  std::string outcome;  // "found 2 devices", "not found: ...", "cudaGetDeviceCount failed: ..."
};

struct GpuReport {
  std::vector<GpuDevice> devices;  // empty: `error` says why
  GpuApi api = GpuApi::kRuntime;   // who answered (when devices is not empty)
  std::string library;
  int runtime_version = 0;  // 12080 = 12.8; 0 when unknown
  int driver_version = 0;   // the CUDA version the driver supports; 0 when unknown
  std::vector<GpuAttempt> attempts;
  std::string error;

  bool found() const { return !devices.empty(); }
  // Device 0 decides the target (the first visible device, as CUDA numbers them). On a node
  // whose devices differ this says so: "devices differ: 0 sm89, 1 sm86; using device 0 ...".
  std::string heterogeneity_note() const;
};

// The libraries a probe tries, in order, for each API. Runtime: cudart option, then
// <site>/nvidia/cuda_runtime/lib/libcudart.so* and <site>/nvidia/cu13/lib/libcudart.so* (the
// runtime pip installs with torch; newest name first), then the system names.
std::vector<std::pair<GpuApi, std::string>> gpu_library_candidates(const GpuProbeOptions& opts);

// Tries the candidates until one lists devices; every attempt is recorded in words.
GpuReport probe_gpus(const GpuProbeOptions& opts);

// CUDA's rules for CUDA_VISIBLE_DEVICES applied to `count` physical devices (NVML's order):
// unset = all; a comma-separated list of indices, read up to the first invalid entry; empty =
// none. UUID (GPU-..., MIG-...) entries cannot be mapped without the runtime: an error.
Expected<std::vector<int>, std::string> visible_device_indices(
    const std::optional<std::string>& env, int count);

}  // namespace whfs::target
