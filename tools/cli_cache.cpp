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
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cache/block_cache.h"
#include "fs/common/units.h"
#include "fs/options.h"
#include "fs/stats_json.h"
#include "tools/cli_commands.h"

namespace whfs::cli {
namespace {

std::string cache_dir_of(const CommonOptions& o) {
  if (!o.cache_dir.empty()) return o.cache_dir;
  return default_cache_dir([](const char* n) { return std::getenv(n); }, ::geteuid() == 0);
}

// The access of a cache shared with --cache-group, as the mount's cache_group= gives it: a
// member who does not own the directory opens it without changing any mode.
bool access_of(const CommonOptions& o, cache::DirAccess* access) {
  if (o.cache_group.empty()) return true;
  const group* g = ::getgrnam(o.cache_group.c_str());
  if (g == nullptr) {
    std::fprintf(stderr, "wheelhouse: --cache-group: no group named '%s'\n", o.cache_group.c_str());
    return false;
  }
  access->group = g->gr_gid;
  return true;
}

// Opens the cache with the cap it already has; reports the error itself.
std::unique_ptr<cache::BlockCache> open_cache(const CommonOptions& o, int* exit_code) {
  cache::Options co;
  co.dir = cache_dir_of(o);
  co.cap_bytes = 0;   // keep the cap the mount set
  co.repair = false;  // never move aside a cache that a mount may be using: say so instead
  if (co.dir.empty()) {
    std::fprintf(stderr, "wheelhouse: no cache directory: HOME is not set; give --cache-dir\n");
    *exit_code = kUsage;
    return nullptr;
  }
  if (!access_of(o, &co.access)) {
    *exit_code = kUsage;
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
  auto c = open_cache(o, &rc);
  if (!c) return rc;
  auto s = c->stats();
  if (!s) {
    std::fprintf(stderr, "wheelhouse: %s\n", s.error().message.c_str());
    return kFailed;
  }
  const nlohmann::json j = cache_stats_json(cache_dir_of(o), *s);
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  std::printf("cache        %s\n", cache_dir_of(o).c_str());
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
  auto c = open_cache(o, &rc);
  if (!c) return rc;
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
  }
  if (o.json) {
    std::cout << arr.dump(2) << "\n";
    return kOk;
  }
  std::printf("%-20s  %10s  %7s  %-8s  %s\n", "last access (UTC)", "size", "cached", "state",
              "content");
  for (const auto& e : *list) {
    const unsigned pct = e.state.total == 0 ? 100 : 100 * e.state.present / e.state.total;
    std::printf("%-20s  %10s  %6u%%  %-8s  %s\n", iso_time(e.last_access).c_str(),
                format_bytes(e.size).c_str(), pct,
                e.state.verified ? "verified" : (e.state.complete() ? "complete" : "partial"),
                e.id.to_string().c_str());
  }
  return kOk;
}

int run_cache_verify(const CommonOptions& o) {
  int rc = kOk;
  auto c = open_cache(o, &rc);
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
  auto c = open_cache(o, &rc);
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
  const std::string dir = cache_dir_of(o);
  if (dir.empty()) {
    std::fprintf(stderr, "wheelhouse: no cache directory: HOME is not set; give --cache-dir\n");
    return kUsage;
  }
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
  if (!access_of(o, &co.access)) return kUsage;
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
