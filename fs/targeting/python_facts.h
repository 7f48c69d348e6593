#pragma once
// What an interpreter's files say of it (python_layout.h) and of its torch (torch_probe.h),
// with the stamp of every file and folder read: while none of them changes, neither does the
// answer.

#include <optional>
#include <string>
#include <vector>

#include "fs/targeting/caller.h"
#include "fs/targeting/python_info.h"
#include "fs/targeting/python_layout.h"
#include "fs/targeting/root_fs.h"
#include "fs/targeting/torch_probe.h"

namespace whfs::target {

struct PythonFacts {
  std::optional<PythonInfo> python;
  std::string python_error;
  std::optional<TorchInfo> torch;
  std::string torch_error;
  std::vector<Input> inputs;
};

// Reads the interpreter at `interpreter` in `root` and its torch (through the calling thread's
// credentials: use ActAs). `process` gives PYTHONPATH, HOME and the like (null: none).
PythonFacts read_python_facts(const RootFs& root, const std::string& interpreter,
                              const CallerProcess* process);

// Whether every input still has its stamp.
bool inputs_unchanged(const RootFs& root, const std::vector<Input>& inputs);

}  // namespace whfs::target
