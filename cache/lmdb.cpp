#include "cache/lmdb.h"

#include <cerrno>
#include <utility>

namespace whfs::cache::lmdb {

namespace {

MDB_val to_val(Bytes b) {
  // LMDB memcpy()s even empty values: never hand it a null pointer.
  static const std::byte kEmpty{};
  return MDB_val{b.size(), const_cast<std::byte*>(b.data() != nullptr ? b.data() : &kEmpty)};
}

Bytes to_bytes(const MDB_val& v) { return {static_cast<const std::byte*>(v.mv_data), v.mv_size}; }

Unexpected<Error> fail(int rc, const char* where) { return {Error{rc, where}}; }

}  // namespace

std::string Error::message() const { return std::string(where) + ": " + mdb_strerror(code); }

bool Error::is_corruption() const {
  // (Not MDB_BAD_TXN: that is a txn this process may no longer use, e.g. after MDB_MAP_FULL,
  // and says nothing about the store that other processes use.)
  return code == MDB_CORRUPTED || code == MDB_PAGE_NOTFOUND || code == MDB_INVALID ||
         code == MDB_PANIC;
}

// ---- Env -------------------------------------------------------------------------------

Res<Env> Env::open(const std::string& dir, const Config& config) {
  MDB_env* raw = nullptr;
  if (int rc = mdb_env_create(&raw); rc != 0) return fail(rc, "mdb_env_create");
  Env env(raw);  // closes `raw` on every failure below
  if (int rc = mdb_env_set_maxdbs(raw, config.max_dbs); rc != 0) {
    return fail(rc, "mdb_env_set_maxdbs");
  }
  if (int rc = mdb_env_set_maxreaders(raw, config.max_readers); rc != 0) {
    return fail(rc, "mdb_env_set_maxreaders");
  }
  if (config.map_size != 0) {
    if (int rc = mdb_env_set_mapsize(raw, config.map_size); rc != 0) {
      return fail(rc, "mdb_env_set_mapsize");
    }
  }
  if (int rc = mdb_env_open(raw, dir.c_str(), config.flags, config.mode); rc != 0) {
    return fail(rc, "mdb_env_open");
  }
  env.learn_sizes();
  return env;
}

void Env::learn_sizes() {
  if (page_size_ == 0) {  // once, at open: other threads read it without a lock later
    MDB_stat st{};
    mdb_env_stat(env_, &st);
    page_size_ = st.ms_psize;
    mdb_filehandle_t fd = -1;
    if (mdb_env_get_fd(env_, &fd) == 0) data_fd_ = fd;
  }
  MDB_envinfo info{};
  mdb_env_info(env_, &info);
  map_size_.store(info.me_mapsize, std::memory_order_relaxed);
  map_addr_.store(static_cast<const std::byte*>(mdb_env_get_map(env_)), std::memory_order_relaxed);
}

Env::~Env() {
  if (env_ != nullptr) mdb_env_close(env_);
}

Env::Env(Env&& other) noexcept
    : env_(std::exchange(other.env_, nullptr)),
      page_size_(other.page_size_),
      map_size_(other.map_size_.load()),
      map_addr_(other.map_addr_.load()),
      data_fd_(other.data_fd_) {}

Env& Env::operator=(Env&& other) noexcept {
  if (this != &other) {
    if (env_ != nullptr) mdb_env_close(env_);
    env_ = std::exchange(other.env_, nullptr);
    page_size_ = other.page_size_;
    map_size_.store(other.map_size_.load());
    map_addr_.store(other.map_addr_.load());
    data_fd_ = other.data_fd_;
  }
  return *this;
}

Res<void> Env::set_map_size(std::size_t bytes) {
  if (int rc = mdb_env_set_mapsize(env_, bytes); rc != 0) return fail(rc, "mdb_env_set_mapsize");
  learn_sizes();  // LMDB may have rounded it up to the pages in use
  return {};
}

Res<void> Env::sync(bool force) {
  if (int rc = mdb_env_sync(env_, force ? 1 : 0); rc != 0) return fail(rc, "mdb_env_sync");
  return {};
}

int Env::reader_check() const {
  int dead = 0;
  mdb_reader_check(env_, &dead);
  return dead;
}

Res<void> Env::copy_compact(const std::string& dir) const {
  if (int rc = mdb_env_copy2(env_, dir.c_str(), MDB_CP_COMPACT); rc != 0) {
    return fail(rc, "mdb_env_copy2");
  }
  return {};
}

// ---- Txn -------------------------------------------------------------------------------

Res<Txn> Txn::begin(const Env& env, unsigned flags) {
  MDB_txn* raw = nullptr;
  if (int rc = mdb_txn_begin(env.get(), nullptr, flags, &raw); rc != 0) {
    return fail(rc, "mdb_txn_begin");
  }
  return Txn(raw);
}

Txn& Txn::operator=(Txn&& other) noexcept {
  if (this != &other) {
    abort();
    txn_ = std::exchange(other.txn_, nullptr);
  }
  return *this;
}

Res<void> Txn::commit() {
  // mdb_txn_commit frees the txn whether it succeeds or not.
  if (int rc = mdb_txn_commit(std::exchange(txn_, nullptr)); rc != 0) {
    return fail(rc, "mdb_txn_commit");
  }
  return {};
}

void Txn::abort() {
  if (txn_ != nullptr) mdb_txn_abort(std::exchange(txn_, nullptr));
}

void Txn::reset() { mdb_txn_reset(txn_); }

Res<void> Txn::renew() {
  if (int rc = mdb_txn_renew(txn_); rc != 0) return fail(rc, "mdb_txn_renew");
  return {};
}

Res<Dbi> Txn::open_dbi(const char* name, unsigned flags) {
  Dbi dbi;
  if (int rc = mdb_dbi_open(txn_, name, flags, &dbi.handle); rc != 0) {
    return fail(rc, "mdb_dbi_open");
  }
  return dbi;
}

Res<std::optional<Bytes>> Txn::get(Dbi dbi, Bytes key) const {
  MDB_val k = to_val(key);
  MDB_val v{};
  const int rc = mdb_get(txn_, dbi.handle, &k, &v);
  if (rc == MDB_NOTFOUND) return std::optional<Bytes>();
  if (rc != 0) return fail(rc, "mdb_get");
  return std::optional<Bytes>(to_bytes(v));
}

Res<void> Txn::put(Dbi dbi, Bytes key, Bytes value, unsigned flags) {
  MDB_val k = to_val(key);
  MDB_val v = to_val(value);
  if (int rc = mdb_put(txn_, dbi.handle, &k, &v, flags); rc != 0) return fail(rc, "mdb_put");
  return {};
}

Res<std::optional<std::span<std::byte>>> Txn::reserve_new(Dbi dbi, Bytes key, std::size_t size) {
  using Out = std::optional<std::span<std::byte>>;
  MDB_val k = to_val(key);
  MDB_val v{size, nullptr};
  const int rc = mdb_put(txn_, dbi.handle, &k, &v, MDB_NOOVERWRITE | MDB_RESERVE);
  if (rc == MDB_KEYEXIST) return Out();
  if (rc != 0) return fail(rc, "mdb_put");
  return Out(std::span<std::byte>(static_cast<std::byte*>(v.mv_data), size));
}

Res<bool> Txn::del(Dbi dbi, Bytes key) {
  MDB_val k = to_val(key);
  const int rc = mdb_del(txn_, dbi.handle, &k, nullptr);
  if (rc == MDB_NOTFOUND) return false;
  if (rc != 0) return fail(rc, "mdb_del");
  return true;
}

Res<void> Txn::clear(Dbi dbi) {
  if (int rc = mdb_drop(txn_, dbi.handle, 0); rc != 0) return fail(rc, "mdb_drop");
  return {};
}

Res<MDB_stat> Txn::stat(Dbi dbi) const {
  MDB_stat st{};
  if (int rc = mdb_stat(txn_, dbi.handle, &st); rc != 0) return fail(rc, "mdb_stat");
  return st;
}

// ---- Cursor ----------------------------------------------------------------------------

Res<Cursor> Cursor::open(const Txn& txn, Dbi dbi) {
  MDB_cursor* raw = nullptr;
  if (int rc = mdb_cursor_open(txn.get(), dbi.handle, &raw); rc != 0) {
    return fail(rc, "mdb_cursor_open");
  }
  return Cursor(raw);
}

Cursor::~Cursor() {
  if (cur_ != nullptr) mdb_cursor_close(cur_);
}

Cursor& Cursor::operator=(Cursor&& other) noexcept {
  if (this != &other) {
    if (cur_ != nullptr) mdb_cursor_close(cur_);
    cur_ = std::exchange(other.cur_, nullptr);
  }
  return *this;
}

Res<void> Cursor::renew(const Txn& txn) {
  if (int rc = mdb_cursor_renew(txn.get(), cur_); rc != 0) return fail(rc, "mdb_cursor_renew");
  return {};
}

Res<std::optional<Entry>> Cursor::seek(Bytes key) {
  MDB_val k = to_val(key);
  MDB_val v{};
  const int rc = mdb_cursor_get(cur_, &k, &v, MDB_SET_RANGE);
  if (rc == MDB_NOTFOUND) return std::optional<Entry>();
  if (rc != 0) return fail(rc, "mdb_cursor_get");
  return std::optional<Entry>(Entry{to_bytes(k), to_bytes(v)});
}

Res<std::optional<Entry>> Cursor::move(MDB_cursor_op op) {
  MDB_val k{};
  MDB_val v{};
  const int rc = mdb_cursor_get(cur_, &k, &v, op);
  if (rc == MDB_NOTFOUND) return std::optional<Entry>();
  if (rc != 0) return fail(rc, "mdb_cursor_get");
  return std::optional<Entry>(Entry{to_bytes(k), to_bytes(v)});
}

Res<void> Cursor::del() {
  if (int rc = mdb_cursor_del(cur_, 0); rc != 0) return fail(rc, "mdb_cursor_del");
  return {};
}

}  // namespace whfs::cache::lmdb
