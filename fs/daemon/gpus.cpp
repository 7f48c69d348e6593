#include "fs/daemon/gpus.h"

namespace whfs {

target::GpuReport probe_gpus(const MountOptions& o) {
  if (!o.target.arch.empty()) {
    target::GpuReport r;
    r.probed = false;
    r.error = "not probed: arch=" + o.target.arch + " is set";
    return r;
  }
  target::GpuProbeOptions g;
  g.cudart = o.target.cudart;
  return target::probe_gpus(g);
}

std::string gpu_summary(const MountOptions& o, const target::CallerTargets& callers) {
  if (!o.current) return "no current/";
  const auto g = callers.gpus();
  std::string s =
      o.current_per_caller ? "current/ follows each process" : "current/ is the mount's";
  if (!g.found()) return s + "; GPUs: " + g.error;
  s += "; GPUs:";
  for (const auto& d : g.devices) s += " " + std::to_string(d.index) + ":" + d.arch();
  return s + " (" + target::to_string(g.api) + " " + g.library + ")";
}

}  // namespace whfs
