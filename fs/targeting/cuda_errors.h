#pragma once
// CUDA runtime (cudaError_t), driver (CUresult) and NVML (nvmlReturn_t) codes in words, for the
// codes a detection can meet. Every message a person reads says what happened and what to
// check; the library's own string is quoted next to it when the library gives one.

#include <string>

namespace whfs::target {

// e.g. 35 -> "the NVIDIA driver is too old for this CUDA runtime (cudaErrorInsufficientDriver)"
std::string describe_cuda_runtime_error(int code);
// e.g. 100 -> "no CUDA device is visible (CUDA_ERROR_NO_DEVICE)"
std::string describe_cuda_driver_error(int code);
// e.g. 9 -> "the NVIDIA kernel driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED)"
std::string describe_nvml_error(int code);

// 12080 -> "12.8" (the encoding of cudaRuntimeGetVersion/cuDriverGetVersion); "" for <= 0.
std::string cuda_version_text(int version);

}  // namespace whfs::target
