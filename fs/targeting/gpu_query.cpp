#include "fs/targeting/gpu_query.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

namespace whfs::target::detail {
namespace {

// The few prototypes used, declared here so nothing CUDA is needed at build time. Enums are
// passed as int, which is how the C ABI passes them.
constexpr int kComputeCapabilityMajor = 75;  // cudaDevAttr / CU_DEVICE_ATTRIBUTE_..._MAJOR
constexpr int kComputeCapabilityMinor = 76;
constexpr int kPciBusId = 33;  // the same numbers in the runtime and the driver API
constexpr int kPciDeviceId = 34;
constexpr int kPciDomainId = 50;

// 16 UUID bytes in the form CUDA_VISIBLE_DEVICES and nvidia-smi use.
std::string uuid_text(const unsigned char* b) {
  char s[64];
  std::snprintf(s, sizeof s,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return s;
}

// The PCI address through a cudaDeviceGetAttribute-shaped call (failures leave zeros: the
// address only orders devices).
template <class GetAttribute>
void read_pci(GpuDevice& d, GetAttribute get, int dev) {
  if (get(&d.pci_bus, kPciBusId, dev) != 0) d.pci_bus = 0;
  if (get(&d.pci_device, kPciDeviceId, dev) != 0) d.pci_device = 0;
  if (get(&d.pci_domain, kPciDomainId, dev) != 0) d.pci_domain = 0;
}

class Library {
 public:
  explicit Library(const std::string& path)
      : handle_(::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) {
      const char* e = ::dlerror();  // NOLINT(concurrency-mt-unsafe): the child has one thread
      error_ = e != nullptr ? e : "dlopen failed";
    }
  }
  // No dlclose: the child exits right after, and some vendor libraries misbehave on unload.
  bool loaded() const { return handle_ != nullptr; }
  const std::string& error() const { return error_; }

  template <class Fn>
  Fn get(const char* name) const {
    void* p = ::dlsym(handle_, name);
    Fn f = nullptr;
    static_assert(sizeof f == sizeof p);
    std::memcpy(&f, &p, sizeof f);  // object to function pointer without a cast warning
    return f;
  }

 private:
  void* handle_;
  std::string error_;
};

LibraryAnswer missing(const char* symbol) {
  LibraryAnswer a;
  a.loaded = true;
  a.failed_call = "dlsym";
  a.library_message = std::string("the library has no ") + symbol;
  return a;
}

void fail(LibraryAnswer& a, const char* call, int code, const char* message) {
  a.failed_call = call;
  a.code = code;
  a.library_message = message != nullptr ? message : "";
  a.devices.clear();
}

LibraryAnswer query_runtime(const Library& lib) {
  using GetCount = int (*)(int*);
  using GetAttribute = int (*)(int*, int, int);
  using ErrorString = const char* (*)(int);
  using GetVersion = int (*)(int*);
  const auto get_count = lib.get<GetCount>("cudaGetDeviceCount");
  const auto get_attribute = lib.get<GetAttribute>("cudaDeviceGetAttribute");
  if (get_count == nullptr) return missing("cudaGetDeviceCount");
  if (get_attribute == nullptr) return missing("cudaDeviceGetAttribute");
  const auto error_string = lib.get<ErrorString>("cudaGetErrorString");
  auto words = [&](int rc) { return error_string != nullptr ? error_string(rc) : nullptr; };
  // cudaDeviceProp starts with char name[256] and cudaUUID_t uuid in every runtime since
  // CUDA 10; the rest of its layout changes between versions, so only those are read, from a
  // buffer larger than any version's struct.
  using GetProperties = int (*)(void*, int);
  auto get_properties = lib.get<GetProperties>("cudaGetDeviceProperties_v2");
  if (get_properties == nullptr) get_properties = lib.get<GetProperties>("cudaGetDeviceProperties");

  LibraryAnswer a;
  a.loaded = true;
  if (const auto v = lib.get<GetVersion>("cudaRuntimeGetVersion")) v(&a.runtime_version);
  if (const auto v = lib.get<GetVersion>("cudaDriverGetVersion")) v(&a.driver_version);
  int count = 0;
  if (const int rc = get_count(&count); rc != 0) {
    fail(a, "cudaGetDeviceCount", rc, words(rc));
    return a;
  }
  for (int i = 0; i < count; ++i) {
    GpuDevice d;
    d.index = i;
    int rc = get_attribute(&d.major, kComputeCapabilityMajor, i);
    if (rc == 0) rc = get_attribute(&d.minor, kComputeCapabilityMinor, i);
    if (rc != 0) {
      fail(a, "cudaDeviceGetAttribute", rc, words(rc));
      return a;
    }
    read_pci(d, get_attribute, i);
    if (get_properties != nullptr) {
      std::vector<unsigned char> prop(16384, 0);
      if (get_properties(prop.data(), i) == 0) {
        d.name.assign(reinterpret_cast<const char*>(prop.data()),
                      ::strnlen(reinterpret_cast<const char*>(prop.data()), 256));
        d.uuid = uuid_text(prop.data() + 256);
      }
    }
    a.devices.push_back(d);
  }
  return a;
}

LibraryAnswer query_driver(const Library& lib) {
  using Init = int (*)(unsigned);
  using GetCount = int (*)(int*);
  using Get = int (*)(int*, int);
  using GetAttribute = int (*)(int*, int, int);
  using GetName = int (*)(char*, int, int);
  using ErrorString = int (*)(int, const char**);
  using GetVersion = int (*)(int*);
  const auto init = lib.get<Init>("cuInit");
  const auto get_count = lib.get<GetCount>("cuDeviceGetCount");
  const auto get = lib.get<Get>("cuDeviceGet");
  const auto get_attribute = lib.get<GetAttribute>("cuDeviceGetAttribute");
  if (init == nullptr) return missing("cuInit");
  if (get_count == nullptr) return missing("cuDeviceGetCount");
  if (get == nullptr) return missing("cuDeviceGet");
  if (get_attribute == nullptr) return missing("cuDeviceGetAttribute");
  const auto get_name = lib.get<GetName>("cuDeviceGetName");
  using GetUuid = int (*)(unsigned char*, int);
  const auto get_uuid = lib.get<GetUuid>("cuDeviceGetUuid");
  const auto error_string = lib.get<ErrorString>("cuGetErrorString");
  auto words = [&](int rc) {
    const char* s = nullptr;
    if (error_string != nullptr && error_string(rc, &s) != 0) s = nullptr;
    return s;
  };

  LibraryAnswer a;
  a.loaded = true;
  if (const auto v = lib.get<GetVersion>("cuDriverGetVersion")) v(&a.driver_version);
  if (const int rc = init(0); rc != 0) {
    fail(a, "cuInit", rc, words(rc));
    return a;
  }
  int count = 0;
  if (const int rc = get_count(&count); rc != 0) {
    fail(a, "cuDeviceGetCount", rc, words(rc));
    return a;
  }
  for (int i = 0; i < count; ++i) {
    GpuDevice d;
    d.index = i;
    int dev = 0;
    int rc = get(&dev, i);
    if (rc == 0) rc = get_attribute(&d.major, kComputeCapabilityMajor, dev);
    if (rc == 0) rc = get_attribute(&d.minor, kComputeCapabilityMinor, dev);
    if (rc != 0) {
      fail(a, "cuDeviceGetAttribute", rc, words(rc));
      return a;
    }
    char name[256] = {};
    if (get_name != nullptr && get_name(name, sizeof name - 1, dev) == 0) d.name = name;
    read_pci(d, get_attribute, dev);
    unsigned char uuid[16] = {};
    if (get_uuid != nullptr && get_uuid(uuid, dev) == 0) d.uuid = uuid_text(uuid);
    a.devices.push_back(d);
  }
  return a;
}

LibraryAnswer query_nvml(const Library& lib) {
  using Init = int (*)();
  using GetCount = int (*)(unsigned*);
  using GetHandle = int (*)(unsigned, void**);
  using GetCapability = int (*)(void*, int*, int*);
  using GetName = int (*)(void*, char*, unsigned);
  using ErrorString = const char* (*)(int);
  using GetVersion = int (*)(int*);
  using Shutdown = int (*)();
  const auto init = lib.get<Init>("nvmlInit_v2");
  const auto get_count = lib.get<GetCount>("nvmlDeviceGetCount_v2");
  const auto get_handle = lib.get<GetHandle>("nvmlDeviceGetHandleByIndex_v2");
  const auto get_capability = lib.get<GetCapability>("nvmlDeviceGetCudaComputeCapability");
  if (init == nullptr) return missing("nvmlInit_v2");
  if (get_count == nullptr) return missing("nvmlDeviceGetCount_v2");
  if (get_handle == nullptr) return missing("nvmlDeviceGetHandleByIndex_v2");
  if (get_capability == nullptr) return missing("nvmlDeviceGetCudaComputeCapability");
  const auto get_name = lib.get<GetName>("nvmlDeviceGetName");
  const auto get_uuid = lib.get<GetName>("nvmlDeviceGetUUID");
  // nvmlPciInfo_t: char busIdLegacy[16], then unsigned domain, bus, device, ...
  using GetPci = int (*)(void*, void*);
  const auto get_pci = lib.get<GetPci>("nvmlDeviceGetPciInfo_v3");
  const auto error_string = lib.get<ErrorString>("nvmlErrorString");
  auto words = [&](int rc) { return error_string != nullptr ? error_string(rc) : nullptr; };

  LibraryAnswer a;
  a.loaded = true;
  if (const int rc = init(); rc != 0) {
    fail(a, "nvmlInit_v2", rc, words(rc));
    return a;
  }
  if (const auto v = lib.get<GetVersion>("nvmlSystemGetCudaDriverVersion")) {
    if (v(&a.driver_version) != 0) a.driver_version = 0;
  }
  unsigned count = 0;
  if (const int rc = get_count(&count); rc != 0) {
    fail(a, "nvmlDeviceGetCount_v2", rc, words(rc));
    return a;
  }
  for (unsigned i = 0; i < count; ++i) {
    GpuDevice d;
    d.index = static_cast<int>(i);
    void* handle = nullptr;
    int rc = get_handle(i, &handle);
    if (rc == 0) rc = get_capability(handle, &d.major, &d.minor);
    if (rc != 0) {
      fail(a, "nvmlDeviceGetCudaComputeCapability", rc, words(rc));
      return a;
    }
    char name[256] = {};
    if (get_name != nullptr && get_name(handle, name, sizeof name - 1) == 0) d.name = name;
    char uuid[96] = {};
    if (get_uuid != nullptr && get_uuid(handle, uuid, sizeof uuid - 1) == 0) d.uuid = uuid;
    unsigned pci[32] = {};
    if (get_pci != nullptr && get_pci(handle, pci) == 0) {
      d.pci_domain = static_cast<int>(pci[4]);
      d.pci_bus = static_cast<int>(pci[5]);
      d.pci_device = static_cast<int>(pci[6]);
    }
    a.devices.push_back(d);
  }
  if (const auto shutdown = lib.get<Shutdown>("nvmlShutdown")) shutdown();
  return a;
}

}  // namespace

LibraryAnswer query_library(GpuApi api, const std::string& library) noexcept {
  try {
    const Library lib(library);
    if (!lib.loaded()) {
      LibraryAnswer a;
      a.load_error = lib.error();
      return a;
    }
    switch (api) {
      case GpuApi::kRuntime:
        return query_runtime(lib);
      case GpuApi::kDriver:
        return query_driver(lib);
      case GpuApi::kNvml:
        return query_nvml(lib);
    }
  } catch (...) {
  }
  LibraryAnswer a;
  a.load_error = "the probe failed inside the child";
  return a;
}

std::string encode(const LibraryAnswer& a) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : a.devices) {
    devices.push_back({{"index", d.index},
                       {"major", d.major},
                       {"minor", d.minor},
                       {"name", d.name},
                       {"uuid", d.uuid},
                       {"pci", {d.pci_domain, d.pci_bus, d.pci_device}}});
  }
  const nlohmann::json j = {{"loaded", a.loaded},
                            {"load_error", a.load_error},
                            {"failed_call", a.failed_call},
                            {"code", a.code},
                            {"library_message", a.library_message},
                            {"runtime_version", a.runtime_version},
                            {"driver_version", a.driver_version},
                            {"devices", devices}};
  // Replace, not throw, on bytes that are not UTF-8 (a vendor string could hold any).
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Expected<LibraryAnswer, std::string> decode(std::string_view text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return unexpected(std::string("the probe child sent no answer"));
  try {
    LibraryAnswer a;
    a.loaded = j.at("loaded").get<bool>();
    a.load_error = j.at("load_error").get<std::string>();
    a.failed_call = j.at("failed_call").get<std::string>();
    a.code = j.at("code").get<int>();
    a.library_message = j.at("library_message").get<std::string>();
    a.runtime_version = j.at("runtime_version").get<int>();
    a.driver_version = j.at("driver_version").get<int>();
    for (const auto& d : j.at("devices")) {
      GpuDevice g;
      g.index = d.at("index").get<int>();
      g.major = d.at("major").get<int>();
      g.minor = d.at("minor").get<int>();
      g.name = d.at("name").get<std::string>();
      g.uuid = d.at("uuid").get<std::string>();
      const auto& pci = d.at("pci");
      g.pci_domain = pci.at(0).get<int>();
      g.pci_bus = pci.at(1).get<int>();
      g.pci_device = pci.at(2).get<int>();
      a.devices.push_back(std::move(g));
    }
    return a;
  } catch (const nlohmann::json::exception&) {
    return unexpected(std::string("the probe child sent a malformed answer"));
  }
}

}  // namespace whfs::target::detail
