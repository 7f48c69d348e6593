#pragma once
// A small RAII layer over the LMDB C API, for cache/ only (the only code that includes lmdb.h).
//
// - Env, Txn and Cursor are move-only owners; a Txn aborts in its destructor unless committed.
// - Dbi is a plain handle: LMDB keeps DB handles for the life of the env and mdb_dbi_close()
//   is unsafe while any txn may use the handle, so there is nothing to release.
// - A miss is std::nullopt / false; only a real LMDB failure is an Error.
// - Every byte span returned by get/seek points into the memory map (or into the write txn's
//   dirty pages) and is valid ONLY until its Txn ends or, for a write txn, until the next write.
// - A Cursor must be destroyed before its Txn ends (LMDB frees write-txn cursors at txn end).

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "cache/third_party/lmdb/lmdb.h"
#include "fs/common/expected.h"

namespace whfs::cache::lmdb {

using Bytes = std::span<const std::byte>;

// A failed LMDB (or system) call: its return code and which call.
struct Error {
  int code = 0;
  const char* where = "";

  std::string message() const;
  // The store's structure is damaged (as LMDB can tell): a reason to move the store aside.
  bool is_corruption() const;
};

template <class T>
using Res = Expected<T, Error>;

// The error of a failed Res (of any type) as one of another type: `return lmdb::fail(r);`.
template <class R>
Unexpected<Error> fail(const R& failed) {
  return {failed.error()};
}

inline Bytes as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}
inline std::string_view as_chars(Bytes b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

struct Entry {
  Bytes key;
  Bytes value;
};

struct Dbi {
  MDB_dbi handle = 0;
};

class Env {
 public:
  struct Config {
    std::size_t map_size = 0;  // 0: keep the size recorded in the store
    unsigned max_dbs = 16;
    unsigned max_readers = 126;
    unsigned flags = 0;  // MDB_* env flags
    mode_t mode = 0600;  // of the files LMDB creates
  };

  static Res<Env> open(const std::string& dir, const Config& config);

  Env() = default;
  ~Env();
  Env(Env&& other) noexcept;
  Env& operator=(Env&& other) noexcept;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;

  MDB_env* get() const { return env_; }
  explicit operator bool() const { return env_ != nullptr; }

  // Only while no txn of this process is active, and no other thread touches the map: LMDB
  // unmaps and maps it again. 0 adopts the size recorded in the store (what another process
  // grew it to).
  Res<void> set_map_size(std::size_t bytes);
  // Both kept here rather than asked of LMDB: mdb_env_info and mdb_env_stat read the meta
  // pages inside the map, which set_map_size may be unmapping in another thread (a crash
  // seen under load). The page size never changes; the map size changes only here.
  std::size_t map_size() const { return map_size_.load(std::memory_order_relaxed); }
  std::size_t page_size() const { return page_size_; }
  // Where the data file is mapped (valid while a txn of this process is active: a remap needs
  // none) and the data file's descriptor: a value read in a txn lies at (its address - map
  // address) in the file.
  const std::byte* map_address() const { return map_addr_.load(std::memory_order_relaxed); }
  int data_fd() const { return data_fd_; }
  Res<void> sync(bool force);
  // Clears reader slots of dead processes; returns how many.
  int reader_check() const;
  // A compacted copy of the store into `dir` (tests/unit/cache's golden fixture).
  Res<void> copy_compact(const std::string& dir) const;

 private:
  explicit Env(MDB_env* env) : env_(env) {}
  void learn_sizes();  // from LMDB, while no other thread can use this env
  MDB_env* env_ = nullptr;
  std::size_t page_size_ = 0;
  std::atomic<std::size_t> map_size_{0};
  std::atomic<const std::byte*> map_addr_{nullptr};
  int data_fd_ = -1;
};

class Txn {
 public:
  static Res<Txn> begin(const Env& env, unsigned flags);
  // Takes ownership of a live txn (the read-txn pool hands them out this way).
  static Txn adopt(MDB_txn* txn) { return Txn(txn); }

  Txn() = default;
  ~Txn() { abort(); }
  Txn(Txn&& other) noexcept : txn_(other.txn_) { other.txn_ = nullptr; }
  Txn& operator=(Txn&& other) noexcept;
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;

  MDB_txn* get() const { return txn_; }
  explicit operator bool() const { return txn_ != nullptr; }
  // Gives the txn back without ending it.
  MDB_txn* release() {
    MDB_txn* t = txn_;
    txn_ = nullptr;
    return t;
  }

  // The txn is gone afterwards whether or not the commit succeeded.
  Res<void> commit();
  void abort();
  // Read-only txns: reset() drops the snapshot but keeps the reader slot (no lock needed to
  // begin again); renew() takes a fresh snapshot. A failed renew leaves the txn reset.
  void reset();
  Res<void> renew();

  Res<Dbi> open_dbi(const char* name, unsigned flags);
  Res<std::optional<Bytes>> get(Dbi dbi, Bytes key) const;
  Res<void> put(Dbi dbi, Bytes key, Bytes value, unsigned flags = 0);
  // MDB_NOOVERWRITE|MDB_RESERVE: room for `size` bytes to fill before the next write in this
  // txn, or nullopt when the key exists already.
  Res<std::optional<std::span<std::byte>>> reserve_new(Dbi dbi, Bytes key, std::size_t size);
  // false when the key was not there.
  Res<bool> del(Dbi dbi, Bytes key);
  // Empties the DB (keeps it).
  Res<void> clear(Dbi dbi);
  Res<MDB_stat> stat(Dbi dbi) const;

 private:
  explicit Txn(MDB_txn* txn) : txn_(txn) {}
  MDB_txn* txn_ = nullptr;
};

class Cursor {
 public:
  static Res<Cursor> open(const Txn& txn, Dbi dbi);

  Cursor() = default;
  ~Cursor();
  Cursor(Cursor&& other) noexcept : cur_(other.cur_) { other.cur_ = nullptr; }
  Cursor& operator=(Cursor&& other) noexcept;
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;

  // Rebinds a read-only cursor to a renewed read-only txn.
  Res<void> renew(const Txn& txn);

  Res<std::optional<Entry>> first() { return move(MDB_FIRST); }
  Res<std::optional<Entry>> next() { return move(MDB_NEXT); }
  Res<std::optional<Entry>> current() { return move(MDB_GET_CURRENT); }
  // The first entry whose key is >= `key`.
  Res<std::optional<Entry>> seek(Bytes key);
  // Deletes the entry under the cursor; next() then returns the one after it.
  Res<void> del();

 private:
  explicit Cursor(MDB_cursor* cur) : cur_(cur) {}
  Res<std::optional<Entry>> move(MDB_cursor_op op);
  MDB_cursor* cur_ = nullptr;
};

}  // namespace whfs::cache::lmdb
