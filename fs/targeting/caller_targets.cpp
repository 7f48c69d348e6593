#include "fs/targeting/caller_targets.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <utility>

#include "fs/common/clock.h"
#include "fs/targeting/caller.h"
#include "fs/targeting/deadline_reader.h"
#include "fs/targeting/python_layout.h"
#include "fs/targeting/root_fs.h"
#include "fs/targeting/user_cache.h"

namespace whfs::target {
namespace {

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

std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace

// Everything the reading threads need: they hold it, so a reading stuck on a hung filesystem
// outlives neither its data nor the mount's shutdown (it is left behind, not waited for).
struct CallerTargets::Core {
  // A process's cached answer: valid for that process only (not a later one with its pid).
  struct ProcessAnswer {
    ProcessIdentity identity;
    std::shared_ptr<const Resolution> resolution;
  };

  Core(CallerTargetsConfig c, GpuReport g, HostPlatform h)
      : config(std::move(c)),
        host(std::move(h)),
        hints(config.max_hints_per_uid, config.proc),
        readings({config.deadline, config.max_in_flight_per_uid, config.max_in_flight}),
        gpus(std::move(g)),
        processes(config.max_processes, config.max_processes_per_uid, config.recheck),
        interpreters(config.max_interpreters, config.max_interpreters_per_uid, config.recheck) {}

  // The target of `pid`, read now (on a reading thread, or for current=mount).
  std::shared_ptr<const Resolution> read_process(pid_t pid);
  // The facts of the interpreter at `path`: cached, or read now.
  std::shared_ptr<const PythonFacts> interpreter(const RootFs& root, const std::string& path,
                                                 const CallerProcess* process);
  // The answer `from` the reading of `pid`, as the request sees it.
  std::shared_ptr<const Resolution> answer(pid_t pid, uid_t uid,
                                           const DeadlineReader<Resolution>::Answer& from);

  const CallerTargetsConfig config;
  const HostPlatform host;
  HintBook hints;                       // what shell hooks said; its own lock
  DeadlineReader<Resolution> readings;  // its own lock

  mutable std::mutex mu;  // guards everything below
  GpuReport gpus;
  std::optional<dev_t> refused;
  std::uint64_t generation = 0;  // bumped by set_gpus: answers of an older one are not kept
  UserCache<pid_t, ProcessAnswer> processes;                                // by the asking user
  UserCache<std::string, std::shared_ptr<const PythonFacts>> interpreters;  // by the reading one
  std::shared_ptr<const Resolution> fixed;                                  // per_caller == false
  CallerTargetsStats stats;
};

CallerTargets::CallerTargets(CallerTargetsConfig config, GpuReport gpus, HostPlatform host)
    : core_(std::make_shared<Core>(std::move(config), std::move(gpus), std::move(host))) {}

const HostPlatform& CallerTargets::host() const { return core_->host; }

bool CallerTargets::leads_to(const std::string& key) const {
  std::lock_guard lock(core_->mu);
  if (core_->fixed && core_->fixed->key == key) return true;
  return core_->processes.any_of(
      [&](const Core::ProcessAnswer& a) { return a.resolution->key == key; });
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
}

CallerTargetsStats CallerTargets::stats() const {
  CallerTargetsStats s;
  {
    std::lock_guard lock(core_->mu);
    s = core_->stats;
    s.processes = core_->processes.size();
    s.interpreters = core_->interpreters.size();
  }
  s.in_flight = core_->readings.in_flight();
  s.hints_held = core_->hints.size();
  return s;
}

nlohmann::json CallerTargets::status_json() const {
  const Core& c = *core_;
  return target::status_json(c.config.per_caller, c.config.overrides, c.host, gpus(), stats(),
                             c.hints.file());
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
    auto r = c.read_process(::getpid());
    std::lock_guard lock(c.mu);
    c.fixed = r;
    return r;
  }
  if (pid <= 0) {
    std::lock_guard lock(c.mu);
    ++c.stats.unresolved;
    return unresolved(
        "the kernel did not name the process (it runs in a PID namespace the mount cannot see, "
        "e.g. on the host while the mount runs in a container)",
        CallerFacts{});
  }
  const uid_t uid = asker.value_or(static_cast<uid_t>(-1));
  const auto identity = read_identity(pid, c.config.proc);
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(c.mu);
    if (const auto* e = identity ? c.processes.find(pid) : nullptr;
        e != nullptr && e->value.identity == *identity && now - e->at < c.config.recheck) {
      ++c.stats.process_hits;
      return e->value.resolution;
    }
    generation = c.generation;
  }
  auto read = [core = core_, pid] { return core->read_process(pid); };
  // Kept only if it is still the same process and the GPUs did not change meanwhile.
  auto done = [core = core_, pid, uid, generation,
               identity](const std::shared_ptr<const Resolution>& r) {
    std::lock_guard lock(core->mu);
    if (r->key == kUnresolved) ++core->stats.unresolved;
    if (identity && generation == core->generation) {
      core->processes.put(pid, uid, Core::ProcessAnswer{*identity, r}, Clock::now());
    }
  };
  return c.answer(pid, uid, c.readings.get(pid, identity, uid, wait, read, done));
}

std::shared_ptr<const Resolution> CallerTargets::Core::answer(
    pid_t pid, uid_t uid, const DeadlineReader<Resolution>::Answer& from) {
  using Outcome = DeadlineReader<Resolution>::Outcome;
  CallerFacts facts;
  facts.pid = pid;
  std::lock_guard lock(mu);
  switch (from.outcome) {
    case Outcome::kDone:
    case Outcome::kUnderWay:
      return from.result;
    case Outcome::kTimedOut:
    case Outcome::kGaveUp:
      if (from.outcome == Outcome::kTimedOut) {
        ++stats.timed_out;
        ++stats.unresolved;
      }
      return unresolved("reading this process's Python took longer than " +
                            seconds_text(config.deadline) +
                            " (a slow or hung filesystem in its paths?); still trying",
                        facts);
    case Outcome::kUserBusy:
    case Outcome::kBusy:
      ++stats.refused;
      ++stats.unresolved;
      return unresolved(from.outcome == Outcome::kUserBusy
                            ? "user " + std::to_string(uid) + " already has " +
                                  std::to_string(from.busy) +
                                  " detections under way (a slow or hung filesystem in its "
                                  "paths?); try again"
                            : "too many detections under way on this mount; try again",
                        facts);
    case Outcome::kNoThread:
      ++stats.unresolved;
      return unresolved("cannot start a thread to read it: " + from.why, facts);
  }
  return from.result;
}

Expected<std::shared_ptr<const Resolution>, std::string> CallerTargets::adopt(pid_t pid,
                                                                              uid_t uid) {
  Core& c = *core_;
  if (!c.config.per_caller) return unexpected(std::string("current=mount: no per-process views"));
  auto hint = hint_for_parent(pid, uid, c.config.proc);
  if (!hint) return unexpected(hint.error());
  const pid_t parent = hint->pid;
  if (auto put = c.hints.put(std::move(*hint)); !put) return unexpected(put.error());
  {
    std::lock_guard lock(c.mu);
    ++c.stats.hints;
    c.processes.erase(parent);
  }
  // The reading starts now (the shell's next glob finds it done or under way); the hook does
  // not wait for it.
  auto now = resolve(parent, uid, false);
  if (now) return now;
  auto pending = std::make_shared<Resolution>();
  pending->key = "(being read)";
  return std::shared_ptr<const Resolution>(std::move(pending));
}

std::shared_ptr<const PythonFacts> CallerTargets::Core::interpreter(const RootFs& root,
                                                                    const std::string& path,
                                                                    const CallerProcess* process) {
  const std::string key = interpreter_key(process, root, path);
  const auto now = Clock::now();
  std::optional<UserCache<std::string, std::shared_ptr<const PythonFacts>>::Entry> cached;
  {
    std::lock_guard lock(mu);
    if (const auto* e = interpreters.find(key)) cached = *e;
  }
  // Within a recheck an interpreter of this machine's own root is taken as read. One in another
  // root (a container's) is checked against its files every time: a container's root is named
  // by its dev:ino, which the next container can reuse (podman --rm frees the overlay's device
  // number and its upper folder's inode, and the next container gets both back), and a few
  // stats per new process are cheap beside serving it another image's torch.
  const bool foreign_root = process != nullptr && !process->own_root;
  const bool fresh = now - (cached ? cached->at : now) < config.recheck;
  if (cached && ((!foreign_root && fresh) || inputs_unchanged(root, cached->value->inputs))) {
    std::lock_guard lock(mu);
    ++stats.interpreter_hits;
    if (!fresh) interpreters.put(key, cached->uid, cached->value, now);  // checked now
    return cached->value;
  }
  auto made = std::make_shared<const PythonFacts>(read_python_facts(root, path, process));
  spdlog::debug("target: read the Python at {} ({})", path,
                made->python ? "CPython " + made->python->version() : made->python_error);
  std::lock_guard lock(mu);
  ++stats.interpreter_reads;
  interpreters.put(key, process != nullptr ? process->credentials.uid : ::geteuid(), made, now);
  return made;
}

std::shared_ptr<const Resolution> CallerTargets::Core::read_process(pid_t pid) {
  CallerFacts facts;
  facts.pid = pid;
  auto process = read_caller(pid, config.proc);
  if (!process) return unresolved(process.error(), facts);
  const auto hint = hints.find_for(*process);
  if (hint) {
    // The environment its shell hook handed over: what it runs with now.
    process->env = hint->env;
    process->cwd = hint->cwd;
    facts.hint = &*hint;
    facts.now = std::chrono::system_clock::now();
  }
  facts.process = &*process;
  std::optional<dev_t> refuse;
  GpuReport machine;
  {
    std::lock_guard lock(mu);
    refuse = refused;
    machine = gpus;
  }
  auto root = RootFs::open(process->root_dir, refuse);
  if (!root) return unresolved(root.error(), facts);

  std::shared_ptr<const PythonFacts> python;
  const auto& o = config.overrides;
  if (!needs_python(o)) {
    facts.python_error = "not read: torch, cuda and python_tag are all overridden";
  } else if (!o.python.empty()) {
    // python= is the mount owner's choice, read in the mount's world with its rights.
    auto own = RootFs::open("/", refuse);
    if (!own) return unresolved(own.error(), facts);
    python = interpreter(*own, o.python, nullptr);
    facts.interpreter = o.python;
    facts.interpreter_why = "the mount's python= option";
  } else {
    // Everything of the process's world is read with the process's own rights.
    const ActAs as(process->credentials);
    if (!as.ok()) {
      return unresolved("cannot take on the identity of user " +
                            std::to_string(process->credentials.uid) + " to read its files",
                        facts);
    }
    auto choice = choose_interpreter(*process, *root);
    if (!choice) {
      facts.python_error = choice.error();
    } else {
      facts.interpreter = choice->path;
      facts.interpreter_why = choice->why;
      python = interpreter(*root, choice->path, &*process);
    }
  }
  facts.python = python.get();
  facts.gpus = &machine;
  return std::make_shared<const Resolution>(resolve_caller(o, host, facts));
}

}  // namespace whfs::target
