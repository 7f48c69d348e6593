#include "fs/target/gpu_probe.h"

#include <algorithm>
#include <filesystem>

#include "fs/target/child_process.h"
#include "fs/target/cuda_errors.h"
#include "fs/target/gpu_query.h"

namespace whfs::target {
namespace {

// The libcudart files of a pip-installed CUDA runtime in one site-packages folder, newest
// name first (libcudart.so.12 before libcudart.so).
std::vector<std::string> bundled_runtimes(const std::string& site_dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const char* sub : {"nvidia/cuda_runtime/lib", "nvidia/cu13/lib"}) {
    std::vector<std::string> found;
    std::error_code ec;
    for (fs::directory_iterator it(fs::path(site_dir) / sub, ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.starts_with("libcudart.so")) found.push_back(it->path().string());
    }
    std::sort(found.rbegin(), found.rend());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

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

std::string GpuReport::heterogeneity_note() const {
  const bool differ = std::any_of(devices.begin(), devices.end(), [&](const GpuDevice& d) {
    return d.major != devices.front().major || d.minor != devices.front().minor;
  });
  if (!differ) return "";
  std::string s = "devices differ:";
  for (const auto& d : devices) s += " " + std::to_string(d.index) + " " + d.arch() + ",";
  s.pop_back();
  return s + "; using device 0 (" + devices.front().arch() +
         "); set CUDA_VISIBLE_DEVICES or arch= to choose another";
}

std::vector<std::pair<GpuApi, std::string>> gpu_library_candidates(const GpuProbeOptions& opts) {
  std::vector<std::pair<GpuApi, std::string>> out;
  auto add = [&](GpuApi api, const std::string& lib) {
    const std::pair<GpuApi, std::string> c{api, lib};
    if (!lib.empty() && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  };
  add(GpuApi::kRuntime, opts.cudart);
  for (const auto& dir : opts.site_dirs) {
    for (const auto& lib : bundled_runtimes(dir)) add(GpuApi::kRuntime, lib);
  }
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
        [api = api, &lib = lib] { return detail::encode(detail::query_library(api, lib)); },
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
    if (api == GpuApi::kNvml && answer->failed_call.empty()) {
      // NVML lists every GPU in PCI order; keep what CUDA_VISIBLE_DEVICES lets CUDA see.
      auto visible = visible_device_indices(opts.cuda_visible_devices,
                                            static_cast<int>(answer->devices.size()));
      if (!visible) {
        attempt.loaded = true;
        attempt.outcome = visible.error();
        report.attempts.push_back(std::move(attempt));
        continue;
      }
      std::vector<GpuDevice> kept;
      for (int physical : *visible) {
        GpuDevice d = answer->devices[static_cast<std::size_t>(physical)];
        d.index = static_cast<int>(kept.size());
        kept.push_back(std::move(d));
      }
      if (kept.empty() && !answer->devices.empty()) {
        attempt.loaded = true;
        attempt.outcome = "lists " + std::to_string(answer->devices.size()) +
                          " GPUs, none of them visible under CUDA_VISIBLE_DEVICES=\"" +
                          *opts.cuda_visible_devices + "\"";
        report.attempts.push_back(std::move(attempt));
        continue;
      }
      answer->devices = std::move(kept);
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

Expected<std::vector<int>, std::string> visible_device_indices(
    const std::optional<std::string>& env, int count) {
  std::vector<int> out;
  if (!env) {
    for (int i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  std::string_view rest = *env;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.starts_with("GPU-") || item.starts_with("MIG-")) {
      return unexpected("CUDA_VISIBLE_DEVICES names a device by UUID (" + std::string(item) +
                        "), which NVML alone cannot map to CUDA's numbering; use indices or "
                        "the arch= option");
    }
    // Like CUDA: the list ends at the first entry that is not a valid, unused index.
    int index = 0;
    bool valid = !item.empty() && item.size() < 6;
    for (char c : item) {
      if (c < '0' || c > '9') valid = false;
      if (valid) index = index * 10 + (c - '0');
    }
    if (!valid || index >= count || std::find(out.begin(), out.end(), index) != out.end()) break;
    out.push_back(index);
  }
  return out;
}

}  // namespace whfs::target
