#pragma once
// The target of `publish` and `check` (auto: this process's GPU and Python's torch; or a key),
// and what the run check needs of it: its archs, its glibc and the torch to read symbols from.

#include <memory>
#include <optional>
#include <string>

#include "fs/check/run_check.h"
#include "fs/check/torch_symbols.h"
#include "fs/common/expected.h"
#include "fs/targeting/target.h"
#include "tools/cli/cli_commands.h"

namespace whfs::cli {

struct ResolvedTarget {
  target::Target target;
  std::string key;
};

struct TargetRequest {
  std::string target = "auto";  // or a key
  std::string python;           // auto: the Python whose torch counts
  std::string cudart;           // auto: the CUDA runtime to ask
};

Expected<ResolvedTarget, Failure> resolve_target(const TargetRequest& request);

// The run check's target; its RunTarget points into it, so it stays where it is made.
struct RunSetup {
  check::RunTarget run;
  std::optional<check::TorchSymbols> torch;
};

// `torch_dir` (a torch folder, or its lib/) when given, else the torch of the target (auto),
// else of the Python this shell runs when its major.minor is the key's. A torch folder that
// cannot be read is an error; no torch at all is a note of the report.
Expected<std::unique_ptr<RunSetup>, Failure> run_setup(const ResolvedTarget& t,
                                                       const std::string& torch_dir);

}  // namespace whfs::cli
