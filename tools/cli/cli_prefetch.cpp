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
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fs/common/clock.h"
#include "fs/common/units.h"
#include "fs/targeting/caller_targets.h"
#include "fs/targeting/key.h"
#include "tools/cli/cli_commands.h"
#include "tools/cli/mount_select.h"
#include "tools/cli/status_reader.h"

namespace whfs::cli {
namespace {

namespace fsys = std::filesystem;

struct Job {
  std::string path;
  std::uint64_t size = 0;
  std::string repo_path;  // its path in the repository (user.wheelhouse.path): the daemon's name
  std::atomic<int> state{0};           // 0 waiting, 1 being read, 2 done
  std::atomic<std::uint64_t> read{0};  // bytes read back so far
  Job(std::string p, std::uint64_t s) : path(std::move(p)), size(s) {}
};

std::string xattr_of(const std::string& path, const char* name) {
  char buf[4096];
  const ssize_t n = ::getxattr(path.c_str(), name, buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// Files under the requested paths, with their sizes (stat never downloads).
bool collect(const PrefetchOptions& o, std::deque<Job>& jobs, int* rc) {
  *rc = kFailed;
  std::vector<std::string> roots;
  // With --target or --current, a bare name is a package of those folders (flash_attn); a
  // path (with a '/') is a file or folder of the mount.
  const bool folders_named = !o.targets.empty() || o.current_given;
  std::vector<std::string> packages = o.current_packages;
  for (const auto& p : o.paths) {
    if (folders_named && p.find('/') == std::string::npos) {
      packages.push_back(p);
    } else {
      roots.push_back(p.starts_with("/") ? p : o.mountpoint + "/" + p);
    }
  }
  // The folders the packages are taken from: current/ (this process's target) or the named
  // targets (any machine's).
  std::vector<std::string> bases;
  for (const auto& key : o.targets) bases.push_back(o.mountpoint + "/targets/" + key);
  if (bases.empty() && o.current_given) {
    // current/ of a process whose target is not known leads to targets/unresolved: say why
    // instead of prefetching nothing.
    char link[512];
    const ssize_t n = ::readlink((o.mountpoint + "/current").c_str(), link, sizeof link - 1);
    if (n > 0 && std::string(link, static_cast<std::size_t>(n)) ==
                     std::string("targets/") + target::CallerTargets::kUnresolved) {
      std::fprintf(stderr,
                   "wheelhouse: current/ leads to targets/unresolved for this shell: "
                   "`wheelhouse detect` says why; give --target KEY for another machine\n");
      *rc = kFailed;
      return false;
    }
    bases.push_back(o.mountpoint + "/current");
  }
  for (const auto& base : bases) {
    if (packages.empty()) roots.push_back(base);
    for (const auto& pkg : packages) roots.push_back(base + "/" + pkg);
  }
  if (roots.empty()) {
    std::fprintf(stderr,
                 "wheelhouse: nothing to prefetch: give PATHs, --current [PACKAGE...] or "
                 "--target KEY\n");
    *rc = kUsage;
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
      jobs.emplace_back(r, fsys::file_size(r, ec));
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
        jobs.emplace_back(it->path().string(), it->file_size(ec));
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

// Bytes done over the last seconds, for a rate and an ETA that follow the link's speed now
// (not the average since start, which a cached head start skews).
class RecentRate {
 public:
  void add(Clock::time_point t, std::uint64_t done) {
    samples_.emplace_back(t, done);
    while (samples_.size() > 2 && t - samples_[1].first > std::chrono::seconds(5)) {
      samples_.pop_front();
    }
  }
  double rate() const {
    if (samples_.size() < 2) return 0;
    const double dt =
        std::chrono::duration<double>(samples_.back().first - samples_.front().first).count();
    return dt > 0 ? static_cast<double>(samples_.back().second - samples_.front().second) / dt : 0;
  }

 private:
  std::deque<std::pair<Clock::time_point, std::uint64_t>> samples_;
};

int run_prefetch(const PrefetchOptions& options) {
  // Bad input first (a usage error whatever the mount).
  for (const auto& key : options.targets) {
    if (auto k = target::parse_key(key, target::host_platform()); !k) {
      std::fprintf(stderr, "wheelhouse: --target %s: %s\n", key.c_str(), k.error().c_str());
      return kUsage;
    }
  }
  auto chosen = choose_mount(options.mountpoint, "wheelhouse prefetch --mount DIR");
  if (!chosen) {
    std::fprintf(stderr, "wheelhouse: %s\n", chosen.error().message.c_str());
    return chosen.error().code;
  }
  PrefetchOptions o = options;
  o.mountpoint = chosen->path;
  if (auto st = read_status(o.mountpoint); !st) {
    std::fprintf(stderr, "wheelhouse: %s\n", st.error().second.c_str());
    return st.error().first;
  }
  std::deque<Job> jobs;
  if (int rc = kOk; !collect(o, jobs, &rc)) return rc;
  std::uint64_t total = 0;
  for (auto& j : jobs) {
    total += j.size;
    j.repo_path = xattr_of(j.path, "user.wheelhouse.path");
  }
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  // What the daemon received while this ran (its count as bytes arrive): on a slow link a
  // file that fails part-way has still brought bytes into the cache.
  auto received_total = [&]() -> std::optional<std::uint64_t> {
    auto st = read_status(o.mountpoint);
    if (!st || !st->contains("received_bytes")) return std::nullopt;
    return (*st)["received_bytes"].get<std::uint64_t>();
  };
  const auto received_before = received_total();
  std::atomic<std::uint64_t> read_bytes{0};
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
      Job& job = jobs[i];
      job.state = 1;
      const auto t0 = Clock::now();
      const int fd = ::open(job.path.c_str(), O_RDONLY | O_CLOEXEC);
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
        job.read += static_cast<std::uint64_t>(n);
        read_bytes += static_cast<std::uint64_t>(n);
      }
      if (fd >= 0) ::close(fd);
      job.state = 2;
      done_files++;
      std::lock_guard lock(out_mu);
      if (!ok) {
        failures++;
        std::fprintf(stderr, "%swheelhouse: %s: %s\n", tty ? "\r\033[K" : "", job.path.c_str(),
                     std::strerror(err));
      } else if (!tty) {
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        std::printf("fetched %s (%s) in %.2f s\n", job.path.c_str(), format_bytes(job.size).c_str(),
                    s);
        std::fflush(stdout);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, o.jobs); ++t) threads.emplace_back(worker);
  if (tty) {
    // Progress by bytes as they arrive: with verified serving a file reads back only once it
    // is whole and checked, so the bytes of a file being read come from the daemon's own
    // count of its transfer (wheelhouse status), redrawn four times a second.
    RecentRate recent;
    while (done_files < jobs.size()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      std::map<std::string, std::uint64_t> received;
      if (auto st = read_status(o.mountpoint); st) {
        for (const auto& t : st->value("transfers", nlohmann::json::array())) {
          received[t.value("path", "")] = t.value("received", std::uint64_t{0});
        }
      }
      std::uint64_t done = 0;
      for (const auto& j : jobs) {
        const int state = j.state.load();
        if (state == 2) {
          done += j.size;
        } else if (state == 1) {
          std::uint64_t got = j.read.load();
          if (const auto it = received.find(j.repo_path); it != received.end()) {
            got = std::max(got, it->second);
          }
          done += std::min(got, j.size);
        }
      }
      const auto now = Clock::now();
      recent.add(now, done);
      const double rate = recent.rate();
      const double frac = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
      const int width = 30;
      const int fill = std::min(width, static_cast<int>(frac * width));
      std::lock_guard lock(out_mu);
      std::fprintf(
          stderr, "\r\033[K[%s%s] %3.0f%% %s / %s  %s  ETA %s  (%zu/%zu files)",
          std::string(static_cast<std::size_t>(fill), '#').c_str(),
          std::string(static_cast<std::size_t>(width - fill), '.').c_str(), frac * 100,
          format_bytes(done).c_str(), format_bytes(total).c_str(), human_rate(rate).c_str(),
          human_duration(rate > 0 ? static_cast<double>(total - done) / rate : NAN).c_str(),
          done_files.load(), jobs.size());
    }
  }
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::string arrived;
  if (const auto after = received_total(); after && received_before) {
    arrived = "; the mount received " + format_bytes(*after - std::min(*after, *received_before));
  }
  std::fprintf(tty ? stderr : stdout, "%s%zu %s, %s in %.1f s (%s)%s%s\n", tty ? "\r\033[K" : "",
               jobs.size(), jobs.size() == 1 ? "file" : "files", format_bytes(read_bytes).c_str(),
               secs, human_rate(secs > 0 ? static_cast<double>(read_bytes) / secs : 0).c_str(),
               failures > 0 ? (", " + std::to_string(failures.load()) + " failed").c_str() : "",
               arrived.c_str());
  return failures > 0 ? kFailed : kOk;
}

}  // namespace whfs::cli
