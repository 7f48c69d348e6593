// Block cache benchmarks (Google Benchmark; built, never run by ctest):
//   BM_CacheGet/pages/threads   read_blocks of one random block from a warm 256 MiB cache
//   BM_FileGet/pages/threads    pread of the same number of bytes from a warm 256 MiB file
//   BM_CachePut/pages/batch     put_blocks of `batch` consecutive blocks (one write txn)
//   BM_CachePutEvicting         the same into a 256 MiB cap, so eviction runs all along
//   BM_LmdbPut/writemap         raw LMDB: 32 KiB values with MDB_RESERVE, with/without
//                               MDB_WRITEMAP (the flag the cache does not use)
// Latency counters (p50_us, p99_us) are per call, averaged over threads.
//
//   cache_bench --benchmark_filter=Get --benchmark_min_time=1
// Put benchmarks write several GiB under $TMPDIR (page cache; no fsync).

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "cache/block_cache.h"
#include "cache/lmdb.h"
#include "fs/common/hash.h"

namespace {

namespace fs = std::filesystem;
using whfs::cache::BlockCache;
using whfs::cache::ContentId;
using whfs::cache::Options;

constexpr std::uint64_t kDataBytes = std::uint64_t{256} << 20;
constexpr std::uint64_t kContentBytes = std::uint64_t{8} << 20;

fs::path bench_root() {
  const char* tmp = std::getenv("TMPDIR");
  static const fs::path root =
      fs::path(tmp ? tmp : "/tmp") / ("whfs-cache-bench-" + std::to_string(::getpid()));
  return root;
}

std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  return out;
}

ContentId id_of(std::span<const std::byte> bytes) {
  whfs::Hasher h(whfs::HashAlgo::kSha256);
  h.update(bytes);
  return *ContentId::from_digest(ContentId::Kind::kSha256, h.finish());
}

std::unique_ptr<BlockCache> open_cache(const fs::path& dir, std::uint64_t cap,
                                       std::uint32_t pages) {
  Options o;
  o.dir = dir;
  o.cap_bytes = cap;
  o.block_pages = pages;
  auto c = BlockCache::open(o);
  if (!c) {
    std::fprintf(stderr, "open %s: %s\n", dir.c_str(), c.error().message.c_str());
    std::abort();
  }
  return std::move(*c);
}

// A warm cache holding kDataBytes in contents of kContentBytes, one per block size.
struct Populated {
  std::unique_ptr<BlockCache> cache;
  std::vector<ContentId> ids;
};

Populated& populated(std::uint32_t pages) {
  static std::mutex mu;
  static std::map<std::uint32_t, std::unique_ptr<Populated>> all;
  std::lock_guard lk(mu);
  auto& p = all[pages];
  if (p) return *p;
  p = std::make_unique<Populated>();
  const fs::path dir = bench_root() / ("get-" + std::to_string(pages));
  fs::remove_all(dir);
  p->cache = open_cache(dir, 2 * kDataBytes, pages);
  for (std::uint64_t i = 0; i < kDataBytes / kContentBytes; ++i) {
    const auto bytes = random_bytes(kContentBytes, i);
    p->ids.push_back(id_of(bytes));
    if (!p->cache->put_blocks(p->ids.back(), bytes.size(), 0, bytes)) std::abort();
  }
  return *p;
}

// The same bytes in a plain file, read once so the page cache holds them.
int warm_file() {
  static std::once_flag once;
  static int fd = -1;
  std::call_once(once, [] {
    fs::create_directories(bench_root());
    const fs::path path = bench_root() / "plain.bin";
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    for (std::uint64_t i = 0; i < kDataBytes / kContentBytes; ++i) {
      const auto bytes = random_bytes(kContentBytes, i);
      if (::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
        std::abort();
      }
    }
    std::vector<char> buf(1 << 20);
    for (off_t off = 0; ::pread(fd, buf.data(), buf.size(), off) > 0; off += buf.size()) {
    }
  });
  return fd;
}

// Per-call latency, reported as p50/p99 counters.
class Latencies {
 public:
  explicit Latencies(std::size_t reserve) { ns_.reserve(reserve); }
  void add(std::chrono::steady_clock::duration d) {
    ns_.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  }
  void report(benchmark::State& state) {
    if (ns_.empty()) return;
    std::sort(ns_.begin(), ns_.end());
    auto at = [&](double q) { return ns_[static_cast<std::size_t>(q * (ns_.size() - 1))] / 1e3; };
    state.counters["p50_us"] = benchmark::Counter(at(0.50), benchmark::Counter::kAvgThreads);
    state.counters["p99_us"] = benchmark::Counter(at(0.99), benchmark::Counter::kAvgThreads);
  }

 private:
  std::vector<std::int64_t> ns_;
};

void BM_CacheGet(benchmark::State& state) {
  const auto pages = static_cast<std::uint32_t>(state.range(0));
  Populated& p = populated(pages);
  const std::uint32_t bs = p.cache->block_size();
  const std::uint32_t blocks = static_cast<std::uint32_t>((kContentBytes + bs - 1) / bs);
  std::mt19937_64 rng(state.thread_index() + 1);
  Latencies lat(1 << 20);
  std::uint64_t sink = 0;
  char out[4096];
  for (auto _ : state) {
    const ContentId& id = p.ids[rng() % p.ids.size()];
    const auto index = static_cast<std::uint32_t>(rng() % blocks);
    const auto t0 = std::chrono::steady_clock::now();
    auto missing = p.cache->read_blocks(
        id, kContentBytes, index, 1,
        [&](auto, auto data) {
          // What a FUSE read of 4 KiB does with the block: copy 4 KiB out of it.
          std::memcpy(out, data.data(), std::min<std::size_t>(sizeof out, data.size()));
          sink += static_cast<unsigned char>(out[0]);
        },
        whfs::cache::BlockStore::ReadMode::kPartial);
    lat.add(std::chrono::steady_clock::now() - t0);
    if (!missing || !missing->empty()) state.SkipWithError("miss");
  }
  benchmark::DoNotOptimize(sink);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bs);
  lat.report(state);
}

void BM_FileGet(benchmark::State& state) {
  const auto pages = static_cast<std::uint32_t>(state.range(0));
  const std::size_t bs = pages * 4096 - 24;
  const int fd = warm_file();
  std::vector<char> buf(bs);
  std::mt19937_64 rng(state.thread_index() + 1);
  Latencies lat(1 << 20);
  for (auto _ : state) {
    const off_t off = static_cast<off_t>(rng() % (kDataBytes / bs) * bs);
    const auto t0 = std::chrono::steady_clock::now();
    if (::pread(fd, buf.data(), bs, off) != static_cast<ssize_t>(bs)) state.SkipWithError("pread");
    lat.add(std::chrono::steady_clock::now() - t0);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bs);
  lat.report(state);
}

// Writers put new contents `batch` blocks per call; each benchmark run gets a fresh cache.
void put_bench(benchmark::State& state, std::uint32_t pages, std::uint32_t batch, std::uint64_t cap,
               const std::string& name) {
  static std::mutex mu;
  static std::unique_ptr<BlockCache> cache;
  const fs::path dir = bench_root() / name;
  if (state.thread_index() == 0) {
    std::lock_guard lk(mu);
    fs::remove_all(dir);
    cache = open_cache(dir, cap, pages);
  }
  // Other threads wait for thread 0's setup at the first iteration barrier of the loop.
  const auto data = random_bytes(std::size_t{64} << 20, 1000 + state.thread_index());
  Latencies lat(1 << 16);
  std::uint64_t n = 0;
  std::uint64_t bytes = 0;
  for (auto _ : state) {
    BlockCache& c = *cache;
    const std::size_t len = std::min<std::size_t>(std::size_t{batch} * c.block_size(), data.size());
    // A fresh id per call: the content is never complete, so nothing is hashed.
    std::array<std::uint8_t, 32> digest{};
    const std::uint64_t tag = (static_cast<std::uint64_t>(state.thread_index()) << 48) | n++;
    std::memcpy(digest.data(), &tag, sizeof tag);
    const auto id = *ContentId::from_digest(ContentId::Kind::kSha256, digest);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = c.put_blocks(id, std::uint64_t{1} << 40, 0, std::span(data).first(len));
    lat.add(std::chrono::steady_clock::now() - t0);
    if (!r) state.SkipWithError(r.error().message.c_str());
    bytes += len;
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  lat.report(state);
}

void BM_CachePut(benchmark::State& state) {
  put_bench(state, static_cast<std::uint32_t>(state.range(0)),
            static_cast<std::uint32_t>(state.range(1)), std::uint64_t{16} << 30, "put");
}

void BM_CachePutEvicting(benchmark::State& state) {
  put_bench(state, 8, static_cast<std::uint32_t>(state.range(0)), kDataBytes, "put-evict");
}

void BM_LmdbPut(benchmark::State& state) {
  namespace lmdb = whfs::cache::lmdb;
  const bool writemap = state.range(0) != 0;
  const fs::path dir = bench_root() / (writemap ? "raw-writemap" : "raw");
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto env = lmdb::Env::open(dir.string(),
                             {.map_size = std::size_t{16} << 30,
                              .max_dbs = 2,
                              .flags = MDB_NOSYNC | MDB_NOTLS | (writemap ? MDB_WRITEMAP : 0u)});
  if (!env) return state.SkipWithError(env.error().message().c_str());
  const auto payload = random_bytes(32752, 1);  // 8 pages with LMDB's header
  lmdb::Dbi dbi;
  {
    auto txn = lmdb::Txn::begin(*env, 0);
    dbi = *txn->open_dbi(nullptr, 0);
    if (!txn->commit()) return state.SkipWithError("open");
  }
  std::uint64_t key = 0;
  for (auto _ : state) {
    auto txn = lmdb::Txn::begin(*env, 0);
    for (int i = 0; i < 128; ++i, ++key) {
      const std::uint64_t be = __builtin_bswap64(key);
      auto slot =
          txn->reserve_new(dbi, {reinterpret_cast<const std::byte*>(&be), 8}, payload.size());
      std::memcpy((*slot)->data(), payload.data(), payload.size());
    }
    if (!txn->commit()) state.SkipWithError("commit");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 128 * payload.size());
}

// The cache and the local file are read with the same sizes and threads, to be compared.
void same_reads(benchmark::internal::Benchmark* b) {
  b->ArgName("pages")->Arg(8)->Arg(16)->Arg(64)->Arg(256);
  b->Threads(1)->Threads(4)->Threads(16)->UseRealTime();
}
BENCHMARK(BM_CacheGet)->Apply(same_reads);
BENCHMARK(BM_FileGet)->Apply(same_reads);
BENCHMARK(BM_CachePut)
    ->ArgNames({"pages", "batch"})
    ->Args({8, 1})
    ->Args({8, 128})
    ->Args({16, 64})
    ->Args({64, 16})
    ->Args({256, 4})
    ->Threads(1)
    ->Threads(4)
    ->UseRealTime();
BENCHMARK(BM_CachePutEvicting)->ArgName("batch")->Arg(128)->Threads(1)->UseRealTime();
BENCHMARK(BM_LmdbPut)->ArgName("writemap")->Arg(0)->Arg(1)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  fs::remove_all(bench_root(), ec);
  return 0;
}
