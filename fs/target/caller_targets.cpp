#include "fs/target/caller_targets.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <utility>

namespace whfs::target {
namespace {

constexpr std::size_t kMaxVersionPy = 64 << 10;

GpuEnv gpu_env_of(const CallerProcess& p) {
  GpuEnv env;
  env.cuda_visible_devices = p.var("CUDA_VISIBLE_DEVICES");
  env.cuda_device_order = p.var("CUDA_DEVICE_ORDER");
  // The container runtime's variable describes the container's share of the host's GPUs; on
  // the host itself it means nothing.
  if (!p.own_root) env.nvidia_visible_devices = p.var("NVIDIA_VISIBLE_DEVICES");
  return env;
}

// The interpreter cache's key: who reads, in which world, which interpreter, and the variables
// that change what it imports.
std::string interpreter_key(const CallerProcess* p, const RootFs& root, const std::string& path) {
  const FileStamp r = root.root_stamp();
  std::string key = std::to_string(r.dev) + ":" + std::to_string(r.ino) + "\n" + path;
  if (p != nullptr) {
    key += "\n" + std::to_string(p->credentials.uid);
    for (const char* var : {"PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "HOME"}) {
      key += "\n";
      if (const auto v = p->var(var)) key += "=" + *v;
    }
  }
  return key;
}

bool needs_python(const TargetOverrides& o) {
  return o.torch.empty() || o.cuda.empty() || o.python_tag.empty();
}

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

CallerTargets::CallerTargets(CallerTargetsConfig config, GpuReport gpus, HostPlatform host)
    : config_(std::move(config)), host_(std::move(host)), gpus_(std::move(gpus)) {}

GpuReport CallerTargets::gpus() const {
  std::lock_guard lock(mu_);
  return gpus_;
}

void CallerTargets::set_gpus(GpuReport gpus) {
  std::lock_guard lock(mu_);
  gpus_ = std::move(gpus);
  ++generation_;
  processes_.clear();
  fixed_.reset();
}

CallerTargetsStats CallerTargets::stats() const {
  std::lock_guard lock(mu_);
  CallerTargetsStats s = stats_;
  s.processes = processes_.size();
  s.interpreters = interpreters_.size();
  return s;
}

nlohmann::json CallerTargets::status_json() const {
  const CallerTargetsStats s = stats();
  const GpuReport g = gpus();
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& d : g.devices) {
    gpus.push_back({{"index", d.index}, {"arch", d.arch()}, {"name", d.name}, {"uuid", d.uuid}});
  }
  nlohmann::json j;
  j["mode"] = config_.per_caller ? "per-caller" : "mount";
  j["gpus"] = gpus;
  if (g.found()) {
    j["gpu_library"] = std::string(to_string(g.api)) + " " + g.library;
  } else {
    j["gpu_error"] = g.error;
  }
  const auto& o = config_.overrides;
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
  j["host"] = {{"machine", host_.machine}, {"glibc", host_.libc}};
  j["resolves"] = s.resolves;
  j["process_hits"] = s.process_hits;
  j["interpreter_reads"] = s.interpreter_reads;
  j["interpreter_hits"] = s.interpreter_hits;
  j["unresolved"] = s.unresolved;
  j["cached_processes"] = s.processes;
  j["cached_interpreters"] = s.interpreters;
  return j;
}

std::shared_ptr<const Resolution> CallerTargets::unresolved(const std::string& why,
                                                            nlohmann::json caller) {
  auto r = std::make_shared<Resolution>();
  r->key = kUnresolved;
  r->why_unresolved = why;
  caller["key"] = kUnresolved;
  caller["why_unresolved"] = why;
  r->caller = std::move(caller);
  return r;
}

std::shared_ptr<const Resolution> CallerTargets::resolve(pid_t pid) {
  const auto now = Clock::now();
  {
    std::lock_guard lock(mu_);
    ++stats_.resolves;
    if (!config_.per_caller && fixed_) return fixed_;
  }
  if (!config_.per_caller) {
    // The mount's own target: this daemon's environment, as `wheelhouse detect` sees its own.
    auto r = resolve_uncached(::getpid());
    std::lock_guard lock(mu_);
    fixed_ = r;
    return r;
  }
  if (pid <= 0) {
    std::lock_guard lock(mu_);
    ++stats_.unresolved;
    return unresolved(
        "the kernel did not name the process (it runs in a PID namespace the mount cannot see, "
        "e.g. on the host while the mount runs in a container)",
        nlohmann::json::object());
  }
  const auto identity = read_identity(pid, config_.proc);
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(mu_);
    generation = generation_;
    if (identity) {
      const auto it = processes_.find(pid);
      if (it != processes_.end() && it->second.identity == *identity &&
          now - it->second.resolved < config_.recheck) {
        ++stats_.process_hits;
        return it->second.resolution;
      }
    }
  }
  auto r = resolve_uncached(pid);
  std::lock_guard lock(mu_);
  if (r->key == kUnresolved) ++stats_.unresolved;
  if (identity && generation == generation_) {
    if (processes_.size() >= config_.max_processes) {
      // Drop what has not been asked for within a recheck; if that frees nothing, everything.
      std::erase_if(processes_,
                    [&](const auto& kv) { return now - kv.second.resolved >= config_.recheck; });
      if (processes_.size() >= config_.max_processes) processes_.clear();
    }
    processes_[pid] = Process{*identity, r, now};
  }
  return r;
}

std::shared_ptr<const CallerTargets::Interpreter> CallerTargets::interpreter(
    const std::string& key, const RootFs& root, const std::string& path,
    const CallerProcess* process) {
  const auto now = Clock::now();
  std::shared_ptr<const Interpreter> cached;
  {
    std::lock_guard lock(mu_);
    const auto it = interpreters_.find(key);
    if (it != interpreters_.end()) cached = it->second;
  }
  if (cached &&
      (now - cached->checked < config_.recheck || inputs_unchanged(root, cached->facts.inputs))) {
    std::lock_guard lock(mu_);
    ++stats_.interpreter_hits;
    if (now - cached->checked >= config_.recheck) {
      auto fresh = std::make_shared<Interpreter>(*cached);
      fresh->checked = now;
      interpreters_[key] = fresh;
      return fresh;
    }
    return cached;
  }
  auto made = std::make_shared<Interpreter>();
  made->facts = read_python_facts(root, path, process);
  made->checked = now;
  spdlog::debug(
      "target: read the Python at {} ({})", path,
      made->facts.python ? "CPython " + made->facts.python->version() : made->facts.python_error);
  std::lock_guard lock(mu_);
  ++stats_.interpreter_reads;
  if (interpreters_.size() >= config_.max_interpreters) interpreters_.clear();
  interpreters_[key] = made;
  return made;
}

std::shared_ptr<const Resolution> CallerTargets::resolve_uncached(pid_t pid) {
  nlohmann::json caller = {{"pid", pid}};
  auto process = read_caller(pid, config_.proc);
  if (!process) return unresolved(process.error(), caller);
  caller["process"] = process->exe_name;
  if (!process->own_root) caller["root"] = "its own (a container or chroot)";
  auto opened = RootFs::open(process->root_dir);
  if (!opened) return unresolved(opened.error(), caller);
  const RootFs& root = *opened;

  TargetFacts facts;
  facts.host = host_;
  std::shared_ptr<const Interpreter> interp;
  const auto& o = config_.overrides;
  if (!needs_python(o)) {
    facts.python_error = "not read: torch, cuda and python_tag are all overridden";
  } else if (!o.python.empty()) {
    // python= is the mount owner's choice, read in the mount's world with its rights.
    auto own = RootFs::open("/");
    if (!own) return unresolved(own.error(), caller);
    interp = interpreter(interpreter_key(nullptr, *own, o.python), *own, o.python, nullptr);
    caller["interpreter"] = o.python;
    caller["interpreter_why"] = "the mount's python= option";
  } else {
    // Everything of the process's world is read with the process's own rights.
    const ActAs as(process->credentials);
    if (!as.ok()) {
      return unresolved("cannot take on the identity of user " +
                            std::to_string(process->credentials.uid) + " to read its files",
                        caller);
    }
    auto choice = choose_interpreter(*process, root);
    if (!choice) {
      facts.python_error = choice.error();
    } else {
      caller["interpreter"] = choice->path;
      caller["interpreter_why"] = choice->why;
      interp = interpreter(interpreter_key(&*process, root, choice->path), root, choice->path,
                           &*process);
    }
  }
  if (interp) {
    const PythonFacts& pf = interp->facts;
    if (pf.python) {
      facts.python = &*pf.python;
      if (pf.torch) {
        facts.torch = &*pf.torch;
      } else {
        facts.torch_error = pf.torch_error;
      }
    } else {
      facts.python_error = pf.python_error;
    }
  }
  GpuReport gpus;
  {
    std::lock_guard lock(mu_);
    gpus = gpus_;
  }
  const VisibleGpus visible = visible_gpus(gpus, gpu_env_of(*process));
  facts.machine_gpus = &gpus;
  facts.visible = &visible;
  caller["gpus"] = visible.why;

  auto r = std::make_shared<Resolution>();
  r->target = compose_target(o, facts);
  const auto key = key_of(r->target);
  if (key) {
    r->key = format_key(*key, host_);
  } else {
    r->key = kUnresolved;
    r->why_unresolved = key.error();
    caller["why_unresolved"] = key.error();
  }
  caller["key"] = r->key;
  r->caller = std::move(caller);
  return r;
}

}  // namespace whfs::target
