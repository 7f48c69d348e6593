#pragma once
// The process behind a FUSE request, as far as choosing its wheels goes: what it runs, how it
// was started, the few environment variables that decide its Python and its GPUs, and its root
// (a container's, or the daemon's own). Read from /proc/PID: nothing about it is executed.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fs/common/expected.h"

namespace whfs::target {

// The environment variables that decide a caller's target (all others are never kept).
inline constexpr const char* kCallerEnv[] = {
    "VIRTUAL_ENV",       "CONDA_PREFIX",           "PATH",          "PYTHONPATH",
    "PYTHONNOUSERSITE",  "PYTHONUSERBASE",         "HOME",          "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "PYENV_VERSION", "PYENV_ROOT",
};

// Who a process is for file access: its filesystem uid and gid and its groups.
struct Credentials {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
};

struct CallerProcess {
  pid_t pid = 0;
  std::uint64_t start_time = 0;  // /proc/PID/stat's starttime: with pid, one process for ever
  std::string exe_name;          // the file name it runs (python3.11, bash)
  std::string exe_path;          // its path as the daemon sees it ("" when its root is another)
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // only kCallerEnv
  bool own_root = true;                    // its root is the daemon's
  std::string cwd;                         // "" when its root is another one
  std::string root_dir;                    // "/proc/PID/root", or "/" for own_root
  Credentials credentials;

  std::optional<std::string> var(const std::string& name) const {
    const auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
};

// Reads /proc/PID (`proc` is "/proc" outside tests). Needs the right to read the process's
// environment (root, or its own user): otherwise the error says so.
Expected<CallerProcess, std::string> read_caller(pid_t pid, const std::string& proc = "/proc");

// What tells a process apart from a later one with the same pid, and from itself before an
// exec: its start time and what it runs. Two cheap reads of /proc/PID.
struct ProcessIdentity {
  std::uint64_t start_time = 0;
  std::string exe;
  bool operator==(const ProcessIdentity&) const = default;
};
std::optional<ProcessIdentity> read_identity(pid_t pid, const std::string& proc = "/proc");

// The parent of a process (PPid in /proc/PID/status), or nullopt when it is gone.
std::optional<pid_t> read_parent(pid_t pid, const std::string& proc = "/proc");

// Parses NUL-separated /proc text (cmdline, environ). Pure.
std::vector<std::string> split_nul(const std::string& text);

// For its lifetime, the calling thread opens, reads and looks up files as `who` (filesystem
// uid and gid, supplementary groups; Linux keeps these per thread), so a root daemon reading a
// user's files gets exactly that user's rights: a file the user cannot read (or a folder the
// user cannot search) stays closed to the daemon too. Does nothing when the daemon does not
// run as root or `who` is root. ok() is false when the switch failed (then read nothing).
class ActAs {
 public:
  explicit ActAs(const Credentials& who);
  ~ActAs();
  ActAs(const ActAs&) = delete;
  ActAs& operator=(const ActAs&) = delete;
  bool ok() const { return ok_; }

 private:
  bool switched_ = false;
  bool ok_ = true;
  uid_t old_uid_ = 0;
  gid_t old_gid_ = 0;
  std::vector<gid_t> old_groups_;
};

}  // namespace whfs::target
