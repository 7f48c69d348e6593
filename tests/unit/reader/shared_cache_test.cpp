// The read path over a real LMDB cache shared the way containers and several daemons share
// one: a full reader table, two "processes" (two cache instances, two OFDs) reading one cold
// file, a claim holder that stalls, blocks planted with the "verified" flag set.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <filesystem>
#include <future>
#include <thread>

#include "cache/block_cache.h"
#include "cache/lmdb.h"
#include "cache/records.h"
#include "fs/reader/reader.h"
#include "tests/unit/reader/fakes.h"
#include "tests/unit/reader/fetcher_fixture.h"

namespace whfs::reader {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::MemoryHub;

std::string make_bytes(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / 7) & 0xff);
  return s;
}

using testing_fetcher::believed;
using testing_fetcher::content_of;
using testing_fetcher::TestReader;

class SharedCacheTest : public ::testing::Test {
 protected:
  SharedCacheTest() {
    spdlog::default_logger_raw();
    char tmpl[] = "/tmp/whfs-shared-XXXXXX";
    root_ = ::mkdtemp(tmpl);
    dir_ = root_ / "cache";
  }
  ~SharedCacheTest() override { fs::remove_all(root_); }

  cache::Options options() {
    cache::Options o;
    o.dir = dir_;
    o.cap_bytes = 64ull << 20;
    o.block_pages = 1;
    return o;
  }
  std::unique_ptr<cache::BlockCache> open(const cache::Options& o) {
    auto c = cache::BlockCache::open(o);
    EXPECT_TRUE(c) << (c ? "" : c.error().message);
    return c ? std::move(*c) : nullptr;
  }
  // A content stored and recorded as verified, then its block 3 replaced (with a valid block
  // checksum): what anyone who can write the cache directory can do.
  void plant_block_three() {
    {
      auto c = open(options());
      ASSERT_TRUE(c->put_blocks(content.id, content.size, 0, std::as_bytes(std::span(bytes))));
      ASSERT_TRUE(c->verify_content(content.id, content.size).value().verified);
    }
    auto env = cache::lmdb::Env::open(dir_.string(), {.max_dbs = 16});
    ASSERT_TRUE(env);
    auto txn = cache::lmdb::Txn::begin(*env, 0);
    auto dbi = txn->open_dbi(cache::kBlocksDb, 0);
    ASSERT_TRUE(dbi);
    const auto key = cache::block_key(content.id, 3);
    auto v = txn->get(*dbi, key.bytes());
    ASSERT_TRUE(v && *v);
    std::string value(cache::lmdb::as_chars(**v));
    value[8 + 10] ^= 0x5a;  // a payload byte
    const auto payload = std::as_bytes(std::span(value)).subspan(8);
    const std::uint64_t sum = cache::block_checksum(key.bytes(), payload);
    for (int i = 0; i < 8; ++i) value[i] = static_cast<char>(sum >> (8 * i) & 0xff);
    ASSERT_TRUE(txn->put(*dbi, key.bytes(), cache::lmdb::as_bytes(value)));
    ASSERT_TRUE(txn->commit());
  }
  static FetcherConfig config() {
    FetcherConfig c;
    c.workers = 4;
    c.max_request = 16 << 10;
    return c;
  }
  static std::string read(Reader& r, const FileContent& c, std::uint64_t off, std::size_t n) {
    auto f = r.open(c, true);
    std::string out;
    auto res = r.read(*f, off, n, WaitPolicy{10s, nullptr}, [&](std::span<const iovec> iov) {
      for (const auto& v : iov) out.append(static_cast<const char*>(v.iov_base), v.iov_len);
    });
    r.release(*f);
    return res ? out : "ERROR:" + res.error().message;
  }

  fs::path root_;
  fs::path dir_;
  std::string bytes = make_bytes(300000);
  FileContent content = content_of(bytes);
};

TEST_F(SharedCacheTest, AFullReaderTableStillServesVerifiedBytes) {
  cache::Options o = options();
  o.max_readers = 4;
  o.lock_timeout = 200ms;
  auto c = open(o);
  // Other processes hold every slot of LMDB's reader table.
  auto env = cache::lmdb::Env::open(
      dir_.string(), {.max_dbs = 16, .max_readers = 4, .flags = MDB_RDONLY | MDB_NOTLS});
  ASSERT_TRUE(env);
  std::vector<cache::lmdb::Txn> held;
  while (true) {
    auto t = cache::lmdb::Txn::begin(*env, MDB_RDONLY);
    if (!t) {
      EXPECT_EQ(t.error().code, MDB_READERS_FULL);
      break;
    }
    held.push_back(std::move(*t));
  }
  MemoryHub hub(bytes);
  TestReader r_parts(*c, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  EXPECT_EQ(read(r, content, 1000, 5000), bytes.substr(1000, 5000));
  EXPECT_EQ(r_parts.stats.fetch().in_memory, 1u);  // verified in memory, not stored
}

TEST_F(SharedCacheTest, TwoProcessesReadingOneColdFileDownloadItOnce) {
  auto ca = open(options());
  auto cb = open(options());  // another process's instance: its own lock descriptions
  MemoryHub hub_a(bytes);
  MemoryHub hub_b(bytes);
  hub_a.delay = 20ms;  // A downloads slowly enough for B to arrive while it does
  TestReader a_parts(*ca, hub_a, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& a = a_parts.reader;
  TestReader b_parts(*cb, hub_b, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& b = b_parts.reader;
  auto fa = std::async(std::launch::async, [&] { return read(a, content, 0, bytes.size()); });
  std::this_thread::sleep_for(50ms);
  auto fb = std::async(std::launch::async, [&] { return read(b, content, 250000, 100); });
  EXPECT_EQ(fa.get(), bytes);
  EXPECT_EQ(fb.get(), bytes.substr(250000, 100));
  EXPECT_GT(hub_a.calls, 0);
  EXPECT_EQ(hub_b.calls, 0) << "B downloaded what A was downloading for the cache";
  EXPECT_EQ(b_parts.stats.fetch().shared_waits, 1u);
  EXPECT_GE(b_parts.stats.fetch().rechecks, 1u);  // B hashed A's download itself before serving it
}

TEST_F(SharedCacheTest, AClaimHolderThatMakesNoProgressIsTakenOver) {
  testing::MemoryStore store(1000);
  store.claimed_elsewhere = true;  // a process that claimed the file, then stopped
  MemoryHub hub(bytes);
  FetcherConfig fc = config();
  fc.claim_takeover = 1s;
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{fc, {}});
  Reader& r = r_parts.reader;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(read(r, content, 500, 500), bytes.substr(500, 500));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 900ms);
  EXPECT_EQ(r_parts.stats.fetch().takeovers, 1u);
}

TEST_F(SharedCacheTest, BlocksPlantedWithTheVerifiedFlagAreNotServed) {
  // Anyone who can write the cache directory can replace a block (with a valid block
  // checksum) of a content recorded as verified. A daemon hashes every content itself once
  // before serving it, so it serves the Hub's bytes, not the planted ones.
  plant_block_three();
  auto c = open(options());
  const std::uint32_t bs = c->block_size();
  MemoryHub hub(bytes);
  TestReader r_parts(*c, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  EXPECT_EQ(read(r, content, 3 * bs, 100), bytes.substr(3 * bs, 100));
  EXPECT_GE(r_parts.stats.fetch().corrupt, 1u);
  EXPECT_GT(hub.calls, 0);  // downloaded again
}

// What the daemon derives for itself from a content (a wheel's METADATA, by peek) comes, in a
// cache others can write, only from bytes this process verified: else from the Hub.
TEST_F(SharedCacheTest, APeekOfASharedCacheTakesNoBytesThisProcessDidNotVerify) {
  plant_block_three();
  auto c = open(options());
  const std::uint32_t bs = c->block_size();
  const WaitPolicy wait{std::chrono::seconds(10), nullptr};
  {
    MemoryHub hub(bytes);
    TestReader trusting_parts(*c, hub, testing::public_scope(), ReaderConfig{config(), {}},
                              believed());
    Reader& trusting = trusting_parts.reader;
    auto got = trusting.peek(content, 3 * bs, 100, wait);
    ASSERT_TRUE(got);
    EXPECT_NE(*got, bytes.substr(3 * bs, 100));  // a private cache's rule: its bytes as stored
  }
  FetcherConfig fc = config();
  MemoryHub hub(bytes);
  TestReader wary_parts(*c, hub, testing::public_scope(), ReaderConfig{fc, {}});
  Reader& wary = wary_parts.reader;
  auto got = wary.peek(content, 3 * bs, 100, wait);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(*got, bytes.substr(3 * bs, 100));
  EXPECT_GT(hub.calls, 0);
}

}  // namespace
}  // namespace whfs::reader
