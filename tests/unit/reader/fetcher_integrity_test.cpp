// The fetcher's integrity with in-memory doubles: verified serving, corrupt downloads and
// quarantine, contents verified by another process, the memory path.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "fs/reader/fetcher.h"
#include "fs/reader/reader.h"
#include "tests/unit/reader/fetcher_fixture.h"

namespace whfs::reader {
namespace {

using namespace std::chrono_literals;
using namespace testing_fetcher;

// ---- verified serving --------------------------------------------------------------------

TEST_F(FetcherTest, ReaderServesExactBytesOfAVerifiedContent) {
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  EXPECT_EQ(store.pins, 1);
  EXPECT_EQ(read(r, *f, 0, 10), bytes.substr(0, 10));
  EXPECT_EQ(read(r, *f, kBlock - 3, 7), bytes.substr(kBlock - 3, 7));
  EXPECT_EQ(read(r, *f, 0, bytes.size() + 50), bytes);  // clipped at the end
  EXPECT_EQ(read(r, *f, bytes.size(), 10), "");
  auto st = store.content_state(content.id);
  EXPECT_TRUE((*st)->verified);
  EXPECT_EQ(store.hashed, 1);  // hashed once, by this process
  EXPECT_EQ(calls(), 3);       // the first read brought the whole file
  r.release(*f);
  EXPECT_EQ(store.pins, 0);
}

TEST_F(FetcherTest, NoReadOfACorruptDownloadEverReturnsItsBytes) {
  // One byte in the middle is wrong in every download. Reads of the region around it, cold
  // and again after the mismatch was seen, get EIO: never the wrong byte, never any byte of
  // the file (which might be wrong elsewhere for all a reader knows).
  const std::int64_t bad = 5 * kBlock + 17;
  hub.corrupt_at = bad;
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  for (int attempt = 0; attempt < 3; ++attempt) {
    for (const std::uint64_t off : {std::uint64_t(bad) - 100, std::uint64_t{0}}) {
      const std::string got = read(r, *f, off, 300);
      EXPECT_TRUE(got.starts_with("ERROR:")) << "attempt " << attempt << " at " << off;
    }
  }
  EXPECT_GE(r_parts.stats.fetch().corrupt, 2u);  // the first download and the retry both mismatched
  // A clean download later serves the right bytes.
  hub.corrupt_at = -1;
  FetcherConfig c = config();
  c.corrupt_quarantine = 0s;
  TestReader later_parts(store, hub, testing::public_scope(), ReaderConfig{c, {}});
  Reader& later = later_parts.reader;
  auto g = later.open(content, false);
  EXPECT_EQ(read(later, *g, bad - 100, 300), bytes.substr(bad - 100, 300));
  later.release(*g);
  r.release(*f);
}

TEST_F(FetcherTest, ACorruptDownloadIsQuarantinedWithoutAnotherDownload) {
  hub.corrupt = true;
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  EXPECT_TRUE(read(r, *f, 0, bytes.size()).starts_with("ERROR:"));
  const int before = calls();
  EXPECT_TRUE(read(r, *f, 0, 100).starts_with("ERROR:"));
  EXPECT_EQ(calls(), before);
  EXPECT_GE(r_parts.stats.fetch().failed_fast, 1u);
  r.release(*f);
}

TEST_F(FetcherTest, StreamingReportsACorruptDownloadSoTheKernelDropsItsPages) {
  hub.corrupt_at = 5 * kBlock + 17;
  TestReader r_parts(store, hub, testing::public_scope(),
                     ReaderConfig{config(Serving::kStreaming), {}});
  Reader& r = r_parts.reader;
  std::atomic<int> reported{0};
  r_parts.gate.set_corrupt_listener([&](const cache::ContentId& id) {
    EXPECT_EQ(id, content.id);
    reported++;
  });
  auto f = r.open(content, false);
  read(r, *f, 0, bytes.size());  // streaming: whatever it returned, the mismatch is reported
  EXPECT_EQ(reported, 2);        // the download and its retry
  EXPECT_TRUE(read(r, *f, 5 * kBlock, 100).starts_with("ERROR:"));
  r.release(*f);
}

TEST_F(FetcherTest, AContentAnotherProcessRecordedAsVerifiedIsHashedHereFirst) {
  // Another process (or anyone who can write the cache) left wrong bytes with the "verified"
  // flag set. This process hashes them before serving: a mismatch, a fresh download, the
  // right bytes.
  std::string wrong = bytes;
  wrong[3 * kBlock + 5] ^= 0x20;
  store.plant(content.id, wrong);
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  EXPECT_EQ(read(r, *f, 3 * kBlock, 100), bytes.substr(3 * kBlock, 100));
  EXPECT_GE(r_parts.stats.fetch().corrupt, 1u);
  EXPECT_GE(calls(), 1);
  r.release(*f);
}

TEST_F(FetcherTest, AContentVerifiedElsewhereIsServedAfterOneHashHere) {
  store.plant(content.id, bytes);
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(read(r, *f, 100, 50), bytes.substr(100, 50));
  EXPECT_EQ(store.hashed, 1);
  EXPECT_EQ(calls(), 0);
  r.release(*f);
  FetcherConfig trusting = config();
  TestReader t_parts(store, hub, testing::public_scope(), ReaderConfig{trusting, {}}, believed());
  Reader& t = t_parts.reader;
  auto g = t.open(content, false);
  EXPECT_EQ(read(t, *g, 100, 50), bytes.substr(100, 50));
  EXPECT_EQ(store.hashed, 1);  // trusted: not hashed again
  t.release(*g);
}

TEST_F(FetcherTest, WhatTheDaemonCallsVerifiedIsTheGatesCall) {
  // A wheel's METADATA is marked verified only when its wheel is: in a cache others can write,
  // another process's "verified" record counts once this process hashed the wheel itself.
  store.plant(content.id, bytes);  // recorded as verified by another process
  TestReader shared(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
  EXPECT_FALSE(shared.reader.verified(content));
  auto f = shared.reader.open(content, false);
  EXPECT_EQ(read(shared.reader, *f, 100, 50), bytes.substr(100, 50));
  shared.reader.release(*f);
  EXPECT_TRUE(shared.reader.verified(content));  // hashed here
  TestReader own(store, hub, testing::public_scope(), ReaderConfig{config(), {}}, believed());
  EXPECT_TRUE(own.reader.verified(content));  // a private cache's record
}

TEST_F(FetcherTest, AContentLostFromUnderAReaderIsDownloadedAgain) {
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  EXPECT_EQ(read(r, *f, 0, 100), bytes.substr(0, 100));
  const int before = calls();
  store.lose(content.id);  // evicted by another process between two reads
  EXPECT_EQ(read(r, *f, 5000, 100), bytes.substr(5000, 100));
  EXPECT_GT(calls(), before);
  r.release(*f);
}

TEST_F(FetcherTest, ABlockChangedAfterVerificationIsCaughtByTheNextProcess) {
  {
    TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
    Reader& r = r_parts.reader;
    auto f = r.open(content, false);
    EXPECT_EQ(read(r, *f, 0, 100), bytes.substr(0, 100));
    r.release(*f);
  }
  store.corrupt_block(content.id, 2);  // the record still says "verified"
  TestReader next_parts(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& next = next_parts.reader;
  auto g = next.open(content, false);
  EXPECT_EQ(read(next, *g, 2 * kBlock, 100), bytes.substr(2 * kBlock, 100));
  EXPECT_GE(next_parts.stats.fetch().corrupt, 1u);
  next.release(*g);
}

TEST_F(FetcherTest, AStoreThatRefusesEveryPutStillServesVerifiedBytes) {
  for (const auto kind : {cache::CacheError::Kind::kBusy, cache::CacheError::Kind::kReadOnly}) {
    MemoryStore refusing{kBlock};
    refusing.refuse = kind;
    TestReader r_parts(refusing, hub, testing::public_scope(), ReaderConfig{config(), {}});
    Reader& r = r_parts.reader;
    auto f = r.open(content, false);
    EXPECT_EQ(read(r, *f, 3000, 2000), bytes.substr(3000, 2000));
    EXPECT_EQ(r_parts.stats.fetch().in_memory, 1u);
    r.release(*f);
  }
}

// ---- the memory path -------------------------------------------------------------------

TEST_F(FetcherTest, AContentTheCacheCannotKeepIsVerifiedAndServedFromMemory) {
  store.full = true;
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  EXPECT_EQ(read(r, *f, 2500, 3000), bytes.substr(2500, 3000));
  EXPECT_EQ(read(r, *f, 0, bytes.size()), bytes);
  EXPECT_GE(r_parts.stats.fetch().uncached, 1u);
  EXPECT_EQ(r_parts.stats.fetch().in_memory, 1u);
  const int after = calls();
  auto g = r.open(content, false);  // another open of the same content: no new download
  EXPECT_EQ(read(r, *g, 7, 70), bytes.substr(7, 70));
  EXPECT_EQ(calls(), after);
  r.release(*f);
  r.release(*g);
}

TEST_F(FetcherTest, TheMemoryPathNeverServesACorruptDownload) {
  store.full = true;
  hub.corrupt_at = 7 * kBlock;
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  EXPECT_TRUE(read(r, *f, 7 * kBlock - 10, 20).starts_with("ERROR:"));
  EXPECT_TRUE(read(r, *f, 0, 20).starts_with("ERROR:"));
  r.release(*f);
}

TEST_F(FetcherTest, AContentTooLargeForMemoryFailsInsteadOfServingUnverifiedBytes) {
  store.full = true;
  FetcherConfig c = config();
  c.memory_limit = bytes.size() - 1;
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{c, {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  const std::string got = read(r, *f, 0, 100);
  EXPECT_TRUE(got.starts_with("ERROR:")) << got;
  EXPECT_NE(got.find("larger than the memory"), std::string::npos) << got;
  r.release(*f);
}

}  // namespace
}  // namespace whfs::reader
