// A fake libnvidia-ml.so for the probe's last fallback, answered from the environment
// (fake_gpu.h). It lists every device, as NVML does, whatever CUDA_VISIBLE_DEVICES says.
#include <cstdint>
#include <cstdio>

#include "tests/unit/target/fake_gpu.h"

namespace {
// NVML hands out opaque handles; here they are the index plus one, never null.
void* handle_of(unsigned index) { return reinterpret_cast<void*>(std::uintptr_t{index} + 1); }
int index_of(void* handle) {
  return static_cast<int>(reinterpret_cast<std::uintptr_t>(handle)) - 1;
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
  if (index >= static_cast<unsigned>(fake_gpu::devices().count)) return 2;
  *handle = handle_of(index);
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

}  // extern "C"
