#pragma once
// Internal to gpu_probe.cpp: what runs inside the probe's child (dlopen, the vendor calls)
// and the wire form of its answer.

#include <string>
#include <string_view>
#include <vector>

#include "fs/common/expected.h"
#include "fs/targeting/gpu_probe.h"

namespace whfs::target::detail {

struct LibraryAnswer {
  bool loaded = false;
  std::string load_error;       // dlerror() when not loaded
  std::string failed_call;      // the call that failed; empty when all succeeded
  int code = 0;                 // its cudaError_t / CUresult / nvmlReturn_t
  std::string library_message;  // the library's own words for `code`, when it has them
  int runtime_version = 0;
  int driver_version = 0;
  std::vector<GpuDevice> devices;
};

// Runs in the child: loads `library`, asks it for its devices. Never throws.
LibraryAnswer query_library(GpuApi api, const std::string& library) noexcept;

std::string encode(const LibraryAnswer& a);
Expected<LibraryAnswer, std::string> decode(std::string_view text);

}  // namespace whfs::target::detail
