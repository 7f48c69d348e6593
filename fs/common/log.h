#pragma once
// Logging goes through spdlog's default logger; this sets it up once, in main. Every line at
// info and above is flushed as it is written (a detached daemon's `tail -f` sees it at once);
// debug and trace lines within a second. Every logger also keeps the last warnings and errors
// in memory, for `wheelhouse status`: a daemon whose log went nowhere (no journal, no syslog)
// still says what went wrong.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace whfs {

// Level names: trace, debug, info, warn, error, critical, off. Returns false on an unknown
// name (the caller reports it as a bad option). Logs go to stderr (the journal under systemd).
bool setup_logging(std::string_view level);

// Where a detached daemon (no stderr any more) logs from now on: `file` when given; else
// syslog when /dev/log exists (journald listens there too); else `fallback_file`. Returns
// where, in words, or an error sentence (the file cannot be opened). Files are created 0600
// and rotated at 10 MiB (3 kept).
std::string log_detached(const std::string& file, const std::string& fallback_file);

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
