#pragma once
// The hint book: what each hooked shell last said of its own environment (CallerTargets::adopt),
// held for as long as that shell runs, a bounded number per user.
//
// A book kept in a file (keep_in) is written after each change and read once at mount, so that
// a daemon mounted again on the same folder (systemctl restart, a crash and Restart=on-failure, a
// package upgrade) knows the shells that are still running: their hooks send a hint again only
// when the shell's environment changes. The file is the daemon's own: in a folder that only its
// user (or root) can write (OwnFolder), created 0600, replaced by rename, never reached through
// a link. A hint in it is taken again only for a process with the same pid, start time, user
// and root as when it was given, and only since the same boot of the machine.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fs/common/expected.h"
#include "fs/common/own_file.h"
#include "fs/targeting/caller.h"
#include "fs/targeting/overrides.h"

namespace whfs::target {

// A process's root folder as the kernel knows it (/proc/PID/root, read without asking its
// filesystem): device and inode.
struct RootId {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  bool operator==(const RootId&) const = default;
};
std::optional<RootId> read_root(pid_t pid, const std::string& proc = "/proc");

struct Hint {
  pid_t pid = 0;                 // the shell's
  std::uint64_t start_time = 0;  // /proc/PID/stat's: with pid, that shell and no later process
  uid_t uid = 0;                 // its filesystem user
  RootId root;
  std::map<std::string, std::string> env;  // only kCallerEnv
  std::string cwd;
  std::string by;  // the program that handed it over
  std::chrono::system_clock::time_point at;
  bool operator==(const Hint&) const = default;
};

// Whether the process of `hint` still runs: its pid, with the same start time, user and root.
bool still_running(const Hint& hint, const std::string& proc = "/proc");

// The hint process `pid` (user `uid`) hands to its parent: its own environment and working
// directory, for the parent to count as having them (a shell after `source activate` keeps its
// start-up environment in /proc, but its children get the new one). Only for a parent of the
// same user, in the same root; else why not, in one line.
Expected<Hint, std::string> hint_for_parent(pid_t pid, uid_t uid,
                                            const std::string& proc = "/proc");

// The file's text for the book of `mountpoint` written while the machine runs boot `boot`
// (read_boot_id), and back (pure). A hint whose environment and folder take more than
// kMaxSavedHint bytes is left out (kept in memory only). The error is one line: why the text is
// not a book of `mountpoint` of this boot (pids and start times mean nothing after a reboot,
// and ~/.cache is no tmpfs).
inline constexpr std::size_t kMaxSavedHint = 16 << 10;
std::string hints_to_text(const std::string& mountpoint, const std::string& boot,
                          const std::vector<Hint>& hints);
Expected<std::vector<Hint>, std::string> hints_from_text(const std::string& text,
                                                         const std::string& mountpoint,
                                                         const std::string& boot);
// The kernel's boot id (/proc/sys/kernel/random/boot_id), "" when it cannot be read.
std::string read_boot_id(const std::string& proc = "/proc");

// Where the daemon keeps its books when state_dir= does not say: /run/wheelhouse-fs for root
// (a tmpfs: hints mean nothing after a reboot), else $XDG_RUNTIME_DIR/wheelhouse-fs, else
// ${XDG_CACHE_HOME:-~/.cache}/wheelhouse-fs/state; "" when none applies (no HOME).
std::string default_state_dir(const GetEnv& getenv, bool is_root);
// The book's file name for a mount point (absolute): a hash of it.
std::string hint_file_name(const std::string& mountpoint);

class HintBook {
 public:
  explicit HintBook(std::size_t max_per_uid, std::string proc = "/proc");
  ~HintBook();
  HintBook(const HintBook&) = delete;
  HintBook& operator=(const HintBook&) = delete;

  // Takes `hint` for its shell (in place of that shell's previous one). A user at its bound
  // first loses the hints of its processes that are gone; still at it: the error says so.
  Expected<void, std::string> put(Hint hint);
  // The hint of process `pid` if it is still that process's (its start time and user).
  std::optional<Hint> find(pid_t pid, std::uint64_t start_time, uid_t uid) const;
  // The hint of `process`, or of the shell it was forked from without an exec since: a shell
  // may expand a glob in a child it forked for the command (zsh does for external commands,
  // bash in pipelines and subshells), and such a child shows the same stale environment.
  std::optional<Hint> find_for(const CallerProcess& process) const;
  bool empty() const;
  std::size_t size() const;

  // From now on the book is kept in `name` in `folder`, as the book of `mountpoint`: the hints
  // that file holds of processes still running are taken (their count is returned) and the
  // file is written again without the others. A file that is not this user's, or not a book of
  // `mountpoint`, is ignored with one log line.
  std::size_t keep_in(OwnFolder folder, const std::string& name, const std::string& mountpoint);
  // Drops the hints of processes that are gone (and from the file; none left: no file).
  void drop_gone();
  // "FOLDER/NAME", or "" when the book is kept in no file.
  std::string file() const;

 private:
  struct File;
  void save();  // after a change: writes the file (one writer at a time; the others' changes
                // are written by it)

  const std::size_t max_per_uid_;
  const std::string proc_;
  mutable std::mutex mu_;  // guards everything below
  std::map<pid_t, Hint> hints_;
  std::unique_ptr<File> file_;
  std::uint64_t changes_ = 0;
  bool writing_ = false;
};

}  // namespace whfs::target
