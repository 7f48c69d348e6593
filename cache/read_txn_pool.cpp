#include "cache/read_txn_pool.h"

#include <algorithm>
#include <cerrno>
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
  const Deadline deadline = Clock::now() + lock_timeout_;
  {
    std::unique_lock lk(live_mu_);
    if (!live_cv_.wait_until(lk, deadline, [&] { return live_ < max_live_; })) {
      return Unexpected<lmdb::Error>{lmdb::Error{EBUSY, "read txns of this process"}};
    }
    ++live_;
  }
  auto give_back = [&] {
    {
      std::lock_guard lk(live_mu_);
      --live_;
    }
    live_cv_.notify_one();
  };
  lmdb::Res<lmdb::Txn> txn = Unexpected<lmdb::Error>{lmdb::Error{EBUSY, "the reader table lock"}};
  {
    ProcessLockGuard slot(reader_table_, deadline);
    if (slot.owns()) txn = lmdb::Txn::begin(env_, MDB_RDONLY);
  }
  if (!txn) {
    give_back();
    return Unexpected<lmdb::Error>{txn.error()};
  }
  auto cur = lmdb::Cursor::open(*txn, dbi_);
  if (!cur) {
    txn->abort();
    give_back();
    return Unexpected<lmdb::Error>{cur.error()};
  }
  r.txn = std::move(*txn);
  r.cursor = std::move(*cur);
  return r;
}

void ReadTxnPool::release(Reader&& reader) {
  reader.txn.reset();
  {
    Shard& s = shard();
    std::lock_guard lk(s.mu);
    if (s.idle.size() < max_idle_) {
      s.idle.push_back(std::move(reader));
      return;
    }
  }
  // Not kept: the slot goes back to LMDB (cursor, then txn, in this order).
  reader.cursor = lmdb::Cursor();
  reader.txn.abort();
  {
    std::lock_guard lk(live_mu_);
    --live_;
  }
  live_cv_.notify_one();
}

int ReadTxnPool::reader_check() {
  ProcessLockGuard slot(reader_table_, Clock::now() + lock_timeout_);
  return slot.owns() ? env_.reader_check() : 0;
}

void ReadTxnPool::clear() {
  for (Shard& s : shards_) {
    std::vector<Reader> idle;
    {
      std::lock_guard lk(s.mu);
      idle.swap(s.idle);
    }
    std::lock_guard lk(live_mu_);
    live_ -= std::min(live_, idle.size());
  }
  live_cv_.notify_all();
}

}  // namespace whfs::cache
