#pragma once
// DownloadClaims: download claims between the processes sharing a cache directory (internal
// to cache/), as OFD locks on bytes of downloads.lock (claims.cpp).

#include <memory>

#include "cache/block_store.h"

namespace whfs::cache {

class DownloadClaims {
 public:
  // `fd`: downloads.lock, opened (owned from here), or -1: no claims (a read-only cache, or
  // no claims file): every claim is granted and coordinates nothing.
  explicit DownloadClaims(int fd) : fd_(fd) {}
  ~DownloadClaims();
  DownloadClaims(const DownloadClaims&) = delete;
  DownloadClaims& operator=(const DownloadClaims&) = delete;

  // BlockStore::claim_download.
  Result<std::unique_ptr<BlockStore::DownloadClaim>> claim(const ContentId& id);

 private:
  int fd_ = -1;
};

}  // namespace whfs::cache
