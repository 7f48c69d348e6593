#pragma once
// Opening the LMDB block cache's store (internal to cache/): BlockCache::open's checks,
// repairs (a damaged store moved aside) and errors, before any class of the cache exists.

#include "cache/block_cache.h"
#include "cache/lmdb.h"
#include "cache/records.h"
#include "cache/session.h"
#include "cache/txn_engine.h"

namespace whfs::cache {

struct StoreInit {
  Dbs dbs;
  BlockGeometry geometry{1, 1};
  std::uint64_t cap = 0;
  // The store records that a group shared it once (meta "shared"): see OpenedStore.
  bool was_shared = false;
};

// What LmdbBlockCache is made of.
struct OpenedStore {
  Session session;
  lmdb::Env env;
  StoreInit init;
  bool read_only = false;  // a lower tier: no write txn, no pending updates, no pins
  int downloads_fd = -1;   // downloads.lock, opened (claims.cpp), or -1: no claims
  // Nobody but this user (and root) can have written what the store holds: opened private
  // (no group), its data file was this user's with mode 0600 (or new), and it never recorded
  // being shared with a group (BlockCache::owner_only).
  bool owner_only = false;
};

// Opens (creating if needed) the store in options.dir, as BlockCache::open documents.
Result<OpenedStore> open_store(const Options& options);

}  // namespace whfs::cache
