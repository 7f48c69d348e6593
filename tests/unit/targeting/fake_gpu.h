#pragma once
// Shared by the fake vendor libraries: their answers come from environment variables, read at
// each call, so a test sets them and the probe's forked child inherits them.
//   FAKE_CUDA_DEVICES="8.9,8.6"   compute capabilities of the devices (unset or empty: none)
//   FAKE_GPU_NAME="Fake GPU"      the name the driver API and NVML give
//   FAKE_CUDA_ERROR=35            libcudart: cudaGetDeviceCount fails with this cudaError_t
//   FAKE_CU_ERROR=100             libcuda: cuInit fails with this CUresult
//   FAKE_NVML_ERROR=9             NVML: nvmlInit_v2 fails with this nvmlReturn_t
//   FAKE_CUDA_RUNTIME_VERSION=12080, FAKE_CUDA_DRIVER_VERSION=12090
//   FAKE_CUDA_CRASH=1 / FAKE_CUDA_HANG=1   libcudart aborts / never returns (isolation tests)
//   FAKE_CUDA_PCI_BUS="3,1"       the PCI bus of each device (default: its index); the libraries
//                                 list devices in FAKE_CUDA_DEVICES order (CUDA's default
//                                 order), NVML sorted by bus as the real one does
// Device i's UUID is GPU-fa4e0000-0000-0000-0000-0000000000ii (ii: i in hex).

#include <cstdlib>
#include <cstring>

namespace fake_gpu {

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::atoi(v) : fallback;
}

struct Devices {
  int count = 0;
  int major[16] = {};
  int minor[16] = {};
  int bus[16] = {};
};

// "8.9,8.6" -> {2, {8, 8}, {9, 6}}.
inline Devices devices() {
  Devices d;
  const char* v = std::getenv("FAKE_CUDA_DEVICES");
  while (v != nullptr && *v != '\0' && d.count < 16) {
    d.major[d.count] = std::atoi(v);
    const char* dot = std::strchr(v, '.');
    if (dot == nullptr) break;
    d.minor[d.count] = std::atoi(dot + 1);
    ++d.count;
    v = std::strchr(dot, ',');
    if (v != nullptr) ++v;
  }
  for (int i = 0; i < 16; ++i) d.bus[i] = i;
  const char* b = std::getenv("FAKE_CUDA_PCI_BUS");
  for (int i = 0; b != nullptr && *b != '\0' && i < 16; ++i) {
    d.bus[i] = std::atoi(b);
    b = std::strchr(b, ',');
    if (b != nullptr) ++b;
  }
  return d;
}

// The answer to a PCI attribute (33 bus, 34 device, 50 domain) of device i.
inline int pci_attribute(const Devices& d, int attr, int i) { return attr == 33 ? d.bus[i] : 0; }

inline void uuid_bytes(int i, unsigned char* out) {
  std::memset(out, 0, 16);
  out[0] = 0xfa;
  out[1] = 0x4e;
  out[15] = static_cast<unsigned char>(i);
}

inline const char* name() {
  const char* v = std::getenv("FAKE_GPU_NAME");
  return v != nullptr ? v : "Fake GPU";
}

}  // namespace fake_gpu
