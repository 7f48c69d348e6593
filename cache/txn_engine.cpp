// TxnEngine: the txn plumbing. Reads run in pooled read txns; writes carry the quota's pending
// in-memory updates, make room past its high-water mark, and turn MDB_MAP_FULL and
// MDB_MAP_RESIZED into eviction, map growth and retries.

#include "cache/txn_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <thread>
#include <utility>

#include "cache/quota.h"

namespace whfs::cache {

namespace {

// The cache's retries, each bounded here: a read is tried again only when another process
// grew the map meanwhile (MDB_MAP_RESIZED: the new size is adopted first); a write also after
// making room (eviction, a larger map, the eviction reserve) or adopting a new size.
constexpr int kReadAttempts = 3;
constexpr int kMaxWriteAttempts = 8;
constexpr std::size_t kIdleReadersPerShard = 1;  // 16 idle read txns at most

}  // namespace

TxnEngine::TxnEngine(const Options& options, Session& session, lmdb::Env env, const Dbs& dbs,
                     const BlockGeometry& geometry, std::uint64_t cap, bool read_only)
    : options_(options),
      session_(session),
      env_(std::move(env)),
      dbs_(dbs),
      geometry_(geometry),
      read_only_(read_only),
      readers_(env_, dbs_.blocks, kIdleReadersPerShard, options_.max_readers_per_process,
               session_.reader_table(), options_.lock_timeout),
      cap_bytes_(cap) {}

std::uint64_t TxnEngine::now_ms() const {
  const auto t = options_.clock ? options_.clock() : std::chrono::system_clock::now();
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
}

// ---- txn plumbing ----------------------------------------------------------------------

Result<void> TxnEngine::read(ReadBody body) {
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    lmdb::Res<void> r;
    {
      std::shared_lock lk(map_mutex_);
      auto reader = readers_.acquire();
      if (!reader) {
        r = Unexpected<lmdb::Error>{reader.error()};
      } else {
        r = body(*reader);
        readers_.release(std::move(*reader));
      }
    }
    if (r) return {};
    if (r.error().code != MDB_MAP_RESIZED) return Unexpected<CacheError>{to_error(r.error())};
    if (auto ok = adopt_map_size(); !ok) return ok;
  }
  return cache_error(CacheError::Kind::kLmdb, "cache: the map keeps being resized");
}

Result<void> TxnEngine::write(std::uint64_t need_bytes, WriteBody body, bool evicting) {
  if (read_only_) {
    return cache_error(CacheError::Kind::kReadOnly,
                       "cache " + options_.dir.string() + " is read-only");
  }
  bool emergency = false;
  Result<void> result =
      cache_error(CacheError::Kind::kFull,
                  "cache: no room in " + options_.dir.string() + " after evicting (pinned?)");
  int full = 0;  // MDB_MAP_FULL seen so far
  for (int attempt = 0; attempt < kMaxWriteAttempts; ++attempt) {
    bool over_high_water = false;
    auto r = write_once(need_bytes, body, &over_high_water);
    if (r && !over_high_water) {
      result = {};
      break;
    }
    if (over_high_water) {
      auto evicted = quota_->evict_until(quota_->room_target(cap_bytes_.load(), need_bytes));
      if (!evicted) {
        result = Unexpected<CacheError>{evicted.error()};
        break;
      }
      // Everything left is pinned: only the map's limit (MDB_MAP_FULL) applies from here.
      if (evicted->exhausted) need_bytes = 0;
    } else if (r.error().code == EBUSY) {
      result = cache_error(CacheError::Kind::kBusy,
                           "cache " + options_.dir.string() + ": another process has held its " +
                               "write lock for more than " +
                               std::to_string(options_.lock_timeout.count()) +
                               " ms (stopped?); not stored");
      break;
    } else if (r.error().code == MDB_MAP_RESIZED) {
      if (auto ok = adopt_map_size(); !ok) return ok;
    } else if (r.error().code == MDB_MAP_FULL && !evicting) {
      if (auto ok = make_room(need_bytes, full++); !ok) return ok;
    } else if (r.error().code == MDB_MAP_FULL && !emergency) {
      // An eviction that cannot get a page: let it use the reserve (see put_map_size).
      emergency = true;
      if (auto ok = set_map(full_map_size(cap_bytes_.load(), env_.page_size())); !ok) return ok;
    } else {
      result = Unexpected<CacheError>{to_error(r.error())};
      break;
    }
  }
  if (emergency) (void)set_map(put_map_size(cap_bytes_.load(), env_.page_size()));
  return result;
}

lmdb::Res<void> TxnEngine::write_once(std::uint64_t need_bytes, WriteBody body,
                                      bool* over_high_water) {
  std::shared_lock lk(map_mutex_);
  // One write txn at a time in the whole machine, by our own lock: no thread ever waits on
  // LMDB's writer mutex while another process (maybe in another PID namespace) holds it.
  ProcessLockGuard writer(session_.writer(), Clock::now() + options_.lock_timeout);
  if (!writer.owns()) return Unexpected<lmdb::Error>{lmdb::Error{EBUSY, "the cache write lock"}};
  auto txn = lmdb::Txn::begin(env_, 0);
  if (!txn) return Unexpected<lmdb::Error>{txn.error()};
  WriteScope scope{*txn, {}, {}, 0, now_ms()};
  auto usage = txn->get(dbs_.meta, lmdb::as_bytes(kUsageKey));
  if (!usage) return Unexpected<lmdb::Error>{usage.error()};
  if (*usage) {
    if (auto u = decode_usage(**usage)) {
      scope.usage = *u;
    } else {
      auto counted = count_usage(*txn);
      if (!counted) return Unexpected<lmdb::Error>{counted.error()};
      spdlog::warn("cache: unreadable usage record in {}; recounted", options_.dir.string());
      scope.usage = *counted;
    }
  }
  // The footprint is LMDB's own page count: exact, B-tree pages included, so the water marks
  // hold on the pages themselves (a tiny cap of one-page blocks has 5% in leaf pages).
  auto in_use = bytes_in_use(*txn);
  if (!in_use) return Unexpected<lmdb::Error>{in_use.error()};
  scope.usage.footprint_bytes = *in_use;
  auto cap = txn->get(dbs_.meta, lmdb::as_bytes(kCapKey));
  if (!cap) return Unexpected<lmdb::Error>{cap.error()};
  scope.cap = *cap ? decode_u64(**cap).value_or(Options::kDefaultCap) : Options::kDefaultCap;
  cap_bytes_ = scope.cap;
  if (need_bytes > 0 && scope.usage.footprint_bytes + need_bytes > quota_->high_water(scope.cap)) {
    *over_high_water = true;
    return {};  // the txn aborts; the caller evicts first
  }
  const Usage before = scope.usage;

  Quota::Pending pending = quota_->take_pending();
  // Pending recency and lease releases first: an eviction in `body` must see them.
  lmdb::Res<void> r = quota_->apply_pending(scope, pending);
  if (r) r = body(scope);
  if (r) {
    // Bodies track their own estimate as they go (for eviction's stop test); record the count.
    in_use = bytes_in_use(*txn);
    if (in_use) scope.usage.footprint_bytes = *in_use;
    if (!in_use) r = Unexpected<lmdb::Error>{in_use.error()};
  }
  if (r && !(before == scope.usage)) {
    r = txn->put(dbs_.meta, lmdb::as_bytes(kUsageKey), lmdb::as_bytes(encode(scope.usage)));
  }
  if (r && !(scope.counters == Counters{})) {
    Counters total;
    auto old = txn->get(dbs_.meta, lmdb::as_bytes(kCountersKey));
    if (!old) r = Unexpected<lmdb::Error>{old.error()};
    if (r && *old) total = decode_counters(**old).value_or(Counters{});
    total += scope.counters;
    if (r) r = txn->put(dbs_.meta, lmdb::as_bytes(kCountersKey), lmdb::as_bytes(encode(total)));
  }
  if (r) r = txn->commit();
  if (!r) {
    // Nothing was written: put the pending updates back for the next txn.
    quota_->restore_pending(std::move(pending));
  }
  return r;
}

lmdb::Res<std::uint64_t> TxnEngine::bytes_in_use(const lmdb::Txn& txn) {
  std::uint64_t pages = 0;
  for (lmdb::Dbi dbi : {dbs_.meta, dbs_.blocks, dbs_.contents, dbs_.lru, dbs_.leases,
                        dbs_.revisions, dbs_.listings, lmdb::Dbi{1} /* main */}) {
    auto st = txn.stat(dbi);
    if (!st) return Unexpected<lmdb::Error>{st.error()};
    pages += st->ms_branch_pages + st->ms_leaf_pages + st->ms_overflow_pages;
  }
  return pages * env_.page_size();
}

lmdb::Res<Usage> TxnEngine::count_usage(const lmdb::Txn& txn) {
  auto blocks = txn.stat(dbs_.blocks);
  if (!blocks) return Unexpected<lmdb::Error>{blocks.error()};
  auto contents = txn.stat(dbs_.contents);
  if (!contents) return Unexpected<lmdb::Error>{contents.error()};
  Usage u;
  u.blocks = blocks->ms_entries;
  u.contents = contents->ms_entries;
  u.payload_bytes = u.blocks * geometry_.block_size();  // an upper bound
  return u;
}

Result<void> TxnEngine::make_room(std::uint64_t need_bytes, int attempt) {
  readers_.reader_check();  // a dead process's stale snapshot pins freed pages
  const std::uint64_t cap = cap_bytes_.load();
  const std::uint64_t map = put_map_size(cap, env_.page_size());
  if (map > env_.map_size()) return set_map(map);  // another opener raised the cap
  auto usage = read_usage();
  if (!usage) return Unexpected<CacheError>{usage.error()};
  // The map is full although the blocks may be under the cap (free pages still held by
  // readers or freed too recently, fragmentation, B-tree pages): free more on every attempt.
  const std::uint64_t step = (need_bytes + cap / 32) * static_cast<std::uint64_t>(attempt + 1);
  const std::uint64_t target = std::min(
      quota_->low_water(cap), usage->footprint_bytes > step ? usage->footprint_bytes - step : 0);
  auto evicted = quota_->evict_until(target);
  if (!evicted) return Unexpected<CacheError>{evicted.error()};
  // Nothing evictable is final only the second time: the first MDB_MAP_FULL after an eviction
  // may just be its pages not being reusable yet (see below).
  if (evicted->bytes == 0 && evicted->exhausted && attempt > 0) {
    return cache_error(CacheError::Kind::kFull,
                       "cache: " + options_.dir.string() +
                           " is full and every content in it is pinned by an open file");
  }
  // LMDB reuses the pages a txn frees only two commits later (a reader may still be starting
  // on the previous snapshot): commit one small txn so that the retry can use them.
  (void)write(
      0,
      [&](WriteScope& s) {
        return s.txn.put(dbs_.meta, lmdb::as_bytes(kUsageKey), lmdb::as_bytes(encode(s.usage)));
      },
      /*evicting=*/true);
  return {};
}

Result<Usage> TxnEngine::read_usage() {
  Usage usage;
  auto ok = read([&](ReadTxnPool::Reader& r) -> lmdb::Res<void> {
    auto v = r.txn.get(dbs_.meta, lmdb::as_bytes(kUsageKey));
    if (!v) return Unexpected<lmdb::Error>{v.error()};
    if (*v) usage = decode_usage(**v).value_or(Usage{});
    return {};
  });
  if (!ok) return Unexpected<CacheError>{ok.error()};
  return usage;
}

Result<void> TxnEngine::adopt_map_size() {
  // Another process grew the data file past our map: LMDB rounds our size up to the pages in
  // use (and lets us remap only with no txn of ours active).
  return set_map(put_map_size(cap_bytes_.load(), env_.page_size()));
}

Result<void> TxnEngine::set_map(std::uint64_t bytes) {
  std::unique_lock lk(map_mutex_);
  if (auto ok = env_.set_map_size(bytes); !ok) return Unexpected<CacheError>{to_error(ok.error())};
  return {};
}

CacheError TxnEngine::to_error(const lmdb::Error& e) {
  if (e.code == MDB_MAP_FULL) return {CacheError::Kind::kFull, "cache: " + e.message()};
  if (e.code == EBUSY || e.code == MDB_READERS_FULL) {
    return {CacheError::Kind::kBusy, "cache " + options_.dir.string() + ": " + e.message()};
  }
  if (e.is_corruption()) note_corruption(e);
  return {CacheError::Kind::kLmdb, "cache " + options_.dir.string() + ": " + e.message()};
}

void TxnEngine::note_corruption(const lmdb::Error& e) {
  spdlog::error("cache: {} reports damage ({}); it will be checked at the next open",
                options_.dir.string(), e.message());
  session_.mark_suspect();
}

Result<void> TxnEngine::sync() {
  std::shared_lock lk(map_mutex_);  // (msync would touch the map; fdatasync does not)
  if (auto ok = env_.sync(true); !ok) return Unexpected<CacheError>{to_error(ok.error())};
  return {};
}

}  // namespace whfs::cache
