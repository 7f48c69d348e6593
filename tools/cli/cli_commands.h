#pragma once
// The subcommands of `wheelhouse` (tools/cli/wheelhouse.cpp parses the command line).

#include <sys/types.h>

#include <string>
#include <vector>

#include "fs/common/expected.h"

namespace whfs::cli {

// 5-8: `publish` only, so that a script can tell why nothing was published.
enum Exit {
  kOk = 0,
  kFailed = 1,
  kUsage = 2,
  kNotOurs = 3,
  kCorruptFound = 4,
  kWheelRefused = 5,  // a wheel failed its checks or does not run on the target (check too)
  kDenied = 6,        // no token, or the Hub refused it (invalid, read-only, gated)
  kConflict = 7,      // another file is at a wheel's path (--replace)
  kNotFound = 8,      // the repository or branch (or a private repo the token cannot see)
};

// A command's failure: its exit code and one sentence.
struct Failure {
  int code = 1;
  std::string message;
};

struct CommonOptions {
  bool json = false;
  std::string cache_dir;                    // empty: the default of wheelhousefs
  std::string cache_group;                  // a cache shared with this group (cache_group=)
  std::string mount;                        // cache commands: the cache of this mount
  std::vector<std::string> target_options;  // detect: python=, arch=, ...
};

struct DetectOptions {
  pid_t pid = 0;          // the process whose target to show (0: this one, i.e. its shell's)
  bool key_only = false;  // print only the key (for scripts: targets/$(wheelhouse detect --key))
  std::string mount;      // the mount whose answer to give (default: the one the working folder
                          // is in, else the only one; none: this machine's own reading)
};

struct PrefetchOptions {
  std::string mountpoint;            // empty: the only wheelhouse mount
  std::vector<std::string> targets;  // keys: targets/KEY/ (with current_packages: those)
  std::vector<std::string> current_packages;
  bool current_given = false;
  std::vector<std::string> paths;
  int jobs = 4;
};

struct HashesOptions {
  std::string mountpoint;             // empty: the only wheelhouse mount
  std::string target;                 // a key; empty: where current leads this process
  std::vector<std::string> packages;  // project or folder names; empty: every one
};

struct PublishOptions {
  std::vector<std::string> args;  // [REPO] WHEEL...: REPO unless it ends in .whl
  std::string revision = "main";
  std::string target = "auto";  // or a key (sm89-torch2.9-cu128-cp312)
  std::string python;           // --target auto: the Python whose torch counts
  std::string cudart;           // --target auto: the CUDA runtime to ask (else the system's)
  bool dry_run = false;
  bool replace = false;
  std::string endpoint;    // empty: HF_ENDPOINT, else https://huggingface.co
  std::string token_file;  // empty: HF_TOKEN, HF_TOKEN_PATH, $HF_HOME/token
  int stall_timeout = 60;  // seconds without a byte moving before a transfer is retried
  std::string torch;       // the torch folder whose libraries the run check reads
  bool force = false;      // publish even what the run check refuses (said in the commit)
};

struct CheckOptions {
  std::vector<std::string> wheels;
  std::string target = "auto";  // or a key
  std::string python;           // --target auto: the Python whose torch counts
  std::string cudart;           // --target auto: the CUDA runtime to ask
  std::string torch;            // the torch folder to check symbols against (else the target's)
  bool json = false;
};

struct DoctorOptions {
  std::string repo = "DoctorPopi/python_wheelhouse";
  std::string endpoint;             // empty: HF_ENDPOINT, else https://huggingface.co
  std::string cache_dir;            // empty: wheelhousefs's default
  bool offline = false;             // no request to the Hub
  std::vector<std::string> mounts;  // --mount: only these; empty: every wheelhouse mount
};

int run_detect(const CommonOptions& o, const DetectOptions& d);
int run_doctor(const DoctorOptions& o);
int run_shell_hook(const std::string& shell, const std::vector<std::string>& mounts);
// --install (else --uninstall) of the hook line in `files` (empty: /etc/bash.bashrc and
// /etc/zsh/zshrc where they exist).
int run_shell_hook_files(bool install, const std::vector<std::string>& files);
// `append`: the pip configuration file to add the keys to (empty: print them).
int run_pip_config(const std::string& mount, const std::string& append);
// Every wheelhouse mount: folder, repo@revision, daemon pid, user, state.
int run_mounts(bool json);
// SIGHUP to the daemon of that mount (checked to be it); waits up to `timeout_s` for what it
// found (0: not at all).
int run_refresh(const std::string& mount, int timeout_s);
// Unmounts that mount and waits up to `timeout_s` for its daemon to end; a dead one is detached.
int run_stop(const std::string& mount, int timeout_s);
int run_publish(const PublishOptions& o);
int run_check(const CheckOptions& o);
int run_hashes(const HashesOptions& o);
// MOUNTPOINT empty: the only wheelhouse mount. `watch`: every second until interrupted.
int run_status(const std::string& mountpoint, const CommonOptions& o, bool watch);
int run_cache_stats(const CommonOptions& o);
int run_cache_ls(const CommonOptions& o);
int run_cache_verify(const CommonOptions& o);
int run_cache_evict(const CommonOptions& o, const std::vector<std::string>& targets);
// Refuses while another process (a mount) uses the cache, unless `force`.
int run_cache_clear(const CommonOptions& o, bool yes, bool force);
int run_prefetch(const PrefetchOptions& o);

// "1.5 GiB", "12.0 MiB/s", "3m12s": shared by the subcommands.
std::string human_rate(double bytes_per_second);
std::string human_duration(double seconds);

}  // namespace whfs::cli
