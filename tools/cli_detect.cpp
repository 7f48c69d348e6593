// wheelhouse detect: the target current/ would match on this machine, axis by axis, with where
// each value came from (the same detection the mount runs).

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "fs/target/target.h"
#include "tools/cli_commands.h"

namespace whfs::cli {

int run_detect(const CommonOptions& o) {
  TargetOverrides ov;
  ov.arch = std::getenv("WHEELHOUSE_ARCH") ? std::getenv("WHEELHOUSE_ARCH") : "";
  ov.torch = std::getenv("WHEELHOUSE_TORCH") ? std::getenv("WHEELHOUSE_TORCH") : "";
  ov.cuda = std::getenv("WHEELHOUSE_CUDA") ? std::getenv("WHEELHOUSE_CUDA") : "";
  ov.python_tag = std::getenv("WHEELHOUSE_PYTHON_TAG") ? std::getenv("WHEELHOUSE_PYTHON_TAG") : "";
  ov.python = std::getenv("WHEELHOUSE_PYTHON") ? std::getenv("WHEELHOUSE_PYTHON") : "";
  ov.cudart = std::getenv("WHEELHOUSE_CUDART") ? std::getenv("WHEELHOUSE_CUDART") : "";
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
  const target::Target t = target::detect_target(
      ov, target::default_detect_options([](const char* n) { return std::getenv(n); }));
  const nlohmann::json j = target::to_json(t);
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    auto line = [](const char* label, const target::Axis& a) {
      if (a.has_value()) {
        std::printf("%-11s %-8s (%s)\n", label, a.value.c_str(), a.source.c_str());
      } else {
        std::printf("%-11s %-8s (%s)\n", label, "-", a.missing.c_str());
      }
    };
    line("GPU arch", t.arch);
    line("torch", t.torch);
    line("CUDA", t.cuda);
    line("Python tag", t.python_tag);
    for (const auto& n : t.notes) std::printf("note: %s\n", n.c_str());
  }
  // Success means every axis is known: current/ would show wheels.
  const bool complete =
      t.arch.has_value() && t.torch.has_value() && t.cuda.has_value() && t.python_tag.has_value();
  return complete ? kOk : kFailed;
}

}  // namespace whfs::cli
