// wheelhouse detect: the target current/ leads this shell (or process --pid) to, axis by axis,
// with where each value came from: the same reading of files the mount does for whoever asks.

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "fs/common/mounts.h"
#include "fs/target/caller_targets.h"
#include "fs/target/gpu_probe.h"
#include "tools/cli_commands.h"

namespace whfs::cli {
namespace {

const char* env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

int run_detect(const CommonOptions& o, const DetectOptions& d) {
  // A script's key comes from the mount itself (its overrides, and the environment this
  // process has now, that of the shell or script that runs it); without a mount, as below.
  if (d.key_only && d.pid == 0 && o.target_options.empty()) {
    const auto mounts = d.mount.empty() ? wheelhouse_mounts() : std::vector<std::string>{d.mount};
    if (!mounts.empty()) {
      const std::string mount = default_mount(mounts);
      auto key = key_from_mount(mount);
      if (!key) {
        std::fprintf(stderr, "wheelhouse: %s\n", key.error().c_str());
        return kFailed;
      }
      std::printf("%s\n", key->c_str());
      return *key != target::CallerTargets::kUnresolved ? kOk : kFailed;
    }
  }
  TargetOverrides ov;
  ov.arch = env_or_empty("WHEELHOUSE_ARCH");
  ov.torch = env_or_empty("WHEELHOUSE_TORCH");
  ov.cuda = env_or_empty("WHEELHOUSE_CUDA");
  ov.python_tag = env_or_empty("WHEELHOUSE_PYTHON_TAG");
  ov.python = env_or_empty("WHEELHOUSE_PYTHON");
  ov.cudart = env_or_empty("WHEELHOUSE_CUDART");
  for (const auto& item : o.target_options) {
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    std::string* field = key == "arch"         ? &ov.arch
                         : key == "torch"      ? &ov.torch
                         : key == "cuda"       ? &ov.cuda
                         : key == "python_tag" ? &ov.python_tag
                         : key == "python"     ? &ov.python
                         : key == "cudart"     ? &ov.cudart
                                               : nullptr;
    if (field == nullptr || value.empty()) {
      std::fprintf(stderr,
                   "wheelhouse: unknown or empty option '%s' (python=, cudart=, arch=, "
                   "torch=, cuda=, python_tag=)\n",
                   item.c_str());
      return kUsage;
    }
    *field = value;
  }
  if (auto v = target::validate_overrides(ov); !v) {
    std::fprintf(stderr, "wheelhouse: %s\n", v.error().c_str());
    return kUsage;
  }
  if (auto v = target::check_trusted_library(ov.cudart); !v) {
    std::fprintf(stderr, "wheelhouse: %s\n", v.error().c_str());
    return kUsage;
  }
  target::GpuReport gpus;
  if (ov.arch.empty()) {
    target::GpuProbeOptions g;
    g.cudart = ov.cudart;
    gpus = target::probe_gpus(g);
  }
  target::CallerTargetsConfig config;
  config.overrides = ov;
  config.deadline = std::chrono::minutes(1);  // no FUSE request waits on it here
  target::CallerTargets targets(config, gpus, target::host_platform());
  const pid_t pid = d.pid > 0 ? d.pid : ::getpid();
  if (d.pid < 0) {
    std::fprintf(stderr, "wheelhouse: --pid must be a process id, got %d\n",
                 static_cast<int>(d.pid));
    return kUsage;
  }
  if (d.pid > 0 && ::kill(d.pid, 0) != 0 && errno == ESRCH) {
    std::fprintf(stderr, "wheelhouse: --pid %d: no such process\n", static_cast<int>(d.pid));
    return kFailed;
  }
  const auto r = targets.resolve(pid);
  const target::Target& t = r->target;
  if (d.key_only) {
    std::printf("%s\n", r->key.c_str());
  } else if (o.json) {
    nlohmann::json j = target::to_json(t);
    j["key"] = r->key;
    j["caller"] = r->caller;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    auto line = [](const char* label, const target::Axis& a) {
      if (a.has_value()) {
        std::printf("%-11s %-8s (%s)\n", label, a.value.c_str(), a.source.c_str());
      } else {
        std::printf("%-11s %-8s (%s)\n", label, "-", a.missing.c_str());
      }
    };
    if (r->caller.contains("interpreter")) {
      std::printf("%-11s %s (%s)\n", "Python", r->caller["interpreter"].get<std::string>().c_str(),
                  r->caller.value("interpreter_why", "").c_str());
    }
    line("GPU arch", t.arch);
    line("torch", t.torch);
    line("CUDA", t.cuda);
    line("Python tag", t.python_tag);
    for (const auto& n : t.notes) std::printf("note: %s\n", n.c_str());
    std::printf("%-11s targets/%s%s\n", "folder", r->key.c_str(),
                r->why_unresolved.empty() ? "" : (" (" + r->why_unresolved + ")").c_str());
  }
  // Success means every axis is known: current/ leads to wheels.
  return r->key != target::CallerTargets::kUnresolved ? kOk : kFailed;
}

}  // namespace whfs::cli
