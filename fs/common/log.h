#pragma once
// Logging goes through spdlog's default logger; this sets it up once, in main. Every line at
// info and above is flushed as it is written (a detached daemon's `tail -f` sees it at once);
// debug and trace lines within a second. Every logger also keeps the last warnings and errors
// in memory, for `wheelhouse status`: a daemon whose log went nowhere (no journal, no syslog)
// still says what went wrong.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fs/common/expected.h"
#include "fs/common/own_file.h"

namespace whfs {

inline constexpr std::uint64_t kLogRotateAt = 10 << 20;
inline constexpr int kLogsKept = 3;

// The name of the `n`th old log: wheelhousefs.log -> wheelhousefs.1.log (spdlog's naming),
// wh -> wh.1.
std::string rotated_name(const std::string& name, int n);

// A log file of the daemon's own (own_file.h): its folder checked and held open; the file
// created 0600, or an existing regular file of this user with one link, never through a link.
// At `rotate_at` bytes it is renamed NAME.1.EXT (NAME.1.EXT to NAME.2.EXT, ..., kLogsKept kept)
// and a new PATH is created the same way (O_CREAT | O_EXCL | O_NOFOLLOW, 0600): a name planted
// between rotations is never followed; when PATH cannot be made again, the lines go on to the
// file open until then.
// Not thread-safe: the sink that writes to it locks.
class LogFile {
 public:
  // `what` starts the error line ("log_file=/var/log/wh.log"); folders missing on the path
  // are created (0700).
  static Expected<std::unique_ptr<LogFile>, std::string> open(const std::string& path,
                                                              std::uint64_t rotate_at,
                                                              const std::string& what);
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  // Appends `text` (rotating first when it would pass the size).
  void write(std::string_view text);
  const std::string& path() const { return path_; }
  // Why the last rotation failed ("" when it did not).
  const std::string& rotation_problem() const { return rotation_problem_; }

 private:
  LogFile(OwnFolder folder, std::string name, std::string path, int fd, std::uint64_t size,
          std::uint64_t rotate_at);
  void rotate();

  OwnFolder folder_;
  std::string name_;
  std::string path_;
  int fd_;
  std::uint64_t size_;
  std::uint64_t rotate_at_;
  std::string rotation_problem_;
};

// Level names: trace, debug, info, warn, error, critical, off. Returns false on an unknown
// name (the caller reports it as a bad option). Logs go to stderr (the journal under systemd).
bool setup_logging(std::string_view level);

// Where a detached daemon (no stderr any more) logs from now on: `file` when given (opened
// before the daemon started, so that a bad log_file= fails the mount); else syslog when
// /dev/log exists (journald listens there too); else `fallback_file` (a LogFile rotated at
// `rotate_at`). Returns where, in words, or why no file could be opened.
Expected<std::string, std::string> log_detached(std::unique_ptr<LogFile> file,
                                                const std::string& fallback_file,
                                                std::uint64_t rotate_at = kLogRotateAt);

// The last distinct warnings and errors, the oldest first: a message logged again moves to
// the end and counts up, so one problem repeated 17 times is one entry with count 17.
struct Problem {
  std::string level;  // "warning", "error", "critical"
  std::string message;
  std::string first;  // "2026-11-30T15:20:01+0000", local time
  std::string last;
  std::uint64_t count = 0;
};
std::vector<Problem> recent_problems();

// Lines logged per level since start (trace .. critical), for the metrics.
std::array<std::uint64_t, 6> log_line_counts();

}  // namespace whfs
