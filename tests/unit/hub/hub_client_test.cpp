// CurlHubClient against the Hub emulator: every point of issue #3, checked through what the
// client returns and what the emulator's request log saw.
#include "fs/hub/hub_client.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <set>
#include <thread>

#include "fs/common/hash.h"
#include "tests/support/fakehub.h"

namespace whfs::hub {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using test::FakeHub;

const std::string kRepo = "DoctorPopi/python_wheelhouse";

Deadline in(std::chrono::milliseconds d) { return Clock::now() + d; }

class HubClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new std::string(test::dataset("small"));
    manifest_ = new json(test::manifest(*data_));
    const std::string tree = *data_ + "/tree";
    FakeHub::Options o;
    o.repos = {{kRepo, tree}, {"acme/private", tree + ":private"}, {"acme/gated", tree + ":gated"}};
    o.tokens = {"hf_good=acme/private,acme/gated", "hf_noaccess="};
    o.args = {"--page-size", "7"};
    hub_ = new FakeHub(o);
  }
  static void TearDownTestSuite() {
    delete hub_;
    delete manifest_;
    delete data_;
  }
  void TearDown() override {
    hub_->clear_faults();
    hub_->control("/config", {{"rate", 0}, {"latency_ms", 0}});
  }

  static HubClientConfig config(const std::string& repo = kRepo) {
    HubClientConfig c;
    c.endpoint = hub_->hub_url();
    c.repo = *parse_repo_ref(repo);
    c.retry = RetryPolicy{6, 10ms, 50ms};
    c.http.low_speed_time = 2s;
    c.http.connect_timeout = 2s;
    return c;
  }
  static std::string head() {
    return hub_->control("/state")["repos"][kRepo]["head"].get<std::string>();
  }
  static std::string source(const std::string& path) {
    return test::read_file(*data_ + "/tree/" + path);
  }
  // The biggest file of the dataset (an LFS wheel with a "+" in its name).
  static std::string big() { return (*manifest_)["big_file"].get<std::string>(); }
  static FileRef file(const std::string& path) {
    return FileRef{head(), path, (*manifest_)["files"][path]["size"].get<std::uint64_t>()};
  }
  static std::string read_all(HubClient& c, const FileRef& f, Deadline d = in(60s)) {
    std::string out(f.size, '\0');
    auto r = c.read_range(f, 0, std::as_writable_bytes(std::span(out)), d);
    EXPECT_TRUE(r) << r.error().describe();
    return out;
  }
  std::vector<json> log_since(std::size_t n) {
    auto all = hub_->log();
    return {all.begin() + static_cast<std::ptrdiff_t>(std::min(n, all.size())), all.end()};
  }

  static std::string* data_;
  static json* manifest_;
  static FakeHub* hub_;
};

std::string* HubClientTest::data_ = nullptr;
json* HubClientTest::manifest_ = nullptr;
FakeHub* HubClientTest::hub_ = nullptr;

TEST_F(HubClientTest, ResolvesEveryRevisionFormToTheCommit) {
  auto c = make_hub_client(config());
  const std::string sha = head();
  for (const char* rev : {"main", "HEAD", "v1.0", "refs/pr/1", "refs/heads/main"}) {
    auto r = c->resolve_revision(rev, in(10s));
    ASSERT_TRUE(r) << rev << ": " << r.error().describe();
    EXPECT_EQ(r->commit, sha) << rev;
    EXPECT_FALSE(r->last_modified.empty());
  }
  EXPECT_EQ(c->resolve_revision(sha, in(10s))->commit, sha);
  // refs/pr/1 travels as ONE encoded segment.
  bool seen = false;
  for (const auto& e : hub_->log()) {
    if (e["raw_path"].get<std::string>().find("/revision/refs%2Fpr%2F1") != std::string::npos)
      seen = true;
  }
  EXPECT_TRUE(seen);
  auto missing = c->resolve_revision("no-such-branch", in(10s));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, HubErrorKind::kNotFound);
  EXPECT_EQ(missing.error().code, "RevisionNotFound");
}

TEST_F(HubClientTest, RecursiveListingFollowsPagesOfSevenAndMatchesTheSource) {
  auto c = make_hub_client(config());
  const std::size_t before = hub_->log().size();
  auto entries = c->list_folder(head(), "", true, in(60s));
  ASSERT_TRUE(entries) << entries.error().describe();
  std::set<std::string> files;
  for (const auto& e : *entries) {
    if (e.is_dir()) continue;
    files.insert(e.path);
    const auto& m = (*manifest_)["files"][e.path];
    EXPECT_EQ(e.size, m["size"].get<std::uint64_t>()) << e.path;
    if (e.is_lfs()) {
      EXPECT_EQ(e.lfs_sha256, m["sha256"].get<std::string>());
    } else {
      EXPECT_EQ(e.oid, m["git_sha1"].get<std::string>());
    }
  }
  std::set<std::string> want;
  for (const auto& [path, _] : (*manifest_)["files"].items()) want.insert(path);
  EXPECT_EQ(files, want);
  const auto pages = log_since(before).size();
  EXPECT_GE(pages, (entries->size() + 6) / 7);  // every page of 7 was fetched
}

TEST_F(HubClientTest, FolderListingIsDirectChildrenOnly) {
  auto c = make_hub_client(config());
  auto entries = c->list_folder(head(), "flash_attn/sm89", false, in(30s));
  ASSERT_TRUE(entries) << entries.error().describe();
  std::vector<std::string> names;
  for (const auto& e : *entries) names.push_back(e.path);
  EXPECT_EQ(names, (std::vector<std::string>{"flash_attn/sm89/torch2.7-cu128",
                                             "flash_attn/sm89/torch2.9-cu128"}));
  auto missing = c->list_folder(head(), "no/such", false, in(10s));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, "EntryNotFound");
}

TEST_F(HubClientTest, BadNextLinksAreErrorsNotLoops) {
  auto c = make_hub_client(config());
  hub_->fault({{"kind", "link_repeat"}, {"count", 2}, {"path", "/tree/"}});
  auto r = c->list_folder(head(), "", true, in(30s));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, HubErrorKind::kBadResponse);
  EXPECT_NE(r.error().message.find("repeats"), std::string::npos);
  hub_->fault({{"kind", "link_cross_origin"}, {"count", 1}, {"path", "/tree/"}});
  r = c->list_folder(head(), "", true, in(30s));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("another origin"), std::string::npos);
}

TEST_F(HubClientTest, ReadsLfsThroughThe302AndSmallFilesThroughThe307) {
  auto c = make_hub_client(config());
  const std::size_t before = hub_->log().size();
  const FileRef wheel = file(big());
  EXPECT_EQ(read_all(*c, wheel), source(big()));
  EXPECT_EQ(read_all(*c, file("README.md")), source("README.md"));
  auto log = log_since(before);
  bool saw_302 = false, saw_cdn = false, saw_307 = false, saw_cache = false;
  for (const auto& e : log) {
    const std::string raw = e["raw_path"];
    if (e["status"] == 302) {
      saw_302 = true;
      EXPECT_NE(raw.find("%2B"), std::string::npos) << "'+' must travel as %2B: " << raw;
    }
    if (e["server"] == "cdn" && e["status"] == 206) saw_cdn = true;
    if (e["status"] == 307) saw_307 = true;
    if (raw.starts_with("/api/resolve-cache/") && e["status"] == 206) saw_cache = true;
    EXPECT_EQ(e["accept_encoding"], "identity");
    EXPECT_TRUE(e["ua"].get<std::string>().starts_with("wheelhouse-fs/"));
    EXPECT_NE(e["ua"].get<std::string>().find("; libcurl/"), std::string::npos);
  }
  EXPECT_TRUE(saw_302 && saw_cdn && saw_307 && saw_cache);
}

TEST_F(HubClientTest, RangesAtTheEdgesAreExact) {
  auto c = make_hub_client(config());
  const FileRef wheel = file(big());
  const std::string src = source(big());
  for (std::uint64_t off : {std::uint64_t{0}, std::uint64_t{1}, wheel.size / 2, wheel.size - 1}) {
    const std::size_t len = std::min<std::uint64_t>(4097, wheel.size - off);
    std::string buf(len, '\0');
    ASSERT_TRUE(c->read_range(wheel, off, std::as_writable_bytes(std::span(buf)), in(30s)));
    EXPECT_EQ(buf, src.substr(off, len)) << off;
  }
  std::string past(10, '\0');
  auto r = c->read_range(wheel, wheel.size - 5, std::as_writable_bytes(std::span(past)), in(5s));
  EXPECT_FALSE(r);
}

TEST_F(HubClientTest, ReusesTheSignedUrlAndResolvesAgainWhenItExpires) {
  auto c = make_hub_client(config());
  const FileRef wheel = file(big());
  std::string buf(1000, '\0');
  auto bytes = std::as_writable_bytes(std::span(buf));
  ASSERT_TRUE(c->read_range(wheel, 0, bytes, in(30s)));
  std::size_t mark = hub_->log().size();
  ASSERT_TRUE(c->read_range(wheel, 5000, bytes, in(30s)));
  auto log = log_since(mark);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0]["server"], "cdn");  // straight to the CDN, no new /resolve
  EXPECT_GE(c->stats().url_reuses.load(), 1u);

  hub_->control("/expire-urls");
  mark = hub_->log().size();
  ASSERT_TRUE(c->read_range(wheel, 9000, bytes, in(30s)));
  EXPECT_EQ(buf, source(big()).substr(9000, 1000));
  log = log_since(mark);
  // Lines are written when responses end; the order of the requests is their arrival.
  std::sort(log.begin(), log.end(), [](const json& a, const json& b) {
    return a["start"].get<double>() < b["start"].get<double>();
  });
  ASSERT_EQ(log.size(), 3u);  // 403 from the CDN, a new 302, the read
  EXPECT_EQ(log[0]["status"], 403);
  EXPECT_EQ(log[1]["status"], 302);
  EXPECT_EQ(log[2]["status"], 206);
}

TEST_F(HubClientTest, TokenGoesToTheHubOnlyNeverToTheCdn) {
  test::TempDir dir;
  const std::string token_file = dir.path() + "/token";
  std::ofstream(token_file) << "hf_good\n";
  auto cfg = config("acme/private");
  cfg.token_file = token_file;
  auto c = make_hub_client(cfg);
  const std::size_t before = hub_->log().size();
  auto rev = c->resolve_revision("main", in(10s));
  ASSERT_TRUE(rev) << rev.error().describe();
  FileRef wheel = file(big());
  wheel.commit = rev->commit;
  EXPECT_EQ(read_all(*c, wheel), source(big()));
  int hub_auth = 0, cdn = 0;
  for (const auto& e : log_since(before)) {
    if (e["server"] == "cdn") {
      ++cdn;
      EXPECT_FALSE(e["auth"].get<bool>()) << "token sent to the CDN";
    } else {
      hub_auth += e["auth"].get<bool>() ? 1 : 0;
    }
  }
  EXPECT_GT(cdn, 0);
  EXPECT_GT(hub_auth, 0);
  EXPECT_FALSE(hub_->control("/state")["counters"].contains("cdn_auth_violations"));
}

TEST_F(HubClientTest, PrivateRepoWithAndWithoutToken) {
  test::TempDir dir;
  const std::string token_file = dir.path() + "/token";
  {
    auto cfg = config("acme/private");
    cfg.token_file = dir.path() + "/absent";
    auto r = make_hub_client(cfg)->resolve_revision("main", in(10s));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, HubErrorKind::kNotFound);
    EXPECT_EQ(r.error().http_status, 401);
    EXPECT_NE(r.error().message.find("private"), std::string::npos);
  }
  std::ofstream(token_file) << "hf_noaccess";
  auto cfg = config("acme/private");
  cfg.token_file = token_file;
  auto c = make_hub_client(cfg);
  auto r = c->resolve_revision("main", in(10s));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, HubErrorKind::kNotFound);
  EXPECT_EQ(r.error().code, "RepoNotFound");
  // The token file is rewritten: picked up without a restart (re-read at most once a second).
  std::this_thread::sleep_for(1100ms);
  std::ofstream(token_file) << "hf_good";
  auto ok = c->resolve_revision("main", in(10s));
  EXPECT_TRUE(ok) << ok.error().describe();

  std::ofstream(token_file) << "hf_unknown_token";
  std::this_thread::sleep_for(1100ms);
  auto bad = c->resolve_revision("main", in(10s));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().kind, HubErrorKind::kUnauthorized);
}

TEST_F(HubClientTest, GatedRepoContentIsForbiddenWithoutAccess) {
  test::TempDir dir;
  auto cfg = config("acme/gated");
  cfg.token_file = dir.path() + "/absent";
  auto anon = make_hub_client(cfg);
  auto rev = anon->resolve_revision("main", in(10s));
  ASSERT_TRUE(rev);  // metadata is public
  std::string buf(10, '\0');
  FileRef f = file("README.md");
  f.commit = rev->commit;
  auto r = anon->read_range(f, 0, std::as_writable_bytes(std::span(buf)), in(10s));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, HubErrorKind::kForbidden);
  EXPECT_EQ(r.error().code, "GatedRepo");
}

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
  EXPECT_EQ(read_all(*c, file(big())), source(big()));
  // Every request truncated: an error, and nothing returned as data.
  hub_->fault({{"kind", "truncate"}, {"server", "cdn"}, {"after_bytes", 0}});
  std::string buf(100000, '\0');
  auto r = c->read_range(file(big()), 0, std::as_writable_bytes(std::span(buf)), in(20s));
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().kind == HubErrorKind::kCorrupt ||
              r.error().kind == HubErrorKind::kUnavailable)
      << r.error().describe();
}

TEST_F(HubClientTest, AnIgnoredRangeIsHandled) {
  auto c = make_hub_client(config());
  hub_->fault({{"kind", "ignore_range"}, {"server", "cdn"}, {"count", 2}});
  const FileRef wheel = file(big());
  std::string buf(3000, '\0');
  ASSERT_TRUE(c->read_range(wheel, 12345, std::as_writable_bytes(std::span(buf)), in(30s)));
  EXPECT_EQ(buf, source(big()).substr(12345, 3000));
}

TEST_F(HubClientTest, AStallEndsAsTimeoutWithinTheDeadline) {
  auto cfg = config();
  cfg.http.low_speed_time = 1s;
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
  auto rr = c->read_range(file(big()), 0, std::as_writable_bytes(std::span(buf)), in(3s));
  ASSERT_FALSE(rr);
  EXPECT_EQ(rr.error().kind, HubErrorKind::kTimeout) << rr.error().describe();
}

TEST_F(HubClientTest, AStallMidBodyIsAskedAgainAtOnceOnAFreshConnection) {
  // The CDN's first two answers stop half-way and hang (the Xet bridge does this in the
  // wild). Each stall is cut at the stall limit and the rest asked at once on a new
  // connection: no backoff (here a 5 s one would show), the bytes already received are kept.
  auto cfg = config();
  cfg.http.low_speed_time = 1s;
  cfg.retry = RetryPolicy{6, 5000ms, 8000ms};
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
    cfg.endpoint = "http://wheel-mirror.example" + port;
    cfg.proxy = proxy.url();
    cfg.token_file = token_file;
    cfg.allow_insecure_token = opt_in;
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
  cfg.token_file = token_file;
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
  EXPECT_TRUE(r.error().kind == HubErrorKind::kUnavailable ||
              r.error().kind == HubErrorKind::kTimeout)
      << r.error().describe();
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
        auto r = c->read_range(wheel, off, std::as_writable_bytes(std::span(buf)), in(60s));
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
  cfg.proxy = proxy.url();
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

TEST(RepoRef, ParsesAndValidates) {
  auto d = parse_repo_ref("DoctorPopi/python_wheelhouse");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->type, RepoType::kDataset);
  EXPECT_EQ(parse_repo_ref("models/org/m")->type, RepoType::kModel);
  EXPECT_EQ(parse_repo_ref("datasets/a/b")->id, "a/b");
  for (const char* bad : {"", "a", "a/b/c", "/b", "a/", "a/b c", "a--x/b", "a/..b", "-a/b", "a/b.",
                          "a/b?x", "a/b#y", "a/\xc3\xa9"}) {
    EXPECT_FALSE(parse_repo_ref(bad)) << bad;
  }
}

TEST(Endpoint, OptionThenEnvThenDefault) {
  ::unsetenv("HF_ENDPOINT");
  EXPECT_EQ(resolve_endpoint(""), "https://huggingface.co");
  ::setenv("HF_ENDPOINT", "http://mirror.local:8080/", 1);
  EXPECT_EQ(resolve_endpoint(""), "http://mirror.local:8080");
  EXPECT_EQ(resolve_endpoint("http://opt//"), "http://opt");
  ::unsetenv("HF_ENDPOINT");
}

}  // namespace
}  // namespace whfs::hub
