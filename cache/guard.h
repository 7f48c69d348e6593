#pragma once
// No exception escapes the cache's public API: each entry point runs its body through
// guarded(), which turns an exception (out of memory, OpenSSL init failure, a throwing
// callback) into a CacheError.

#include <exception>
#include <string>

#include "cache/cache_error.h"

namespace whfs::cache {

template <class F>
auto guarded(const char* what, F&& f) noexcept -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return cache_error(CacheError::Kind::kIo, std::string(what) + ": " + e.what());
  } catch (...) {
    return cache_error(CacheError::Kind::kIo, std::string(what) + ": unknown exception");
  }
}

}  // namespace whfs::cache
