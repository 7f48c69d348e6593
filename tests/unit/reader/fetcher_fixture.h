#pragma once
// The fetcher tests' fixture: a file of 10 blocks and a bit, an in-memory store and hub, and
// helpers that wait for states (never for a fixed time).

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <string>
#include <thread>

#include "fs/common/hash.h"
#include "fs/reader/fetcher.h"
#include "fs/reader/reader.h"
#include "fs/reader/serving_gate.h"
#include "tests/unit/reader/fakes.h"

namespace whfs::reader::testing_fetcher {

using namespace std::chrono_literals;
using testing::MemoryHub;
using testing::MemoryStore;

inline constexpr std::uint32_t kBlock = 1000;

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

inline std::string make_bytes(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 13) % 26);
  return s;
}

inline FileContent content_of(const std::string& bytes) {
  Hasher h(HashAlgo::kSha256);
  h.update(bytes);
  return FileContent{
      std::string(40, 'c'), "pkg/x.whl", bytes.size(),
      *cache::ContentId::from_hex(cache::ContentId::Kind::kSha256, to_hex(h.finish()))};
}

// The trust of a cache only this user can have written: its records are taken at their word.
inline CacheTrust believed() { return CacheTrust{true, "this test's private cache"}; }

// A fetcher as the daemon builds one: the read path's figures, the serving gate (whose trust is
// `trust`), then the fetcher over them.
struct TestFetcher {
  TestFetcher(cache::BlockStore& store, hub::HubClient& hub, const FetcherConfig& config,
              const cache::AccessScope& scope = testing::public_scope(), CacheTrust trust = {})
      : gate(scope, std::move(trust), config, stats), fetcher(store, hub, gate, stats, config) {}
  ReadPathStats stats;
  ServingGate gate;
  Fetcher fetcher;
};

// The same for a reader.
struct TestReader {
  TestReader(cache::BlockStore& store, hub::HubClient& hub, const cache::AccessScope& scope,
             const ReaderConfig& config, CacheTrust trust = {})
      : gate(scope, std::move(trust), config.fetcher, stats),
        reader(store, hub, gate, stats, config) {}
  ReadPathStats stats;
  ServingGate gate;
  Reader reader;
};

class FetcherTest : public ::testing::Test {
 protected:
  // spdlog's registry is a function-local static inside libspdlog.so, which TSan does not
  // instrument: created here, before the workers log concurrently, TSan sees its creation.
  FetcherTest() { spdlog::default_logger_raw(); }

  std::string bytes = make_bytes(10 * kBlock + 123);
  FileContent content = content_of(bytes);
  MemoryStore store{kBlock};
  MemoryHub hub{bytes};
  ReadPathStats stats;  // the parts tested alone record here

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

}  // namespace whfs::reader::testing_fetcher
