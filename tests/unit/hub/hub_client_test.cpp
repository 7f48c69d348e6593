// CurlHubClient against the Hub emulator: revisions, listings, reads through redirects, the
// token's reach, private and gated repos (faults and limits: hub_faults_test.cpp).
#include "tests/unit/hub/hub_client_fixture.h"

namespace whfs::hub {
namespace {

using namespace std::chrono_literals;
using namespace testing_hub;
using nlohmann::json;
using test::FakeHub;

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

// The next page is asked for while a page is parsed, never two of one listing at once; and a
// listing past its page limit stops there (no request for the page beyond it).
TEST_F(HubClientTest, PagesComeOneAtATimeAndAPageLimitAsksForNoPageBeyondIt) {
  auto c = make_hub_client(config());
  hub_->control("/config", {{"latency_ms", 30}});
  const std::size_t before = hub_->log().size();
  auto all = c->list_folder(head(), "", true, in(60s));
  ASSERT_TRUE(all) << all.error().describe();
  auto pages = log_since(before);
  ASSERT_GE(pages.size(), 3u);
  for (std::size_t i = 1; i < pages.size(); ++i) {
    EXPECT_GE(pages[i]["start"].get<double>(), pages[i - 1]["ts"].get<double>()) << i;
  }
  const std::size_t limited = hub_->log().size();
  auto r = c->list_folder(head(), "", true, in(60s), 2);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, "TooManyPages");
  EXPECT_EQ(log_since(limited).size(), 2u);
}

// api_requests=: at most N Hub API requests on the wire at once, whoever asks.
TEST_F(HubClientTest, AtMostNApiRequestsAreOnTheWireAtOnce) {
  HubClientConfig cfg = config();
  cfg.max_api_requests = 2;
  auto c = make_hub_client(cfg);
  const std::string commit = head();
  hub_->control("/config", {{"latency_ms", 150}});
  const std::size_t before = hub_->log().size();
  std::vector<std::thread> callers;
  std::atomic<int> ok{0};
  for (const char* folder :
       {"flash_attn", "natten", "cumesh", "flash_attn/sm89", "natten/sm89", "cumesh/sm89"}) {
    callers.emplace_back([&, folder] {
      if (c->list_folder(commit, folder, false, in(60s))) ok++;
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(ok.load(), 6);
  // The most requests the emulator had open at once, from its own clock.
  std::vector<std::pair<double, int>> edges;
  for (const auto& e : log_since(before)) {
    edges.emplace_back(e["start"].get<double>(), 1);
    edges.emplace_back(e["ts"].get<double>(), -1);
  }
  std::sort(edges.begin(), edges.end());  // an end before a start at the same instant
  int open = 0, most = 0;
  for (const auto& [t, d] : edges) most = std::max(most, open += d);
  EXPECT_LE(most, 2);
  EXPECT_EQ(most, 2);  // and not one at a time either
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
    ASSERT_TRUE(read_range(*c, wheel, off, std::as_writable_bytes(std::span(buf)), in(30s)));
    EXPECT_EQ(buf, src.substr(off, len)) << off;
  }
  std::string past(10, '\0');
  auto r = read_range(*c, wheel, wheel.size - 5, std::as_writable_bytes(std::span(past)), in(5s));
  EXPECT_FALSE(r);
}

TEST_F(HubClientTest, TheFillCallbackFollowsTheBodyToItsEnd) {
  // What a caller storing bytes as they arrive relies on: the filled front only grows, each
  // time over bytes that are already the file's, and ends at the buffer's size.
  auto c = make_hub_client(config());
  const FileRef wheel = file(big());
  const std::string src = source(big());
  const std::uint64_t off = 3;
  std::string buf(wheel.size - off, '\0');
  std::vector<std::size_t> seen;
  bool front_right = true;
  auto note = [&](std::size_t filled) {
    seen.push_back(filled);
    front_right = front_right && buf.compare(0, filled, src, off, filled) == 0;
  };
  ASSERT_TRUE(read_range(*c, wheel, off, std::as_writable_bytes(std::span(buf)), in(30s), note));
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(seen.back(), buf.size());
  EXPECT_TRUE(front_right);
  EXPECT_EQ(buf, src.substr(off));
}

TEST_F(HubClientTest, ReusesTheSignedUrlAndResolvesAgainWhenItExpires) {
  auto c = make_hub_client(config());
  const FileRef wheel = file(big());
  std::string buf(1000, '\0');
  auto bytes = std::as_writable_bytes(std::span(buf));
  ASSERT_TRUE(read_range(*c, wheel, 0, bytes, in(30s)));
  std::size_t mark = hub_->log().size();
  ASSERT_TRUE(read_range(*c, wheel, 5000, bytes, in(30s)));
  auto log = log_since(mark);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0]["server"], "cdn");  // straight to the CDN, no new /resolve
  EXPECT_GE(c->stats().url_reuses.load(), 1u);

  hub_->control("/expire-urls");
  mark = hub_->log().size();
  ASSERT_TRUE(read_range(*c, wheel, 9000, bytes, in(30s)));
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
  cfg.transport.token_file = token_file;
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
    cfg.transport.token_file = dir.path() + "/absent";
    auto r = make_hub_client(cfg)->resolve_revision("main", in(10s));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, HubErrorKind::kNotFound);
    EXPECT_EQ(r.error().http_status, 401);
    EXPECT_NE(r.error().message.find("private"), std::string::npos);
  }
  std::ofstream(token_file) << "hf_noaccess";
  auto cfg = config("acme/private");
  cfg.transport.token_file = token_file;
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
  cfg.transport.token_file = dir.path() + "/absent";
  auto anon = make_hub_client(cfg);
  auto rev = anon->resolve_revision("main", in(10s));
  ASSERT_TRUE(rev);  // metadata is public
  std::string buf(10, '\0');
  FileRef f = file("README.md");
  f.commit = rev->commit;
  auto r = read_range(*anon, f, 0, std::as_writable_bytes(std::span(buf)), in(10s));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, HubErrorKind::kForbidden);
  EXPECT_EQ(r.error().code, "GatedRepo");
}

}  // namespace
}  // namespace whfs::hub
