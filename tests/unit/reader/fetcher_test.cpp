// The fetcher and the reader with in-memory doubles: single-flight, coalescing, promotion,
// verification, quarantine, a full cache, deadlines.
#include "fs/reader/fetcher.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <thread>

#include "fs/reader/reader.h"
#include "tests/unit/reader/fakes.h"

namespace whfs::reader {
namespace {

using namespace std::chrono_literals;
using testing::MemoryHub;
using testing::MemoryStore;

constexpr std::uint32_t kBlock = 1000;

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

  FetcherConfig config() {
    FetcherConfig c;
    c.workers = 4;
    c.max_request = 4 * kBlock;
    return c;
  }

  std::string read(Reader& r, OpenFile& f, std::uint64_t off, std::size_t n,
                   std::chrono::milliseconds timeout = 5000ms) {
    std::string out;
    auto res = r.read(f, off, n, Clock::now() + timeout, [&](std::span<const iovec> iov) {
      for (const auto& v : iov) out.append(static_cast<const char*>(v.iov_base), v.iov_len);
    });
    if (!res) return "ERROR:" + res.error().message;
    return out;
  }
};

TEST_F(FetcherTest, ConcurrentReadersOfOneBlockCauseOneDownload) {
  Fetcher f(store, hub, config());
  hub.hold();  // line all readers up behind one download
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      if (f.fetch(content, {3}, Clock::now() + 5s)) ok++;
    });
  }
  std::this_thread::sleep_for(100ms);
  hub.release();
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 16);
  EXPECT_EQ(hub.calls, 1);
  EXPECT_GE(f.stats().waits_joined, 1u);
}

TEST_F(FetcherTest, AdjacentMissingBlocksBecomeOneRequest) {
  Fetcher f(store, hub, config());
  ASSERT_TRUE(f.fetch(content, {1, 2, 3, 7, 8}, Clock::now() + 5s));
  EXPECT_EQ(hub.calls, 2);
  std::lock_guard lock(hub.mu_);
  std::sort(hub.ranges.begin(), hub.ranges.end());
  EXPECT_EQ(hub.ranges[0], (std::pair<std::uint64_t, std::size_t>{kBlock, 3 * kBlock}));
  EXPECT_EQ(hub.ranges[1], (std::pair<std::uint64_t, std::size_t>{7 * kBlock, 2 * kBlock}));
}

TEST_F(FetcherTest, RequestsAreCappedAtMaxRequest) {
  Fetcher f(store, hub, config());
  ASSERT_TRUE(f.fetch(content, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, Clock::now() + 5s));
  EXPECT_EQ(hub.calls, 3);  // 4 + 4 + 3 blocks
}

TEST_F(FetcherTest, AReaderJoiningAQueuedPrefetchPromotesIt) {
  FetcherConfig c = config();
  c.workers = 1;
  Fetcher f(store, hub, c);
  hub.hold();
  f.prefetch(content, {0, 4});  // occupies the only worker
  std::this_thread::sleep_for(50ms);
  f.prefetch(content, {4, 4});  // queued behind it
  std::atomic<bool> done{false};
  std::thread reader([&] {
    EXPECT_TRUE(f.fetch(content, {5}, Clock::now() + 5s));
    done = true;
  });
  std::this_thread::sleep_for(50ms);
  hub.release();
  reader.join();
  EXPECT_TRUE(done);
  EXPECT_EQ(hub.calls, 2);  // the reader waited for the prefetch of 4..7, no third request
  EXPECT_GE(f.stats().waits_joined, 1u);
}

TEST_F(FetcherTest, AReadNeverWaitsForTheReadaheadItStarts) {
  // The window a first read opens begins inside the read's own block; the read's block must
  // still come in a request of its own, queued before the window.
  FetcherConfig fc = config();
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
  for (int i = 0; i < 200 && hub.calls < 3; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(hub.calls, 3);  // block 0, then 1-4 and 5-8
  r.release(*f);
}

TEST_F(FetcherTest, TheReplyIsTheReadsLastUseOfTheFile) {
  // The kernel may send RELEASE the moment a read is answered, and another thread destroys the
  // open file: the read must not touch it after replying (ASan sees it if it does). Cold and
  // warm, each read sequential so that it also starts readahead.
  ReadaheadConfig ra;
  ra.initial_window = 4 * kBlock;
  ra.batch = 2 * kBlock;
  Reader r(store, hub, ReaderConfig{config(), ra});
  for (int pass = 0; pass < 2; ++pass) {
    std::uint64_t off = 0;
    for (int i = 0; i < 5; ++i, off += 2 * kBlock) {
      auto f = r.open(content, false);
      std::string got;
      auto res = r.read(*f, off, 2 * kBlock, Clock::now() + 5s, [&](std::span<const iovec> iov) {
        for (const auto& v : iov) got.append(static_cast<const char*>(v.iov_base), v.iov_len);
        r.release(*f);
        f.reset();
      });
      ASSERT_TRUE(res) << res.error().message;
      EXPECT_EQ(f, nullptr);
      EXPECT_EQ(got, bytes.substr(off, 2 * kBlock)) << "pass " << pass << " at " << off;
    }
  }
  EXPECT_EQ(store.pins, 0);
}

TEST_F(FetcherTest, ReaderServesExactBytesAndVerifiesTheWholeContent) {
  Reader r(store, hub, ReaderConfig{config(), {}});
  auto f = r.open(content, false);
  EXPECT_EQ(store.pins, 1);
  EXPECT_EQ(read(r, *f, 0, 10), bytes.substr(0, 10));
  EXPECT_EQ(read(r, *f, kBlock - 3, 7), bytes.substr(kBlock - 3, 7));
  EXPECT_EQ(read(r, *f, 0, bytes.size() + 50), bytes);  // clipped at the end
  EXPECT_EQ(read(r, *f, bytes.size(), 10), "");
  EXPECT_GE(store.verifies, 1);
  auto st = store.content_state(content.id);
  EXPECT_TRUE((*st)->verified);
  r.release(*f);
  EXPECT_EQ(store.pins, 0);
}

TEST_F(FetcherTest, ACorruptDownloadIsRetriedOnceThenQuarantined) {
  hub.corrupt = true;
  Reader r(store, hub, ReaderConfig{config(), {}});
  auto f = r.open(content, false);
  const std::string first = read(r, *f, 0, bytes.size());
  EXPECT_TRUE(first.starts_with("ERROR:")) << first.substr(0, 40);
  EXPECT_TRUE(r.stats().corrupt >= 2);  // the first download and the retry both mismatched
  // The second read fails at once, without another download.
  const int calls = hub.calls;
  EXPECT_TRUE(read(r, *f, 0, 100).starts_with("ERROR:"));
  EXPECT_EQ(hub.calls, calls);
}

TEST_F(FetcherTest, AFullCacheStillServesTheBytes) {
  store.full = true;
  Reader r(store, hub, ReaderConfig{config(), {}});
  auto f = r.open(content, false);
  EXPECT_EQ(read(r, *f, 2500, 3000), bytes.substr(2500, 3000));
  EXPECT_GE(r.stats().uncached, 1u);
  // One download the cache could not keep, then one direct read: not a download per retry.
  EXPECT_EQ(hub.calls, 2);
}

TEST_F(FetcherTest, AReadNeverOutlivesItsDeadline) {
  hub.hold();
  Reader r(store, hub, ReaderConfig{config(), {}});
  auto f = r.open(content, false);
  const auto start = Clock::now();
  const std::string got = read(r, *f, 0, 100, 300ms);
  EXPECT_TRUE(got.starts_with("ERROR:"));
  EXPECT_LT(Clock::now() - start, 5s);  // bounded, with a wide margin
  hub.release();
  EXPECT_EQ(read(r, *f, 0, 100), bytes.substr(0, 100));  // and it recovers
}

TEST_F(FetcherTest, HubErrorsReachTheReader) {
  hub.fail = true;
  Reader r(store, hub, ReaderConfig{config(), {}});
  auto f = r.open(content, false);
  EXPECT_TRUE(read(r, *f, 0, 100).starts_with("ERROR:"));
}

}  // namespace
}  // namespace whfs::reader
