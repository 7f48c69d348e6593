// LmdbBlockCache: the maintenance calls of the CLI (stats, list, verify_all, clear). All of
// them work while other processes use the cache.

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>

#include "cache/guard.h"
#include "cache/lmdb_block_cache.h"

namespace whfs::cache {

// ---- maintenance -----------------------------------------------------------------------

Result<CacheStats> LmdbBlockCache::stats() {
  return guarded("cache stats", [&]() -> Result<CacheStats> {
    CacheStats st;
    auto ok = engine_.read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      for (auto [key, apply] :
           {std::pair<std::string_view, int>{kUsageKey, 0}, {kCountersKey, 1}, {kCapKey, 2}}) {
        auto v = rd.txn.get(engine_.dbs().meta, lmdb::as_bytes(key));
        if (!v) return lmdb::fail(v);
        if (!*v) continue;
        if (apply == 0) st.usage = decode_usage(**v).value_or(Usage{});
        if (apply == 1) st.counters = decode_counters(**v).value_or(Counters{});
        if (apply == 2) st.cap_bytes = decode_u64(**v).value_or(0);
      }
      return {};
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
    st.counters += quota_->pending_counters();
    st.map_bytes = engine_.map_size();
    st.block_size = block_size();
    st.second_hash_passes = verifier_.second_hash_passes();
    struct stat sb {};
    if (::lstat((options_.dir / "data.mdb").c_str(), &sb) == 0) {
      st.file_bytes = static_cast<std::uint64_t>(sb.st_size);
      st.disk_bytes = static_cast<std::uint64_t>(sb.st_blocks) * 512;
    }
    return st;
  });
}

Result<std::vector<ContentInfo>> LmdbBlockCache::list_contents() {
  return guarded("cache list", [&]() -> Result<std::vector<ContentInfo>> {
    std::vector<ContentInfo> out;
    auto ok = engine_.read([&](ReadTxnPool::Reader& rd) -> lmdb::Res<void> {
      out.clear();
      auto cur = lmdb::Cursor::open(rd.txn, engine_.dbs().contents);
      if (!cur) return lmdb::fail(cur);
      for (auto e = cur->first();; e = cur->next()) {
        if (!e) return lmdb::fail(e);
        if (!*e) return {};
        const auto id = content_id_from_key((*e)->key);
        const auto rec = decode_content((*e)->value);
        if (!id || !rec) continue;
        out.push_back({*id,
                       rec->size,
                       {rec->present, rec->total, rec->verified},
                       std::chrono::system_clock::time_point(
                           std::chrono::milliseconds(std::min(rec->last_access_ms, kMaxTimeMs)))});
      }
    });
    if (!ok) return Unexpected<CacheError>{ok.error()};
    return out;
  });
}

Result<VerifyReport> LmdbBlockCache::verify_all() {
  return guarded("cache verify_all", [&]() -> Result<VerifyReport> {
    auto contents = list_contents();
    if (!contents) return Unexpected<CacheError>{contents.error()};
    VerifyReport report;
    for (const ContentInfo& c : *contents) {
      if (!c.state.complete()) {
        ++report.incomplete;
        continue;
      }
      ++report.checked;
      auto r = verifier_.verify(c.id, c.size);
      if (!r && r.error().kind == CacheError::Kind::kCorrupt) {
        ++report.corrupt;
      } else if (!r) {
        return Unexpected<CacheError>{r.error()};
      } else if (!r->complete()) {
        --report.checked;  // blocks went bad or were evicted meanwhile
        ++report.incomplete;
      }
    }
    return report;
  });
}

Result<void> LmdbBlockCache::clear() {
  return guarded("cache clear", [&]() -> Result<void> {
    return engine_.write(
        0,
        [&](WriteScope& s) -> lmdb::Res<void> {
          for (lmdb::Dbi dbi : {engine_.dbs().blocks, engine_.dbs().contents, engine_.dbs().lru,
                                engine_.dbs().revisions, engine_.dbs().listings}) {
            if (auto r = s.txn.clear(dbi); !r) return r;
          }
          s.usage = Usage{};
          return {};
        },
        /*evicting=*/true);
  });
}

Result<void> BlockCache::remove_store(const std::filesystem::path& dir, const DirAccess& access) {
  return guarded("cache remove", [&] { return Session::remove_files(dir, access); });
}

}  // namespace whfs::cache
