#include "cache/read_txn_pool.h"

#include <functional>
#include <thread>
#include <utility>

namespace whfs::cache {

ReadTxnPool::Shard& ReadTxnPool::shard() {
  return shards_[std::hash<std::thread::id>{}(std::this_thread::get_id()) % kShards];
}

lmdb::Res<ReadTxnPool::Reader> ReadTxnPool::acquire() {
  Reader r;
  {
    Shard& s = shard();
    std::lock_guard lk(s.mu);
    if (!s.idle.empty()) {
      r = std::move(s.idle.back());
      s.idle.pop_back();
    }
  }
  if (r.txn) {
    if (auto ok = r.txn.renew(); !ok) return Unexpected<lmdb::Error>{ok.error()};
    if (auto ok = r.cursor.renew(r.txn); !ok) return Unexpected<lmdb::Error>{ok.error()};
    return r;
  }
  auto txn = lmdb::Txn::begin(env_, MDB_RDONLY);
  if (!txn) return Unexpected<lmdb::Error>{txn.error()};
  auto cur = lmdb::Cursor::open(*txn, dbi_);
  if (!cur) return Unexpected<lmdb::Error>{cur.error()};
  r.txn = std::move(*txn);
  r.cursor = std::move(*cur);
  return r;
}

void ReadTxnPool::release(Reader&& reader) {
  reader.txn.reset();
  Shard& s = shard();
  std::lock_guard lk(s.mu);
  if (s.idle.size() < max_idle_) s.idle.push_back(std::move(reader));
  // else: `reader` is destroyed in the caller (cursor, then txn), freeing its reader slot.
}

void ReadTxnPool::clear() {
  for (Shard& s : shards_) {
    std::vector<Reader> idle;
    {
      std::lock_guard lk(s.mu);
      idle.swap(s.idle);
    }
  }
}

}  // namespace whfs::cache
