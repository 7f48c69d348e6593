// CurlHubClient: the HubClient over HttpTransport. Every call is bounded by its deadline and
// retried with backoff on transient failures; redirects are followed by hand so that the token
// only ever goes to the endpoint's origin.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "fs/common/version.h"
#include "fs/hub/hub_client.h"
#include "fs/hub/listing.h"
#include "fs/hub/range_sink.h"
#include "fs/hub/token.h"
#include "fs/hub/url.h"

namespace whfs::hub {
namespace {

constexpr int kMaxRedirects = 10;

HubError make_error(HubErrorKind kind, std::string message, int status = 0) {
  return HubError{kind, std::move(message), status, "", "", ""};
}

HubError with_cause(HubError e, std::string cause) {
  e.cause = std::move(cause);
  return e;
}

// What one attempt of a call ended with.
struct Outcome {
  // kProgress: a short but well-formed answer moved forward; ask for the rest at once, which
  // does not count as a retry.
  enum class Kind { kDone, kProgress, kRetry, kFail } kind = Kind::kDone;
  HubError error;
  std::optional<std::chrono::seconds> hint;  // the server's own wait, for 429/503
  // A stalled connection was dropped: a fresh one is tried at once, without a backoff (the
  // stall limit already waited, and the server is not asking us to slow down).
  bool at_once = false;
};

Outcome done() { return {}; }
Outcome fail(HubError e) { return {Outcome::Kind::kFail, std::move(e), std::nullopt}; }
Outcome retry(HubError e, std::optional<std::chrono::seconds> hint = std::nullopt) {
  return {Outcome::Kind::kRetry, std::move(e), hint};
}

bool is_redirect(int status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

class CurlHubClient final : public HubClient {
 public:
  explicit CurlHubClient(HubClientConfig config)
      : config_(std::move(config)),
        tokens_(config_.token_file),
        transport_(config_.http),
        endpoint_origin_(origin_of(config_.endpoint)),
        rng_(std::random_device{}()) {
    const bool dataset = config_.repo.type == RepoType::kDataset;
    api_base_ = config_.endpoint + (dataset ? "/api/datasets/" : "/api/models/") + config_.repo.id;
    file_base_ = config_.endpoint + (dataset ? "/datasets/" : "/") + config_.repo.id;
    send_token_ = endpoint_origin_ &&
                  (endpoint_origin_->scheme == "https" ||
                   is_loopback_host(endpoint_origin_->host) || config_.allow_insecure_token);
    if (!send_token_ && tokens_.token()) {
      spdlog::warn(
          "the endpoint {} is plain http and not on this machine: the token ({}) is not sent, "
          "so that it never crosses a network in clear text (option insecure_token sends it)",
          config_.endpoint, tokens_.describe());
    }
  }

  ~CurlHubClient() override { cancel(); }

  Expected<Revision, HubError> resolve_revision(std::string_view revision,
                                                Deadline deadline) override {
    const std::string url =
        api_base_ + "/revision/" + encode_segment(revision) + "?expand=sha&expand=lastModified";
    auto resp = api_get(url, deadline);
    if (!resp) return unexpected(std::move(resp).error());
    auto info = parse_revision_info(resp->body);
    if (!info) return unexpected(std::move(info).error());
    return Revision{info->commit, info->last_modified};
  }

  Expected<std::vector<RemoteEntry>, HubError> list_folder(std::string_view commit,
                                                           std::string_view folder, bool recursive,
                                                           Deadline deadline,
                                                           std::size_t max_pages) override {
    if (max_pages == 0) max_pages = config_.max_pages;
    std::string url = api_base_ + "/tree/" + std::string(commit) +
                      (folder.empty() ? "" : "/" + encode_path(folder)) + "?limit=1000" +
                      (recursive ? "&recursive=true" : "");
    std::vector<RemoteEntry> entries;
    std::unordered_set<std::string> seen_paths;
    std::unordered_set<std::string> seen_urls{url};
    for (std::size_t page = 0;; ++page) {
      if (page >= max_pages) {
        HubError e = make_error(HubErrorKind::kBadResponse, "listing has more than " +
                                                                std::to_string(max_pages) +
                                                                " pages; refusing to truncate it");
        e.code = "TooManyPages";
        return unexpected(std::move(e));
      }
      auto resp = api_get(url, deadline);
      if (!resp) return unexpected(std::move(resp).error());
      auto parsed = parse_tree_page(resp->body, folder, recursive);
      if (!parsed) return unexpected(std::move(parsed).error());
      for (const auto& why : parsed->skipped) {
        spdlog::warn("listing of \"{}\": skipped remote entry {}", folder, why);
      }
      for (auto& e : parsed->entries) {
        if (seen_paths.insert(e.path).second) entries.push_back(std::move(e));
      }
      if (entries.size() > config_.max_entries) {
        HubError e = make_error(HubErrorKind::kBadResponse,
                                "listing has more than " + std::to_string(config_.max_entries) +
                                    " entries; refusing to hold or truncate it");
        e.code = "TooManyEntries";
        return unexpected(std::move(e));
      }
      const auto next = parse_link_next(resp->header("link"));
      if (!next) break;
      const auto origin = origin_of(*next);
      if (!origin || !endpoint_origin_ || *origin != *endpoint_origin_) {
        return unexpected(make_error(HubErrorKind::kBadResponse,
                                     "next-page link points to another origin: " + redact(*next)));
      }
      if (!seen_urls.insert(*next).second) {
        return unexpected(make_error(HubErrorKind::kBadResponse,
                                     "next-page link repeats an earlier page: " + redact(*next)));
      }
      url = *next;
    }
    return entries;
  }

  using HubClient::read_range;
  Expected<void, HubError> read_range(const FileRef& file, std::uint64_t offset,
                                      std::span<std::byte> out, Deadline deadline,
                                      const CancelFlag* abandon, const FillFn* on_fill) override {
    if (out.empty()) return {};
    if (offset + out.size() > file.size) {
      return unexpected(
          make_error(HubErrorKind::kBadResponse, "read past the end of " + file.path));
    }
    const std::string resolve_url =
        file_base_ + "/resolve/" + file.commit + "/" + encode_path(file.path);
    const std::string key = file.commit + '\0' + file.path;
    std::size_t got = 0;
    bool refreshed = false;
    auto attempt = [&]() -> Outcome {
      const std::size_t before = got;
      std::optional<RangeSink> sink;  // fresh per response
      auto prepare = [&](HttpRequest& req, BodySink& body) {
        req.headers = {"Accept-Encoding: identity", "Range: bytes=" + std::to_string(offset + got) +
                                                        "-" +
                                                        std::to_string(offset + out.size() - 1)};
        sink.emplace(out, &got, offset + got, file.size);
        body = [&sink, &got, on_fill](const HttpResponse& h, std::span<const std::byte> d) {
          const std::size_t had = got;
          const bool more = (*sink)(h, d);
          if (on_fill != nullptr && got > had) (*on_fill)(got);
          return more;
        };
      };
      auto answer = [&](const std::string& url, const HttpResponse& resp) -> Next {
        const int status = resp.status;
        if ((status == 401 || status == 403) && url != resolve_url && !refreshed) {
          // The signed URL expired or was revoked: forget it and resolve again, once.
          refreshed = true;
          forget_url(key);
          spdlog::debug("{}: signed URL refused ({}), resolving again", file.path, status);
          return resolve_url;
        }
        if (status < 200 || status >= 300) return status_outcome(resp, file.path);
        if (!sink->mismatch().empty()) {
          return retry(
              make_error(HubErrorKind::kCorrupt, file.path + ": " + sink->mismatch(), status));
        }
        if (url != resolve_url) remember_url(key, url);
        if (got == out.size()) return done();
        // A short but well-formed answer: ask for the rest at once if it made progress.
        if (got > before) return Outcome{Outcome::Kind::kProgress, {}, std::nullopt};
        return retry(make_error(HubErrorKind::kCorrupt,
                                file.path + ": body ended after " + std::to_string(got) + " of " +
                                    std::to_string(out.size()) + " bytes",
                                status));
      };
      return exchange(cached_url(key).value_or(resolve_url), deadline, abandon, file.path, prepare,
                      answer);
    };
    // A retried transfer is worth a line in the log (an admin tails it while a read waits);
    // a retried API call only at debug (a mount's start says one line, whatever it tried).
    return run_with_retries(attempt, deadline, "read " + file.path, spdlog::level::info);
  }

  const HubStats& stats() const override { return stats_; }

  void cancel() override {
    {
      std::lock_guard lock(sleep_mu_);
      cancelled_ = true;
    }
    sleep_cv_.notify_all();
    transport_.cancel();
  }

 private:
  template <class Attempt>
  Expected<void, HubError> run_with_retries(Attempt&& attempt, Deadline deadline,
                                            const std::string& what,
                                            spdlog::level::level_enum retry_level) {
    HubError last = make_error(HubErrorKind::kTimeout, what + ": deadline passed");
    last.cause = "timed out";
    const auto started = Clock::now();
    int tries = 0;
    // The error a person reads: the last cause, how many tries over how long. The kind stays
    // the cause's (a refused connection is not a timeout because the deadline came).
    auto give_up = [&](const char* why) {
      const auto secs =
          std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started).count();
      const std::string tried =
          tries > 1 ? std::to_string(tries) + " tries in " + std::to_string(secs) + " s" : "";
      if (last.cause.empty()) last.cause = last.message;
      if (!tried.empty()) last.cause += " (" + tried + ")";
      if (!tried.empty() || *why != '\0') {
        last.message += " (" + tried + (!tried.empty() && *why != '\0' ? "; " : "") + why + ")";
      }
      stats_.errors++;
      return unexpected(std::move(last));
    };
    while (tries < config_.retry.max_attempts) {
      if (Clock::now() >= deadline) break;
      Outcome o = attempt();
      if (o.kind == Outcome::Kind::kDone) return {};
      if (o.kind == Outcome::Kind::kFail) {
        stats_.errors++;
        return unexpected(std::move(o.error));
      }
      if (o.kind == Outcome::Kind::kProgress) continue;
      last = std::move(o.error);
      ++tries;
      if (last.kind == HubErrorKind::kTimeout) stats_.stalls++;
      if (tries >= config_.retry.max_attempts) break;
      if (o.at_once) {
        stats_.retries++;
        spdlog::log(retry_level, "{}: {}; retry {} now", what, last.describe(), tries);
        continue;
      }
      const auto delay = retry_delay(tries - 1, o.hint);
      if (Clock::now() + delay >= deadline) {
        // Waiting would pass the deadline: fail now with what we know.
        return give_up("the next would pass the deadline");
      }
      stats_.retries++;
      spdlog::log(retry_level, "{}: {}; retry {} in {} ms", what, last.describe(), tries,
                  delay.count());
      if (!sleep_for(delay)) {
        stats_.errors++;
        return unexpected(make_error(HubErrorKind::kCancelled, what + ": shutting down"));
      }
    }
    return give_up("");
  }

  std::chrono::milliseconds retry_delay(int retry_index, std::optional<std::chrono::seconds> hint) {
    std::uniform_real_distribution<double> dist(0.0, 1.0);
    double u = 0;
    {
      std::lock_guard lock(rng_mu_);
      u = dist(rng_);
    }
    auto delay = backoff_delay(config_.retry, retry_index, u);
    if (hint) {
      // The server's wait plus one second, as the official clients do.
      delay = std::max<std::chrono::milliseconds>(delay, *hint + std::chrono::seconds(1));
    }
    return delay;
  }

  bool sleep_for(std::chrono::milliseconds d) {
    std::unique_lock lock(sleep_mu_);
    sleep_cv_.wait_for(lock, d, [this] { return cancelled_; });
    return !cancelled_;
  }

  // What to do with a response that is not a redirect: an outcome, or a URL to go to instead
  // (a signed URL that was refused: resolve it again).
  using Next = std::variant<Outcome, std::string>;

  // One attempt of a call: the request `prepare` makes (headers, body sink) for each URL from
  // `url` on, redirects followed by hand (add_auth: the token goes to the endpoint's origin
  // only), and `answer` for the first response that is not a redirect.
  template <class Prepare, class Answer>
  Outcome exchange(std::string url, Deadline deadline, const CancelFlag* abandon,
                   const std::string& what, Prepare&& prepare, Answer&& answer) {
    for (int hop = 0; hop <= kMaxRedirects; ++hop) {
      HttpRequest req;
      req.url = url;
      BodySink body;
      prepare(req, body);
      add_auth(req);
      const auto origin = origin_of(url);
      const bool cdn = !origin || !endpoint_origin_ || *origin != *endpoint_origin_;
      stats_.requests++;
      if (cdn) stats_.cdn_requests++;
      auto resp = transport_.perform(req, deadline, body, abandon);
      const std::uint64_t got = resp ? resp->body_bytes : resp.error().body_bytes;
      stats_.bytes += got;
      if (cdn) stats_.cdn_bytes += got;
      if (!resp) return transfer_outcome(resp.error(), what);
      if (is_redirect(resp->status)) {
        const std::string loc = resp->header("location");
        if (loc.empty()) return fail(response_error(*resp, what));
        url = resolve_reference(url, loc);
        stats_.redirects++;
        continue;
      }
      Next next = answer(url, *resp);
      if (auto* o = std::get_if<Outcome>(&next)) return std::move(*o);
      url = std::move(std::get<std::string>(next));
    }
    return fail(make_error(HubErrorKind::kBadResponse, what + ": too many redirects"));
  }

  // GET an API URL (JSON); the final 2xx response with its body.
  Expected<HttpResponse, HubError> api_get(const std::string& start_url, Deadline deadline) {
    HttpResponse result;
    const std::string what = redact(start_url);
    auto attempt = [&]() -> Outcome {
      return exchange(
          start_url, deadline, nullptr, what,
          [](HttpRequest& req, BodySink&) {
            req.headers = {"Accept: application/json", "Accept-Encoding: identity"};
          },
          [&](const std::string&, HttpResponse& resp) -> Next {
            if (resp.status < 200 || resp.status >= 300) return status_outcome(resp, what);
            result = std::move(resp);
            return done();
          });
    };
    auto r = run_with_retries(attempt, deadline, "GET " + what, spdlog::level::debug);
    if (!r) return unexpected(std::move(r).error());
    return result;
  }

  // The token goes to the endpoint's origin and nowhere else (not to a CDN, not after a
  // redirect to another host or port).
  void add_auth(HttpRequest& req) {
    if (!send_token_) return;
    const auto origin = origin_of(req.url);
    if (!origin || !endpoint_origin_ || *origin != *endpoint_origin_) return;
    if (auto token = tokens_.token()) req.headers.push_back("Authorization: Bearer " + *token);
  }

  Outcome transfer_outcome(const TransferError& e, const std::string& what) {
    using K = TransferError::Kind;
    switch (e.kind) {
      case K::kCancelled:
        return fail(make_error(HubErrorKind::kCancelled, what + ": shutting down"));
      case K::kAbandoned:
        return fail(make_error(HubErrorKind::kCancelled, what + ": nobody waits for it any more"));
      case K::kTooLarge:
        return fail(make_error(HubErrorKind::kBadResponse, what + ": " + e.message));
      case K::kTimeout:
        return retry(
            with_cause(make_error(HubErrorKind::kTimeout, what + ": " + e.message), e.message));
      case K::kStalled: {
        Outcome o =
            retry(make_error(HubErrorKind::kTimeout, what + ": stalled (" + e.message +
                                                         "); retrying on a fresh connection"));
        o.at_once = true;
        return o;
      }
      case K::kTruncated:
        return retry(
            make_error(HubErrorKind::kCorrupt, what + ": truncated body (" + e.message + ")"));
      case K::kConnect:
      case K::kReset:
      case K::kOther:
        break;
    }
    return retry(
        with_cause(make_error(HubErrorKind::kUnavailable, what + ": " + e.message), e.message));
  }

  Outcome status_outcome(const HttpResponse& resp, const std::string& what) {
    HubError e = response_error(resp, what);
    if (retryable_status(resp.status)) {
      return retry(std::move(e),
                   server_retry_hint(resp.header("retry-after"), resp.header("ratelimit")));
    }
    return fail(std::move(e));
  }

  HubError response_error(const HttpResponse& resp, const std::string& what) {
    return hub::response_error(resp, what, tokens_.token().has_value());
  }

  std::optional<std::string> cached_url(const std::string& key) {
    std::lock_guard lock(url_mu_);
    const auto it = urls_.find(key);
    if (it == urls_.end()) return std::nullopt;
    if (Clock::now() >= it->second.good_until) {
      urls_.erase(it);
      return std::nullopt;
    }
    stats_.url_reuses++;
    return it->second.url;
  }

  void remember_url(const std::string& key, const std::string& url) {
    const auto now_sys = std::time(nullptr);
    const auto expiry = signed_url_expiry(url);
    const auto ttl = expiry ? std::chrono::seconds(*expiry - now_sys) : config_.default_url_ttl;
    const auto usable = ttl - config_.url_expiry_margin;
    if (usable <= std::chrono::seconds(0)) return;
    std::lock_guard lock(url_mu_);
    if (urls_.size() > 100000) urls_.clear();  // bound memory; URLs are cheap to resolve again
    urls_[key] = CachedUrl{url, Clock::now() + usable};
  }

  void forget_url(const std::string& key) {
    std::lock_guard lock(url_mu_);
    urls_.erase(key);
  }

  struct CachedUrl {
    std::string url;
    Clock::time_point good_until;
  };

  HubClientConfig config_;
  TokenSource tokens_;
  HttpTransport transport_;
  std::optional<Origin> endpoint_origin_;
  bool send_token_ = false;
  std::string api_base_;
  std::string file_base_;
  HubStats stats_;

  std::mutex url_mu_;  // guards urls_; never held across I/O
  std::unordered_map<std::string, CachedUrl> urls_;

  std::mutex rng_mu_;  // guards rng_
  std::mt19937_64 rng_;

  std::mutex sleep_mu_;  // guards cancelled_ for the backoff sleeps
  std::condition_variable sleep_cv_;
  bool cancelled_ = false;
};

}  // namespace

std::unique_ptr<HubClient> make_hub_client(HubClientConfig config) {
  if (config.http.user_agent.empty()) config.http.user_agent = default_user_agent();
  if (!config.proxy.empty()) config.http.proxy = config.proxy;
  return std::make_unique<CurlHubClient>(std::move(config));
}

}  // namespace whfs::hub
