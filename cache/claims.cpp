// DownloadClaims: download claims between the processes sharing a cache directory.
//
// One OFD lock per content on a byte of `downloads.lock` picked by the content id: the kernel
// drops it when its process dies (kill -9 included), in any PID namespace, and a claim costs
// no write txn. Two contents whose ids map to the same byte (1 in 2^62) merely share a claim.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "cache/download_claims.h"

namespace whfs::cache {
namespace {

class OfdClaim final : public BlockStore::DownloadClaim {
 public:
  OfdClaim(int fd, off_t byte) : fd_(fd), byte_(byte) {}
  ~OfdClaim() override {
    struct flock fl {};
    fl.l_type = F_UNLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = byte_;
    fl.l_len = 1;
    ::fcntl(fd_, F_OFD_SETLK, &fl);
  }
  OfdClaim(const OfdClaim&) = delete;
  OfdClaim& operator=(const OfdClaim&) = delete;

 private:
  int fd_;
  off_t byte_;
};

off_t claim_byte(const ContentId& id) {
  std::uint64_t h = 0;
  const auto d = id.digest();
  for (std::size_t i = 0; i < 8 && i < d.size(); ++i) h = h << 8 | d[i];
  return static_cast<off_t>(h & ((std::uint64_t{1} << 62) - 1));
}

}  // namespace

DownloadClaims::~DownloadClaims() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<BlockStore::DownloadClaim>> DownloadClaims::claim(const ContentId& id) {
  using DownloadClaim = BlockStore::DownloadClaim;
  if (fd_ < 0) {
    // A read-only cache (nothing is downloaded into it), or no claims file: no coordination.
    return std::make_unique<DownloadClaim>();
  }
  const off_t byte = claim_byte(id);
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = byte;
  fl.l_len = 1;
  if (::fcntl(fd_, F_OFD_SETLK, &fl) == 0) {
    return std::unique_ptr<DownloadClaim>(new OfdClaim(fd_, byte));
  }
  if (errno == EAGAIN || errno == EACCES) return std::unique_ptr<DownloadClaim>();
  return cache_error(CacheError::Kind::kIo,
                     "claim " + id.to_string() + ": " + std::strerror(errno));
}

}  // namespace whfs::cache
