#pragma once
// The wheelhouse mounts this process sees, how each one answers (live, stopped, dead), and the
// one a command works on: the one named (the mount's folder or a path in it), else the only
// one; never a folder that is not a mount. A mount is asked only through its status attribute,
// on a thread of its own with a deadline, so that a stopped daemon never hangs a command.

#include <sys/types.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fs/common/expected.h"
#include "tools/cli/cli_commands.h"

namespace whfs::cli {

// How long a mount has to answer before it counts as stopped (or hung).
constexpr std::chrono::seconds kAnswerDeadline{3};

// A wheelhouse mount as /proc/self/mountinfo lists it: one per FUSE connection (a bind mount of
// it is the same mount, at another folder too).
struct WheelhouseMount {
  std::string path;                  // the folder, as mountinfo spells it
  std::vector<std::string> also_at;  // bind mounts of the same connection
  std::string source;                // the repository (the mount's fsname)
  std::string dev;                   // "0:53": the connection's device number
  long long user_id = -1;            // FUSE's user_id=: the user whose daemon serves it
};

// The wheelhouse mounts visible in `mountinfo`, in mount order; a folder whose last mount is not
// a wheelhouse mount (one mounted over it) is not one.
std::vector<WheelhouseMount> wheelhouse_mount_table(const char* mountinfo = "/proc/self/mountinfo");

enum class MountState { kLive, kStopped, kDead, kFailed };
const char* to_string(MountState s);

// (clang-tidy 14 takes its implicit, noexcept move constructor for one that may throw.)
struct MountProbe {  // NOLINT(bugprone-exception-escape)
  WheelhouseMount mount;
  MountState state = MountState::kFailed;
  nlohmann::json status;  // kLive: the status attribute
  std::string error;      // kFailed: why (e.g. Permission denied)
  pid_t pid = 0;          // its daemon: the status's pid, or (stopped) the stopped process whose
                          // command line names the folder; 0 when not known
};

// Each mount asked at once, each on its own thread; those that did not answer by the deadline
// are kStopped.
std::vector<MountProbe> probe_mounts(const std::vector<WheelhouseMount>& mounts);

// One line for a list of mounts: folder, repo@revision, pid, user, state.
std::string describe(const MountProbe& p);
// "repo@revision" ("repo@?" when the mount does not answer).
std::string repo_text(const MountProbe& p);
// "live", "stopped (...)", "dead (...)", "failed: ...", with what to do.
std::string state_text(const MountProbe& p);
// The name of a uid ("root", "alice"), else its number.
std::string user_name(long long uid);

// The mount a command works on. `given`: the folder of a mount or a path inside one (empty:
// the only mount there is). `how_to_name`: how the command names one ("--mount DIR"), for the
// refusal that lists several. Errors: kNotOurs (no mount, or `given` is none), kUsage (several).
Expected<WheelhouseMount, Failure> choose_mount(const std::string& given,
                                                const std::string& how_to_name);
// The mount whose folder holds `path` (lexically, then through its links), if any: nothing on a
// mount is touched unless the path itself leads there through a link.
std::optional<WheelhouseMount> mount_holding(const std::string& path,
                                             const std::vector<WheelhouseMount>& mounts);
// The mount this process's working folder is in, if any.
std::optional<WheelhouseMount> mount_of_cwd(const std::vector<WheelhouseMount>& mounts);

// The status of `mountpoint`, asked with the deadline: kNotOurs when it is no wheelhouse mount,
// kFailed when it is dead or does not answer (each said in one sentence).
Expected<nlohmann::json, std::pair<int, std::string>> read_status_within(
    const std::string& mountpoint, std::chrono::milliseconds deadline = kAnswerDeadline);

// The pid of the daemon that serves `m`, checked to be that daemon: a wheelhousefs process
// (its name), started before the mount was made, that sees this connection mounted at the
// folder its status names, and whose command line (when it names an absolute folder) names
// that folder. A status read in another pid namespace names a pid that fails these checks.
Expected<pid_t, std::string> verified_daemon(const WheelhouseMount& m,
                                             const nlohmann::json& status);

// Reads `path` (a file of a mount) with the deadline: its bytes, or why not.
Expected<std::string, std::string> read_file_within(const std::string& path,
                                                    std::chrono::milliseconds deadline);

}  // namespace whfs::cli
