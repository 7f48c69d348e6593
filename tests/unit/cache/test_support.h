#pragma once
// Shared helpers for the cache tests and their helper program.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/audience.h"
#include "cache/block_cache.h"

namespace whfs::cache::testing {

// The audience of a mount without a token (cache/audience.h), as records are put and looked up.
inline const Audience kPublic{kPublicAudience};
inline const std::vector<std::string> kPublicOnly{std::string(kPublicAudience)};

// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Deterministic pseudo-random bytes.
std::vector<std::byte> make_bytes(std::size_t n, std::uint64_t seed);
ContentId sha256_of(std::span<const std::byte> bytes);
ContentId git_blob_of(std::span<const std::byte> bytes);

// Options for tests: small blocks (one page), a boot id file of our own, `cap` bytes.
Options test_options(const std::filesystem::path& dir, std::uint64_t cap = 64ull << 20,
                     std::uint32_t block_pages = 1);
std::unique_ptr<BlockCache> open_or_die(const Options& options);

// Content whose every block starts with `key` (8 bytes, little-endian) followed by bytes
// derived from (key, block index): any block can be checked on its own.
std::vector<std::byte> self_describing(std::uint64_t key, std::size_t size,
                                       std::uint32_t block_size);
// Whether `payload` is block `index` of some self_describing() content (blocks shorter than
// the key are accepted as they are).
bool block_is_genuine(std::span<const std::byte> payload, std::uint32_t index,
                      std::uint32_t block_size);

// The golden fixture's contents (tests/unit/cache/data, made by `cache_test_helper
// make-fixture`): one-page blocks of 4072 bytes.
struct Fixture {
  static constexpr std::uint32_t kBlockPages = 1;
  static constexpr std::uint64_t kCap = 1 << 20;
  static std::vector<std::byte> lfs_bytes() { return make_bytes(10000, 42); }
  static std::vector<std::byte> plain_bytes() { return make_bytes(100, 43); }
  static constexpr const char* kEndpoint = "https://huggingface.co";
  static constexpr const char* kRepo = "org/wheels";
  static constexpr const char* kRev = "main";
  static constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";
  static constexpr std::int64_t kResolvedMs = 1700000000000;
  static std::vector<RemoteEntry> listing();
};

// Stores all of `bytes` (in one put) and returns the state.
ContentState put_all(BlockCache& cache, const ContentId& id, std::span<const std::byte> bytes);
// Verifies the content, then reads every block as a reader would; nullopt if any is missing
// (or the bytes did not match their id), else the bytes.
std::optional<std::vector<std::byte>> read_all(BlockCache& cache, const ContentId& id,
                                               std::uint64_t size);

// Rewrites one stored block value through raw LMDB (the cache must be closed): `edit` gets
// the value (8-byte checksum + payload) to change in place.
void edit_raw_block(const std::filesystem::path& dir, const ContentId& id, std::uint32_t index,
                    const std::function<void(std::string&)>& edit);
// Stores `value` under `key` in the named DB through raw LMDB (the cache must be closed).
void put_raw(const std::filesystem::path& dir, const char* db, std::string_view key,
             std::string_view value);

// Runs the helper program (cache_test_helper) with `args`, optionally under
// `unshare --pid --fork`; returns its pid (not waited for).
// Its stdout goes to `stdout_file` when given.
pid_t spawn_helper(const std::vector<std::string>& args, bool new_pid_namespace = false,
                   const std::filesystem::path& stdout_file = {});
// Waits for `pid`; its exit status, or 128 + signal.
int wait_exit(pid_t pid);

}  // namespace whfs::cache::testing
