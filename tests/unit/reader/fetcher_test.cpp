// The fetcher and the reader with in-memory doubles: single-flight, coalescing, promotion,
// verified serving, streaming, the memory path, quarantine, patience, interrupts.
#include "fs/reader/fetcher.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <future>
#include <thread>

#include "fs/reader/reader.h"
#include "tests/unit/reader/fakes.h"

namespace whfs::reader {
namespace {

using namespace std::chrono_literals;
using testing::MemoryHub;
using testing::MemoryStore;

constexpr std::uint32_t kBlock = 1000;

// Waits until `done()` holds (a state the test can see, never a fixed time), up to a bound
// generous enough for 2 loaded cores under TSan.
template <class Pred>
bool eventually(Pred done, std::chrono::milliseconds limit = 20s) {
  const auto until = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

std::string make_bytes(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 13) % 26);
  return s;
}

FileContent content_of(const std::string& bytes) {
  Hasher h(HashAlgo::kSha256);
  h.update(bytes);
  return FileContent{
      std::string(40, 'c'), "pkg/x.whl", bytes.size(),
      *cache::ContentId::from_hex(cache::ContentId::Kind::kSha256, to_hex(h.finish()))};
}

class FetcherTest : public ::testing::Test {
 protected:
  // spdlog's registry is a function-local static inside libspdlog.so, which TSan does not
  // instrument: created here, before the workers log concurrently, TSan sees its creation.
  FetcherTest() { spdlog::default_logger_raw(); }

  std::string bytes = make_bytes(10 * kBlock + 123);
  FileContent content = content_of(bytes);
  MemoryStore store{kBlock};
  MemoryHub hub{bytes};

  FetcherConfig config(Serving serving = Serving::kVerified) {
    FetcherConfig c;
    c.workers = 4;
    c.max_request = 4 * kBlock;
    c.serving = serving;
    return c;
  }

  static WaitPolicy patience(std::chrono::milliseconds p = 5000ms, CancelFlag* cancel = nullptr) {
    return WaitPolicy{p, cancel};
  }

  std::string read(Reader& r, OpenFile& f, std::uint64_t off, std::size_t n,
                   WaitPolicy wait = patience()) {
    std::string out;
    auto res = r.read(f, off, n, wait, [&](std::span<const iovec> iov) {
      for (const auto& v : iov) out.append(static_cast<const char*>(v.iov_base), v.iov_len);
    });
    if (!res) return "ERROR:" + res.error().message;
    return out;
  }

  int calls() { return hub.calls.load(); }
};

// ---- single flight and request shapes ----------------------------------------------------

TEST_F(FetcherTest, ConcurrentReadersOfOneBlockCauseOneDownload) {
  Fetcher f(store, hub, config(Serving::kStreaming));
  hub.hold();  // line all readers up behind one download
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      if (f.ensure(content, {3, 1}, patience())) ok++;
    });
  }
  // Every reader but the first has joined the first one's download, which the hub holds.
  ASSERT_TRUE(eventually([&] { return f.stats().waits_joined >= 15; }));
  hub.release();
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 16);
  EXPECT_EQ(calls(), 1);
  EXPECT_GE(f.stats().waits_joined, 1u);
}

TEST_F(FetcherTest, ConcurrentVerifiedReadersOfOneFileDownloadItOnce) {
  Fetcher f(store, hub, config());
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

TEST_F(FetcherTest, AdjacentMissingBlocksBecomeOneRequest) {
  Fetcher f(store, hub, config(Serving::kStreaming));
  ASSERT_TRUE(store.put_blocks(content.id, content.size, 4,
                               std::as_bytes(std::span(bytes)).subspan(4 * kBlock, 3 * kBlock)));
  ASSERT_TRUE(f.ensure(content, {1, 8}, patience()));  // blocks 1..8, of which 4..6 are stored
  EXPECT_EQ(calls(), 2);
  std::lock_guard lock(hub.mu_);
  std::sort(hub.ranges.begin(), hub.ranges.end());
  EXPECT_EQ(hub.ranges[0], (std::pair<std::uint64_t, std::size_t>{kBlock, 3 * kBlock}));
  EXPECT_EQ(hub.ranges[1], (std::pair<std::uint64_t, std::size_t>{7 * kBlock, 2 * kBlock}));
}

TEST_F(FetcherTest, AVerifiedReadFetchesTheWholeFileItsOwnBlocksFirst) {
  FetcherConfig c = config();
  c.workers = 1;  // one request at a time: the order is the order asked
  Fetcher f(store, hub, c);
  ASSERT_TRUE(f.ensure(content, {9, 1}, patience()));
  std::lock_guard lock(hub.mu_);
  ASSERT_EQ(hub.ranges.size(), 4u);
  EXPECT_EQ(hub.ranges[0], (std::pair<std::uint64_t, std::size_t>{9 * kBlock, kBlock + 123}));
  EXPECT_EQ(hub.ranges[1], (std::pair<std::uint64_t, std::size_t>{0, 4 * kBlock}));
  EXPECT_EQ(hub.ranges[2], (std::pair<std::uint64_t, std::size_t>{4 * kBlock, 4 * kBlock}));
  EXPECT_EQ(hub.ranges[3], (std::pair<std::uint64_t, std::size_t>{8 * kBlock, kBlock}));
}

TEST_F(FetcherTest, BlocksAreStoredAsTheyArriveAndABrokenTransferKeepsThem) {
  // A range of 2 MiB arrives in 100 kB pieces: its blocks are stored in several puts while it
  // arrives, not in one at the end.
  const std::string big = make_bytes(2'000'000 + 123);
  const FileContent file = content_of(big);
  MemoryHub big_hub{big};
  FetcherConfig c = config(Serving::kStreaming);
  c.max_request = 4'000'000;
  c.failure_memo = std::chrono::seconds(0);  // the next read tries again at once
  Fetcher f(store, big_hub, c);
  big_hub.fail_midway = true;  // half of it, then the connection drops
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
  EXPECT_GE(kept * std::uint64_t{kBlock}, Fetcher::kStreamPutBytes);
  EXPECT_LE(kept * std::uint64_t{kBlock}, big.size() / 2);
  // The next read asks only for what is missing.
  big_hub.fail_midway = false;
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
  Fetcher f(store, hub, c);
  hub.hold();
  f.prefetch(content, {0, 4});  // occupies the only worker
  ASSERT_TRUE(eventually([&] { return calls() == 1; }));
  f.prefetch(content, {4, 4});  // queued behind it
  std::atomic<bool> done{false};
  std::thread reader([&] {
    EXPECT_TRUE(f.ensure(content, {5, 1}, patience()));
    done = true;
  });
  ASSERT_TRUE(eventually([&] { return f.stats().waits_joined >= 1; }));  // joined the queued one
  hub.release();
  reader.join();
  EXPECT_TRUE(done);
  EXPECT_EQ(calls(), 2);  // the reader waited for the prefetch of 4..7, no third request
  EXPECT_GE(f.stats().waits_joined, 1u);
}

TEST_F(FetcherTest, AStreamingReadNeverWaitsForTheReadaheadItStarts) {
  // The window a first read opens begins inside the read's own block; the read's block must
  // still come in a request of its own, queued before the window.
  FetcherConfig fc = config(Serving::kStreaming);
  fc.workers = 1;
  ReadaheadConfig ra;
  ra.initial_window = 8 * kBlock;
  ra.batch = 4 * kBlock;
  Reader r(store, hub, ReaderConfig{fc, ra});
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
    Reader r(fresh, hub, ReaderConfig{config(serving), ra});
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

// ---- verified serving --------------------------------------------------------------------

TEST_F(FetcherTest, ReaderServesExactBytesOfAVerifiedContent) {
  Reader r(store, hub, ReaderConfig{config(), {}});
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
  Reader r(store, hub, ReaderConfig{config(), {}});
  auto f = r.open(content, false);
  for (int attempt = 0; attempt < 3; ++attempt) {
    for (const std::uint64_t off : {std::uint64_t(bad) - 100, std::uint64_t{0}}) {
      const std::string got = read(r, *f, off, 300);
      EXPECT_TRUE(got.starts_with("ERROR:")) << "attempt " << attempt << " at " << off;
    }
  }
  EXPECT_GE(r.stats().corrupt, 2u);  // the first download and the retry both mismatched
  // A clean download later serves the right bytes.
  hub.corrupt_at = -1;
  FetcherConfig c = config();
  c.corrupt_quarantine = 0s;
  Reader later(store, hub, ReaderConfig{c, {}});
  auto g = later.open(content, false);
  EXPECT_EQ(read(later, *g, bad - 100, 300), bytes.substr(bad - 100, 300));
  later.release(*g);
  r.release(*f);
}

TEST_F(FetcherTest, ACorruptDownloadIsQuarantinedWithoutAnotherDownload) {
  hub.corrupt = true;
  Reader r(store, hub, ReaderConfig{config(), {}});
  auto f = r.open(content, false);
  EXPECT_TRUE(read(r, *f, 0, bytes.size()).starts_with("ERROR:"));
  const int before = calls();
  EXPECT_TRUE(read(r, *f, 0, 100).starts_with("ERROR:"));
  EXPECT_EQ(calls(), before);
  EXPECT_GE(r.stats().failed_fast, 1u);
  r.release(*f);
}

TEST_F(FetcherTest, StreamingReportsACorruptDownloadSoTheKernelDropsItsPages) {
  hub.corrupt_at = 5 * kBlock + 17;
  Reader r(store, hub, ReaderConfig{config(Serving::kStreaming), {}});
  std::atomic<int> reported{0};
  r.set_corrupt_listener([&](const cache::ContentId& id) {
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
  Reader r(store, hub, ReaderConfig{config(), {}});
  auto f = r.open(content, false);
  EXPECT_EQ(read(r, *f, 3 * kBlock, 100), bytes.substr(3 * kBlock, 100));
  EXPECT_GE(r.stats().corrupt, 1u);
  EXPECT_GE(calls(), 1);
  r.release(*f);
}

TEST_F(FetcherTest, AContentVerifiedElsewhereIsServedAfterOneHashHere) {
  store.plant(content.id, bytes);
  Reader r(store, hub, ReaderConfig{config(), {}});
  auto f = r.open(content, false);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(read(r, *f, 100, 50), bytes.substr(100, 50));
  EXPECT_EQ(store.hashed, 1);
  EXPECT_EQ(calls(), 0);
  r.release(*f);
  FetcherConfig trusting = config();
  trusting.trust_cache = true;
  Reader t(store, hub, ReaderConfig{trusting, {}});
  auto g = t.open(content, false);
  EXPECT_EQ(read(t, *g, 100, 50), bytes.substr(100, 50));
  EXPECT_EQ(store.hashed, 1);  // trusted: not hashed again
  t.release(*g);
}

TEST_F(FetcherTest, AContentLostFromUnderAReaderIsDownloadedAgain) {
  Reader r(store, hub, ReaderConfig{config(), {}});
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
    Reader r(store, hub, ReaderConfig{config(), {}});
    auto f = r.open(content, false);
    EXPECT_EQ(read(r, *f, 0, 100), bytes.substr(0, 100));
    r.release(*f);
  }
  store.corrupt_block(content.id, 2);  // the record still says "verified"
  Reader next(store, hub, ReaderConfig{config(), {}});
  auto g = next.open(content, false);
  EXPECT_EQ(read(next, *g, 2 * kBlock, 100), bytes.substr(2 * kBlock, 100));
  EXPECT_GE(next.stats().corrupt, 1u);
  next.release(*g);
}

TEST_F(FetcherTest, AStoreThatRefusesEveryPutStillServesVerifiedBytes) {
  for (const auto kind : {cache::CacheError::Kind::kBusy, cache::CacheError::Kind::kReadOnly}) {
    MemoryStore refusing{kBlock};
    refusing.refuse = kind;
    Reader r(refusing, hub, ReaderConfig{config(), {}});
    auto f = r.open(content, false);
    EXPECT_EQ(read(r, *f, 3000, 2000), bytes.substr(3000, 2000));
    EXPECT_EQ(r.stats().in_memory, 1u);
    r.release(*f);
  }
}

// ---- the memory path -------------------------------------------------------------------

TEST_F(FetcherTest, AContentTheCacheCannotKeepIsVerifiedAndServedFromMemory) {
  store.full = true;
  Reader r(store, hub, ReaderConfig{config(), {}});
  auto f = r.open(content, false);
  EXPECT_EQ(read(r, *f, 2500, 3000), bytes.substr(2500, 3000));
  EXPECT_EQ(read(r, *f, 0, bytes.size()), bytes);
  EXPECT_GE(r.stats().uncached, 1u);
  EXPECT_EQ(r.stats().in_memory, 1u);
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
  Reader r(store, hub, ReaderConfig{config(), {}});
  auto f = r.open(content, false);
  EXPECT_TRUE(read(r, *f, 7 * kBlock - 10, 20).starts_with("ERROR:"));
  EXPECT_TRUE(read(r, *f, 0, 20).starts_with("ERROR:"));
  r.release(*f);
}

TEST_F(FetcherTest, AContentTooLargeForMemoryFailsInsteadOfServingUnverifiedBytes) {
  store.full = true;
  FetcherConfig c = config();
  c.memory_limit = bytes.size() - 1;
  Reader r(store, hub, ReaderConfig{c, {}});
  auto f = r.open(content, false);
  const std::string got = read(r, *f, 0, 100);
  EXPECT_TRUE(got.starts_with("ERROR:")) << got;
  EXPECT_NE(got.find("larger than the memory"), std::string::npos) << got;
  r.release(*f);
}

// ---- patience, fail-fast, interrupts ------------------------------------------------------

TEST_F(FetcherTest, ADownloadThatKeepsProgressingIsNotCutShort) {
  // Each request takes 150 ms and one runs at a time: the whole file takes ~450 ms, past a
  // patience of 300 ms, but never 300 ms without progress.
  FetcherConfig c = config();
  c.workers = 1;
  hub.delay = 150ms;
  Reader r(store, hub, ReaderConfig{c, {}});
  auto f = r.open(content, false);
  EXPECT_EQ(read(r, *f, 0, 100, patience(300ms)), bytes.substr(0, 100));
  r.release(*f);
}

TEST_F(FetcherTest, AStalledReadFailsAfterItsPatienceAndItsRetryFailsAtOnce) {
  hub.hold();
  FetcherConfig c = config();
  c.failure_memo = 1s;
  Reader r(store, hub, ReaderConfig{c, {}});
  auto f = r.open(content, false);
  auto start = Clock::now();
  EXPECT_TRUE(read(r, *f, 0, 100, patience(300ms)).starts_with("ERROR:"));
  EXPECT_LT(Clock::now() - start, 3s);  // bounded, with a wide margin
  // The kernel retries a failed read at once: it fails at once, without a new wait.
  start = Clock::now();
  EXPECT_TRUE(read(r, *f, 0, 100, patience(5s)).starts_with("ERROR:"));
  EXPECT_LT(Clock::now() - start, 200ms);
  EXPECT_GE(r.stats().failed_fast, 1u);
  hub.release();
  // Once the memory of the failure expires, the read is tried again and works.
  EXPECT_TRUE(eventually([&] { return read(r, *f, 0, 100) == bytes.substr(0, 100); }));
  r.release(*f);
}

TEST_F(FetcherTest, AnInterruptedReadReturnsAtOnce) {
  hub.hold();
  Reader r(store, hub, ReaderConfig{config(), {}});
  auto f = r.open(content, false);
  CancelFlag cancel;
  auto result = std::async(std::launch::async, [&] {
    const auto start = Clock::now();
    const std::string got = read(r, *f, 0, 100, patience(30s, &cancel));
    return std::make_pair(got, Clock::now() - start);
  });
  ASSERT_TRUE(eventually([&] { return calls() >= 1; }));  // the read waits for held downloads
  cancel.cancel();
  ASSERT_EQ(result.wait_for(5s), std::future_status::ready);
  const auto [got, took] = result.get();
  EXPECT_TRUE(got.starts_with("ERROR:")) << got;
  EXPECT_LT(took, 2s);
  EXPECT_EQ(r.stats().interrupted, 1u);
  // Nobody waits for its downloads any more: they end too, freeing their workers and
  // connections for the next reader (the hub is still holding every request).
  ASSERT_TRUE(eventually([&] { return hub.abandoned >= 3; }));
  EXPECT_EQ(hub.abandoned, 3);  // the whole file: 3 requests, none finished
  hub.release();
  r.release(*f);
}

TEST_F(FetcherTest, HubErrorsReachTheReader) {
  hub.fail = true;
  Reader r(store, hub, ReaderConfig{config(), {}});
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
