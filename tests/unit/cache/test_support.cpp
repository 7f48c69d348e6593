#include "tests/unit/cache/test_support.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "cache/lmdb.h"
#include "cache/records.h"
#include "fs/common/hash.h"

extern char** environ;

namespace whfs::cache::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp ? tmp : "/tmp") + "/whfs-cache-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<std::byte> make_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (std::size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<std::byte>(x >> 24);
  }
  return out;
}

ContentId sha256_of(std::span<const std::byte> bytes) {
  Hasher h(HashAlgo::kSha256);
  h.update(bytes);
  return *ContentId::from_digest(ContentId::Kind::kSha256, h.finish());
}

ContentId git_blob_of(std::span<const std::byte> bytes) {
  Hasher h = git_blob_hasher(bytes.size());
  h.update(bytes);
  return *ContentId::from_digest(ContentId::Kind::kGitSha1, h.finish());
}

std::vector<std::byte> self_describing(std::uint64_t key, std::size_t size,
                                       std::uint32_t block_size) {
  std::vector<std::byte> out;
  out.reserve(size);
  for (std::uint32_t b = 0; out.size() < size; ++b) {
    const std::size_t len = std::min<std::size_t>(block_size, size - out.size());
    auto block = make_bytes(len, key * 1000003 + b);
    for (std::size_t i = 0; i < 8 && i < len; ++i) block[i] = std::byte(key >> (8 * i) & 0xff);
    out.insert(out.end(), block.begin(), block.end());
  }
  return out;
}

bool block_is_genuine(std::span<const std::byte> payload, std::uint32_t index,
                      std::uint32_t block_size) {
  if (payload.size() > block_size) return false;
  if (payload.size() < 8) return true;
  std::uint64_t key = 0;
  for (int i = 7; i >= 0; --i) key = key << 8 | static_cast<std::uint64_t>(payload[i]);
  auto expected = make_bytes(payload.size(), key * 1000003 + index);
  return std::equal(payload.begin() + 8, payload.end(), expected.begin() + 8);
}

std::vector<RemoteEntry> Fixture::listing() {
  RemoteEntry lfs;
  lfs.path = "simple/torch/torch-2.4.0-cp311-cp311-linux_x86_64.whl";
  lfs.size = 10000;
  lfs.oid = "1111111111111111111111111111111111111111";
  lfs.lfs_sha256 = sha256_of(lfs_bytes()).hex();
  RemoteEntry dir;
  dir.path = "simple/numpy";
  dir.type = RemoteEntry::Type::kDirectory;
  dir.oid = "2222222222222222222222222222222222222222";
  return {lfs, dir};
}

Options test_options(const fs::path& dir, std::uint64_t cap, std::uint32_t block_pages) {
  Options o;
  o.dir = dir;
  o.cap_bytes = cap;
  o.block_pages = block_pages;
  o.check_timeout = std::chrono::seconds(60);
  return o;
}

std::unique_ptr<BlockCache> open_or_die(const Options& options) {
  auto c = BlockCache::open(options);
  if (!c) {
    ADD_FAILURE() << "open " << options.dir << ": " << c.error().message;
    std::abort();
  }
  return std::move(*c);
}

ContentState put_all(BlockCache& cache, const ContentId& id, std::span<const std::byte> bytes) {
  auto r = cache.put_blocks(id, bytes.size(), 0, bytes);
  if (!r) ADD_FAILURE() << "put_blocks: " << r.error().message;
  return r ? *r : ContentState{};
}

std::optional<std::vector<std::byte>> read_all(BlockCache& cache, const ContentId& id,
                                               std::uint64_t size) {
  const std::uint32_t bs = cache.block_size();
  const auto total = static_cast<std::uint32_t>((size + bs - 1) / bs);
  std::vector<std::byte> out(size);
  // As a reader gets them: verified first (a complete content is served only once its hash
  // matched).
  if (auto v = cache.verify_content(id, size); !v) return std::nullopt;
  auto missing = cache.read_blocks(
      id, size, 0, total,
      [&](std::uint32_t i, auto bytes) {
        std::memcpy(out.data() + std::size_t{i} * bs, bytes.data(), bytes.size());
      },
      BlockStore::ReadMode::kVerified);
  if (!missing) {
    ADD_FAILURE() << "read_blocks: " << missing.error().message;
    return std::nullopt;
  }
  if (!missing->empty()) return std::nullopt;
  return out;
}

void put_raw(const fs::path& dir, const char* db, std::string_view key, std::string_view value) {
  auto env = lmdb::Env::open(dir.string(), {.max_dbs = 16, .flags = MDB_NOSYNC});
  ASSERT_TRUE(env) << env.error().message();
  auto txn = lmdb::Txn::begin(*env, 0);
  ASSERT_TRUE(txn);
  auto dbi = txn->open_dbi(db, 0);
  ASSERT_TRUE(dbi);
  ASSERT_TRUE(txn->put(*dbi, lmdb::as_bytes(key), lmdb::as_bytes(value)));
  ASSERT_TRUE(txn->commit());
}

void edit_raw_block(const fs::path& dir, const ContentId& id, std::uint32_t index,
                    const std::function<void(std::string&)>& edit) {
  auto env = lmdb::Env::open(dir.string(), {.max_dbs = 16, .flags = MDB_NOSYNC});
  ASSERT_TRUE(env) << env.error().message();
  auto txn = lmdb::Txn::begin(*env, 0);
  ASSERT_TRUE(txn);
  auto dbi = txn->open_dbi(kBlocksDb, 0);
  ASSERT_TRUE(dbi);
  const auto key = block_key(id, index);
  auto v = txn->get(*dbi, key.bytes());
  ASSERT_TRUE(v && *v);
  std::string value(lmdb::as_chars(**v));
  edit(value);
  ASSERT_TRUE(txn->put(*dbi, key.bytes(), lmdb::as_bytes(value)));
  ASSERT_TRUE(txn->commit());
}

pid_t spawn_helper(const std::vector<std::string>& args, bool new_pid_namespace,
                   const fs::path& stdout_file) {
  std::vector<std::string> argv;
  // --kill-child: killing unshare kills the namespace's first process, and with it the
  // namespace (as a container is stopped).
  if (new_pid_namespace) argv = {"/usr/bin/unshare", "--pid", "--fork", "--kill-child"};
  argv.push_back(WHFS_CACHE_TEST_HELPER);
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!stdout_file.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);  // its complaints land there too
  }
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

int wait_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace whfs::cache::testing
