// A fake libnvidia-ml.so for the probe's last fallback, answered from the environment
// (fake_gpu.h). It lists every device in PCI order, as NVML does, whatever
// CUDA_VISIBLE_DEVICES says.
#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "tests/unit/targeting/fake_gpu.h"

namespace {
// NVML hands out opaque handles; here they are the device's FAKE_CUDA_DEVICES position plus
// one, never null.
void* handle_of(int device) { return reinterpret_cast<void*>(std::uintptr_t(device) + 1); }
int index_of(void* handle) {
  return static_cast<int>(reinterpret_cast<std::uintptr_t>(handle)) - 1;
}
// NVML's index i: the device with the i-th lowest PCI bus.
int device_at(unsigned index) {
  const auto d = fake_gpu::devices();
  int order[16];
  for (int i = 0; i < d.count; ++i) order[i] = i;
  std::stable_sort(order, order + d.count, [&](int a, int b) { return d.bus[a] < d.bus[b]; });
  return index < static_cast<unsigned>(d.count) ? order[index] : -1;
}
}  // namespace

extern "C" {

const char* nvmlErrorString(int result) {
  switch (result) {
    case 0:
      return "Success";
    case 9:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}

int nvmlInit_v2() { return fake_gpu::env_int("FAKE_NVML_ERROR", 0); }
int nvmlShutdown() { return 0; }

int nvmlSystemGetCudaDriverVersion(int* version) {
  *version = fake_gpu::env_int("FAKE_CUDA_DRIVER_VERSION", 12090);
  return 0;
}

int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = static_cast<unsigned>(fake_gpu::devices().count);
  return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** handle) {
  const int device = device_at(index);
  if (device < 0) return 2;
  *handle = handle_of(device);
  return 0;
}

int nvmlDeviceGetCudaComputeCapability(void* handle, int* major, int* minor) {
  const auto d = fake_gpu::devices();
  const int i = index_of(handle);
  if (i < 0 || i >= d.count) return 2;
  *major = d.major[i];
  *minor = d.minor[i];
  return 0;
}

int nvmlDeviceGetName(void* handle, char* name, unsigned length) {
  if (length == 0) return 7;
  std::snprintf(name, length, "%s %d", fake_gpu::name(), index_of(handle));
  return 0;
}

int nvmlDeviceGetUUID(void* handle, char* uuid, unsigned length) {
  unsigned char b[16];
  fake_gpu::uuid_bytes(index_of(handle), b);
  std::snprintf(uuid, length, "GPU-fa4e0000-0000-0000-0000-0000000000%02x", b[15]);
  return 0;
}

// nvmlPciInfo_t: char busIdLegacy[16]; unsigned domain, bus, device, ...
// (Declared as the probe calls it: a call through another function type is undefined.)
int nvmlDeviceGetPciInfo_v3(void* handle, void* pci) {
  auto* info = static_cast<unsigned*>(pci);
  const auto d = fake_gpu::devices();
  const int i = index_of(handle);
  if (i < 0 || i >= d.count) return 2;
  info[4] = 0;
  info[5] = static_cast<unsigned>(d.bus[i]);
  info[6] = 0;
  return 0;
}

}  // extern "C"
