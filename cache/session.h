#pragma once
// Power-loss bookkeeping for one cache directory (see block_cache.h for why it is needed).
//
// Files next to LMDB's data.mdb and lock.mdb:
//   session.lock  open file description (OFD) locks: byte 0 serialises opening and closing,
//                 byte 1 is share-locked by every process that has the cache open.
//   session       "wheelhouse-fs-session/1 <boot id> <open|clean|suspect>", replaced atomically
//                 and fsynced: whether the store may hold unsynced writes of an earlier boot.
//
// Opening: under byte 0, decide whether the store must be checked (it was open, not closed
// cleanly, and the machine rebooted since; or a process saw corruption), check it in a forked
// child (so a crash on garbage pages cannot take the caller down), move a damaged store aside,
// then record "open <this boot>". Closing: under byte 0, after mdb_env_sync, the last process
// (the only holder of byte 1) records "clean".

#include <chrono>
#include <filesystem>
#include <string>

#include "cache/cache_error.h"

namespace whfs::cache {

class Session {
 public:
  struct Config {
    std::filesystem::path dir;
    std::filesystem::path boot_id_file;
    std::chrono::seconds check_timeout{600};
  };

  // Creates the directory if needed and takes the open/close gate (byte 0).
  static Result<Session> acquire(const Config& config);
  // Deletes the store's files unless a process has the cache open.
  static Result<void> remove_files(const std::filesystem::path& dir);

  Session() = default;
  ~Session();
  Session(Session&& other) noexcept;
  Session& operator=(Session&& other) noexcept;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Whether the store must be checked before it is trusted.
  bool needs_check() const { return needs_check_; }
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
  void mark_suspect();
  // After the final mdb_env_sync: records "clean" if no other process uses the store.
  void close_clean();

 private:
  Config config_;
  std::string boot_id_;
  int lock_fd_ = -1;
  bool needs_check_ = false;
};

// The kernel's boot id, or "" when unreadable.
std::string read_boot_id(const std::filesystem::path& file);

}  // namespace whfs::cache
