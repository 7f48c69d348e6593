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
};

// What LmdbBlockCache is made of.
struct OpenedStore {
  Session session;
  lmdb::Env env;
  StoreInit init;
  bool read_only = false;  // a lower tier: no write txn, no pending updates, no pins
  int downloads_fd = -1;   // downloads.lock, opened (claims.cpp), or -1: no claims
};

// Opens (creating if needed) the store in options.dir, as BlockCache::open documents.
Result<OpenedStore> open_store(const Options& options);

}  // namespace whfs::cache
