// wheelhouse status: a running mount's figures, read from its root's user.wheelhouse.status
// extended attribute (served by the daemon itself, so it is always current): the transfers in
// flight, the reads, the Hub and the cache, the last distinct problems. --watch redraws it
// every second (like top); --json gives the same facts for scripts.

#include <fmt/format.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "fs/common/units.h"
#include "tools/cli/cli_commands.h"
#include "tools/cli/mount_select.h"
#include "tools/cli/status_reader.h"

namespace whfs::cli {
namespace {

using ull = unsigned long long;

std::uint64_t num(const nlohmann::json& obj, const char* k) {
  if (!obj.is_object()) return 0;
  const auto it = obj.find(k);
  if (it == obj.end()) return 0;
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  if (it->is_number())
    return it->get<double>() > 0 ? static_cast<std::uint64_t>(it->get<double>()) : 0;
  return 0;
}

std::string ago(std::int64_t then, std::int64_t now) {
  if (then <= 0) return "?";
  return human_duration(static_cast<double>(now - then)) + " ago";
}

std::string local_time(std::int64_t t) {
  const std::time_t tt = t;
  std::tm tm{};
  ::localtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string plural(std::uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string percent(std::uint64_t part, std::uint64_t whole) {
  if (whole == 0) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.1f%%",
                100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return buf;
}

void print_status(const std::string& mountpoint, const nlohmann::json& j) {
  const auto now = static_cast<std::int64_t>(num(j, "now"));
  const auto mounted = static_cast<std::int64_t>(num(j, "mounted_at"));
  std::printf("mount      %s (pid %llu, wheelhouse-fs %s), up %s\n", mountpoint.c_str(),
              static_cast<ull>(num(j, "pid")), j.value("version", "?").c_str(),
              mounted > 0 ? human_duration(static_cast<double>(now - mounted)).c_str() : "?");
  const std::string commit = j.value("commit", "?");
  const auto commit_time = static_cast<std::int64_t>(num(j, "commit_time"));
  std::printf("repository %s @ %s -> commit %s%s\n", j.value("repo", "?").c_str(),
              j.value("revision", "?").c_str(), commit.c_str(),
              commit_time > 0
                  ? (" (of " + local_time(commit_time) + ", " + ago(commit_time, now) + ")").c_str()
                  : "");
  if (j.contains("last_refresh") && j["last_refresh"].is_object()) {
    const auto& r = j["last_refresh"];
    const auto at = static_cast<std::int64_t>(num(r, "at"));
    std::printf("refreshed  %s (%s): %s\n", local_time(at).c_str(), ago(at, now).c_str(),
                r.value("result", "").c_str());
  } else {
    std::printf("refreshed  not since the mount (SIGHUP or refresh= looks for a new commit)\n");
  }
  std::printf("endpoint   %s%s\n", j.value("endpoint", "?").c_str(),
              j.value("offline", false)            ? " (offline)"
              : j.value("offline_fallback", false) ? " (unreachable at mount: serving the cache)"
                                                   : "");
  if (j.contains("metrics") && j["metrics"].is_string()) {
    std::printf("metrics    %s\n", j["metrics"].get<std::string>().c_str());
  }
  if (j.contains("targets") && j["targets"].is_object()) {
    const auto& t = j["targets"];
    std::string gpus;
    for (const auto& d : t.value("gpus", nlohmann::json::array())) {
      gpus += " " + d.value("arch", "?");
    }
    if (gpus.empty()) gpus = " none (" + t.value("gpu_error", "") + ")";
    std::printf("current    %s; GPUs:%s; %s, %s read\n",
                t.value("mode", "") == "mount" ? "the mount's own target for every process"
                                               : "follows each process",
                gpus.c_str(), plural(num(t, "resolves"), "answer", "answers").c_str(),
                plural(num(t, "interpreter_reads"), "Python install", "Python installs").c_str());
  }

  const auto transfers = j.value("transfers", nlohmann::json::array());
  std::printf("transfers  %s in flight\n",
              transfers.empty() ? "none" : std::to_string(transfers.size()).c_str());
  for (const auto& t : transfers) {
    const std::uint64_t size = num(t, "size");
    const std::uint64_t got = num(t, "received");
    std::printf("  %s  %s / %s %s  %s  %s, %s waiting\n", t.value("path", "?").c_str(),
                format_bytes(got).c_str(), format_bytes(size).c_str(),
                percent(std::min(got, size), size).c_str(),
                human_rate(static_cast<double>(num(t, "rate"))).c_str(),
                plural(num(t, "connections"), "connection", "connections").c_str(),
                plural(num(t, "readers"), "reader", "readers").c_str());
  }
  // (fmt: these lines carry many counters, and "{}" needs no cast per integer.)
  if (j.contains("reads")) {
    const auto& r = j["reads"];
    const std::uint64_t reads = num(r, "reads");
    fmt::print(
        "reads      {} reached the daemon: {} hits ({}, served at once), {} misses "
        "(waited for a download), {} errors\n",
        reads, num(r, "hits"), percent(num(r, "hits"), reads), num(r, "misses"), num(r, "errors"));
  }
  if (j.contains("fetch")) {
    const auto& f = j["fetch"];
    const std::uint64_t demand = num(f, "demand");
    const std::uint64_t ahead = num(f, "prefetch");
    fmt::print(
        "downloads  {} ({} for readers, {} ahead); {} ranged GETs done, {}; {} reads joined one "
        "in flight, {} failed their hash\n",
        plural(demand + ahead, "download", "downloads"), demand, ahead, num(f, "requests"),
        format_bytes(num(f, "bytes")), num(f, "joined"), num(f, "corrupt"));
    fmt::print("serving    {}; {} verified in memory, {} failed at once, {} interrupted\n",
               j.value("serving", "?"), num(f, "in_memory"), num(f, "failed_fast"),
               num(f, "interrupted"));
  }
  if (j.contains("hub")) {
    const auto& h = j["hub"];
    const std::uint64_t cdn = num(h, "cdn_requests");
    const std::uint64_t all = num(h, "requests");
    const std::string sent =
        fmt::format("{} requests to the Hub, {} to the CDN, {} received",
                    all >= cdn ? all - cdn : 0, cdn, format_bytes(num(h, "bytes")));
    const std::string failed = fmt::format("{} retries ({} stalls), {} errors", num(h, "retries"),
                                           num(h, "stalls"), num(h, "errors"));
    std::printf("http       %s; %s\n", sent.c_str(), failed.c_str());
  }
  if (j.contains("cache")) {
    const auto& c = j["cache"];
    std::printf(
        "cache      %s: %s of %s, %s; block lookups %llu hits, %llu misses; %llu evictions, "
        "%llu corrupt blocks\n",
        c.value("dir", "?").c_str(), format_bytes(num(c, "used_bytes")).c_str(),
        format_bytes(num(c, "cap_bytes")).c_str(),
        plural(num(c, "contents"), "file", "files").c_str(), static_cast<ull>(num(c, "hits")),
        static_cast<ull>(num(c, "misses")), static_cast<ull>(num(c, "evictions")),
        static_cast<ull>(num(c, "corrupt_blocks")));
  }
  if (j.contains("cache_trust") && j["cache_trust"].is_object()) {
    std::printf("trust      %s; %s\n", j["cache_trust"].value("why", "?").c_str(),
                plural(num(j.value("fetch", nlohmann::json::object()), "rechecks"),
                       "content hashed by this daemon", "contents hashed by this daemon")
                    .c_str());
  }
  const auto problems = j.value("recent_problems", nlohmann::json::array());
  if (!problems.empty()) {
    std::printf("last warnings and errors (the latest last):\n");
    for (const auto& p : problems) {
      if (!p.is_object()) continue;
      const std::uint64_t count = num(p, "count");
      std::printf(
          "  %s %s%s: %s\n", p.value("last", "").c_str(), p.value("level", "").c_str(),
          count > 1
              ? (" (x" + std::to_string(count) + " since " + p.value("first", "") + ")").c_str()
              : "",
          p.value("message", "").c_str());
    }
  }
}

volatile std::sig_atomic_t g_stop = 0;

}  // namespace

int run_status(const std::string& mountpoint_arg, const CommonOptions& o, bool watch) {
  auto chosen = choose_mount(mountpoint_arg, "wheelhouse status DIR");
  if (!chosen) {
    std::fprintf(stderr, "wheelhouse: %s\n", chosen.error().message.c_str());
    return chosen.error().code;
  }
  const std::string mountpoint = chosen->path;
  if (watch) {
    std::signal(SIGINT, [](int) { g_stop = 1; });
    std::signal(SIGTERM, [](int) { g_stop = 1; });
  }
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  do {
    auto j = read_status(mountpoint);
    if (!j) {
      std::fprintf(stderr, "wheelhouse: %s\n", j.error().second.c_str());
      return j.error().first;
    }
    if (o.json) {
      // --watch --json: one object per line (JSON lines), for a script to follow.
      std::printf("%s\n", watch ? j->dump().c_str() : j->dump(2).c_str());
    } else {
      if (watch && tty) std::printf("\033[H\033[2J");  // top's redraw: home, clear
      print_status(mountpoint, *j);
      if (watch && !tty) std::printf("\n");
    }
    std::fflush(stdout);
    if (!watch) break;
    for (int i = 0; i < 10 && g_stop == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } while (g_stop == 0);
  return kOk;
}

}  // namespace whfs::cli
