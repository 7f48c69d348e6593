#include "fs/targeting/cuda_errors.h"

namespace whfs::target {
namespace {

struct Meaning {
  int code;
  const char* name;
  const char* words;
};

// The runtime and the driver share most numbers; the names differ.
constexpr Meaning kRuntime[] = {
    {1, "cudaErrorInvalidValue", "a CUDA call got an invalid value"},
    {2, "cudaErrorMemoryAllocation", "the CUDA runtime ran out of memory"},
    {3, "cudaErrorInitializationError", "the CUDA driver could not be initialised"},
    {34, "cudaErrorStubLibrary",
     "the libcuda found is a stub, not the NVIDIA driver (is the driver installed and "
     "libcuda.so.1 on the library path?)"},
    {35, "cudaErrorInsufficientDriver",
     "the NVIDIA driver is too old for this CUDA runtime (update the driver or use a runtime "
     "of an older CUDA)"},
    {36, "cudaErrorCallRequiresNewerDriver", "this CUDA call needs a newer NVIDIA driver"},
    {46, "cudaErrorDevicesUnavailable",
     "the CUDA devices are busy or unavailable (exclusive-process mode?)"},
    {100, "cudaErrorNoDevice",
     "no CUDA device is visible (check the driver, access to /dev/nvidia*, and "
     "CUDA_VISIBLE_DEVICES)"},
    {101, "cudaErrorInvalidDevice", "the device ordinal is not valid"},
    {304, "cudaErrorOperatingSystem",
     "an operating-system call failed (often: no access to /dev/nvidia* in a container)"},
    {803, "cudaErrorSystemDriverMismatch",
     "the NVIDIA kernel module and the user-space driver are different versions (reboot or "
     "reinstall the driver)"},
    {804, "cudaErrorCompatNotSupportedOnDevice",
     "the CUDA forward-compatibility package does not support this device"},
    {999, "cudaErrorUnknown", "the CUDA runtime failed for an unknown reason"},
};

constexpr Meaning kDriver[] = {
    {1, "CUDA_ERROR_INVALID_VALUE", "a CUDA driver call got an invalid value"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "the CUDA driver ran out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "the CUDA driver could not be initialised"},
    {4, "CUDA_ERROR_DEINITIALIZED", "the CUDA driver is shutting down"},
    {34, "CUDA_ERROR_STUB_LIBRARY",
     "the libcuda found is a stub, not the NVIDIA driver (is the driver installed?)"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE",
     "the CUDA devices are busy or unavailable (exclusive-process mode?)"},
    {100, "CUDA_ERROR_NO_DEVICE",
     "no CUDA device is visible (check the driver, access to /dev/nvidia*, and "
     "CUDA_VISIBLE_DEVICES)"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "the device ordinal is not valid"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM",
     "an operating-system call failed (often: no access to /dev/nvidia* in a container)"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "the NVIDIA kernel module and the user-space driver are different versions (reboot or "
     "reinstall the driver)"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
     "the CUDA forward-compatibility package does not support this device"},
    {999, "CUDA_ERROR_UNKNOWN", "the CUDA driver failed for an unknown reason"},
};

constexpr Meaning kNvml[] = {
    {1, "NVML_ERROR_UNINITIALIZED", "NVML was not initialised"},
    {2, "NVML_ERROR_INVALID_ARGUMENT", "an NVML call got an invalid argument"},
    {3, "NVML_ERROR_NOT_SUPPORTED", "the device does not support this NVML query"},
    {4, "NVML_ERROR_NO_PERMISSION", "no permission to query the GPU through NVML"},
    {6, "NVML_ERROR_NOT_FOUND", "the GPU was not found"},
    {9, "NVML_ERROR_DRIVER_NOT_LOADED", "the NVIDIA kernel driver is not loaded"},
    {12, "NVML_ERROR_LIBRARY_NOT_FOUND", "NVML could not find a library it needs"},
    {13, "NVML_ERROR_FUNCTION_NOT_FOUND", "the NVIDIA driver is too old for this NVML call"},
    {15, "NVML_ERROR_GPU_IS_LOST", "the GPU has fallen off the bus or is otherwise lost"},
    {17, "NVML_ERROR_OPERATING_SYSTEM", "an operating-system call failed"},
    {18, "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
     "the NVIDIA kernel module and NVML are different versions (reboot or reinstall the "
     "driver)"},
    {999, "NVML_ERROR_UNKNOWN", "NVML failed for an unknown reason"},
};

template <std::size_t N>
std::string describe(const Meaning (&table)[N], int code, const char* what) {
  for (const auto& m : table) {
    if (m.code == code) return std::string(m.words) + " (" + m.name + ")";
  }
  return std::string(what) + " error " + std::to_string(code);
}

}  // namespace

std::string describe_cuda_runtime_error(int code) {
  return describe(kRuntime, code, "CUDA runtime");
}

std::string describe_cuda_driver_error(int code) { return describe(kDriver, code, "CUDA driver"); }

std::string describe_nvml_error(int code) { return describe(kNvml, code, "NVML"); }

std::string cuda_version_text(int version) {
  if (version <= 0) return "";
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

}  // namespace whfs::target
