#pragma once
// The GPUs of this machine through the CUDA runtime, loaded with dlopen at run time (nothing
// CUDA at build time), with the driver API and NVML as fallbacks. Each library is loaded and
// asked in its own forked child with a deadline, so one that crashes, hangs or calls exit()
// costs a child, not the daemon (see child_process.h).
//
// The probe lists every device (CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER are removed from
// the child's environment): which of them a process may use is its own business, decided per
// process from its environment (visible_gpus below). Only libraries the mount's owner chose
// are loaded: the cudart= option and the system's names; never one from a user's
// site-packages, which a root daemon must not run.

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
  std::string cudart;  // option cudart=PATH: tried first
  // Looked up by the dynamic loader (LD_LIBRARY_PATH, ld.so.cache). CUDA 11's soname is
  // libcudart.so.11.0. Tests replace these lists to keep the machine's libraries out.
  std::vector<std::string> system_runtimes = {"libcudart.so.13", "libcudart.so.12",
                                              "libcudart.so.11.0", "libcudart.so"};
  std::vector<std::string> drivers = {"libcuda.so.1"};
  std::vector<std::string> nvml = {"libnvidia-ml.so.1"};
  std::chrono::milliseconds timeout{30000};  // per library: a cold driver start takes seconds
};

struct GpuDevice {
  int index = 0;  // the CUDA ordinal in CUDA's default order (NVML: its own index, PCI order)
  int major = 0;
  int minor = 0;
  std::string name;
  std::string uuid;  // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx; empty when unknown
  // The PCI address: the order CUDA_DEVICE_ORDER=PCI_BUS_ID and NVIDIA_VISIBLE_DEVICES use.
  int pci_domain = 0;
  int pci_bus = 0;
  int pci_device = 0;
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
  bool probed = true;  // false: not asked (arch= chose the target): `error` says so

  bool found() const { return !devices.empty(); }
  // Whether `devices` is in CUDA's default order (runtime, driver API); NVML gives PCI order.
  bool cuda_order() const { return api != GpuApi::kNvml; }
};

// The libraries a probe tries, in order, for each API: the cudart option, then the system
// names (runtime, driver API, NVML).
std::vector<std::pair<GpuApi, std::string>> gpu_library_candidates(const GpuProbeOptions& opts);

// Tries the candidates until one lists devices; every attempt is recorded in words.
GpuReport probe_gpus(const GpuProbeOptions& opts);

// The cudart= option of a daemon running as root: the library (and its folder) must be owned
// by root and writable by no one else, or another user could choose what root loads. Passes
// when `path` is empty or the daemon is not root.
Expected<void, std::string> check_trusted_library(const std::string& path);

// The GPU-related environment of one process.
struct GpuEnv {
  std::optional<std::string> cuda_visible_devices;
  std::optional<std::string> cuda_device_order;  // PCI_BUS_ID or FASTEST_FIRST (the default)
  // Only for a process in a container: the host devices its runtime gave it (indices in PCI
  // order, UUIDs, all, none, void).
  std::optional<std::string> nvidia_visible_devices;
};

struct VisibleGpus {
  std::vector<GpuDevice> devices;  // what the process may use; empty: `why` says why
  std::string why;                 // in words: "CUDA_VISIBLE_DEVICES=1: device 1 (sm86)"
  std::vector<std::string> notes;  // where the mapping was uncertain and all were kept
};

// The devices a process with `env` may use, out of the machine's (as probe_gpus found them),
// by CUDA's rules: NVIDIA_VISIBLE_DEVICES first (a container's share), then
// CUDA_VISIBLE_DEVICES (indices in CUDA_DEVICE_ORDER, UUIDs or their unique prefixes; read up
// to the first invalid entry; empty = none). Where an entry cannot be mapped with certainty
// (a MIG UUID, a UUID the library did not give, indices in CUDA's default order when only NVML
// answered on a node whose devices differ) every candidate is kept: a folder chosen for all of
// them runs on whichever the process gets. Pure.
VisibleGpus visible_gpus(const GpuReport& machine, const GpuEnv& env);

// The distinct archs of `devices`, lowest first: "sm80+sm89".
std::string arch_set(const std::vector<GpuDevice>& devices);

}  // namespace whfs::target
