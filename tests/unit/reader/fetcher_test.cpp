// The fetcher and the reader with in-memory doubles: single-flight, coalescing, promotion,
// streaming puts, patience, interrupts (verified serving and the memory path:
// fetcher_integrity_test.cpp).
#include "fs/reader/fetcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "fs/reader/reader.h"
#include "tests/unit/reader/fetcher_fixture.h"

namespace whfs::reader {
namespace {

using namespace std::chrono_literals;
using namespace testing_fetcher;

// ---- single flight and request shapes ----------------------------------------------------

TEST_F(FetcherTest, ConcurrentReadersOfOneBlockCauseOneDownload) {
  TestFetcher f_parts(store, hub, config(Serving::kStreaming));
  Fetcher& f = f_parts.fetcher;
  hub.hold();  // line all readers up behind one download
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      if (f.ensure(content, {3, 1}, patience())) ok++;
    });
  }
  // Every reader but the first has joined the first one's download, which the hub holds.
  ASSERT_TRUE(eventually([&] { return f_parts.stats.fetch().waits_joined >= 15; }));
  hub.release();
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 16);
  EXPECT_EQ(calls(), 1);
  EXPECT_GE(f_parts.stats.fetch().waits_joined, 1u);
}

TEST_F(FetcherTest, ConcurrentVerifiedReadersOfOneFileDownloadItOnce) {
  TestFetcher f_parts(store, hub, config());
  Fetcher& f = f_parts.fetcher;
  hub.hold();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      const std::uint32_t b = static_cast<std::uint32_t>(i) % 11;
      if (f.ensure(content, {b, 1}, patience())) ok++;
    });
  }
  ASSERT_TRUE(eventually([&] { return calls() >= 1; }));  // the download is under way, held
  hub.release();
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 8);
  // The whole file once: every byte in exactly one request (how the file is cut into
  // requests depends on which reader came first).
  std::lock_guard lock(hub.mu_);
  std::sort(hub.ranges.begin(), hub.ranges.end());
  std::uint64_t next = 0;
  for (const auto& [off, len] : hub.ranges) {
    EXPECT_EQ(off, next) << "a gap or an overlap";
    next = off + len;
  }
  EXPECT_EQ(next, bytes.size());
  EXPECT_LE(hub.ranges.size(), 5u);
}

TEST_F(FetcherTest, ASlowDownloadThatKeepsMovingBytesOutlastsThePatience) {
  // Each ranged GET takes 3.2 s on this link, and a read's patience is 2 s: the read waits as
  // long as bytes keep arriving (before, a read failed when no GET ended within its patience).
  hub.fill_piece = 500;
  hub.piece_delay = 400ms;
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  std::string got;
  const auto res = r.read(*f, 0, 100, patience(2000ms), [&](std::span<const iovec> iov) {
    for (const auto& v : iov) got.append(static_cast<const char*>(v.iov_base), v.iov_len);
  });
  ASSERT_TRUE(res) << res.error().message;
  EXPECT_EQ(got, bytes.substr(0, 100));
  r.release(*f);
}

TEST_F(FetcherTest, AReadWhoseDownloadsMoveNothingFailsAfterItsPatience) {
  hub.hold();  // the link moves no byte
  FetcherConfig c = config();
  c.failure_memo = 0s;
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{c, {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  const std::string got = read(r, *f, 0, 100, patience(1000ms));
  EXPECT_TRUE(got.starts_with("ERROR:")) << got;
  EXPECT_NE(got.find("no download progress"), std::string::npos) << got;
  hub.release();
  r.release(*f);
}

TEST_F(FetcherTest, AdjacentMissingBlocksBecomeOneRequest) {
  TestFetcher f_parts(store, hub, config(Serving::kStreaming));
  Fetcher& f = f_parts.fetcher;
  ASSERT_TRUE(store.put_blocks(content.id, content.size, 4,
                               std::as_bytes(std::span(bytes)).subspan(4 * kBlock, 3 * kBlock)));
  ASSERT_TRUE(store.grant(content.id, cache::Audience(cache::kPublicAudience)));
  ASSERT_TRUE(f.ensure(content, {1, 8}, patience()));  // blocks 1..8, of which 4..6 are stored
  EXPECT_EQ(calls(), 2);
  std::lock_guard lock(hub.mu_);
  std::sort(hub.ranges.begin(), hub.ranges.end());
  EXPECT_EQ(hub.ranges[0], (std::pair<std::uint64_t, std::size_t>{kBlock, 3 * kBlock}));
  EXPECT_EQ(hub.ranges[1], (std::pair<std::uint64_t, std::size_t>{7 * kBlock, 2 * kBlock}));
}

TEST_F(FetcherTest, AVerifiedReadFetchesTheWholeFileFrontToBackWhicheverBlockItAsked) {
  // Nothing is served before the whole file matched its hash, which follows the blocks from
  // the front: a read of the last block (as the kernel's readahead READs or a zip reader's
  // first look at the central directory ask) still has the file come front to back.
  FetcherConfig c = config();
  c.workers = 1;  // one request at a time: the order is the order asked
  TestFetcher f_parts(store, hub, c);
  Fetcher& f = f_parts.fetcher;
  ASSERT_TRUE(f.ensure(content, {9, 1}, patience()));
  std::lock_guard lock(hub.mu_);
  ASSERT_EQ(hub.ranges.size(), 3u);
  EXPECT_EQ(hub.ranges[0], (std::pair<std::uint64_t, std::size_t>{0, 4 * kBlock}));
  EXPECT_EQ(hub.ranges[1], (std::pair<std::uint64_t, std::size_t>{4 * kBlock, 4 * kBlock}));
  EXPECT_EQ(hub.ranges[2], (std::pair<std::uint64_t, std::size_t>{8 * kBlock, 2 * kBlock + 123}));
}

TEST_F(FetcherTest, BlocksAreStoredAsTheyArriveAndABrokenTransferKeepsThem) {
  // A range of 2 MiB arrives in 100 kB pieces: its blocks are stored in several puts while it
  // arrives, not in one at the end.
  const std::string big = make_bytes(2'000'000 + 123);
  const FileContent file = content_of(big);
  MemoryHub big_hub{big};
  FetcherConfig c = config(Serving::kStreaming);
  c.max_request = c.min_request = 4'000'000;  // one range of the whole file
  c.failure_memo = std::chrono::seconds(0);   // the next read tries again at once
  TestFetcher f_parts(store, big_hub, c);
  Fetcher& f = f_parts.fetcher;
  big_hub.fail_midway = true;  // half of it, then the connection drops, and the link is down
  big_hub.down_after_midway = true;
  EXPECT_FALSE(f.ensure(file, {0, 2001}, patience()));
  EXPECT_GE(store.puts.load(), 1);
  // What arrived before the break is stored, byte for byte (a whole number of 512 KiB puts).
  std::uint32_t kept = 0;
  auto missing = store.read_blocks(
      file.id, file.size, 0, 2001,
      [&](std::uint32_t b, std::span<const std::byte> d) {
        ++kept;
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(d.data()), d.size()),
                  big.substr(std::size_t{b} * kBlock, d.size()));
      },
      cache::BlockStore::ReadMode::kPartial);
  ASSERT_TRUE(missing);
  EXPECT_GE(kept * std::uint64_t{kBlock}, RangedGets::kStreamPutBytes);
  EXPECT_LE(kept * std::uint64_t{kBlock}, big.size() / 2);
  // The next read asks only for what is missing.
  big_hub.fail_midway = false;
  big_hub.fail = false;
  const int puts_before = store.puts.load();
  auto again = f.ensure(file, {0, 2001}, patience());
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_GE(store.puts.load() - puts_before, 2);  // the rest, in pieces again
  std::lock_guard lock(big_hub.mu_);
  ASSERT_GE(big_hub.ranges.size(), 2u);
  EXPECT_EQ(big_hub.ranges.back().first, std::uint64_t{kept} * kBlock);
}

TEST_F(FetcherTest, AReaderJoiningAQueuedPrefetchPromotesIt) {
  FetcherConfig c = config(Serving::kStreaming);
  c.workers = 1;
  TestFetcher f_parts(store, hub, c);
  Fetcher& f = f_parts.fetcher;
  hub.hold();
  f.prefetch(content, {0, 4});  // occupies the only worker
  ASSERT_TRUE(eventually([&] { return calls() == 1; }));
  f.prefetch(content, {4, 4});  // queued behind it
  std::atomic<bool> done{false};
  std::thread reader([&] {
    EXPECT_TRUE(f.ensure(content, {5, 1}, patience()));
    done = true;
  });
  ASSERT_TRUE(eventually(
      [&] { return f_parts.stats.fetch().waits_joined >= 1; }));  // joined the queued one
  hub.release();
  reader.join();
  EXPECT_TRUE(done);
  EXPECT_EQ(calls(), 2);  // the reader waited for the prefetch of 4..7, no third request
  EXPECT_GE(f_parts.stats.fetch().waits_joined, 1u);
}

TEST_F(FetcherTest, AStreamingReadNeverWaitsForTheReadaheadItStarts) {
  // The window a first read opens begins inside the read's own block; the read's block must
  // still come in a request of its own, queued before the window.
  FetcherConfig fc = config(Serving::kStreaming);
  fc.workers = 1;
  ReadaheadConfig ra;
  ra.initial_window = 8 * kBlock;
  ra.batch = 4 * kBlock;
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{fc, ra});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  EXPECT_EQ(read(r, *f, 0, 10), bytes.substr(0, 10));
  {
    std::lock_guard lock(hub.mu_);
    ASSERT_FALSE(hub.ranges.empty());
    EXPECT_EQ(hub.ranges[0], (std::pair<std::uint64_t, std::size_t>{0, kBlock}));
  }
  // The window still comes: blocks 1..8 are fetched in the background.
  ASSERT_TRUE(eventually([&] { return calls() >= 3; }));
  EXPECT_EQ(calls(), 3);  // block 0, then 1-4 and 5-8
  r.release(*f);
}

TEST_F(FetcherTest, TheReplyIsTheReadsLastUseOfTheFile) {
  // The kernel may send RELEASE the moment a read is answered, and another thread destroys the
  // open file: the read must not touch it after replying (ASan sees it if it does). Cold and
  // warm, both serving modes, each read sequential so that streaming also starts readahead.
  for (const Serving serving : {Serving::kVerified, Serving::kStreaming}) {
    MemoryStore fresh{kBlock};
    ReadaheadConfig ra;
    ra.initial_window = 4 * kBlock;
    ra.batch = 2 * kBlock;
    TestReader r_parts(fresh, hub, testing::public_scope(), ReaderConfig{config(serving), ra});
    Reader& r = r_parts.reader;
    for (int pass = 0; pass < 2; ++pass) {
      std::uint64_t off = 0;
      for (int i = 0; i < 5; ++i, off += 2 * kBlock) {
        auto f = r.open(content, false);
        std::string got;
        auto res = r.read(*f, off, 2 * kBlock, patience(), [&](std::span<const iovec> iov) {
          for (const auto& v : iov) got.append(static_cast<const char*>(v.iov_base), v.iov_len);
          r.release(*f);
          f.reset();
        });
        ASSERT_TRUE(res) << res.error().message;
        EXPECT_EQ(f, nullptr);
        EXPECT_EQ(got, bytes.substr(off, 2 * kBlock)) << "pass " << pass << " at " << off;
      }
    }
    EXPECT_EQ(fresh.pins, 0);
  }
}

// ---- what the cache is asked ------------------------------------------------------------

TEST_F(FetcherTest, AColdReadAsksTheCacheOncePerStepAndAWarmReadOnce) {
  // A cold verified read: what is stored (nothing: every block is missing, without asking which),
  // the claim, the download (which looks at its range once: another process may have stored
  // some), the hash as the last block is put, then the reply. No second look around the claim,
  // no look after the download: ensure() hands the gate's verdict back.
  FetcherConfig c = config();
  c.workers = 1;
  c.max_request = 16 * kBlock;  // the whole file in one ranged GET
  TestReader t(store, hub, testing::public_scope(), ReaderConfig{c, {}});
  auto f = t.reader.open(content, false);
  EXPECT_EQ(read(t.reader, *f, 0, 100), bytes.substr(0, 100));
  EXPECT_EQ(calls(), 1);
  EXPECT_EQ(store.states.load(), 1);
  EXPECT_EQ(store.presence_reads.load(), 1);
  EXPECT_EQ(store.verifies.load(), 1);
  EXPECT_EQ(store.serving_reads.load(), 1);
  // Warm: the gate's verdict, then one read of the store.
  EXPECT_EQ(read(t.reader, *f, 7 * kBlock, 100), bytes.substr(7 * kBlock, 100));
  EXPECT_EQ(store.serving_reads.load(), 2);
  EXPECT_EQ(store.states.load(), 1);
  EXPECT_EQ(store.presence_reads.load(), 1);
  EXPECT_EQ(t.stats.read_counts().misses, 1u);
  EXPECT_EQ(t.stats.read_counts().hits, 1u);
  t.reader.release(*f);
}

// ---- patience, fail-fast, interrupts ------------------------------------------------------

TEST_F(FetcherTest, ADownloadThatKeepsProgressingIsNotCutShort) {
  // Each request takes 150 ms and one runs at a time: the whole file takes ~450 ms, past a
  // patience of 300 ms, but never 300 ms without progress.
  FetcherConfig c = config();
  c.workers = 1;
  hub.delay = 150ms;
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{c, {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  EXPECT_EQ(read(r, *f, 0, 100, patience(300ms)), bytes.substr(0, 100));
  r.release(*f);
}

TEST_F(FetcherTest, AStalledReadFailsAfterItsPatienceAndItsRetryFailsAtOnce) {
  hub.hold();
  FetcherConfig c = config();
  c.failure_memo = 1s;
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{c, {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  auto start = Clock::now();
  EXPECT_TRUE(read(r, *f, 0, 100, patience(300ms)).starts_with("ERROR:"));
  EXPECT_LT(Clock::now() - start, 3s);  // bounded, with a wide margin
  // The kernel retries a failed read at once: it fails at once, without a new wait.
  start = Clock::now();
  EXPECT_TRUE(read(r, *f, 0, 100, patience(5s)).starts_with("ERROR:"));
  EXPECT_LT(Clock::now() - start, 200ms);
  EXPECT_GE(r_parts.stats.fetch().failed_fast, 1u);
  hub.release();
  // Once the memory of the failure expires, the read is tried again and works.
  EXPECT_TRUE(eventually([&] { return read(r, *f, 0, 100) == bytes.substr(0, 100); }));
  r.release(*f);
}

TEST_F(FetcherTest, AnInterruptedReadReturnsAtOnce) {
  hub.hold();
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  CancelFlag cancel;
  auto result = std::async(std::launch::async, [&] {
    const auto start = Clock::now();
    const std::string got = read(r, *f, 0, 100, patience(30s, &cancel));
    return std::make_pair(got, Clock::now() - start);
  });
  // The read waits for held downloads: all 3 of the file's requests are at the hub (a flight a
  // worker had not started yet when the reader left would end without reaching it).
  ASSERT_TRUE(eventually([&] { return calls() >= 3; }));
  cancel.cancel();
  ASSERT_EQ(result.wait_for(5s), std::future_status::ready);
  const auto [got, took] = result.get();
  EXPECT_TRUE(got.starts_with("ERROR:")) << got;
  EXPECT_LT(took, 2s);
  EXPECT_EQ(r_parts.stats.fetch().interrupted, 1u);
  // Nobody waits for its downloads any more: they end too, freeing their workers and
  // connections for the next reader (the hub is still holding every request).
  ASSERT_TRUE(eventually([&] { return hub.abandoned >= 3; }));
  EXPECT_EQ(hub.abandoned, 3);  // the whole file: 3 requests, none finished
  hub.release();
  r.release(*f);
}

TEST_F(FetcherTest, HubErrorsReachTheReader) {
  hub.fail = true;
  TestReader r_parts(store, hub, testing::public_scope(), ReaderConfig{config(), {}});
  Reader& r = r_parts.reader;
  auto f = r.open(content, false);
  EXPECT_TRUE(read(r, *f, 0, 100).starts_with("ERROR:"));
  // The fetcher logged the failed download: the error says so, and the filesystem, which
  // logs every failed read, does not log this cause a second time.
  auto res = r.read(*f, 0, 100, patience(), [](std::span<const iovec>) {});
  ASSERT_FALSE(res);
  EXPECT_TRUE(res.error().logged) << res.error().message;
  r.release(*f);
}

}  // namespace
}  // namespace whfs::reader
