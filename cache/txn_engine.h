#pragma once
// The txn and map machinery of the LMDB block cache (internal to cache/): pooled read txns,
// write txns that carry the quota's pending updates and make room past its high-water mark,
// and MDB_MAP_FULL / MDB_MAP_RESIZED turned into eviction, map growth and retries.

#include <atomic>
#include <cstdint>
#include <shared_mutex>

#include "cache/block_cache.h"
#include "cache/lmdb.h"
#include "cache/read_txn_pool.h"
#include "cache/records.h"
#include "cache/session.h"
#include "fs/common/function_ref.h"

namespace whfs::cache {

class Quota;

// The named DBs (records.h).
struct Dbs {
  lmdb::Dbi meta, blocks, contents, lru, leases, revisions, listings;
};

// What a write txn body works with; usage and counters are saved before the commit.
struct WriteScope {
  lmdb::Txn& txn;
  Usage usage;
  Counters counters;  // deltas
  std::uint64_t cap = 0;
  std::uint64_t now_ms = 0;
};
using WriteBody = FunctionRef<lmdb::Res<void>(WriteScope&)>;
using ReadBody = FunctionRef<lmdb::Res<void>(ReadTxnPool::Reader&)>;

class TxnEngine {
 public:
  // `session` outlives the engine; `read_only`: no write txn ever.
  TxnEngine(const Options& options, Session& session, lmdb::Env env, const Dbs& dbs,
            const BlockGeometry& geometry, std::uint64_t cap, bool read_only);
  TxnEngine(const TxnEngine&) = delete;
  TxnEngine& operator=(const TxnEngine&) = delete;

  // The quota whose pending updates ride with every write txn, and which evicts (set once,
  // before the first write).
  void set_quota(Quota* quota) { quota_ = quota; }

  // Runs `body` in one read txn; adopts a map grown by another process and retries.
  Result<void> read(ReadBody body);
  // Runs `body` in one write txn with the pending updates and commits it. `need_bytes` > 0
  // makes room first when the cache is past its high-water mark. MDB_MAP_FULL is handled
  // here (grow the map to the cap, or evict, and retry) and never returned; kFull when
  // nothing can be evicted.
  // An eviction's own txn (`evicting`) never evicts in turn: it fails with kFull instead.
  Result<void> write(std::uint64_t need_bytes, WriteBody body, bool evicting = false);
  // Syncs the data file to disk.
  Result<void> sync();
  // Ends the idle read txns (before the session closes).
  void close_readers() { readers_.clear(); }

  const Dbs& dbs() const { return dbs_; }
  std::uint64_t map_size() const { return env_.map_size(); }
  const lmdb::Env& env() const { return env_; }
  std::uint64_t cap() const { return cap_bytes_.load(); }
  std::uint64_t now_ms() const;

 private:
  lmdb::Res<void> write_once(std::uint64_t need_bytes, WriteBody body, bool* over_high_water);
  Result<void> make_room(std::uint64_t need_bytes, int attempt);
  Result<void> adopt_map_size();
  // Remaps to `bytes` (LMDB rounds up to the pages in use) under the exclusive map lock.
  Result<void> set_map(std::uint64_t bytes);
  Result<Usage> read_usage();
  CacheError to_error(const lmdb::Error& e);
  void note_corruption(const lmdb::Error& e);
  // Usage from LMDB's own page counts, when the usage record is unreadable.
  lmdb::Res<Usage> count_usage(const lmdb::Txn& txn);
  // Pages of every DB (B-tree and overflow pages), in bytes.
  lmdb::Res<std::uint64_t> bytes_in_use(const lmdb::Txn& txn);

  const Options& options_;
  Session& session_;
  lmdb::Env env_;
  const Dbs dbs_;
  const BlockGeometry geometry_;
  const bool read_only_;
  Quota* quota_ = nullptr;
  // Shared for every txn and every LMDB call that reads the map, exclusive to remap
  // (lmdb::Env keeps the page and map sizes so that asking needs none).
  std::shared_mutex map_mutex_;
  ReadTxnPool readers_;  // after env_: destroyed (txns ended) before the env closes
  std::atomic<std::uint64_t> cap_bytes_{0};  // as stored; refreshed by every write txn
};

}  // namespace whfs::cache
