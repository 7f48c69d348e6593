// wheelhouse cache stats|ls|verify|evict|clear: the block cache, also while a mount uses it
// (LMDB lets several processes share the directory).

#include <grp.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cache/block_cache.h"
#include "fs/common/units.h"
#include "fs/config/options.h"
#include "fs/config/stats_json.h"
#include "tools/cli/cli_commands.h"
#include "tools/cli/mount_select.h"

namespace whfs::cli {
namespace {

// The cache a command works on: --cache-dir, else the cache of the mount named by --mount
// (or, for evict, of the mount its paths are in), as the mount itself reports it (its
// directory, its group), else the default of wheelhousefs.
struct Target {
  std::string dir;
  std::string group;
  std::optional<nlohmann::json> mount;  // the mount's status when one was asked (for paths)
};

// The cache of the mount whose status is `st`.
bool cache_of_status(const std::string& mount, const nlohmann::json& st, const CommonOptions& o,
                     Target* t, int* exit_code) {
  t->mount = st;
  t->dir = st.value("cache_dir", "");
  t->group = o.cache_group.empty() ? st.value("cache_group", "") : o.cache_group;
  if (t->dir.empty()) {
    std::fprintf(stderr, "wheelhouse: %s runs without a cache\n", mount.c_str());
    *exit_code = kFailed;
    return false;
  }
  return true;
}

bool target_of(const CommonOptions& o, Target* t, int* exit_code) {
  if (!o.cache_dir.empty()) {
    t->dir = o.cache_dir;
    t->group = o.cache_group;
    return true;
  }
  const auto mounts = wheelhouse_mount_table();
  if (!o.mount.empty() || mounts.size() == 1) {
    // The mount named (its folder, or any path inside it), else the only one.
    auto m = choose_mount(o.mount, "wheelhouse cache --mount DIR");
    if (!m) {
      std::fprintf(stderr, "wheelhouse: --mount: %s\n", m.error().message.c_str());
      *exit_code = m.error().code;
      return false;
    }
    auto st = read_status_within(m->path);
    if (!st) {
      std::fprintf(stderr, "wheelhouse: %s%s\n", st.error().second.c_str(),
                   o.mount.empty() ? " (--cache-dir DIR names a cache instead)" : "");
      *exit_code = st.error().first;
      return false;
    }
    return cache_of_status(m->path, *st, o, t, exit_code);
  }
  if (mounts.size() > 1) {
    // Several mounts: theirs when they all share one cache, else name one.
    const auto probes = probe_mounts(mounts);
    const MountProbe* first = nullptr;
    bool one_cache = true;
    for (const auto& p : probes) {
      if (p.state != MountState::kLive) {
        one_cache = false;
        break;
      }
      if (first == nullptr) first = &p;
      one_cache = one_cache &&
                  p.status.value("cache_dir", "") == first->status.value("cache_dir", "x") &&
                  p.status.value("cache_group", "") == first->status.value("cache_group", "");
    }
    if (one_cache && first != nullptr) {
      return cache_of_status(first->mount.path, first->status, o, t, exit_code);
    }
    std::string list;
    for (const auto& p : probes) {
      list += "\n  " + describe(p) +
              (p.state == MountState::kLive ? "  cache " + p.status.value("cache_dir", "-") : "");
    }
    std::fprintf(stderr,
                 "wheelhouse: %zu wheelhouse mounts here, not with one cache; name one with "
                 "wheelhouse cache --mount DIR (or a cache with --cache-dir DIR):%s\n",
                 mounts.size(), list.c_str());
    *exit_code = kUsage;
    return false;
  }
  // No mount: the cache wheelhousefs would use.
  t->dir = default_cache_dir([](const char* n) { return std::getenv(n); }, ::geteuid() == 0);
  t->group = o.cache_group;
  if (t->dir.empty()) {
    std::fprintf(stderr, "wheelhouse: no cache directory: HOME is not set; give --cache-dir\n");
    *exit_code = kUsage;
    return false;
  }
  return true;
}

// The access of a cache shared with --cache-group, as the mount's cache_group= gives it: a
// member who does not own the directory opens it without changing any mode.
bool access_of(const std::string& group_name, cache::DirAccess* access) {
  if (group_name.empty()) return true;
  const group* g = ::getgrnam(group_name.c_str());
  if (g == nullptr) {
    std::fprintf(stderr, "wheelhouse: --cache-group: no group named '%s'\n", group_name.c_str());
    return false;
  }
  access->group = g->gr_gid;
  return true;
}

// Opens the cache with the cap it already has; reports the error itself. `inspect`: a cache
// that does not exist yet is an error, never created (stats, ls, verify change nothing).
std::unique_ptr<cache::BlockCache> open_cache(const Target& t, bool inspect, int* exit_code) {
  cache::Options co;
  co.dir = t.dir;
  co.cap_bytes = 0;   // keep the cap the mount set
  co.repair = false;  // never move aside a cache that a mount may be using: say so instead
  if (!access_of(t.group, &co.access)) {
    *exit_code = kUsage;
    return nullptr;
  }
  if (inspect && ::access((t.dir + "/data.mdb").c_str(), F_OK) != 0) {
    std::fprintf(stderr, "wheelhouse: no cache in %s (no mount has cached anything there)\n",
                 t.dir.c_str());
    *exit_code = kFailed;
    return nullptr;
  }
  auto c = cache::BlockCache::open(co);
  if (!c) {
    std::fprintf(stderr, "wheelhouse: cache %s: %s\n", co.dir.c_str(), c.error().message.c_str());
    if (c.error().kind == cache::CacheError::Kind::kFormat) {
      std::fprintf(stderr, "wheelhouse: `wheelhouse cache clear --cache-dir %s` empties it\n",
                   co.dir.c_str());
      *exit_code = kNotOurs;
    } else {
      *exit_code = kFailed;
    }
    return nullptr;
  }
  return std::move(c).value();
}

std::optional<cache::ContentId> content_of(const RemoteEntry& e) {
  if (e.is_lfs()) return cache::ContentId::from_hex(cache::ContentId::Kind::kSha256, e.lfs_sha256);
  return cache::ContentId::from_hex(cache::ContentId::Kind::kGitSha1, e.oid);
}

// The paths each content has in the mount's pinned tree, from the listings the cache holds
// (a file was listed before it was read, so every cached file of this commit is found).
std::map<std::string, std::vector<std::string>> paths_in_tree(
    cache::BlockCache& c, const std::optional<nlohmann::json>& status) {
  std::map<std::string, std::vector<std::string>> out;
  if (!status || !status->is_object()) return out;
  const nlohmann::json& mount = *status;
  const std::string endpoint = mount.value("endpoint", "");
  const std::string repo = mount.value("repo", "");
  const std::string commit = mount.value("commit", "");
  // The mount's own audiences (a mount of an older version: public only).
  std::vector<std::string> readable{std::string(cache::kPublicAudience)};
  if (const auto a = mount.find("audiences"); a != mount.end() && a->is_object() &&
                                              a->contains("readable") &&
                                              (*a)["readable"].is_array()) {
    readable.clear();
    for (const auto& r : (*a)["readable"]) {
      if (r.is_string()) readable.push_back(r.get<std::string>());
    }
  }
  std::vector<std::string> folders{""};
  std::size_t seen = 0;
  while (!folders.empty() && seen < 100000) {
    const std::string folder = std::move(folders.back());
    folders.pop_back();
    ++seen;
    auto l = c.get_listing(endpoint, repo, commit, folder, readable);
    if (!l || !*l) continue;
    for (const auto& e : **l) {
      if (e.is_dir()) {
        folders.push_back(e.path);
      } else if (auto id = content_of(e)) {
        out[id->to_string()].push_back(e.path);
      }
    }
  }
  return out;
}

std::string iso_time(std::chrono::system_clock::time_point t) {
  const std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

int run_cache_stats(const CommonOptions& o) {
  int rc = kOk;
  Target t;
  if (!target_of(o, &t, &rc)) return rc;
  auto c = open_cache(t, true, &rc);
  if (!c) return rc;
  auto s = c->stats();
  if (!s) {
    std::fprintf(stderr, "wheelhouse: %s\n", s.error().message.c_str());
    return kFailed;
  }
  const nlohmann::json j = cache_stats_json(t.dir, *s);
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  std::printf("cache        %s\n", t.dir.c_str());
  std::printf("used         %s of %s (%s of file data, on disk %s)\n",
              format_bytes(s->usage.footprint_bytes).c_str(), format_bytes(s->cap_bytes).c_str(),
              format_bytes(s->usage.payload_bytes).c_str(), format_bytes(s->disk_bytes).c_str());
  std::printf("contents     %llu files, %llu blocks of %u bytes\n",
              static_cast<unsigned long long>(s->usage.contents),
              static_cast<unsigned long long>(s->usage.blocks), s->block_size);
  std::printf("blocks read  %llu hits, %llu misses\n",
              static_cast<unsigned long long>(s->counters.hits),
              static_cast<unsigned long long>(s->counters.misses));
  std::printf("evicted      %llu files (%s)\n",
              static_cast<unsigned long long>(s->counters.evictions),
              format_bytes(s->counters.evicted_bytes).c_str());
  std::printf("corruption   %llu blocks, %llu files found and dropped\n",
              static_cast<unsigned long long>(s->counters.corrupt_blocks),
              static_cast<unsigned long long>(s->counters.corrupt_contents));
  return kOk;
}

int run_cache_ls(const CommonOptions& o) {
  int rc = kOk;
  Target t;
  if (!target_of(o, &t, &rc)) return rc;
  auto c = open_cache(t, true, &rc);
  if (!c) return rc;
  const auto paths = paths_in_tree(*c, t.mount);
  auto list = c->list_contents();
  if (!list) {
    std::fprintf(stderr, "wheelhouse: %s\n", list.error().message.c_str());
    return kFailed;
  }
  std::sort(list->begin(), list->end(),
            [](const auto& a, const auto& b) { return a.last_access < b.last_access; });
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& e : *list) {
    arr.push_back({{"id", e.id.to_string()},
                   {"size", e.size},
                   {"blocks", e.state.present},
                   {"total_blocks", e.state.total},
                   {"verified", e.state.verified},
                   {"last_access", iso_time(e.last_access)}});
    if (t.mount) {
      const auto it = paths.find(e.id.to_string());
      arr.back()["paths"] = it == paths.end() ? std::vector<std::string>{} : it->second;
    }
  }
  if (o.json) {
    std::cout << arr.dump(2) << "\n";
    return kOk;
  }
  std::printf("%-20s  %10s  %7s  %-8s  %s\n", "last access (UTC)", "size", "cached", "state",
              t.mount ? "path at the mount's commit (else the content)" : "content");
  for (const auto& e : *list) {
    const unsigned pct = e.state.total == 0 ? 100 : 100 * e.state.present / e.state.total;
    std::string what = e.id.to_string();
    if (const auto it = paths.find(what); it != paths.end()) {
      what = it->second.front();
      if (it->second.size() > 1) what += " (+" + std::to_string(it->second.size() - 1) + " more)";
    }
    std::printf("%-20s  %10s  %6u%%  %-8s  %s\n", iso_time(e.last_access).c_str(),
                format_bytes(e.size).c_str(), pct,
                e.state.verified ? "verified" : (e.state.complete() ? "complete" : "partial"),
                what.c_str());
  }
  return kOk;
}

int run_cache_verify(const CommonOptions& o) {
  int rc = kOk;
  Target t;
  if (!target_of(o, &t, &rc)) return rc;
  auto c = open_cache(t, true, &rc);
  if (!c) return rc;
  auto r = c->verify_all();
  if (!r) {
    std::fprintf(stderr, "wheelhouse: %s\n", r.error().message.c_str());
    return kFailed;
  }
  if (o.json) {
    std::cout << nlohmann::json{{"checked", r->checked},
                                {"corrupt", r->corrupt},
                                {"incomplete", r->incomplete}}
                     .dump(2)
              << "\n";
  } else {
    std::printf(
        "verified %llu complete files: %llu corrupt (dropped); %llu partial files not "
        "checked\n",
        static_cast<unsigned long long>(r->checked), static_cast<unsigned long long>(r->corrupt),
        static_cast<unsigned long long>(r->incomplete));
  }
  return r->corrupt > 0 ? kCorruptFound : kOk;
}

int run_cache_evict(const CommonOptions& o, const std::vector<std::string>& targets) {
  int rc = kOk;
  CommonOptions with_mount = o;
  if (o.cache_dir.empty() && o.mount.empty()) {
    // Paths in a mount evict from that mount's cache, not the default one.
    const auto mounts = wheelhouse_mount_table();
    for (const auto& p : targets) {
      if (cache::ContentId::parse(p)) continue;
      if (const auto m = mount_holding(p, mounts)) {
        with_mount.mount = m->path;
        break;
      }
    }
  }
  Target where;
  if (!target_of(with_mount, &where, &rc)) return rc;
  auto c = open_cache(where, true, &rc);
  if (!c) return rc;
  for (const auto& t : targets) {
    auto id = cache::ContentId::parse(t);
    if (!id) {
      // A file in a wheelhouse mount names its content in an extended attribute.
      char buf[128];
      ssize_t n = ::getxattr(t.c_str(), "user.wheelhouse.sha256", buf, sizeof buf);
      if (n == 64) {
        id = cache::ContentId::from_hex(cache::ContentId::Kind::kSha256, std::string(buf, 64));
      } else if ((n = ::getxattr(t.c_str(), "user.wheelhouse.oid", buf, sizeof buf)) == 40) {
        id = cache::ContentId::from_hex(cache::ContentId::Kind::kGitSha1, std::string(buf, 40));
      }
    }
    if (!id) {
      std::fprintf(stderr,
                   "wheelhouse: %s is neither a file of a wheelhouse mount nor a content "
                   "id (sha256:<64 hex> or gitsha1:<40 hex>)\n",
                   t.c_str());
      rc = kUsage;
      continue;
    }
    auto r = c->evict(*id);
    if (!r) {
      std::fprintf(stderr, "wheelhouse: evict %s: %s\n", t.c_str(), r.error().message.c_str());
      rc = kFailed;
    } else {
      std::printf("%s %s\n", *r ? "evicted" : "not cached:", t.c_str());
    }
  }
  return rc;
}

int run_cache_clear(const CommonOptions& o, bool yes, bool force) {
  int rc = kOk;
  Target t;
  if (!target_of(o, &t, &rc)) return rc;
  const std::string& dir = t.dir;
  if (!yes) {
    if (::isatty(STDIN_FILENO) == 0) {
      std::fprintf(stderr, "wheelhouse: `cache clear` empties %s; add --yes to confirm\n",
                   dir.c_str());
      return kUsage;
    }
    std::fprintf(stderr, "Empty the cache in %s? [y/N] ", dir.c_str());
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != "y" && answer != "Y" && answer != "yes") return kFailed;
  }
  cache::Options co;
  co.dir = dir;
  co.repair = false;
  if (!access_of(t.group, &co.access)) return kUsage;
  auto c = cache::BlockCache::open(co);
  if (!c) {
    if (c.error().kind != cache::CacheError::Kind::kFormat) {
      std::fprintf(stderr, "wheelhouse: cache %s: %s\n", dir.c_str(), c.error().message.c_str());
      return kFailed;
    }
    // A format this version cannot read: remove the store's files.
    if (auto r = cache::BlockCache::remove_store(dir, co.access); !r) {
      std::fprintf(stderr, "wheelhouse: %s\n", r.error().message.c_str());
      return kFailed;
    }
    std::printf("removed the cache of an unknown format in %s\n", dir.c_str());
    return kOk;
  }
  if ((*c)->in_use_by_others() && !force) {
    std::fprintf(stderr,
                 "wheelhouse: a mount (or another process) uses the cache in %s: not emptied; "
                 "--force empties it anyway (the mounts keep working and download again what "
                 "they read next)\n",
                 dir.c_str());
    return kFailed;
  }
  if (auto r = (*c)->clear(); !r) {
    std::fprintf(stderr, "wheelhouse: %s\n", r.error().message.c_str());
    return kFailed;
  }
  std::printf("emptied %s\n", dir.c_str());
  return kOk;
}

}  // namespace whfs::cli
