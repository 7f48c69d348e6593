// Opening the LMDB block cache's store: the session, the env, the format record, the cap and
// the map size (the flags are explained in lmdb_block_cache.h).

#include "cache/store_open.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <system_error>
#include <thread>
#include <utility>

#include "cache/guard.h"

namespace whfs::cache {

namespace fs = std::filesystem;

namespace {

constexpr unsigned kEnvFlags = MDB_NOSYNC | MDB_NOTLS;

std::uint64_t os_page() { return static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)); }

Unexpected<CacheError> format_error(const fs::path& dir, const std::string& found) {
  return cache_error(CacheError::Kind::kFormat,
                     "cache directory " + dir.string() + " holds " + found +
                         ", not the format this wheelhouse-fs understands (" +
                         std::string(kFormatName) +
                         "); clear it with `wheelhouse cache clear "
                         "--cache-dir " +
                         dir.string() + "`");
}

Result<void> validate(const Options& o) {
  auto bad = [](const std::string& m) {
    return cache_error(CacheError::Kind::kInvalidArgument, m);
  };
  if (o.dir.empty()) return bad("cache: no directory given");
  if (o.cap_bytes != 0 && o.cap_bytes < (std::uint64_t{1} << 20)) {
    return bad("cache: the size cap must be at least 1 MiB");
  }
  if (o.block_pages == 0 || o.block_pages > 4096) return bad("cache: block_pages out of range");
  if (o.low_water_percent == 0 || o.low_water_percent >= o.high_water_percent ||
      o.high_water_percent > 100) {
    return bad("cache: need 0 < low_water_percent < high_water_percent <= 100");
  }
  if (o.evict_batch_blocks == 0) return bad("cache: evict_batch_blocks must be positive");
  return {};
}

// Opens the DBs, creates or checks the format record, records the cap and sizes the map.
// `shared_now`: the store is shared with a group, or was found writable by others than this
// user; recorded once (meta "shared") so that a store made private later is still known to
// hold what others may have written.
Result<StoreInit> init_store(lmdb::Env& env, const Options& options, Session& session,
                             bool shared_now);
Result<StoreInit> init_store_txn(lmdb::Env& env, const Options& options, bool write_cap,
                                 bool shared_now, int* lmdb_code);
Result<StoreInit> init_read_only(lmdb::Env& env, const Options& options);
// Opens (with `flags`: MDB_CREATE or 0) every named DB; `failed` names the one that failed.
lmdb::Res<void> open_dbs(lmdb::Txn& txn, unsigned flags, Dbs* dbs, const char** failed = nullptr);

Result<OpenedStore> open_read_only(const Options& options) {
  // Never written, locked or moved aside: no session, no cap, no map growth. On a read-only
  // filesystem LMDB itself uses no lock file.
  lmdb::Env::Config config;
  config.map_size = 0;
  config.max_dbs = 16;
  config.max_readers = options.max_readers;
  config.flags = MDB_RDONLY | MDB_NOTLS;
  // A root daemon parses no data file that others than root (or the group) could have made.
  if (auto ok = check_read_only_store(options.dir, options.access); !ok) {
    return Unexpected<CacheError>{ok.error()};
  }
  auto env = lmdb::Env::open(options.dir.string(), config);
  if (!env) {
    return cache_error(CacheError::Kind::kLmdb,
                       "read-only cache " + options.dir.string() + ": " + env.error().message());
  }
  auto init = init_read_only(*env, options);
  if (!init) return Unexpected<CacheError>{init.error()};
  return OpenedStore{Session::read_only(options.dir), std::move(*env), *init, /*read_only=*/true};
}

Result<StoreInit> init_read_only(lmdb::Env& env, const Options& options) {
  auto fail = [&](const lmdb::Error& e) {
    return cache_error(CacheError::Kind::kLmdb,
                       "read-only cache " + options.dir.string() + ": " + e.message());
  };
  auto txn = lmdb::Txn::begin(env, MDB_RDONLY);
  if (!txn) return fail(txn.error());
  StoreInit init;
  const char* missing = nullptr;
  if (!open_dbs(*txn, 0, &init.dbs, &missing)) {
    return format_error(options.dir, "no wheelhouse-fs cache (" + std::string(missing) + ")");
  }
  auto stored = txn->get(init.dbs.meta, lmdb::as_bytes(kFormatKey));
  if (!stored) return fail(stored.error());
  if (!*stored) return format_error(options.dir, "an LMDB store without a format");
  auto format = decode_format(**stored);
  if (!format || format->name != kFormatName || format->page_size != env.page_size() ||
      format->block_size == 0) {
    return format_error(options.dir, "another format");
  }
  init.geometry = BlockGeometry(format->block_size, format->page_size);
  auto cap = txn->get(init.dbs.meta, lmdb::as_bytes(kCapKey));
  if (!cap) return fail(cap.error());
  init.cap = *cap ? decode_u64(**cap).value_or(Options::kDefaultCap) : Options::kDefaultCap;
  // DB handles opened in a txn are usable by later txns only once it commits (read-only too).
  if (auto ok = txn->commit(); !ok) return fail(ok.error());
  return init;
}

lmdb::Res<void> open_dbs(lmdb::Txn& txn, unsigned flags, Dbs* dbs, const char** failed) {
  const std::pair<const char*, lmdb::Dbi*> named[] = {
      {kMetaDb, &dbs->meta},        {kBlocksDb, &dbs->blocks}, {kContentsDb, &dbs->contents},
      {kLruDb, &dbs->lru},          {kLeasesDb, &dbs->leases}, {kRevisionsDb, &dbs->revisions},
      {kListingsDb, &dbs->listings}};
  for (const auto& [name, dbi] : named) {
    auto opened = txn.open_dbi(name, flags);
    if (!opened) {
      if (failed) *failed = name;
      return Unexpected<lmdb::Error>{opened.error()};
    }
    *dbi = *opened;
  }
  return {};
}

Result<OpenedStore> open_once(const Options& options, Session& session) {
  // LMDB opens its files by name (and refuses what is not a regular file with one link, our
  // patch in third_party/lmdb): say clearly what is wrong before it does.
  struct stat data {};
  auto exists = check_cache_entry(session.dir_fd(), options.dir, "data.mdb", &data);
  if (!exists) return Unexpected<CacheError>{exists.error()};
  if (auto lock = check_cache_entry(session.dir_fd(), options.dir, "lock.mdb"); !lock) {
    return Unexpected<CacheError>{lock.error()};
  }
  // Before its mode is set again below: whether anyone but this user could write the data
  // file so far (a group it was shared with, or a mode an older version or a umask gave it).
  const bool data_private = !*exists || (data.st_uid == ::geteuid() && (data.st_mode & 0077) == 0);
  auto claims = open_cache_file(session.dir_fd(), options.dir, "downloads.lock", O_RDWR | O_CREAT,
                                options.access);
  if (!claims && claims.error().kind == CacheError::Kind::kAccess) {
    return Unexpected<CacheError>{claims.error()};
  }
  lmdb::Env::Config config;
  // An existing store keeps its recorded map size until its cap is known (init_store).
  const std::uint64_t cap = options.cap_bytes ? options.cap_bytes : Options::kDefaultCap;
  config.map_size =
      options.cap_bytes || !*exists || data.st_size == 0 ? put_map_size(cap, os_page()) : 0;
  config.max_dbs = 16;
  config.max_readers = options.max_readers;
  config.flags = kEnvFlags;
  config.mode = file_mode(options.access);
  auto env = lmdb::Env::open(options.dir.string(), config);
  if (!env) {
    const lmdb::Error& e = env.error();
    if (e.code == MDB_VERSION_MISMATCH) {
      return format_error(options.dir, "an LMDB store of another LMDB version");
    }
    const auto kind = e.is_corruption() ? CacheError::Kind::kCorrupt : CacheError::Kind::kLmdb;
    return cache_error(kind, "cache " + options.dir.string() + ": " + e.message());
  }
  for (const char* name : {"data.mdb", "lock.mdb"}) {
    // The mode of the policy whatever the umask (or an older version) gave them.
    auto ok = restrict_cache_entry(session.dir_fd(), options.dir, name, options.access);
    if (!ok && ok.error().kind == CacheError::Kind::kAccess) {
      return Unexpected<CacheError>{ok.error()};
    }
  }
  {
    ProcessLockGuard slots(session.reader_table(), Clock::now() + options.lock_timeout);
    if (slots.owns()) env->reader_check();  // slots of processes that died holding a read txn
  }
  const bool shared_now = options.access.group.has_value() || !data_private;
  auto init = init_store(*env, options, session, shared_now);
  if (!init) return Unexpected<CacheError>{init.error()};
  if (auto ok = session.mark_open(); !ok) return Unexpected<CacheError>{ok.error()};
  // Without downloads.lock (not ours to open, say) daemons merely do not share downloads.
  const int claims_fd = claims ? claims->release() : -1;
  const bool owner_only = !shared_now && !init->was_shared;
  return OpenedStore{std::move(session), std::move(*env), *init, false, claims_fd, owner_only};
}

Result<StoreInit> init_store(lmdb::Env& env, const Options& options, Session& session,
                             bool shared_now) {
  bool write_cap = true;
  for (int attempt = 0; attempt < 4; ++attempt) {
    int code = 0;
    Result<StoreInit> init = cache_error(
        CacheError::Kind::kBusy,
        "cache " + options.dir.string() + ": another process holds its write lock (stopped?)");
    {
      ProcessLockGuard writer(session.writer(), Clock::now() + options.open_timeout);
      if (writer.owns()) init = init_store_txn(env, options, write_cap, shared_now, &code);
    }
    if (code == MDB_MAP_RESIZED) {
      // Another process grew the data file past our map; no txn of ours is active.
      (void)env.set_map_size(0);
    } else if (code == MDB_MAP_FULL) {
      write_cap = false;  // a full store still opens; the new cap is applied in memory
    } else {
      if (!init) return init;
      // The recorded cap decides (LMDB rounds up to the pages in use, never truncates).
      if (auto map = put_map_size(init->cap, env.page_size()); map != env.map_size()) {
        if (auto ok = env.set_map_size(map); !ok) {
          return cache_error(CacheError::Kind::kLmdb, "cache: " + ok.error().message());
        }
      }
      return init;
    }
  }
  return cache_error(CacheError::Kind::kLmdb, "cache: cannot initialise " + options.dir.string());
}

Result<StoreInit> init_store_txn(lmdb::Env& env, const Options& options, bool write_cap,
                                 bool shared_now, int* lmdb_code) {
  const std::string dir = options.dir.string();
  auto fail = [&](const lmdb::Error& e) {
    *lmdb_code = e.code;
    const auto kind = e.is_corruption() ? CacheError::Kind::kCorrupt : CacheError::Kind::kLmdb;
    return cache_error(kind, "cache " + dir + ": " + e.message());
  };
  auto txn = lmdb::Txn::begin(env, 0);
  if (!txn) return fail(txn.error());
  auto main = txn->stat(lmdb::Dbi{1});  // MAIN_DBI: holds one entry per named DB
  if (!main) return fail(main.error());
  StoreInit init;
  if (auto opened = open_dbs(*txn, MDB_CREATE, &init.dbs); !opened) {
    if (opened.error().code == MDB_INCOMPATIBLE) return format_error(options.dir, "another store");
    return fail(opened.error());
  }
  auto stored = txn->get(init.dbs.meta, lmdb::as_bytes(kFormatKey));
  if (!stored) return fail(stored.error());
  FormatRecord format;
  if (!*stored) {
    if (main->ms_entries != 0) return format_error(options.dir, "an LMDB store without a format");
    format.page_size = static_cast<std::uint32_t>(env.page_size());
    format.block_size = BlockGeometry::payload_for_pages(options.block_pages, format.page_size);
    format.created_ms =
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count());
    auto put = txn->put(init.dbs.meta, lmdb::as_bytes(kFormatKey), lmdb::as_bytes(encode(format)));
    if (!put) return fail(put.error());
  } else {
    auto decoded = decode_format(**stored);
    if (!decoded) return cache_error(CacheError::Kind::kCorrupt, "unreadable format record");
    if (decoded->name != kFormatName)
      return format_error(options.dir, "format '" + decoded->name + "'");
    format = *decoded;
    if (format.page_size != env.page_size() || format.block_size == 0) {
      return format_error(options.dir, "a store made for another page size");
    }
  }
  init.geometry = BlockGeometry(format.block_size, format.page_size);

  auto cap = txn->get(init.dbs.meta, lmdb::as_bytes(kCapKey));
  if (!cap) return fail(cap.error());
  const std::uint64_t stored_cap = *cap ? decode_u64(**cap).value_or(0) : 0;
  init.cap = options.cap_bytes ? options.cap_bytes : stored_cap ? stored_cap : Options::kDefaultCap;
  if (write_cap && init.cap != stored_cap) {
    auto put =
        txn->put(init.dbs.meta, lmdb::as_bytes(kCapKey), lmdb::as_bytes(encode_u64(init.cap)));
    if (!put) return fail(put.error());
  }
  auto shared = txn->get(init.dbs.meta, lmdb::as_bytes(kSharedKey));
  if (!shared) return fail(shared.error());
  init.was_shared = shared->has_value();
  // (A store too full for this put, MDB_MAP_FULL, opens without it, as without the cap: then
  // a later private open cannot tell it was shared now. Its files' mode still says so until
  // that open gives them 0600.)
  if (shared_now && !init.was_shared && write_cap) {
    const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    auto put = txn->put(init.dbs.meta, lmdb::as_bytes(kSharedKey),
                        lmdb::as_bytes(encode_u64(static_cast<std::uint64_t>(now_ms))));
    if (!put) return fail(put.error());
  }
  if (auto ok = txn->commit(); !ok) return fail(ok.error());
  return init;
}

}  // namespace

Result<OpenedStore> open_store(const Options& options) {
  return guarded("cache open", [&]() -> Result<OpenedStore> {
    if (auto ok = validate(options); !ok) return Unexpected<CacheError>{ok.error()};
    if (options.read_only || on_read_only_filesystem(options.dir)) return open_read_only(options);
    const Session::Config sc{options.dir, options.boot_id_file, options.check_timeout,
                             options.access, options.open_timeout};
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto session = Session::acquire(sc);
      if (!session) return Unexpected<CacheError>{session.error()};
      // The CLI repairs nothing that a live mount uses: it says so instead.
      const bool may_repair = options.repair || !session->in_use_by_others();
      if (session->needs_check()) {
        if (!may_repair) {
          return cache_error(CacheError::Kind::kBusy,
                             "cache " + options.dir.string() +
                                 " needs a check after an unclean shutdown, and a mount uses "
                                 "it: not checked (the next mount checks it)");
        }
        if (!session->check_store()) {
          auto moved = session->move_aside("structure check failed after an unclean shutdown");
          if (!moved) return Unexpected<CacheError>{moved.error()};
          continue;
        }
      }
      auto cache = open_once(options, *session);
      if (cache || cache.error().kind != CacheError::Kind::kCorrupt) return cache;
      if (!may_repair) {
        return cache_error(CacheError::Kind::kCorrupt,
                           cache.error().message + "; a mount uses it: not moved aside");
      }
      auto moved = session->move_aside(cache.error().message);
      if (!moved) return Unexpected<CacheError>{moved.error()};
    }
    return cache_error(CacheError::Kind::kIo, "cache: cannot open " + options.dir.string());
  });
}

}  // namespace whfs::cache
