#include "fs/targeting/caller_targets.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <system_error>
#include <thread>
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

// Everything the reading threads need: they hold it, so a reading stuck on a hung filesystem
// outlives neither its data nor the mount's shutdown (it is left behind, not waited for).
struct CallerTargets::Core {
  struct Interpreter {
    PythonFacts facts;
    Clock::time_point checked;
    uid_t uid = 0;
  };
  struct Process {
    ProcessIdentity identity;
    std::shared_ptr<const Resolution> resolution;
    Clock::time_point resolved;
    uid_t uid = 0;
  };
  // One reading of a process's files, which any number of requests for that process wait on.
  struct Flight {
    std::optional<ProcessIdentity> identity;
    std::shared_ptr<const Resolution> result;  // set once, under mu
    std::condition_variable done;
    // Once a request gave up on it, the next ones for that process do not wait again (a path
    // walk asks twice, LOOKUP then READLINK: one deadline per process, not one per request).
    std::shared_ptr<const Resolution> gave_up;
  };

  Core(CallerTargetsConfig c, GpuReport g, HostPlatform h)
      : config(std::move(c)),
        host(std::move(h)),
        hints(config.max_hints_per_uid, config.proc),
        gpus(std::move(g)) {}

  std::shared_ptr<const Resolution> resolve_uncached(pid_t pid);
  std::optional<Hint> hint_for(const CallerProcess& process);
  std::shared_ptr<const Interpreter> interpreter(const std::string& key, const RootFs& root,
                                                 const std::string& path,
                                                 const CallerProcess* process);
  void remember(pid_t pid, const std::optional<ProcessIdentity>& identity, uid_t uid,
                std::uint64_t generation, const std::shared_ptr<const Resolution>& r,
                Clock::time_point now);

  const CallerTargetsConfig config;
  const HostPlatform host;
  HintBook hints;  // what shell hooks said (adopt()); guarded by its own lock

  mutable std::mutex mu;  // guards everything below
  GpuReport gpus;
  std::optional<dev_t> refused;
  std::uint64_t generation = 0;  // bumped by set_gpus: answers of an older one are not kept
  std::map<pid_t, Process> processes;
  std::map<uid_t, std::size_t> processes_of;  // entries of `processes` per user
  std::map<std::string, std::shared_ptr<const Interpreter>> interpreters;
  std::map<pid_t, std::shared_ptr<Flight>> flights;
  std::map<uid_t, std::size_t> in_flight_of;  // readings under way per user
  std::size_t in_flight = 0;
  std::shared_ptr<const Resolution> fixed;  // per_caller == false
  CallerTargetsStats stats;
};

namespace {

std::shared_ptr<const Resolution> make_unresolved(const std::string& why, nlohmann::json caller) {
  auto r = std::make_shared<Resolution>();
  r->key = CallerTargets::kUnresolved;
  r->why_unresolved = why;
  caller["key"] = CallerTargets::kUnresolved;
  caller["why_unresolved"] = why;
  r->caller = std::move(caller);
  return r;
}

std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace

CallerTargets::CallerTargets(CallerTargetsConfig config, GpuReport gpus, HostPlatform host)
    : core_(std::make_shared<Core>(std::move(config), std::move(gpus), std::move(host))) {}

const HostPlatform& CallerTargets::host() const { return core_->host; }

bool CallerTargets::leads_to(const std::string& key) const {
  std::lock_guard lock(core_->mu);
  if (core_->fixed && core_->fixed->key == key) return true;
  return std::any_of(core_->processes.begin(), core_->processes.end(),
                     [&](const auto& kv) { return kv.second.resolution->key == key; });
}

GpuReport CallerTargets::gpus() const {
  std::lock_guard lock(core_->mu);
  return core_->gpus;
}

void CallerTargets::set_gpus(GpuReport gpus) {
  std::lock_guard lock(core_->mu);
  core_->gpus = std::move(gpus);
  ++core_->generation;
  core_->processes.clear();
  core_->processes_of.clear();
  core_->fixed.reset();
}

std::size_t CallerTargets::keep_hints_in(OwnFolder folder, const std::string& name,
                                         const std::string& mountpoint) {
  const std::size_t taken = core_->hints.keep_in(std::move(folder), name, mountpoint);
  std::lock_guard lock(core_->mu);
  core_->stats.hints_restored += taken;
  return taken;
}

void CallerTargets::drop_gone_hints() { core_->hints.drop_gone(); }

void CallerTargets::refuse_device(dev_t dev) {
  std::lock_guard lock(core_->mu);
  core_->refused = dev;
  ++core_->generation;
  core_->processes.clear();
  core_->processes_of.clear();
}

CallerTargetsStats CallerTargets::stats() const {
  std::lock_guard lock(core_->mu);
  CallerTargetsStats s = core_->stats;
  s.processes = core_->processes.size();
  s.interpreters = core_->interpreters.size();
  s.in_flight = core_->in_flight;
  s.hints_held = core_->hints.size();
  return s;
}

nlohmann::json CallerTargets::status_json() const {
  const CallerTargetsStats s = stats();
  const GpuReport g = gpus();
  const auto& config = core_->config;
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& d : g.devices) {
    gpus.push_back({{"index", d.index}, {"arch", d.arch()}, {"name", d.name}, {"uuid", d.uuid}});
  }
  nlohmann::json j;
  j["mode"] = config.per_caller ? "per-caller" : "mount";
  j["gpus"] = gpus;
  if (g.found()) {
    j["gpu_library"] = std::string(to_string(g.api)) + " " + g.library;
  } else {
    j["gpu_error"] = g.error;
  }
  const auto& o = config.overrides;
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
  j["host"] = {{"machine", core_->host.machine}, {"glibc", core_->host.libc}};
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
  if (auto file = core_->hints.file(); !file.empty()) j["hints_file"] = file;
  j["in_flight"] = s.in_flight;
  j["cached_processes"] = s.processes;
  j["cached_interpreters"] = s.interpreters;
  return j;
}

void CallerTargets::Core::remember(pid_t pid, const std::optional<ProcessIdentity>& identity,
                                   uid_t uid, std::uint64_t gen,
                                   const std::shared_ptr<const Resolution>& r,
                                   Clock::time_point now) {
  // Under mu.
  if (!identity || gen != generation) return;
  auto drop = [&](auto pred) {
    for (auto it = processes.begin(); it != processes.end();) {
      if (pred(it->second)) {
        --processes_of[it->second.uid];
        it = processes.erase(it);
      } else {
        ++it;
      }
    }
  };
  if (const auto it = processes.find(pid); it != processes.end()) {
    --processes_of[it->second.uid];
    processes.erase(it);
  }
  // One user's share first: its own entries go, not everyone's.
  if (processes_of[uid] >= config.max_processes_per_uid) {
    drop([&](const Process& p) { return p.uid == uid && now - p.resolved >= config.recheck; });
    if (processes_of[uid] >= config.max_processes_per_uid) {
      // Still at its bound: its oldest answer goes.
      auto oldest = processes.end();
      for (auto it = processes.begin(); it != processes.end(); ++it) {
        if (it->second.uid == uid &&
            (oldest == processes.end() || it->second.resolved < oldest->second.resolved)) {
          oldest = it;
        }
      }
      if (oldest != processes.end()) {
        --processes_of[uid];
        processes.erase(oldest);
      }
    }
  }
  if (processes.size() >= config.max_processes) {
    // Drop what has not been asked for within a recheck; if that frees nothing, everything.
    drop([&](const Process& p) { return now - p.resolved >= config.recheck; });
    if (processes.size() >= config.max_processes) {
      processes.clear();
      processes_of.clear();
    }
  }
  processes[pid] = Process{*identity, r, now, uid};
  ++processes_of[uid];
}

std::shared_ptr<const Resolution> CallerTargets::resolve(pid_t pid, std::optional<uid_t> asker,
                                                         bool wait) {
  Core& c = *core_;
  const auto now = Clock::now();
  {
    std::lock_guard lock(c.mu);
    ++c.stats.resolves;
    if (!c.config.per_caller && c.fixed) return c.fixed;
  }
  if (!c.config.per_caller) {
    // The mount's own target: this daemon's environment, as `wheelhouse detect` sees its own.
    auto r = c.resolve_uncached(::getpid());
    std::lock_guard lock(c.mu);
    c.fixed = r;
    return r;
  }
  if (pid <= 0) {
    std::lock_guard lock(c.mu);
    ++c.stats.unresolved;
    return make_unresolved(
        "the kernel did not name the process (it runs in a PID namespace the mount cannot see, "
        "e.g. on the host while the mount runs in a container)",
        nlohmann::json::object());
  }
  const uid_t uid = asker.value_or(static_cast<uid_t>(-1));
  const auto identity = read_identity(pid, c.config.proc);
  std::unique_lock lock(c.mu);
  if (identity) {
    const auto it = c.processes.find(pid);
    if (it != c.processes.end() && it->second.identity == *identity &&
        now - it->second.resolved < c.config.recheck) {
      ++c.stats.process_hits;
      return it->second.resolution;
    }
  }
  // A reading under way for this very process: wait for it rather than start another.
  std::shared_ptr<Core::Flight> flight;
  if (const auto it = c.flights.find(pid);
      it != c.flights.end() && it->second->identity == identity) {
    flight = it->second;
  } else {
    if (c.in_flight_of[uid] >= c.config.max_in_flight_per_uid ||
        c.in_flight >= c.config.max_in_flight) {
      ++c.stats.refused;
      ++c.stats.unresolved;
      const bool mine = c.in_flight_of[uid] >= c.config.max_in_flight_per_uid;
      return make_unresolved(
          mine ? "user " + std::to_string(uid) + " already has " +
                     std::to_string(c.in_flight_of[uid]) +
                     " detections under way (a slow or hung filesystem in its paths?); try again"
               : "too many detections under way on this mount; try again",
          {{"pid", pid}});
    }
    flight = std::make_shared<Core::Flight>();
    flight->identity = identity;
    c.flights[pid] = flight;
    ++c.in_flight_of[uid];
    ++c.in_flight;
    const std::uint64_t gen = c.generation;
    const auto undo = [&] {
      c.flights.erase(pid);
      if (--c.in_flight_of[uid] == 0) c.in_flight_of.erase(uid);
      --c.in_flight;
    };
    try {
      std::thread([core = core_, flight, pid, uid, gen, identity] {
        auto r = core->resolve_uncached(pid);
        std::lock_guard l(core->mu);
        if (r->key == kUnresolved) ++core->stats.unresolved;
        core->remember(pid, identity, uid, gen, r, Clock::now());
        flight->result = std::move(r);
        if (const auto f = core->flights.find(pid);
            f != core->flights.end() && f->second == flight) {
          core->flights.erase(f);
        }
        --core->in_flight_of[uid];
        if (core->in_flight_of[uid] == 0) core->in_flight_of.erase(uid);
        --core->in_flight;
        flight->done.notify_all();
      }).detach();
    } catch (const std::system_error& e) {  // no thread to be had: answer now, keep nothing
      undo();
      ++c.stats.unresolved;
      return make_unresolved(std::string("cannot start a thread to read it: ") + e.what(),
                             {{"pid", pid}});
    }
  }
  if (flight->gave_up) return flight->gave_up;
  if (!wait) return flight->result;  // null while under way
  if (flight->done.wait_for(lock, c.config.deadline, [&] { return flight->result != nullptr; })) {
    return flight->result;
  }
  ++c.stats.timed_out;
  ++c.stats.unresolved;
  if (!flight->gave_up) {
    flight->gave_up = make_unresolved(
        "reading this process's Python took longer than " + seconds_text(c.config.deadline) +
            " (a slow or hung filesystem in its paths?); still trying",
        {{"pid", pid}});
  }
  return flight->gave_up;
}

Expected<std::shared_ptr<const Resolution>, std::string> CallerTargets::adopt(pid_t pid,
                                                                              uid_t uid) {
  Core& c = *core_;
  if (!c.config.per_caller) return unexpected(std::string("current=mount: no per-process views"));
  if (pid <= 0) return unexpected(std::string("the kernel did not name the process"));
  const auto child = read_caller(pid, c.config.proc);
  if (!child) return unexpected(child.error());
  if (child->credentials.uid != uid) {
    return unexpected(std::string("the process's user is not the one that asked"));
  }
  const auto parent_pid = read_parent(pid, c.config.proc);
  if (!parent_pid) return unexpected(std::string("no parent process"));
  const auto parent = read_caller(*parent_pid, c.config.proc);
  const auto identity = read_identity(*parent_pid, c.config.proc);
  if (!parent || !identity) return unexpected(std::string("the parent process is gone"));
  // Only one's own processes, in the same world: a hint never names what another user runs.
  if (parent->credentials.uid != child->credentials.uid) {
    return unexpected("the parent process belongs to user " +
                      std::to_string(parent->credentials.uid) + ", not " +
                      std::to_string(child->credentials.uid));
  }
  if (parent->own_root != child->own_root) {
    return unexpected(std::string("the parent process has another root"));
  }
  const auto root = read_root(*parent_pid, c.config.proc);
  if (!root || (!parent->own_root && root != read_root(pid, c.config.proc))) {
    return unexpected(std::string("the parent process has another root"));
  }
  if (auto put = c.hints.put(Hint{*parent_pid, identity->start_time, uid, *root, child->env,
                                  child->cwd, child->exe_name, std::chrono::system_clock::now()});
      !put) {
    return unexpected(put.error());
  }
  {
    std::lock_guard lock(c.mu);
    ++c.stats.hints;
    if (const auto it = c.processes.find(*parent_pid); it != c.processes.end()) {
      --c.processes_of[it->second.uid];
      c.processes.erase(it);
    }
  }
  // The reading starts now (the shell's next glob finds it done or under way); the hook does
  // not wait for it.
  auto now = resolve(*parent_pid, uid, false);
  if (now) return now;
  auto pending = std::make_shared<Resolution>();
  pending->key = "(being read)";
  return std::shared_ptr<const Resolution>(std::move(pending));
}

std::shared_ptr<const CallerTargets::Core::Interpreter> CallerTargets::Core::interpreter(
    const std::string& key, const RootFs& root, const std::string& path,
    const CallerProcess* process) {
  const auto now = Clock::now();
  const uid_t uid = process != nullptr ? process->credentials.uid : ::geteuid();
  std::shared_ptr<const Interpreter> cached;
  {
    std::lock_guard lock(mu);
    const auto it = interpreters.find(key);
    if (it != interpreters.end()) cached = it->second;
  }
  // Within a recheck an interpreter of this machine's own root is taken as read. One in another
  // root (a container's) is checked against its files every time: a container's root is named
  // by its dev:ino, which the next container can reuse (podman --rm frees the overlay's device
  // number and its upper folder's inode, and the next container gets both back), and a few
  // stats per new process are cheap beside serving it another image's torch.
  const bool foreign_root = process != nullptr && !process->own_root;
  if (cached && ((!foreign_root && now - cached->checked < config.recheck) ||
                 inputs_unchanged(root, cached->facts.inputs))) {
    std::lock_guard lock(mu);
    ++stats.interpreter_hits;
    if (now - cached->checked >= config.recheck) {
      auto fresh = std::make_shared<Interpreter>(*cached);
      fresh->checked = now;
      interpreters[key] = fresh;
      return fresh;
    }
    return cached;
  }
  auto made = std::make_shared<Interpreter>();
  made->facts = read_python_facts(root, path, process);
  made->checked = now;
  made->uid = uid;
  spdlog::debug(
      "target: read the Python at {} ({})", path,
      made->facts.python ? "CPython " + made->facts.python->version() : made->facts.python_error);
  std::lock_guard lock(mu);
  ++stats.interpreter_reads;
  // One user's share first (its own entries go), then everyone's.
  std::size_t mine = 0;
  for (const auto& [k, v] : interpreters) mine += v->uid == uid && k != key ? 1 : 0;
  if (mine >= config.max_interpreters_per_uid) {
    std::erase_if(interpreters, [&](const auto& kv) { return kv.second->uid == uid; });
  }
  if (interpreters.size() >= config.max_interpreters) {
    std::erase_if(interpreters,
                  [&](const auto& kv) { return now - kv.second->checked >= config.recheck; });
    if (interpreters.size() >= config.max_interpreters) interpreters.clear();
  }
  interpreters[key] = made;
  return made;
}

// The hint of the process, or of the shell it was forked from without an exec since: a shell
// may expand a glob in a child it forked for the command (zsh does for external commands, bash
// in pipelines and subshells), and such a child shows the same stale start-up environment.
std::optional<Hint> CallerTargets::Core::hint_for(const CallerProcess& p) {
  if (hints.empty()) return std::nullopt;
  if (auto h = hints.find(p.pid, p.start_time, p.credentials.uid)) return h;
  const CallerProcess* child = &p;
  std::optional<CallerProcess> parent;
  for (int depth = 0; depth < 8; ++depth) {
    const auto ppid = read_parent(child->pid, config.proc);
    if (!ppid) return std::nullopt;
    auto up = read_caller(*ppid, config.proc);
    if (!up || up->exe_path != child->exe_path || up->env != child->env ||
        up->credentials.uid != child->credentials.uid || up->own_root != child->own_root) {
      return std::nullopt;  // an exec since, another user or world: not that shell's child
    }
    if (auto h = hints.find(*ppid, up->start_time, up->credentials.uid)) return h;
    parent = std::move(*up);
    child = &*parent;
  }
  return std::nullopt;
}

std::shared_ptr<const Resolution> CallerTargets::Core::resolve_uncached(pid_t pid) {
  nlohmann::json caller = {{"pid", pid}};
  auto process = read_caller(pid, config.proc);
  if (!process) return make_unresolved(process.error(), caller);
  caller["process"] = process->exe_name;
  if (auto hint = hint_for(*process)) {
    // The environment its shell hook handed over: what it runs with now.
    process->env = hint->env;
    process->cwd = hint->cwd;
    const auto age = std::chrono::duration_cast<std::chrono::seconds>(
        std::chrono::system_clock::now() - hint->at);
    caller["environment"] = "from the shell hook (" + hint->by + ", " +
                            std::to_string(age.count()) + " s ago), not its start-up one";
  }
  if (!process->own_root) caller["root"] = "its own (a container or chroot)";
  std::optional<dev_t> refuse;
  {
    std::lock_guard lock(mu);
    refuse = refused;
  }
  auto opened = RootFs::open(process->root_dir, refuse);
  if (!opened) return make_unresolved(opened.error(), caller);
  const RootFs& root = *opened;

  TargetFacts facts;
  facts.host = host;
  std::shared_ptr<const Interpreter> interp;
  const auto& o = config.overrides;
  if (!needs_python(o)) {
    facts.python_error = "not read: torch, cuda and python_tag are all overridden";
  } else if (!o.python.empty()) {
    // python= is the mount owner's choice, read in the mount's world with its rights.
    auto own = RootFs::open("/", refuse);
    if (!own) return make_unresolved(own.error(), caller);
    interp = interpreter(interpreter_key(nullptr, *own, o.python), *own, o.python, nullptr);
    caller["interpreter"] = o.python;
    caller["interpreter_why"] = "the mount's python= option";
  } else {
    // Everything of the process's world is read with the process's own rights.
    const ActAs as(process->credentials);
    if (!as.ok()) {
      return make_unresolved("cannot take on the identity of user " +
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
  GpuReport g;
  {
    std::lock_guard lock(mu);
    g = gpus;
  }
  const VisibleGpus visible = visible_gpus(g, gpu_env_of(*process));
  facts.machine_gpus = &g;
  facts.visible = &visible;
  caller["gpus"] = visible.why;

  auto r = std::make_shared<Resolution>();
  r->target = compose_target(o, facts);
  const auto key = key_of(r->target);
  if (key) {
    r->key = format_key(*key, host);
  } else {
    r->key = kUnresolved;
    r->why_unresolved = key.error();
    caller["why_unresolved"] = key.error();
  }
  // The reason no GPU is known is said once, in target.arch.missing (a "no NVIDIA driver"
  // sentence is long): the caller's fields point there instead of repeating it.
  if (const std::string& why = r->target.arch.missing; !why.empty()) {
    for (const char* field : {"gpus", "why_unresolved"}) {
      if (!caller.contains(field) || !caller[field].is_string()) continue;
      std::string text = caller[field].get<std::string>();
      if (const auto at = text.find(why); at != std::string::npos) {
        text.replace(at, why.size(), "(why: target.arch.missing)");
        caller[field] = text;
      }
    }
  }
  caller["key"] = r->key;
  r->caller = std::move(caller);
  return r;
}

}  // namespace whfs::target
