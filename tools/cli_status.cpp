// wheelhouse status: a running mount's figures, read from its root's user.wheelhouse.status
// extended attribute (served by the daemon itself, so it is always current).

#include <sys/xattr.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "fs/common/units.h"
#include "tools/cli_commands.h"

namespace whfs::cli {

int run_status(const std::string& mountpoint, const CommonOptions& o) {
  const char* attr = "user.wheelhouse.status";
  const ssize_t n = ::getxattr(mountpoint.c_str(), attr, nullptr, 0);
  if (n < 0) {
    std::fprintf(
        stderr, "wheelhouse: %s is not a wheelhouse-fs mount (%s)\n", mountpoint.c_str(),
        errno == ENODATA || errno == ENOTSUP ? "no status attribute" : std::strerror(errno));
    return kNotOurs;
  }
  std::string buf(static_cast<std::size_t>(n), '\0');
  const ssize_t got = ::getxattr(mountpoint.c_str(), attr, buf.data(), buf.size());
  if (got < 0) {
    std::fprintf(stderr, "wheelhouse: reading the status of %s: %s\n", mountpoint.c_str(),
                 std::strerror(errno));
    return kFailed;
  }
  buf.resize(static_cast<std::size_t>(got));
  const auto j = nlohmann::json::parse(buf, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "wheelhouse: %s returned a malformed status\n", mountpoint.c_str());
    return kFailed;
  }
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return kOk;
  }
  auto num = [&](const nlohmann::json& obj, const char* k) -> std::uint64_t {
    return obj.contains(k) && obj[k].is_number() ? obj[k].get<std::uint64_t>() : 0;
  };
  std::printf("mount      %s (pid %llu, wheelhouse-fs %s)\n", mountpoint.c_str(),
              static_cast<unsigned long long>(num(j, "pid")), j.value("version", "?").c_str());
  std::printf("repository %s @ %s -> commit %s\n", j.value("repo", "?").c_str(),
              j.value("revision", "?").c_str(), j.value("commit", "?").c_str());
  std::printf("endpoint   %s%s\n", j.value("endpoint", "?").c_str(),
              j.value("offline", false)            ? " (offline)"
              : j.value("offline_fallback", false) ? " (unreachable at mount: serving the cache)"
                                                   : "");
  if (j.contains("targets") && j["targets"].is_object()) {
    const auto& t = j["targets"];
    std::string gpus;
    for (const auto& d : t.value("gpus", nlohmann::json::array())) {
      gpus += " " + d.value("arch", "?");
    }
    if (gpus.empty()) gpus = " none (" + t.value("gpu_error", "") + ")";
    std::printf("current    %s; GPUs:%s; %llu answers, %llu Python installs read\n",
                t.value("mode", "") == "mount" ? "the mount's own target for every process"
                                               : "follows each process",
                gpus.c_str(), static_cast<unsigned long long>(num(t, "resolves")),
                static_cast<unsigned long long>(num(t, "interpreter_reads")));
  }
  if (j.contains("cache")) {
    const auto& c = j["cache"];
    std::printf(
        "cache      %s: %s of %s, %llu files; hits %llu, misses %llu, evictions %llu, "
        "corrupt blocks %llu\n",
        c.value("dir", "?").c_str(), format_bytes(num(c, "used_bytes")).c_str(),
        format_bytes(num(c, "cap_bytes")).c_str(),
        static_cast<unsigned long long>(num(c, "contents")),
        static_cast<unsigned long long>(num(c, "hits")),
        static_cast<unsigned long long>(num(c, "misses")),
        static_cast<unsigned long long>(num(c, "evictions")),
        static_cast<unsigned long long>(num(c, "corrupt_blocks")));
  }
  if (j.contains("hub")) {
    const auto& h = j["hub"];
    std::printf("hub        %llu requests, %s fetched, %llu retries, %llu errors\n",
                static_cast<unsigned long long>(num(h, "requests")),
                format_bytes(num(h, "bytes")).c_str(),
                static_cast<unsigned long long>(num(h, "retries")),
                static_cast<unsigned long long>(num(h, "errors")));
  }
  if (j.contains("fetch")) {
    const auto& f = j["fetch"];
    std::printf(
        "reads      %llu downloads (%llu on demand, %llu ahead), %llu joined, %llu corrupt\n",
        static_cast<unsigned long long>(num(f, "requests")),
        static_cast<unsigned long long>(num(f, "demand")),
        static_cast<unsigned long long>(num(f, "prefetch")),
        static_cast<unsigned long long>(num(f, "joined")),
        static_cast<unsigned long long>(num(f, "corrupt")));
    std::printf("serving    %s; %llu verified in memory, %llu failed at once, %llu interrupted\n",
                j.value("serving", "?").c_str(),
                static_cast<unsigned long long>(num(f, "in_memory")),
                static_cast<unsigned long long>(num(f, "failed_fast")),
                static_cast<unsigned long long>(num(f, "interrupted")));
  }
  if (j.contains("recent_problems") && j["recent_problems"].is_array() &&
      !j["recent_problems"].empty()) {
    std::printf("last warnings and errors:\n");
    for (const auto& p : j["recent_problems"]) {
      if (p.is_string()) std::printf("  %s\n", p.get<std::string>().c_str());
    }
  }
  return kOk;
}

}  // namespace whfs::cli
