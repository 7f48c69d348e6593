// wheelhouse detect: the target current/ leads this shell (or process --pid) to, axis by axis,
// with where each value came from. Where a mount is chosen (--mount, the working folder in one,
// or the only one) it is the mount's own answer: its current/.target as this process reads it,
// the mount's overrides included. Otherwise (no mount; several and none named, which --key
// refuses; -o or --pid) this machine is read the way a mount reads it.

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "fs/targeting/caller_targets.h"
#include "fs/targeting/gpu_probe.h"
#include "tools/cli/cli_commands.h"
#include "tools/cli/mount_select.h"

namespace whfs::cli {
namespace {

const char* env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

void print_axis(const char* label, const nlohmann::json& a) {
  if (a.is_object() && a.value("value", nlohmann::json()).is_string()) {
    std::printf("%-11s %-8s (%s)\n", label, a["value"].get<std::string>().c_str(),
                a.value("source", "").c_str());
  } else {
    std::printf("%-11s %-8s (%s)\n", label, "-",
                a.is_object() ? a.value("missing", "").c_str() : "");
  }
}

// What `mount`'s current/ shows this process: its .target, read by this process.
int detect_through(const std::string& mount, const CommonOptions& o, const DetectOptions& d) {
  nlohmann::json report;
  for (int tries = 0; tries < 2; ++tries) {
    auto text = read_file_within(mount + "/current/.target", kAnswerDeadline);
    if (!text) {
      std::fprintf(stderr, "wheelhouse: %s%s\n", text.error().c_str(),
                   text.error().ends_with("No such file or directory")
                       ? " (a mount with nocurrent has no current/)"
                       : "");
      return kFailed;
    }
    report = nlohmann::json::parse(*text, nullptr, false);
    if (!report.is_object()) {
      std::fprintf(stderr, "wheelhouse: %s/current/.target is not JSON\n", mount.c_str());
      return kFailed;
    }
    // The folder's own report when this process's answer changed between the link and the file.
    if (!report.value("caller", nlohmann::json::object()).contains("note")) break;
  }
  const std::string key = report.value("key", "");
  const nlohmann::json target = report.value("target", nlohmann::json::object());
  const nlohmann::json caller = report.value("caller", nlohmann::json::object());
  const std::string why = caller.value("why_unresolved", report.value("why_empty", ""));
  if (d.key_only) {
    std::printf("%s\n", key.c_str());
  } else if (o.json) {
    nlohmann::json j = target;
    j["key"] = key;
    j["caller"] = caller;
    j["mount"] = mount;
    if (!why.empty()) j["why_unresolved"] = why;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%-11s %s (what its current/ shows this process)\n", "mount", mount.c_str());
    if (caller.contains("interpreter")) {
      std::printf("%-11s %s (%s)\n", "Python", caller.value("interpreter", "").c_str(),
                  caller.value("interpreter_why", "").c_str());
    }
    print_axis("GPU arch", target.value("arch", nlohmann::json()));
    print_axis("torch", target.value("torch", nlohmann::json()));
    print_axis("CUDA", target.value("cuda", nlohmann::json()));
    print_axis("Python tag", target.value("python_tag", nlohmann::json()));
    for (const auto& n : target.value("notes", nlohmann::json::array())) {
      if (n.is_string()) std::printf("note: %s\n", n.get<std::string>().c_str());
    }
    std::printf("%-11s targets/%s%s\n", "folder", key.c_str(),
                why.empty() ? "" : (" (" + why + ")").c_str());
  }
  return !key.empty() && key != target::CallerTargets::kUnresolved ? kOk : kFailed;
}

}  // namespace

int run_detect(const CommonOptions& o, const DetectOptions& d) {
  const bool local_only = d.pid != 0 || !o.target_options.empty();
  if (!d.mount.empty() && local_only) {
    std::fprintf(stderr,
                 "wheelhouse: detect --mount gives the mount's answer for this process; -o and "
                 "--pid read this machine instead (without --mount)\n");
    return kUsage;
  }
  if (!local_only) {
    const auto mounts = wheelhouse_mount_table();
    std::string given = d.mount;
    if (given.empty()) {
      if (auto here = mount_of_cwd(mounts)) given = here->path;
    }
    if (mounts.size() > 1 && given.empty() && !d.key_only) {
      // Several mounts, each with its own overrides: this machine's reading, said to be one.
      std::string names;
      for (const auto& m : mounts) names += (names.empty() ? "" : ", ") + m.path;
      std::fprintf(stderr,
                   "note: %zu wheelhouse mounts here (%s) and none named: this is this machine "
                   "as a mount reads it; `wheelhouse detect --mount DIR` gives that mount's own "
                   "answer, its overrides included\n",
                   mounts.size(), names.c_str());
    } else if (!given.empty() || !mounts.empty()) {
      // (--key with several and none named: refused with the list, as a script's key must be
      // a mount's.)
      auto m = choose_mount(given, "wheelhouse detect --mount DIR");
      if (!m) {
        std::fprintf(stderr, "wheelhouse: %s\n", m.error().message.c_str());
        return m.error().code;
      }
      return detect_through(m->path, o, d);
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
