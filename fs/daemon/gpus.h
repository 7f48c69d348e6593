#pragma once
// The mount's view of the machine's GPUs: probed at start and on each refresh, and said in one
// line (the mount line, a refresh that changed them).

#include <string>

#include "fs/config/options.h"
#include "fs/targeting/caller_targets.h"
#include "fs/targeting/gpu_probe.h"

namespace whfs {

// The machine's GPUs, unless arch= makes them irrelevant. The mount owner's libraries only
// (cudart=, the system's); every device, whatever this daemon's CUDA_VISIBLE_DEVICES.
target::GpuReport probe_gpus(const MountOptions& o);

// "current/ is the mount's; GPUs: 0:sm89 (runtime libcudart.so.12)", or why there are none.
std::string gpu_summary(const MountOptions& o, const target::CallerTargets& callers);

}  // namespace whfs
