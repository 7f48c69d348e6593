// HubTransport, the one Hub transport of reads and publishing, against the Hub emulator: the
// token's reach across redirects, which redirects are followed, and the retry policy (5xx and
// 429 retried, with the server's own wait; 4xx not; the deadline and cancel() obeyed).
#include "fs/hub/transport.h"

#include <sys/stat.h>

#include "tests/unit/hub/hub_client_fixture.h"

namespace whfs::hub {
namespace {

using namespace std::chrono_literals;
using namespace testing_hub;

// The transport is generic in its callers' error type; here errors are plain words.
using Out = Outcome<std::string>;

class TransportTest : public HubClientTest {
 protected:
  void SetUp() override {
    std::ofstream(token_file()) << "hf_good\n";
    ::chmod(token_file().c_str(), 0600);
  }

  std::string token_file() const { return dir_.path() + "/token"; }

  TransportConfig config(bool token = false) const {
    TransportConfig c;
    c.endpoint = hub_->hub_url();
    c.token_file = token ? token_file() : dir_.path() + "/absent";
    c.retry = RetryPolicy{6, 10ms, 50ms};
    c.http.low_speed_time = 2s;
    c.http.connect_timeout = 2s;
    return c;
  }

  static std::string resolve_url(const std::string& repo, const std::string& path) {
    const std::string commit = hub_->control("/state")["repos"][repo]["head"].get<std::string>();
    return hub_->hub_url() + "/datasets/" + repo + "/resolve/" + commit + "/" + encode_path(path);
  }
  static std::string revision_url(const std::string& revision) {
    return hub_->hub_url() + "/api/datasets/" + kRepo + "/revision/" + revision;
  }

  // The response that ended an exchange: its status, and the URL it came from.
  struct Answer {
    int status = 0;
    std::string url;
  };

  // One GET of `url`: done on 2xx, the transport's rule for any other status.
  static Out get(HubTransport& t, const std::string& url, const ExchangeOptions& options,
                 Answer* got) {
    const ExchangeWords<std::string> words{
        [](const TransferError& e) { return "transfer: " + e.message; },
        [] { return std::string("too many redirects"); }};
    return t.exchange<std::string>(
        url, options,
        [](HttpRequest& req, BodySink&) { req.headers = {"Accept-Encoding: identity"}; },
        [got](const std::string& at, HttpResponse& resp) -> Next<std::string> {
          got->status = resp.status;
          got->url = at;
          if (resp.status >= 200 && resp.status < 300) return done<std::string>();
          return status_outcome(resp, "HTTP " + std::to_string(resp.status));
        },
        words);
  }

  // What run_with_retries told its caller.
  struct Retries {
    std::vector<std::chrono::milliseconds> delays;  // one per retry
    std::vector<bool> at_once;
    int failed_tries = 0;
    int gave_up_after = -1;  // tries, when it gave up
    std::string why;         // ... and why, when not for the number of tries
  };

  static Expected<void, std::string> get_with_retries(HubTransport& t, const std::string& url,
                                                      Retries* seen,
                                                      Deadline deadline = Deadline::max(),
                                                      std::chrono::seconds longest_wait = 300s) {
    RetryRun<std::string> run;
    run.deadline = deadline;
    run.longest_server_wait = longest_wait;
    run.on_failed_try = [seen](const std::string&) { ++seen->failed_tries; };
    run.on_retry = [seen](const std::string&, int, std::chrono::milliseconds delay, bool now) {
      seen->delays.push_back(delay);
      seen->at_once.push_back(now);
    };
    run.give_up = [seen](std::optional<std::string> last, int tries, std::chrono::seconds,
                         const char* why) {
      seen->gave_up_after = tries;
      seen->why = why;
      return last.value_or("not tried");
    };
    run.cancelled = [] { return std::string("cancelled"); };
    ExchangeOptions options;
    options.deadline = deadline;
    Answer got;
    return t.run_with_retries<std::string>([&] { return get(t, url, options, &got); }, run);
  }

  // The emulator's requests since `before` whose path contains `part`.
  std::vector<json> requests_since(std::size_t before, const std::string& part) {
    std::vector<json> out;
    for (auto& e : log_since(before)) {
      if (e["path"].get<std::string>().find(part) != std::string::npos) out.push_back(e);
    }
    return out;
  }

  test::TempDir dir_{"transport-test"};
};

TEST_F(TransportTest, TheTokenGoesToTheEndpointsOriginOnlyNeverToARedirectTarget) {
  HubTransport t(config(true));
  ASSERT_TRUE(t.token_may_travel());
  const std::size_t before = hub_->log().size();
  // A private repo: without the token the Hub would answer 404 before any redirect.
  Answer lfs;
  const Out o = get(t, resolve_url("acme/private", big()), {}, &lfs);
  ASSERT_EQ(o.kind, Out::Kind::kDone) << o.error;
  EXPECT_EQ(lfs.status, 200);
  EXPECT_FALSE(t.on_endpoint_origin(lfs.url)) << "the 302 leads to the CDN: " << lfs.url;
  // A small file of a public repo: a 307 to the Hub's own origin, where the token still goes.
  Answer small;
  ASSERT_EQ(get(t, resolve_url(kRepo, "README.md"), {}, &small).kind, Out::Kind::kDone);
  EXPECT_TRUE(t.on_endpoint_origin(small.url)) << small.url;
  int hub_requests = 0, cdn_requests = 0;
  bool saw_cache = false;
  for (const auto& e : log_since(before)) {
    if (e["server"] == "cdn") {
      ++cdn_requests;
      EXPECT_FALSE(e["auth"].get<bool>()) << "token sent to the CDN: " << e.dump();
    } else {
      ++hub_requests;
      EXPECT_TRUE(e["auth"].get<bool>()) << "no token to the Hub: " << e.dump();
      if (e["raw_path"].get<std::string>().starts_with("/api/resolve-cache/")) saw_cache = true;
    }
  }
  EXPECT_EQ(cdn_requests, 1);
  EXPECT_EQ(hub_requests, 3);  // the two /resolve and the 307's target
  EXPECT_TRUE(saw_cache);
  EXPECT_FALSE(hub_->control("/state")["counters"].contains("cdn_auth_violations"));
  EXPECT_EQ(t.stats().requests.load(), 4u);
  EXPECT_EQ(t.stats().cdn_requests.load(), 1u);
  EXPECT_EQ(t.stats().redirects.load(), 2u);
}

TEST_F(TransportTest, AnExchangeWithoutTheTokenSendsItNowhere) {
  HubTransport t(config(true));
  ExchangeOptions options;
  options.token = false;
  const std::size_t before = hub_->log().size();
  Answer got;
  ASSERT_EQ(get(t, revision_url("main"), options, &got).kind, Out::Kind::kDone);
  const auto log = log_since(before);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_FALSE(log[0]["auth"].get<bool>());
}

TEST_F(TransportTest, TheTokenNeverCrossesANetworkInClearText) {
  auto cfg = config(true);
  cfg.endpoint = "http://wheel-mirror.example:8080";
  EXPECT_FALSE(HubTransport(cfg).token_may_travel());
  cfg.allow_insecure_token = true;  // the user's choice
  EXPECT_TRUE(HubTransport(cfg).token_may_travel());
  cfg.allow_insecure_token = false;
  for (const char* endpoint :
       {"https://huggingface.co", "http://127.0.0.1:8080", "http://localhost:8080"}) {
    cfg.endpoint = endpoint;
    EXPECT_TRUE(HubTransport(cfg).token_may_travel()) << endpoint;
  }
  cfg.endpoint = "not a url";
  EXPECT_FALSE(HubTransport(cfg).token_may_travel());
}

TEST_F(TransportTest, RedirectsAreFollowedAsAsked) {
  HubTransport t(config());
  const std::string lfs = resolve_url(kRepo, big());          // 302 to the CDN
  const std::string small = resolve_url(kRepo, "README.md");  // 307 to the Hub itself
  ExchangeOptions options;
  Answer got;
  options.follow = Redirects::kSameMethod;
  EXPECT_EQ(get(t, lfs, options, &got).kind, Out::Kind::kFail);  // a 3xx is an error
  EXPECT_EQ(got.status, 302);
  EXPECT_EQ(got.url, lfs);
  EXPECT_EQ(get(t, small, options, &got).kind, Out::Kind::kDone);
  EXPECT_EQ(got.status, 200);
  EXPECT_NE(got.url, small);
  options.follow = Redirects::kNone;
  EXPECT_EQ(get(t, small, options, &got).kind, Out::Kind::kFail);
  EXPECT_EQ(got.status, 307);
  options.follow = Redirects::kAll;
  EXPECT_EQ(get(t, lfs, options, &got).kind, Out::Kind::kDone);
  EXPECT_EQ(got.status, 200);
  EXPECT_FALSE(t.on_endpoint_origin(got.url));
  // A redirect past the limit: a failure in the caller's words, not an answer.
  options.max_redirects = 0;
  got = {};
  const Out o = get(t, lfs, options, &got);
  EXPECT_EQ(o.kind, Out::Kind::kFail);
  EXPECT_EQ(o.error, "too many redirects");
  EXPECT_EQ(got.status, 0);
}

TEST_F(TransportTest, FiveHundredsAreRetriedWithTheBackoff) {
  HubTransport t(config());
  hub_->fault({{"kind", "status"}, {"status", 503}, {"count", 2}, {"path", "/revision/"}});
  const std::size_t before = hub_->log().size();
  Retries seen;
  auto r = get_with_retries(t, revision_url("main"), &seen);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(requests_since(before, "/revision/").size(), 3u);
  ASSERT_EQ(seen.delays.size(), 2u);
  // base 10 ms doubling, each scaled into [50%, 100%] by the jitter.
  EXPECT_GE(seen.delays[0], 5ms);
  EXPECT_LE(seen.delays[0], 10ms);
  EXPECT_GE(seen.delays[1], 10ms);
  EXPECT_LE(seen.delays[1], 20ms);
  EXPECT_EQ(seen.failed_tries, 2);
  EXPECT_EQ(seen.gave_up_after, -1);
  EXPECT_EQ(t.stats().retries.load(), 2u);
  EXPECT_EQ(t.stats().errors.load(), 0u);
}

TEST_F(TransportTest, ARateLimitWaitsForTheServerPlusOneSecondUpToTheLongestWait) {
  HubTransport t(config());
  hub_->fault({{"kind", "status"},
               {"status", 429},
               {"retry_after", 1},
               {"reset", 1},
               {"count", 1},
               {"path", "/revision/"}});
  Retries seen;
  ASSERT_TRUE(get_with_retries(t, revision_url("main"), &seen));
  ASSERT_EQ(seen.delays.size(), 1u);
  EXPECT_EQ(seen.delays[0], 2000ms);  // far above the 10 ms backoff
  // A caller without a deadline bounds the server's wait.
  hub_->fault({{"kind", "status"},
               {"status", 429},
               {"retry_after", 30},
               {"reset", 30},
               {"count", 1},
               {"path", "/revision/"}});
  Retries capped;
  ASSERT_TRUE(get_with_retries(t, revision_url("main"), &capped, Deadline::max(), 1s));
  ASSERT_EQ(capped.delays.size(), 1u);
  EXPECT_EQ(capped.delays[0], 1000ms);
}

TEST_F(TransportTest, ThePolicysTriesAreAllThereIs) {
  auto cfg = config();
  cfg.retry.max_attempts = 3;
  HubTransport t(cfg);
  hub_->fault({{"kind", "status"}, {"status", 500}, {"path", "/revision/"}});
  const std::size_t before = hub_->log().size();
  Retries seen;
  auto r = get_with_retries(t, revision_url("main"), &seen);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), "HTTP 500");
  EXPECT_EQ(requests_since(before, "/revision/").size(), 3u);
  EXPECT_EQ(seen.delays.size(), 2u);
  EXPECT_EQ(seen.gave_up_after, 3);
  EXPECT_EQ(seen.why, "");
  EXPECT_EQ(t.stats().errors.load(), 1u);
}

TEST_F(TransportTest, AClientErrorIsNotRetried) {
  HubTransport t(config());
  const std::size_t before = hub_->log().size();
  Retries seen;
  auto r = get_with_retries(t, revision_url("no-such-branch"), &seen);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), "HTTP 404");
  EXPECT_EQ(requests_since(before, "/revision/").size(), 1u);
  EXPECT_TRUE(seen.delays.empty());
  EXPECT_EQ(seen.failed_tries, 0);
  EXPECT_EQ(seen.gave_up_after, -1);  // a failure, not a give-up
  EXPECT_EQ(t.stats().retries.load(), 0u);
}

TEST_F(TransportTest, AWaitThatWouldPassTheDeadlineEndsTheCallAtOnce) {
  HubTransport t(config());
  // Retry-After and the RateLimit header's t= both say 30 s.
  hub_->fault({{"kind", "status"},
               {"status", 429},
               {"retry_after", 30},
               {"reset", 30},
               {"path", "/revision/"}});
  const std::size_t before = hub_->log().size();
  const auto start = Clock::now();
  Retries seen;
  auto r = get_with_retries(t, revision_url("main"), &seen, in(5s));
  ASSERT_FALSE(r);
  EXPECT_LT(Clock::now() - start, 4s);  // did not sleep towards the deadline
  EXPECT_EQ(r.error(), "HTTP 429");
  EXPECT_EQ(seen.why, "the next would pass the deadline");
  EXPECT_EQ(seen.gave_up_after, 1);
  EXPECT_EQ(requests_since(before, "/revision/").size(), 1u);
}

TEST_F(TransportTest, AStallIsRetriedAtOnceOnAFreshConnection) {
  auto cfg = config();
  cfg.http.low_speed_time = 1s;
  cfg.retry = RetryPolicy{6, 5000ms, 8000ms};  // a backoff would show
  HubTransport t(cfg);
  hub_->fault({{"kind", "stall"}, {"path", "/revision/"}, {"count", 1}, {"seconds", 60}});
  const auto start = Clock::now();
  Retries seen;
  ASSERT_TRUE(get_with_retries(t, revision_url("main"), &seen, in(30s)));
  EXPECT_LT(Clock::now() - start, 4900ms);
  ASSERT_EQ(seen.at_once.size(), 1u);
  EXPECT_TRUE(seen.at_once[0]);
  EXPECT_EQ(seen.delays[0], 0ms);
}

TEST_F(TransportTest, CancelEndsABackoffPromptly) {
  auto cfg = config();
  cfg.retry = RetryPolicy{6, 5000ms, 8000ms};
  HubTransport t(cfg);
  hub_->fault({{"kind", "status"}, {"status", 503}, {"path", "/revision/"}});
  std::thread canceller([&] {
    std::this_thread::sleep_for(300ms);
    t.cancel();
  });
  const auto start = Clock::now();
  Retries seen;
  auto r = get_with_retries(t, revision_url("main"), &seen, in(30s));
  canceller.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), "cancelled");
  EXPECT_LT(Clock::now() - start, 2500ms);
}

}  // namespace
}  // namespace whfs::hub
