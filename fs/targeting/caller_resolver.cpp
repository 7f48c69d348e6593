#include "fs/targeting/caller_resolver.h"

#include <optional>

#include "fs/targeting/caller_report.h"

namespace whfs::target {

GpuEnv gpu_env_of(const CallerProcess& process) {
  GpuEnv env;
  env.cuda_visible_devices = process.var("CUDA_VISIBLE_DEVICES");
  env.cuda_device_order = process.var("CUDA_DEVICE_ORDER");
  if (!process.own_root) env.nvidia_visible_devices = process.var("NVIDIA_VISIBLE_DEVICES");
  return env;
}

Resolution resolve_caller(const TargetOverrides& overrides, const HostPlatform& host,
                          const CallerFacts& f) {
  TargetFacts facts;
  facts.host = host;
  facts.python_error = f.python_error;
  if (f.python != nullptr) {
    if (f.python->python) {
      facts.python = &*f.python->python;
      if (f.python->torch) {
        facts.torch = &*f.python->torch;
      } else {
        facts.torch_error = f.python->torch_error;
      }
    } else {
      facts.python_error = f.python->python_error;
    }
  }
  std::optional<VisibleGpus> visible;
  if (f.gpus != nullptr) {
    visible = visible_gpus(*f.gpus, f.process != nullptr ? gpu_env_of(*f.process) : GpuEnv{});
    facts.machine_gpus = f.gpus;
    facts.visible = &*visible;
  }

  Resolution r;
  r.target = compose_target(overrides, facts);
  if (const auto key = key_of(r.target)) {
    r.key = format_key(*key, host);
  } else {
    r.key = kUnresolvedKey;
    r.why_unresolved = key.error();
  }
  r.caller =
      caller_section(f, r, visible ? std::optional<std::string>(visible->why) : std::nullopt);
  return r;
}

std::shared_ptr<const Resolution> unresolved(const std::string& why, const CallerFacts& facts) {
  auto r = std::make_shared<Resolution>();
  r->key = kUnresolvedKey;
  r->why_unresolved = why;
  r->caller = caller_section(facts, *r, std::nullopt);
  return r;
}

}  // namespace whfs::target
