#pragma once
// Reset read-only txns kept for reuse. Beginning a read txn from scratch takes LMDB's reader
// table mutex (shared by every process using the cache) to find a free slot; a reset txn
// keeps its slot, so renewing it takes no lock at all. With MDB_NOTLS a txn is not tied to a
// thread, so any FUSE worker can renew any pooled one. The pool is sharded by thread so that
// 16 readers do not queue on one mutex (tests/bench/cache_bench shows it).

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <vector>

#include "cache/lmdb.h"
#include "cache/process_lock.h"

namespace whfs::cache {

class ReadTxnPool {
 public:
  // A live read txn and a cursor on the pool's DB, bound to it.
  struct Reader {
    lmdb::Txn txn;
    lmdb::Cursor cursor;  // declared after txn: closed before the txn ends
  };

  // A new txn takes a slot in LMDB's reader table, shared by every process using the cache
  // (max_readers in all): this process holds at most `max_live` txns at once (idle or in use),
  // and claims each new slot under `reader_table` (see session.h), waiting at most
  // `lock_timeout` for either.
  ReadTxnPool(const lmdb::Env& env, lmdb::Dbi cursor_dbi, std::size_t max_idle_per_shard,
              std::size_t max_live, ProcessLock& reader_table,
              std::chrono::milliseconds lock_timeout)
      : env_(env),
        dbi_(cursor_dbi),
        max_idle_(max_idle_per_shard),
        max_live_(max_live),
        reader_table_(reader_table),
        lock_timeout_(lock_timeout) {}
  ~ReadTxnPool() { clear(); }
  ReadTxnPool(const ReadTxnPool&) = delete;
  ReadTxnPool& operator=(const ReadTxnPool&) = delete;

  // EBUSY (as an lmdb::Error) when no txn could be had in time.
  lmdb::Res<Reader> acquire();
  void release(Reader&& reader);
  // Clears reader slots of dead processes (under the reader-table lock); how many.
  int reader_check();
  // Ends every idle txn (before the env closes).
  void clear();

 private:
  static constexpr std::size_t kShards = 16;
  struct alignas(64) Shard {
    std::mutex mu;  // guards idle; a leaf lock held for one push or pop
    std::vector<Reader> idle;
  };
  Shard& shard();

  const lmdb::Env& env_;
  const lmdb::Dbi dbi_;
  const std::size_t max_idle_;
  const std::size_t max_live_;
  ProcessLock& reader_table_;
  const std::chrono::milliseconds lock_timeout_;
  std::array<Shard, kShards> shards_;
  std::mutex live_mu_;  // guards live_; a leaf lock
  std::condition_variable live_cv_;
  std::size_t live_ = 0;  // txns that hold a reader slot: idle or in use
};

}  // namespace whfs::cache
