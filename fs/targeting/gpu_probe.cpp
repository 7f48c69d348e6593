#include "fs/targeting/gpu_probe.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <tuple>

#include "fs/common/text.h"
#include "fs/targeting/child_process.h"
#include "fs/targeting/cuda_errors.h"
#include "fs/targeting/gpu_query.h"

namespace whfs::target {
namespace {

std::string describe_code(GpuApi api, int code) {
  switch (api) {
    case GpuApi::kRuntime:
      return describe_cuda_runtime_error(code);
    case GpuApi::kDriver:
      return describe_cuda_driver_error(code);
    case GpuApi::kNvml:
      return describe_nvml_error(code);
  }
  return "error " + std::to_string(code);
}

// The answer of one library in words.
std::string describe_answer(GpuApi api, const detail::LibraryAnswer& a) {
  if (!a.loaded) return "cannot be loaded: " + a.load_error;
  if (a.failed_call == "dlsym")
    return "is not a usable " + std::string(to_string(api)) + ": " + a.library_message;
  // A runtime with no driver at all reports "insufficient driver"; the driver version 0 says
  // which of the two it is.
  constexpr int kInsufficientDriver = 35;
  if (api == GpuApi::kRuntime && a.code == kInsufficientDriver && a.driver_version == 0) {
    return a.failed_call +
           " failed: no NVIDIA driver was found (cudaDriverGetVersion gives 0, so the runtime "
           "reports cudaErrorInsufficientDriver); is the driver installed and libcuda.so.1 on "
           "the library path?";
  }
  if (!a.failed_call.empty()) {
    std::string s = a.failed_call + " failed: " + describe_code(api, a.code);
    if (!a.library_message.empty()) s += " [\"" + a.library_message + "\"]";
    // The versions explain an insufficient driver: the runtime is newer than the driver.
    if (a.runtime_version > 0 && a.driver_version > 0 && a.driver_version < a.runtime_version) {
      s += "; this runtime is CUDA " + cuda_version_text(a.runtime_version) +
           ", the driver supports up to CUDA " + cuda_version_text(a.driver_version);
    }
    return s;
  }
  if (a.devices.empty()) return "answered, but lists no CUDA device";
  return "found " + std::to_string(a.devices.size()) +
         (a.devices.size() == 1 ? " device" : " devices");
}

std::string list(const std::vector<GpuAttempt>& attempts) {
  std::string s;
  for (const auto& at : attempts) s += (s.empty() ? "" : ", ") + at.library;
  return s;
}

}  // namespace

const char* to_string(GpuApi api) {
  switch (api) {
    case GpuApi::kRuntime:
      return "CUDA runtime";
    case GpuApi::kDriver:
      return "CUDA driver API";
    case GpuApi::kNvml:
      return "NVML";
  }
  return "?";
}

std::vector<std::pair<GpuApi, std::string>> gpu_library_candidates(const GpuProbeOptions& opts) {
  std::vector<std::pair<GpuApi, std::string>> out;
  auto add = [&](GpuApi api, const std::string& lib) {
    const std::pair<GpuApi, std::string> c{api, lib};
    if (!lib.empty() && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  };
  add(GpuApi::kRuntime, opts.cudart);
  for (const auto& lib : opts.system_runtimes) add(GpuApi::kRuntime, lib);
  for (const auto& lib : opts.drivers) add(GpuApi::kDriver, lib);
  for (const auto& lib : opts.nvml) add(GpuApi::kNvml, lib);
  return out;
}

GpuReport probe_gpus(const GpuProbeOptions& opts) {
  GpuReport report;
  for (const auto& [api, lib] : gpu_library_candidates(opts)) {
    GpuAttempt attempt{api, lib, false, ""};
    const ChildResult r = run_in_child(
        [api = api, &lib = lib] {
          // Every device, in CUDA's default order: each process's share is applied later.
          ::unsetenv("CUDA_VISIBLE_DEVICES");
          ::unsetenv("CUDA_DEVICE_ORDER");
          return detail::encode(detail::query_library(api, lib));
        },
        opts.timeout);
    if (!r.ok()) {
      // It loaded far enough to crash or hang; that is its answer.
      attempt.loaded = r.end != ChildResult::End::kStartFailed;
      attempt.outcome = "the probe child " + r.describe();
      report.attempts.push_back(std::move(attempt));
      continue;
    }
    auto answer = detail::decode(r.out);
    if (!answer) {
      attempt.outcome = answer.error();
      report.attempts.push_back(std::move(attempt));
      continue;
    }
    attempt.loaded = answer->loaded;
    attempt.outcome = describe_answer(api, *answer);
    report.attempts.push_back(std::move(attempt));
    if (answer->failed_call.empty() && !answer->devices.empty()) {
      report.devices = std::move(answer->devices);
      report.api = api;
      report.library = lib;
      report.runtime_version = answer->runtime_version;
      report.driver_version = answer->driver_version;
      return report;
    }
  }
  // No library listed a device: say what each one that loaded said (libraries that said the
  // same thing once, together); if none loaded, say which were tried.
  std::vector<std::pair<std::string, std::string>> said;  // "<api> <libs>", outcome
  for (const auto& at : report.attempts) {
    if (!at.loaded) continue;
    const std::string api = to_string(at.api);
    const auto same = std::find_if(said.begin(), said.end(), [&](const auto& s) {
      return s.second == at.outcome && s.first.starts_with(api + " ");
    });
    if (same != said.end()) {
      same->first += ", " + at.library;
    } else {
      said.emplace_back(api + " " + at.library, at.outcome);
    }
  }
  for (const auto& [who, outcome] : said) {
    if (!report.error.empty()) report.error += "; ";
    report.error.append(who).append(": ").append(outcome);
  }
  if (report.error.empty()) {
    report.error = report.attempts.empty()
                       ? "no CUDA library to try"
                       : "no CUDA library could be loaded (tried " + list(report.attempts) +
                             "); is the NVIDIA driver installed?";
  }
  return report;
}

Expected<void, std::string> check_trusted_library(const std::string& path) {
  if (path.empty() || ::geteuid() != 0) return {};
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr) return {};  // missing: the probe says so in its own words
  const std::string file(real);
  std::free(real);
  const std::string dir = file.substr(0, std::max<std::size_t>(file.rfind('/'), 1));
  for (const std::string& p : {file, dir}) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) continue;
    if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      return unexpected("cudart=" + path + ": " + p +
                        " is not owned by root or is writable by others; a daemon running as "
                        "root loads only libraries that only root can change");
    }
  }
  return {};
}

namespace {

std::vector<std::string_view> split_commas(std::string_view s) {
  std::vector<std::string_view> out = split(s, ',');
  for (auto& field : out) field = trim(field);
  return out;
}

std::optional<std::size_t> index_of(std::string_view item) {
  if (item.empty() || item.size() > 5) return std::nullopt;
  std::size_t v = 0;
  for (char c : item) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::size_t>(c - '0');
  }
  return v;
}

std::vector<GpuDevice> pci_sorted(std::vector<GpuDevice> v) {
  std::stable_sort(v.begin(), v.end(), [](const GpuDevice& a, const GpuDevice& b) {
    return std::tie(a.pci_domain, a.pci_bus, a.pci_device) <
           std::tie(b.pci_domain, b.pci_bus, b.pci_device);
  });
  return v;
}

bool archs_differ(const std::vector<GpuDevice>& v) {
  return std::any_of(v.begin(), v.end(), [&](const GpuDevice& d) {
    return d.major != v.front().major || d.minor != v.front().minor;
  });
}

std::string describe(const std::vector<GpuDevice>& v) {
  std::string s;
  for (const auto& d : v) {
    s += (s.empty() ? "" : ", ") + std::string("device ") + std::to_string(d.index) + " (" +
         d.arch() + ")";
  }
  return s.empty() ? "no device" : s;
}

bool contains(const std::vector<GpuDevice>& v, const GpuDevice& d) {
  return std::any_of(v.begin(), v.end(), [&](const GpuDevice& x) { return x.index == d.index; });
}

// The devices of `pool` whose UUID starts with `item` (CUDA takes unique prefixes); `unknown`
// is set when some device's UUID is not known, so a miss proves nothing.
std::vector<GpuDevice> by_uuid(const std::vector<GpuDevice>& pool, std::string_view item,
                               bool& unknown) {
  std::vector<GpuDevice> out;
  for (const auto& d : pool) {
    if (d.uuid.empty()) unknown = true;
    if (!d.uuid.empty() && std::string_view(d.uuid).starts_with(item)) out.push_back(d);
  }
  return out;
}

}  // namespace

VisibleGpus visible_gpus(const GpuReport& machine, const GpuEnv& env) {
  VisibleGpus out;
  if (!machine.found()) {
    out.why = machine.probed ? "no GPU found on this machine: " + machine.error : machine.error;
    return out;
  }
  std::vector<GpuDevice> pool = machine.devices;
  std::string how;
  // A container's share of the host's devices, numbered as NVML (and nvidia-smi) number them.
  if (const auto& nv = env.nvidia_visible_devices; nv && !nv->empty() && *nv != "all") {
    const std::string text = "NVIDIA_VISIBLE_DEVICES=" + *nv;
    if (*nv == "none" || *nv == "void") {
      out.why = text + ": the container was given no GPU";
      return out;
    }
    const std::vector<GpuDevice> host = pci_sorted(pool);
    std::vector<GpuDevice> share;
    bool uncertain = false;
    for (const auto item : split_commas(*nv)) {
      if (const auto i = index_of(item)) {
        if (*i < host.size()) share.push_back(host[*i]);
        continue;
      }
      bool unknown = false;
      const auto found = by_uuid(pool, item, unknown);
      if (found.size() == 1) {
        share.push_back(found.front());
      } else {
        uncertain = true;
      }
    }
    if (uncertain) {
      out.notes.push_back(text +
                          " names a device this machine's probe cannot identify; every "
                          "GPU is counted, so the choice runs on whichever it is");
    } else {
      std::vector<GpuDevice> kept;
      for (const auto& d : pool) {
        if (contains(share, d)) kept.push_back(d);
      }
      pool = std::move(kept);
      how = text + ", ";
    }
  }
  const bool pci_order = env.cuda_device_order && *env.cuda_device_order == "PCI_BUS_ID";
  if (pci_order) pool = pci_sorted(pool);
  if (!env.cuda_visible_devices) {
    out.devices = pool;
    out.why = how + "CUDA_VISIBLE_DEVICES unset: " + describe(pool);
    if (pool.empty()) out.why = how.substr(0, how.size() - 2) + " leaves no device";
    return out;
  }
  const std::string text = "CUDA_VISIBLE_DEVICES=\"" + *env.cuda_visible_devices + "\"";
  // NVML numbers devices in PCI order; CUDA's default order is fastest first. On a node whose
  // devices differ, an index cannot be mapped without the runtime's order.
  const bool order_unknown = !pci_order && !machine.cuda_order() && archs_differ(pool);
  std::vector<GpuDevice> chosen;
  std::string uncertain;
  if (!env.cuda_visible_devices->empty()) {
    for (const auto item : split_commas(*env.cuda_visible_devices)) {
      std::optional<GpuDevice> d;
      if (const auto i = index_of(item)) {
        if (*i >= pool.size()) break;  // like CUDA: the list ends at the first invalid entry
        if (order_unknown) {
          uncertain = "only NVML answered, which does not give CUDA's default device order";
          break;
        }
        d = pool[*i];
      } else if (item.starts_with("GPU-")) {
        bool unknown = false;
        const auto found = by_uuid(pool, item, unknown);
        if (found.size() == 1) {
          d = found.front();
        } else if (found.empty() && unknown) {
          uncertain = "the GPU library did not give device UUIDs";
          break;
        } else {
          break;  // no such device, or an ambiguous prefix: CUDA stops here too
        }
      } else if (item.starts_with("MIG-")) {
        uncertain = "a MIG instance's parent GPU is not known to the probe";
        break;
      } else {
        break;
      }
      if (contains(chosen, *d)) break;
      chosen.push_back(*d);
    }
  }
  if (!uncertain.empty()) {
    out.devices = pool;
    out.why = how + text + ": " + describe(pool);
    out.notes.push_back(text + " cannot be mapped to a device with certainty (" + uncertain +
                        "); every candidate GPU is counted, so the choice runs on whichever "
                        "it is");
    return out;
  }
  out.devices = chosen;
  out.why = how + text + ": " + describe(chosen);
  if (chosen.empty()) out.why = how + text + " leaves no device";
  return out;
}

std::string arch_set(const std::vector<GpuDevice>& devices) {
  std::set<std::pair<int, int>> archs;
  for (const auto& d : devices) archs.emplace(d.major, d.minor);
  std::string s;
  for (const auto& [major, minor] : archs) {
    s += (s.empty() ? "sm" : "+sm") + std::to_string(major) + std::to_string(minor);
  }
  return s;
}

}  // namespace whfs::target
