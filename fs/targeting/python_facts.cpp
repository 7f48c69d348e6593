#include "fs/targeting/python_facts.h"

#include <utility>

namespace whfs::target {
namespace {

constexpr std::size_t kMaxVersionPy = 64 << 10;

}  // namespace

PythonFacts read_python_facts(const RootFs& root, const std::string& interpreter,
                              const CallerProcess* process) {
  PythonFacts f;
  auto layout = read_python_layout(root, interpreter, process);
  if (!layout) {
    f.python_error = layout.error();
    // What would make it readable later: the interpreter path's folder.
    if (auto st = root.stamp(parent_of(interpreter))) {
      f.inputs.push_back(Input{parent_of(interpreter), *st});
    }
    return f;
  }
  f.inputs = std::move(layout->inputs);
  // A torch installed, removed or replaced later changes its site folder or its version file.
  for (const auto& dir : layout->info.site_dirs) {
    if (auto st = root.stamp(dir)) f.inputs.push_back(Input{dir, *st});
  }
  auto torch = find_torch(layout->info.site_dirs, [&](const std::string& path) {
    return root.read_file(path, kMaxVersionPy);
  });
  if (torch) {
    if (auto st = root.stamp(torch->path)) f.inputs.push_back(Input{torch->path, *st});
    f.torch = std::move(*torch);
  } else {
    f.torch_error = torch.error();
  }
  f.python = std::move(layout->info);
  return f;
}

bool inputs_unchanged(const RootFs& root, const std::vector<Input>& inputs) {
  for (const auto& in : inputs) {
    const auto st = root.stamp(in.path);
    if (!st || !(*st == in.stamp)) return false;
  }
  return true;
}

}  // namespace whfs::target
