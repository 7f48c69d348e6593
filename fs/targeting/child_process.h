#pragma once
// Runs probes in a child process with a deadline, so that a broken interpreter or a vendor
// library that crashes, hangs or calls exit() costs the daemon a child, never itself.

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace whfs::target {

struct ChildResult {
  enum class End {
    kExited,       // `code` is the exit status
    kSignaled,     // `code` is the signal
    kTimedOut,     // killed with SIGKILL at the deadline
    kStartFailed,  // never ran: `start_error` says why (no such program, fork failed, ...)
  };
  End end = End::kStartFailed;
  int code = 0;
  std::string out;  // stdout (or what the function returned), at most kMaxOutput bytes
  std::string err;  // stderr of a program, at most kMaxOutput bytes
  std::string start_error;
  std::chrono::milliseconds timeout{0};  // the deadline it ran under, for describe()

  bool ok() const { return end == End::kExited && code == 0; }
  // "exited with status 1", "was killed by signal 11 (Segmentation fault)", "did not finish
  // within 10 s and was killed", "could not start: ..."
  std::string describe() const;
};

// "10 s", "0.5 s": a duration for a message.
std::string seconds_text(std::chrono::milliseconds d);

inline constexpr std::size_t kMaxOutput = 1 << 20;

// Runs argv[0] (looked up on PATH when it has no '/') with argv, no shell, stdin from
// /dev/null, the current environment; captures stdout and stderr.
ChildResult run_program(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

// Runs `fn` in a forked child and returns what it returned (in `out`). The child writes the
// result to a pipe and leaves with _exit(), so no atexit handler or static destructor of a
// library it loaded runs. fn must not throw across the fork (an escaping exception ends the
// child with status 70).
//
// A fork in a threaded process gives the child a copy of the locks other threads held; glibc
// resets malloc's and the loader's own locks, and the deadline covers any other lock.
ChildResult run_in_child(const std::function<std::string()>& fn, std::chrono::milliseconds timeout);

}  // namespace whfs::target
