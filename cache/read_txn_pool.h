#pragma once
// Reset read-only txns kept for reuse. Beginning a read txn from scratch takes LMDB's reader
// table mutex (shared by every process using the cache) to find a free slot; a reset txn
// keeps its slot, so renewing it takes no lock at all. With MDB_NOTLS a txn is not tied to a
// thread, so any FUSE worker can renew any pooled one. The pool is sharded by thread so that
// 16 readers do not queue on one mutex (measured: tests/bench/cache_bench).

#include <array>
#include <cstddef>
#include <mutex>
#include <vector>

#include "cache/lmdb.h"

namespace whfs::cache {

class ReadTxnPool {
 public:
  // A live read txn and a cursor on the pool's DB, bound to it.
  struct Reader {
    lmdb::Txn txn;
    lmdb::Cursor cursor;  // declared after txn: closed before the txn ends
  };

  ReadTxnPool(const lmdb::Env& env, lmdb::Dbi cursor_dbi, std::size_t max_idle_per_shard)
      : env_(env), dbi_(cursor_dbi), max_idle_(max_idle_per_shard) {}
  ~ReadTxnPool() { clear(); }
  ReadTxnPool(const ReadTxnPool&) = delete;
  ReadTxnPool& operator=(const ReadTxnPool&) = delete;

  lmdb::Res<Reader> acquire();
  void release(Reader&& reader);
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
  std::array<Shard, kShards> shards_;
};

}  // namespace whfs::cache
