// wheelhouse prefetch: warm the cache by reading files through a running mount (the daemon
// fetches, verifies and stores them; every mount sharing the cache benefits). A progress bar
// on a terminal, one line per file otherwise.

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fs/common/clock.h"
#include "fs/common/units.h"
#include "tools/cli_commands.h"

namespace whfs::cli {
namespace {

namespace fsys = std::filesystem;

struct Job {
  std::string path;
  std::uint64_t size = 0;
};

// Files under the requested paths, with their sizes (stat never downloads).
bool collect(const PrefetchOptions& o, std::vector<Job>& jobs) {
  std::vector<std::string> roots;
  for (const auto& p : o.paths) roots.push_back(p.starts_with("/") ? p : o.mountpoint + "/" + p);
  // The folders the packages are taken from: current/ (this process's target) or the named
  // targets (any machine's).
  std::vector<std::string> bases;
  for (const auto& key : o.targets) bases.push_back(o.mountpoint + "/targets/" + key);
  if (bases.empty() && o.current_given) bases.push_back(o.mountpoint + "/current");
  for (const auto& base : bases) {
    if (o.current_packages.empty()) roots.push_back(base);
    for (const auto& pkg : o.current_packages) roots.push_back(base + "/" + pkg);
  }
  if (roots.empty()) {
    std::fprintf(stderr,
                 "wheelhouse: nothing to prefetch: give PATHs, --current [PACKAGE...] or "
                 "--target KEY\n");
    return false;
  }
  for (const auto& r : roots) {
    std::error_code ec;
    const auto st = fsys::status(r, ec);
    if (ec || !fsys::exists(st)) {
      std::fprintf(stderr, "wheelhouse: %s: no such file or folder\n", r.c_str());
      return false;
    }
    if (fsys::is_regular_file(st)) {
      jobs.push_back({r, fsys::file_size(r, ec)});
      continue;
    }
    for (auto it = fsys::recursive_directory_iterator(r, ec); !ec && it != fsys::end(it);
         it.increment(ec)) {
      // A target folder's simple/ and all/ show its package folders' wheels again.
      if (it.depth() == 0 && it->is_directory(ec) &&
          (it->path().filename() == "simple" || it->path().filename() == "all")) {
        it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec) && it->path().filename() != ".target") {
        jobs.push_back({it->path().string(), it->file_size(ec)});
      }
    }
    if (ec) {
      std::fprintf(stderr, "wheelhouse: listing %s: %s\n", r.c_str(), ec.message().c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

std::string human_rate(double bps) {
  return format_bytes(static_cast<std::uint64_t>(std::max(0.0, bps))) + "/s";
}

std::string human_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600,
                  static_cast<int>(s) % 3600 / 60);
  }
  return buf;
}

int run_prefetch(const PrefetchOptions& o) {
  if (::getxattr(o.mountpoint.c_str(), "user.wheelhouse.status", nullptr, 0) < 0) {
    std::fprintf(stderr, "wheelhouse: %s is not a wheelhouse-fs mount\n", o.mountpoint.c_str());
    return kNotOurs;
  }
  std::vector<Job> jobs;
  if (!collect(o, jobs)) return kFailed;
  std::uint64_t total = 0;
  for (const auto& j : jobs) total += j.size;
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  std::atomic<std::uint64_t> done_bytes{0};
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> done_files{0};
  std::atomic<int> failures{0};
  std::mutex out_mu;  // one writer of stdout/stderr at a time
  const auto start = Clock::now();

  auto worker = [&] {
    std::vector<char> buf(1 << 20);
    while (true) {
      const std::size_t i = next.fetch_add(1);
      if (i >= jobs.size()) return;
      const auto t0 = Clock::now();
      const int fd = ::open(jobs[i].path.c_str(), O_RDONLY | O_CLOEXEC);
      bool ok = fd >= 0;
      int err = ok ? 0 : errno;
      while (ok) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n == 0) break;
        if (n < 0) {
          ok = false;
          err = errno;
          break;
        }
        done_bytes += static_cast<std::uint64_t>(n);
      }
      if (fd >= 0) ::close(fd);
      done_files++;
      std::lock_guard lock(out_mu);
      if (!ok) {
        failures++;
        std::fprintf(stderr, "%swheelhouse: %s: %s\n", tty ? "\r\033[K" : "", jobs[i].path.c_str(),
                     std::strerror(err));
      } else if (!tty) {
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        std::printf("fetched %s (%s) in %.2f s\n", jobs[i].path.c_str(),
                    format_bytes(jobs[i].size).c_str(), s);
        std::fflush(stdout);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, o.jobs); ++t) threads.emplace_back(worker);
  if (tty) {
    while (done_files < jobs.size()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      const double rate = secs > 0 ? static_cast<double>(done_bytes) / secs : 0;
      const double frac =
          total == 0 ? 1.0 : static_cast<double>(done_bytes) / static_cast<double>(total);
      const int width = 30;
      const int fill = static_cast<int>(frac * width);
      std::lock_guard lock(out_mu);
      std::fprintf(
          stderr, "\r\033[K[%s%s] %3.0f%% %s / %s  %s  ETA %s  (%zu/%zu files)",
          std::string(static_cast<std::size_t>(std::min(fill, width)), '#').c_str(),
          std::string(static_cast<std::size_t>(width - std::min(fill, width)), '.').c_str(),
          frac * 100, format_bytes(done_bytes).c_str(), format_bytes(total).c_str(),
          human_rate(rate).c_str(),
          human_duration(rate > 0 ? static_cast<double>(total - done_bytes) / rate : NAN).c_str(),
          done_files.load(), jobs.size());
    }
  }
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::fprintf(tty ? stderr : stdout, "%s%zu files, %s in %.1f s (%s)%s\n", tty ? "\r\033[K" : "",
               jobs.size(), format_bytes(done_bytes).c_str(), secs,
               human_rate(secs > 0 ? static_cast<double>(done_bytes) / secs : 0).c_str(),
               failures > 0 ? (", " + std::to_string(failures.load()) + " failed").c_str() : "");
  return failures > 0 ? kFailed : kOk;
}

}  // namespace whfs::cli
