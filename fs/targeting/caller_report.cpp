#include "fs/targeting/caller_report.h"

#include <chrono>
#include <utility>

namespace whfs::target {

nlohmann::json caller_section(const CallerFacts& f, const Resolution& r,
                              const std::optional<std::string>& gpus) {
  nlohmann::json caller = nlohmann::json::object();
  if (f.pid > 0) caller["pid"] = f.pid;
  if (f.process != nullptr) {
    caller["process"] = f.process->exe_name;
    if (f.hint != nullptr) {
      const auto age = std::chrono::duration_cast<std::chrono::seconds>(f.now - f.hint->at);
      caller["environment"] = "from the shell hook (" + f.hint->by + ", " +
                              std::to_string(age.count()) + " s ago), not its start-up one";
    }
    if (!f.process->own_root) caller["root"] = "its own (a container or chroot)";
  }
  if (!f.interpreter.empty()) {
    caller["interpreter"] = f.interpreter;
    caller["interpreter_why"] = f.interpreter_why;
  }
  if (gpus) caller["gpus"] = *gpus;
  caller["key"] = r.key;
  if (r.key == kUnresolvedKey) caller["why_unresolved"] = r.why_unresolved;
  // The reason no GPU is known is said once, in target.arch.missing (a "no NVIDIA driver"
  // sentence is long): the caller's fields point there instead of repeating it.
  if (const std::string& why = r.target.arch.missing; !why.empty()) {
    for (const char* field : {"gpus", "why_unresolved"}) {
      if (!caller.contains(field) || !caller[field].is_string()) continue;
      std::string text = caller[field].get<std::string>();
      if (const auto at = text.find(why); at != std::string::npos) {
        text.replace(at, why.size(), "(why: target.arch.missing)");
        caller[field] = text;
      }
    }
  }
  return caller;
}

nlohmann::json status_json(bool per_caller, const TargetOverrides& o, const HostPlatform& host,
                           const GpuReport& g, const CallerTargetsStats& s,
                           const std::string& hints_file) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& d : g.devices) {
    gpus.push_back({{"index", d.index}, {"arch", d.arch()}, {"name", d.name}, {"uuid", d.uuid}});
  }
  nlohmann::json j;
  j["mode"] = per_caller ? "per-caller" : "mount";
  j["gpus"] = gpus;
  if (g.found()) {
    j["gpu_library"] = std::string(to_string(g.api)) + " " + g.library;
  } else {
    j["gpu_error"] = g.error;
  }
  nlohmann::json ov = nlohmann::json::object();
  for (const auto& [name, value] : {std::pair<const char*, const std::string*>{"arch", &o.arch},
                                    {"torch", &o.torch},
                                    {"cuda", &o.cuda},
                                    {"python_tag", &o.python_tag},
                                    {"python", &o.python},
                                    {"cudart", &o.cudart}}) {
    if (!value->empty()) ov[name] = *value;
  }
  j["overrides"] = ov;
  j["host"] = {{"machine", host.machine}, {"glibc", host.libc}};
  j["resolves"] = s.resolves;
  j["process_hits"] = s.process_hits;
  j["interpreter_reads"] = s.interpreter_reads;
  j["interpreter_hits"] = s.interpreter_hits;
  j["unresolved"] = s.unresolved;
  j["timed_out"] = s.timed_out;
  j["refused_busy"] = s.refused;
  j["hints"] = s.hints;
  j["hints_held"] = s.hints_held;
  j["hints_restored"] = s.hints_restored;
  if (!hints_file.empty()) j["hints_file"] = hints_file;
  j["in_flight"] = s.in_flight;
  j["cached_processes"] = s.processes;
  j["cached_interpreters"] = s.interpreters;
  return j;
}

}  // namespace whfs::target
