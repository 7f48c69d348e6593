#pragma once
// The cache's error type. A miss is never an error: lookups return std::optional or a list of
// missing blocks; an error means the cache could not do what was asked (the caller then serves
// the bytes from the network without caching them).

#include <string>
#include <utility>

#include "fs/common/expected.h"

namespace whfs::cache {

struct CacheError {
  enum class Kind {
    kIo,               // a system call on the cache directory failed
    kFormat,           // the store has an unknown or newer format (or is not a cache)
    kFull,             // no room even after eviction: everything left is pinned by open files
    kCorrupt,          // a whole content did not match its hash; its blocks were dropped
    kLmdb,             // LMDB reported an error that is none of the above
    kInvalidArgument,  // the caller broke a precondition (block range, data length)
    kAccess,           // the directory is not ours, or others could write it
    kReadOnly,         // a read-only cache (a lower tier): nothing is ever written
    kBusy,             // another process holds a lock past the time allowed (stopped?)
  };

  Kind kind = Kind::kIo;
  std::string message;
};

template <class T>
using Result = Expected<T, CacheError>;

inline Unexpected<CacheError> cache_error(CacheError::Kind kind, std::string message) {
  return {CacheError{kind, std::move(message)}};
}

const char* to_string(CacheError::Kind kind);

}  // namespace whfs::cache
