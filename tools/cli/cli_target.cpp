#include "tools/cli/cli_target.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "fs/targeting/caller_targets.h"
#include "fs/targeting/gpu_probe.h"
#include "fs/targeting/key.h"
#include "tools/cli/cli_commands.h"

namespace whfs::cli {
namespace {

Expected<ResolvedTarget, Failure> target_from_key(const std::string& text) {
  const auto host = target::host_platform();
  auto key = target::parse_key(text, host);
  if (!key) return unexpected(Failure{kUsage, key.error()});
  return ResolvedTarget{target::target_of(*key, host), target::format_key(*key, host)};
}

target::CallerTargetsConfig resolve_config(const TargetOverrides& ov) {
  target::CallerTargetsConfig config;
  config.deadline = std::chrono::minutes(1);  // no FUSE request waits on it here
  config.overrides = ov;
  return config;
}

// This process's target, as `wheelhouse detect` finds it: the GPUs it may use (a single arch
// is required, checked with the folder) and the torch of --python, else of the Python this
// shell would run.
Expected<ResolvedTarget, Failure> target_auto(const TargetRequest& o) {
  TargetOverrides ov;
  ov.python = o.python;
  ov.cudart = o.cudart;
  if (ov.cudart.empty()) {
    if (const char* env = std::getenv("WHEELHOUSE_CUDART")) ov.cudart = env;
  }
  if (auto trusted = target::check_trusted_library(ov.cudart); !trusted) {
    return unexpected(Failure{kUsage, trusted.error()});
  }
  target::GpuProbeOptions probe;
  probe.cudart = ov.cudart;
  target::CallerTargets targets(resolve_config(ov), target::probe_gpus(probe),
                                target::host_platform());
  const auto r = targets.resolve(::getpid());
  if (r->key == target::CallerTargets::kUnresolved) {
    return unexpected(Failure{kFailed, "cannot tell this machine's target (" + r->why_unresolved +
                                           "); give --target KEY, e.g. sm89-torch2.9-cu128-cp312"});
  }
  return ResolvedTarget{r->target, r->key};
}

// The torch of the Python this shell runs (its GPUs are not asked: the arch is the key's).
std::optional<target::TorchInfo> environment_torch(const target::Target& key_target) {
  TargetOverrides ov;
  ov.arch = key_target.arch.value;
  target::CallerTargets targets(resolve_config(ov), target::GpuReport{}, target::host_platform());
  return targets.resolve(::getpid())->target.torch_install;
}

std::filesystem::path lib_of(const std::filesystem::path& torch_dir) {
  std::error_code ec;
  return std::filesystem::is_directory(torch_dir / "lib", ec) ? torch_dir / "lib" : torch_dir;
}

}  // namespace

Expected<ResolvedTarget, Failure> resolve_target(const TargetRequest& request) {
  return request.target == "auto" ? target_auto(request) : target_from_key(request.target);
}

Expected<std::unique_ptr<RunSetup>, Failure> run_setup(const ResolvedTarget& t,
                                                       const std::string& torch_dir) {
  auto run = check::run_target_of(t.target, t.key);
  if (!run) return unexpected(Failure{kUsage, run.error()});
  auto setup = std::make_unique<RunSetup>();
  setup->run = std::move(*run);
  std::filesystem::path lib;
  if (!torch_dir.empty()) {
    lib = lib_of(torch_dir);
    setup->run.torch_note = "the torch of --torch (" + lib.string() + ")";
  } else {
    auto ti = t.target.torch_install ? t.target.torch_install : environment_torch(t.target);
    if (!ti) {
      setup->run.torch_note = "no torch in this environment (give --torch DIR)";
    } else if (ti->major_minor != t.target.torch.value) {
      setup->run.torch_note = "torch " + ti->version + " here (" + ti->path +
                              ") is not the target's " + t.target.torch.value +
                              " (give --torch DIR)";
    } else {
      lib = std::filesystem::path(ti->path).parent_path() / "lib";
      setup->run.torch_note = "torch " + ti->version + " (" + lib.string() + ")";
    }
  }
  if (!lib.empty()) {
    auto symbols = check::TorchSymbols::load(lib);
    if (!symbols && !torch_dir.empty()) {
      return unexpected(Failure{kUsage, "--torch: " + symbols.error()});
    }
    if (!symbols) {  // a torch found by itself: what cannot be read of it is said, not fatal
      setup->run.torch_note = "its libraries cannot be read: " + symbols.error();
      return setup;
    }
    setup->torch = std::move(*symbols);
    setup->run.torch = &*setup->torch;
  }
  return setup;
}

}  // namespace whfs::cli
