// CurlHubClient against the Hub emulator's faults: rate limits, 5xx, resets, truncated and
// stalled bodies, cancel, a Hub that is down, many parallel ranges, proxies.
#include "tests/unit/hub/hub_client_fixture.h"

namespace whfs::hub {
namespace {

using namespace std::chrono_literals;
using namespace testing_hub;
using nlohmann::json;
using test::FakeHub;

TEST_F(HubClientTest, RetriesRateLimitsAnd5xxThenSucceeds) {
  auto c = make_hub_client(config());
  hub_->fault({{"kind", "status"},
               {"status", 429},
               {"retry_after", 0},
               {"count", 1},
               {"path", "/revision/"}});
  hub_->fault({{"kind", "status"}, {"status", 503}, {"count", 2}, {"path", "/revision/"}});
  const auto retries = c->stats().retries.load();
  auto r = c->resolve_revision("main", in(30s));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(c->stats().retries.load() - retries, 3u);
  for (int code : {500, 502, 504, 408}) {
    hub_->fault({{"kind", "status"}, {"status", code}, {"count", 1}, {"server", "cdn"}});
  }
  EXPECT_EQ(read_all(*c, file(big())), source(big()));
}

TEST_F(HubClientTest, PersistentRateLimitEndsAsRateLimited) {
  auto c = make_hub_client(config());
  hub_->fault({{"kind", "status"}, {"status", 429}, {"retry_after", 30}, {"path", "/revision/"}});
  auto r = c->resolve_revision("main", in(5s));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, HubErrorKind::kRateLimited);
}

TEST_F(HubClientTest, ResetAndTruncatedBodiesAreResumedNeverReturnedShort) {
  auto c = make_hub_client(config());
  hub_->fault({{"kind", "reset"}, {"server", "cdn"}, {"after_bytes", 100000}, {"count", 1}});
  hub_->fault({{"kind", "truncate"}, {"server", "cdn"}, {"after_bytes", 50000}, {"count", 1}});
  {
    // Across the resumed requests, the filled front never goes back.
    const FileRef wheel = file(big());
    std::string out(wheel.size, '\0');
    std::size_t last = 0;
    bool monotonic = true;
    auto note = [&](std::size_t filled) {
      monotonic = monotonic && filled > last;
      last = filled;
    };
    ASSERT_TRUE(read_range(*c, wheel, 0, std::as_writable_bytes(std::span(out)), in(60s), note));
    EXPECT_TRUE(monotonic);
    EXPECT_EQ(last, out.size());
    EXPECT_EQ(out, source(big()));
  }
  // Every request truncated: an error, and nothing returned as data.
  hub_->fault({{"kind", "truncate"}, {"server", "cdn"}, {"after_bytes", 0}});
  std::string buf(100000, '\0');
  auto r = read_range(*c, file(big()), 0, std::as_writable_bytes(std::span(buf)), in(20s));
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().kind == HubErrorKind::kCorrupt ||
              r.error().kind == HubErrorKind::kUnavailable)
      << r.error().describe();
}

TEST_F(HubClientTest, AStreamedRangeHandsOnEachByteOnceInOrderAcrossResumes) {
  auto c = make_hub_client(config());
  hub_->fault({{"kind", "reset"}, {"server", "cdn"}, {"after_bytes", 70000}, {"count", 1}});
  hub_->fault({{"kind", "truncate"}, {"server", "cdn"}, {"after_bytes", 30000}, {"count", 1}});
  const FileRef wheel = file(big());
  const std::uint64_t offset = 12345, length = wheel.size - offset - 1000;
  std::string got;  // no buffer of the range is given: the bytes come as they arrive
  std::size_t pieces = 0;
  auto take = [&](std::span<const std::byte> bytes) {
    got.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    ++pieces;
  };
  ASSERT_TRUE(c->stream_range(wheel, offset, length, in(60s), nullptr, take));
  EXPECT_EQ(got, source(big()).substr(offset, length));  // once each, in order, resumed
  EXPECT_GT(pieces, 1u);
  // Past the end of the file: refused before any request.
  got.clear();
  auto past = c->stream_range(wheel, wheel.size - 5, 10, in(5s), nullptr, take);
  ASSERT_FALSE(past);
  EXPECT_TRUE(got.empty());
}

TEST_F(HubClientTest, AnIgnoredRangeIsHandled) {
  auto c = make_hub_client(config());
  hub_->fault({{"kind", "ignore_range"}, {"server", "cdn"}, {"count", 2}});
  const FileRef wheel = file(big());
  std::string buf(3000, '\0');
  ASSERT_TRUE(read_range(*c, wheel, 12345, std::as_writable_bytes(std::span(buf)), in(30s)));
  EXPECT_EQ(buf, source(big()).substr(12345, 3000));
}

TEST_F(HubClientTest, AStallEndsAsTimeoutWithinTheDeadline) {
  auto cfg = config();
  cfg.transport.http.low_speed_time = 1s;
  auto c = make_hub_client(cfg);
  hub_->fault({{"kind", "stall"}, {"path", "/revision/"}, {"seconds", 60}});
  const auto start = Clock::now();
  auto r = c->resolve_revision("main", in(3s));
  const auto took = Clock::now() - start;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, HubErrorKind::kTimeout) << r.error().describe();
  // An upper bound with a wide margin: the point is that it ends, not how fast.
  EXPECT_LT(took, 10s);
  hub_->clear_faults();
  hub_->fault({{"kind", "stall_body"}, {"server", "cdn"}, {"after_bytes", 1000}, {"seconds", 60}});
  std::string buf(200000, '\0');
  auto rr = read_range(*c, file(big()), 0, std::as_writable_bytes(std::span(buf)), in(3s));
  ASSERT_FALSE(rr);
  EXPECT_EQ(rr.error().kind, HubErrorKind::kTimeout) << rr.error().describe();
}

TEST_F(HubClientTest, AStallMidBodyIsAskedAgainAtOnceOnAFreshConnection) {
  // The CDN's first two answers stop half-way and hang (the Xet bridge does this in the
  // wild). Each stall is cut at the stall limit and the rest asked at once on a new
  // connection: no backoff (here a 5 s one would show), the bytes already received are kept.
  auto cfg = config();
  cfg.transport.http.low_speed_time = 1s;
  cfg.transport.retry = RetryPolicy{6, 5000ms, 8000ms};
  auto c = make_hub_client(cfg);
  const FileRef wheel = file(big());
  hub_->fault({{"kind", "stall_body"},
               {"server", "cdn"},
               {"after_bytes", wheel.size / 4},
               {"count", 2},
               {"seconds", 60}});
  const auto start = Clock::now();
  EXPECT_EQ(read_all(*c, wheel, in(60s)), source(big()));
  const auto took = Clock::now() - start;
  // Two stall limits and a margin; the old 5 s backoff alone would exceed it.
  EXPECT_LT(took, 4900ms);
  EXPECT_EQ(c->stats().retries.load(), 2u);  // the two stalls, each asked again once
}

TEST_F(HubClientTest, TheTokenNeverCrossesANetworkInClearText) {
  // http:// to a host that is not this machine (as far as the client can tell: the test proxy
  // maps the name to loopback): no Authorization header, unless the user opts in.
  test::TempDir dir;
  const std::string token_file = dir.path() + "/token";
  std::ofstream(token_file) << "hf_good\n";
  ::chmod(token_file.c_str(), 0600);
  test::Proxy proxy({"--resolve", "wheel-mirror.example=127.0.0.1"});
  const auto port = hub_->hub_url().substr(hub_->hub_url().rfind(':'));
  for (const bool opt_in : {false, true}) {
    auto cfg = config();
    cfg.transport.endpoint = "http://wheel-mirror.example" + port;
    cfg.transport.http.proxy = proxy.url();
    cfg.transport.token_file = token_file;
    cfg.transport.allow_insecure_token = opt_in;
    auto c = make_hub_client(cfg);
    const std::size_t before = proxy.log().size();
    ASSERT_TRUE(c->resolve_revision("main", in(10s)));  // a public repo: fine without a token
    const auto log = proxy.log();
    ASSERT_GT(log.size(), before);
    for (std::size_t i = before; i < log.size(); ++i) {
      EXPECT_EQ(log[i]["auth"].get<bool>(), opt_in) << log[i].dump();
    }
  }
  // To this machine over http (the emulator, loopback): sent, as before.
  auto cfg = config("acme/private");
  cfg.transport.token_file = token_file;
  EXPECT_TRUE(make_hub_client(cfg)->resolve_revision("main", in(10s)));
}

TEST_F(HubClientTest, AListingIsBoundedNeverTruncated) {
  auto cfg = config();
  cfg.max_entries = 10;  // pages of 7: the second page passes it
  auto c = make_hub_client(cfg);
  auto r = c->list_folder(head(), "", true, in(30s));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, "TooManyEntries") << r.error().describe();
}

TEST_F(HubClientTest, CancelEndsAStalledCallPromptly) {
  auto c = make_hub_client(config());
  hub_->fault({{"kind", "stall"}, {"path", "/revision/"}, {"seconds", 60}});
  std::thread canceller([&] {
    std::this_thread::sleep_for(300ms);
    c->cancel();
  });
  auto r = c->resolve_revision("main", in(30s));
  canceller.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, HubErrorKind::kCancelled);
}

TEST_F(HubClientTest, HubDownIsUnavailable) {
  auto c = make_hub_client(config());
  hub_->control("/down", {{"server", "hub"}});
  auto r = c->resolve_revision("main", in(5s));
  hub_->control("/up", {{"server", "hub"}});
  ASSERT_FALSE(r);
  // A refused connection is told as such, not as a timeout because the deadline came.
  EXPECT_EQ(r.error().kind, HubErrorKind::kUnavailable) << r.error().describe();
  EXPECT_TRUE(r.error().short_cause().starts_with("connection refused")) << r.error().short_cause();
  EXPECT_EQ(r.error().short_cause().find("http"), std::string::npos) << r.error().short_cause();
  EXPECT_TRUE(c->resolve_revision("main", in(10s)));
}

TEST_F(HubClientTest, ManyParallelRangesOverReusedConnections) {
  auto c = make_hub_client(config());
  const FileRef wheel = file(big());
  const std::string src = source(big());
  const std::size_t before = hub_->log().size();
  constexpr int kThreads = 8;
  constexpr int kPerThread = 12;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::uint64_t off =
            (static_cast<std::uint64_t>(t * kPerThread + i) * 32768) % (wheel.size - 32768);
        std::string buf(32768, '\0');
        auto r = read_range(*c, wheel, off, std::as_writable_bytes(std::span(buf)), in(60s));
        if (!r || buf != src.substr(off, buf.size())) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  std::set<int> cdn_conns;
  int cdn_requests = 0;
  for (const auto& e : log_since(before)) {
    if (e["server"] == "cdn") {
      ++cdn_requests;
      cdn_conns.insert(e["peer"].get<int>());
    }
  }
  EXPECT_GE(cdn_requests, kThreads * kPerThread);
  EXPECT_LE(cdn_conns.size(), static_cast<std::size_t>(kThreads) + 4) << "connections not reused";
}

TEST_F(HubClientTest, ProxyOptionAndEnvironment) {
  test::Proxy proxy;
  auto cfg = config();
  cfg.transport.http.proxy = proxy.url();
  auto c = make_hub_client(cfg);
  ASSERT_TRUE(c->resolve_revision("main", in(10s)));
  EXPECT_EQ(read_all(*c, file("README.md")), source("README.md"));
  const auto via_option = proxy.log().size();
  EXPECT_GE(via_option, 3u);

  ::setenv("http_proxy", proxy.url().c_str(), 1);
  ::unsetenv("no_proxy");
  ::unsetenv("NO_PROXY");
  auto env_client = make_hub_client(config());
  ASSERT_TRUE(env_client->resolve_revision("main", in(10s)));
  const auto via_env = proxy.log().size();
  EXPECT_GT(via_env, via_option);
  ::setenv("NO_PROXY", "127.0.0.1,localhost", 1);
  auto direct = make_hub_client(config());
  ASSERT_TRUE(direct->resolve_revision("main", in(10s)));
  EXPECT_EQ(proxy.log().size(), via_env);
  ::unsetenv("http_proxy");
  ::unsetenv("NO_PROXY");
}

}  // namespace
}  // namespace whfs::hub
