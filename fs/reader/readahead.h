#pragma once
// Readahead for one open file, as a small state machine: sequential reads grow a window of
// bytes fetched ahead; a jump resets it. A first read in the tail of a wheel (a zip reader
// looking for the central directory, as pip does) asks for the whole file, since pip then
// reads every byte of it.

#include <cstdint>
#include <optional>

namespace whfs::reader {

struct ReadaheadConfig {
  std::uint64_t initial_window = 4ull << 20;
  std::uint64_t max_window = 32ull << 20;
  // How far from the end of the reads so far a read may start and still count as sequential.
  std::uint64_t sequential_slack = 2ull << 20;
  // The smallest piece asked for ahead (one download request).
  std::uint64_t batch = 4ull << 20;
  // A first read within this many bytes of the end of a wheel starts a whole-file prefetch
  // (for wheels up to whole_file_max bytes).
  std::uint64_t zip_tail = 128ull << 10;
  std::uint64_t whole_file_max = 1ull << 30;
};

struct Prefetch {
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

class Readahead {
 public:
  Readahead(ReadaheadConfig config, std::uint64_t file_size, bool is_wheel)
      : config_(config), size_(file_size), wheel_(is_wheel) {}

  // Called for each read; returns the bytes to fetch ahead, if any (never past the end, never
  // what an earlier call already asked for).
  std::optional<Prefetch> on_read(std::uint64_t offset, std::uint64_t length);

  std::uint64_t window() const { return window_; }

 private:
  ReadaheadConfig config_;
  std::uint64_t size_;
  bool wheel_;
  bool first_ = true;
  bool whole_file_ = false;
  std::uint64_t next_ = 0;           // where a sequential reader reads next
  std::uint64_t window_ = 0;         // current window (0: not sequential)
  unsigned run_ = 0;                 // sequential reads in a row
  std::uint64_t fetched_until_ = 0;  // prefetch asked up to here
};

}  // namespace whfs::reader
