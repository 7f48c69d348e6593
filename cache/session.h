#pragma once
// Power-loss bookkeeping for one cache directory (see block_cache.h for why it is needed).
//
// Files next to LMDB's data.mdb and lock.mdb:
//   session.lock  open file description (OFD) locks: byte 0 serialises opening and closing,
//                 byte 1 is share-locked by every process that has the cache open, byte 2 is
//                 held around every LMDB write txn and byte 3 around every claim of a slot in
//                 LMDB's reader table (process_lock.h: LMDB's own mutexes for these record
//                 their owner by thread id, which another PID namespace can reuse).
//   session       "wheelhouse-fs-session/1 <boot id> <open|clean|suspect>", replaced atomically
//                 (a new session.tmp renamed over it) and fsynced: whether the store may hold
//                 unsynced writes of an earlier boot. In a sticky shared directory a process
//                 may not rename over another user's record: it rewrites that one in place.
// Every file is opened relative to the directory, never following a link (dir_policy.h).
//
// Opening: under byte 0, decide whether the store must be checked (it was open, not closed
// cleanly, and the machine rebooted since; or a process saw corruption), check it in a forked
// child (so a crash on garbage pages cannot take the caller down), move a damaged store aside,
// then record "open <this boot>". Closing: under byte 0, after mdb_env_sync, the last process
// (the only holder of byte 1) records "clean".

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "cache/cache_error.h"
#include "cache/dir_policy.h"
#include "cache/process_lock.h"

namespace whfs::cache {

class Session {
 public:
  struct Config {
    std::filesystem::path dir;
    std::filesystem::path boot_id_file;
    std::chrono::seconds check_timeout{600};
    DirAccess access;
    // How long to wait for the open/close gate: a process stopped while it held it must not
    // hold up every other one (kBusy then).
    std::chrono::milliseconds open_timeout{10000};
  };

  // Creates the directory if needed (dir_policy.h) and takes the open/close gate (byte 0).
  static Result<Session> acquire(const Config& config);
  // A read-only cache: no files, no gate, no bookkeeping; its locks are no-ops.
  static Session read_only(const std::filesystem::path& dir);
  // Deletes the store's files unless a process has the cache open.
  static Result<void> remove_files(const std::filesystem::path& dir, const DirAccess& access = {});

  Session() = default;
  ~Session();
  Session(Session&& other) noexcept;
  Session& operator=(Session&& other) noexcept;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Whether the store must be checked before it is trusted.
  bool needs_check() const { return needs_check_; }
  // Whether another process has the cache open now (a mount: not to be repaired under it).
  bool in_use_by_others() const;
  // Checks LMDB's structure in a child process; false when damaged (or the check crashed or
  // timed out).
  bool check_store() const;
  // Moves the damaged store out of the way (the directory to <dir>.corrupt-<time>, or if that
  // is impossible, e.g. a mount point, its files into <dir>/corrupt-<time>/) and releases the
  // gate; the caller starts over with acquire(). Logs one warning naming `why`.
  Result<void> move_aside(const std::string& why);
  // Records "open <boot>", joins the users (byte 1) and releases the gate.
  Result<void> mark_open();
  // Records "suspect" so the next opener checks the store (a process saw corruption).
  // Waits for the gate at most open_timeout (a process stopped while it held it): then logs a
  // warning and leaves the record as it is.
  void mark_suspect();
  // After the final mdb_env_sync: records "clean" if no other process uses the store. Waits
  // for the gate as mark_suspect does; the record then stays "open".
  void close_clean();

  // The cache directory, opened (-1 for a read-only cache): its files are opened relative to
  // it (dir_policy.h).
  int dir_fd() const { return dir_fd_.get(); }

  // Held around each LMDB write txn, and around each new slot in LMDB's reader table.
  ProcessLock& writer() { return locks_->writer; }
  ProcessLock& reader_table() { return locks_->readers; }

 private:
  // Takes the gate within open_timeout; false (with a warning naming `what`) when not.
  bool gate_within_timeout(const char* what);
  struct Locks {
    explicit Locks(int fd) : writer(fd, 2), readers(fd, 3) {}
    ProcessLock writer;
    ProcessLock readers;
  };
  Config config_;
  std::string boot_id_;
  UniqueFd dir_fd_;
  int lock_fd_ = -1;
  bool needs_check_ = false;
  std::unique_ptr<Locks> locks_;  // on lock_fd_ (a stable address for the cache's threads)
};

// The kernel's boot id, or "" when unreadable.
std::string read_boot_id(const std::filesystem::path& file);

}  // namespace whfs::cache
