// A fake libcuda.so (the driver API) for the probe's fallback, answered from the environment
// (fake_gpu.h). CUresult numbers and strings are the real driver's.
#include <cstring>

#include "tests/unit/targeting/fake_gpu.h"

extern "C" {

int cuGetErrorString(int error, const char** text) {
  switch (error) {
    case 0:
      *text = "no error";
      return 0;
    case 3:
      *text = "initialization error";
      return 0;
    case 100:
      *text = "no CUDA-capable device is detected";
      return 0;
    default:
      *text = nullptr;
      return 1;  // CUDA_ERROR_INVALID_VALUE: unknown code
  }
}

int cuDriverGetVersion(int* version) {
  *version = fake_gpu::env_int("FAKE_CUDA_DRIVER_VERSION", 12090);
  return 0;
}

int cuInit(unsigned flags) {
  if (flags != 0) return 1;
  return fake_gpu::env_int("FAKE_CU_ERROR", 0);
}

int cuDeviceGetCount(int* count) {
  *count = fake_gpu::devices().count;
  return 0;
}

int cuDeviceGet(int* device, int ordinal) {
  if (ordinal < 0 || ordinal >= fake_gpu::devices().count) return 101;
  *device = ordinal;
  return 0;
}

int cuDeviceGetAttribute(int* value, int attr, int device) {
  const auto d = fake_gpu::devices();
  if (device < 0 || device >= d.count) return 101;
  if (attr == 75) {
    *value = d.major[device];
  } else if (attr == 76) {
    *value = d.minor[device];
  } else if (attr == 33 || attr == 34 || attr == 50) {
    *value = fake_gpu::pci_attribute(d, attr, device);
  } else {
    return 1;
  }
  return 0;
}

int cuDeviceGetName(char* name, int len, int device) {
  if (device < 0 || device >= fake_gpu::devices().count || len <= 0) return 1;
  std::strncpy(name, fake_gpu::name(), static_cast<std::size_t>(len));
  name[len - 1] = '\0';
  return 0;
}

int cuDeviceGetUuid(unsigned char* uuid, int device) {
  if (device < 0 || device >= fake_gpu::devices().count) return 101;
  fake_gpu::uuid_bytes(device, uuid);
  return 0;
}

}  // extern "C"
