// A fake libcudart.so: the CUDA runtime calls the probe makes, answered from the environment
// (fake_gpu.h). Error numbers and strings are the real runtime's.
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "tests/unit/targeting/fake_gpu.h"

namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;
constexpr int kInvalidDevice = 101;
constexpr int kNoDevice = 100;

}  // namespace

extern "C" {

const char* cudaGetErrorString(int error) {
  switch (error) {
    case 0:
      return "no error";
    case 3:
      return "initialization error";
    case 35:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case 100:
      return "no CUDA-capable device is detected";
    case 101:
      return "invalid device ordinal";
    default:
      return "unrecognized error code";
  }
}

int cudaRuntimeGetVersion(int* version) {
  *version = fake_gpu::env_int("FAKE_CUDA_RUNTIME_VERSION", 12080);
  return kSuccess;
}

int cudaDriverGetVersion(int* version) {
  *version = fake_gpu::env_int("FAKE_CUDA_DRIVER_VERSION", 12090);
  return kSuccess;
}

int cudaGetDeviceCount(int* count) {
  if (fake_gpu::env_int("FAKE_CUDA_CRASH", 0) != 0) std::abort();
  if (fake_gpu::env_int("FAKE_CUDA_HANG", 0) != 0) {
    for (;;) ::pause();
  }
  *count = 0;
  if (const int e = fake_gpu::env_int("FAKE_CUDA_ERROR", 0); e != 0) return e;
  *count = fake_gpu::devices().count;
  return *count == 0 ? kNoDevice : kSuccess;
}

int cudaDeviceGetAttribute(int* value, int attr, int device) {
  const auto d = fake_gpu::devices();
  if (device < 0 || device >= d.count) return kInvalidDevice;
  if (attr == 75) {
    *value = d.major[device];
  } else if (attr == 76) {
    *value = d.minor[device];
  } else if (attr == 33 || attr == 34 || attr == 50) {
    *value = fake_gpu::pci_attribute(d, attr, device);
  } else {
    return kInvalidValue;
  }
  return kSuccess;
}

// cudaDeviceProp begins with char name[256] and a 16-byte UUID; the rest stays zero.
int cudaGetDeviceProperties_v2(void* prop, int device) {
  const auto d = fake_gpu::devices();
  if (device < 0 || device >= d.count) return kInvalidDevice;
  auto* bytes = static_cast<unsigned char*>(prop);
  std::strncpy(reinterpret_cast<char*>(bytes), fake_gpu::name(), 255);
  fake_gpu::uuid_bytes(device, bytes + 256);
  return kSuccess;
}

}  // extern "C"
