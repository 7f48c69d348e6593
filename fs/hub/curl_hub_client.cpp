// CurlHubClient: the HubClient over HubTransport (transport.h), which bounds every call by its
// deadline, retries transient failures with backoff and follows redirects by hand so that the
// token only ever goes to the endpoint's origin. What is left here is the read protocol: the
// API's URLs and pages, the ranges and the signed URLs a /resolve redirects to.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <future>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "fs/common/version.h"
#include "fs/hub/hub_client.h"
#include "fs/hub/listing.h"
#include "fs/hub/range_sink.h"
#include "fs/hub/token.h"
#include "fs/hub/transport.h"
#include "fs/hub/url.h"

namespace whfs::hub {
namespace {

constexpr int kMaxRedirects = 10;

using Out = Outcome<HubError>;
using NextStep = Next<HubError>;

HubError make_error(HubErrorKind kind, std::string message, int status = 0) {
  return HubError{kind, std::move(message), status, "", "", ""};
}

HubError with_cause(HubError e, std::string cause) {
  e.cause = std::move(cause);
  return e;
}

// A failed transfer as a HubError (whether it is retried is the transport's rule).
HubError transfer_error(const TransferError& e, const std::string& what) {
  using K = TransferError::Kind;
  switch (e.kind) {
    case K::kCancelled:
      return make_error(HubErrorKind::kCancelled, what + ": shutting down");
    case K::kAbandoned:
      return make_error(HubErrorKind::kCancelled, what + ": nobody waits for it any more");
    case K::kTooLarge:
      return make_error(HubErrorKind::kBadResponse, what + ": " + e.message);
    case K::kTimeout:
      return with_cause(make_error(HubErrorKind::kTimeout, what + ": " + e.message), e.message);
    case K::kStalled:
      return make_error(HubErrorKind::kTimeout,
                        what + ": stalled (" + e.message + "); retrying on a fresh connection");
    case K::kTruncated:
      return make_error(HubErrorKind::kCorrupt, what + ": truncated body (" + e.message + ")");
    case K::kConnect:
    case K::kReset:
    case K::kOther:
      break;
  }
  return with_cause(make_error(HubErrorKind::kUnavailable, what + ": " + e.message), e.message);
}

// At most N API requests on the wire at once (HubClientConfig::max_api_requests); a waiter
// gives up at its deadline or when the client is cancelled.
class ApiSlots {
 public:
  explicit ApiSlots(std::size_t n) : free_(std::max<std::size_t>(1, n)) {}
  bool acquire(Deadline deadline) {
    std::unique_lock lock(mu_);
    cv_.wait_until(lock, deadline, [&] { return free_ > 0 || cancelled_; });
    if (free_ == 0 || cancelled_) return false;
    --free_;
    return true;
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      ++free_;
    }
    cv_.notify_one();
  }
  void cancel() {
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
  }
  bool cancelled() {
    std::lock_guard lock(mu_);
    return cancelled_;
  }

 private:
  std::mutex mu_;  // a leaf: never held across I/O
  std::condition_variable cv_;
  std::size_t free_;
  bool cancelled_ = false;
};

class CurlHubClient final : public HubClient {
 public:
  explicit CurlHubClient(HubClientConfig config)
      : config_(std::move(config)),
        transport_(config_.transport),
        api_slots_(config_.max_api_requests) {
    const bool dataset = config_.repo.type == RepoType::kDataset;
    const std::string& endpoint = transport_.endpoint();
    api_base_ = endpoint + (dataset ? "/api/datasets/" : "/api/models/") + config_.repo.id;
    file_base_ = endpoint + (dataset ? "/datasets/" : "/") + config_.repo.id;
    if (!transport_.token_may_travel() && transport_.tokens().token()) {
      spdlog::warn(
          "the endpoint {} is plain http and not on this machine: the token ({}) is not sent, "
          "so that it never crosses a network in clear text (option insecure_token sends it)",
          endpoint, transport_.tokens().describe());
    }
  }

  ~CurlHubClient() override { cancel(); }

  Expected<Revision, HubError> resolve_revision(std::string_view revision,
                                                Deadline deadline) override {
    const std::string url = api_base_ + "/revision/" + encode_segment(revision) +
                            "?expand=sha&expand=lastModified&expand=private&expand=gated";
    auto resp = api_get(url, deadline);
    if (!resp) return unexpected(std::move(resp).error());
    auto info = parse_revision_info(resp->body);
    if (!info) return unexpected(std::move(info).error());
    return Revision{info->commit, info->last_modified, info->is_public};
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
    // Pipelined: the next page is asked for as soon as a page has arrived, and this page is
    // parsed while it comes (one request in flight per listing, as the Hub's rate limits want;
    // parsing was half the time a 113-page listing took).
    auto fetch = [this, deadline](std::string u) {
      return std::async(std::launch::async,
                        [this, deadline, u = std::move(u)] { return api_get(u, deadline); });
    };
    auto next_page = fetch(url);
    for (std::size_t page = 0;; ++page) {
      auto resp = next_page.get();
      if (!resp) return unexpected(std::move(resp).error());
      const auto next = parse_link_next(resp->header("link"));
      if (next) {
        if (page + 1 >= max_pages) {
          HubError e = make_error(HubErrorKind::kBadResponse,
                                  "listing has more than " + std::to_string(max_pages) +
                                      " pages; refusing to truncate it");
          e.code = "TooManyPages";
          return unexpected(std::move(e));
        }
        if (!transport_.on_endpoint_origin(*next)) {
          return unexpected(
              make_error(HubErrorKind::kBadResponse,
                         "next-page link points to another origin: " + redact(*next)));
        }
        if (!seen_urls.insert(*next).second) {
          return unexpected(make_error(HubErrorKind::kBadResponse,
                                       "next-page link repeats an earlier page: " + redact(*next)));
        }
        next_page = fetch(*next);  // (waited for when it goes out of scope, whatever happens)
      }
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
      if (!next) break;
    }
    return entries;
  }

  Expected<void, HubError> stream_range(const FileRef& file, std::uint64_t offset,
                                        std::uint64_t length, Deadline deadline,
                                        const CancelFlag* abandon, ChunkFn consume) override {
    if (length == 0) return {};
    if (offset + length > file.size) {
      return unexpected(
          make_error(HubErrorKind::kBadResponse, "read past the end of " + file.path));
    }
    const std::string resolve_url =
        file_base_ + "/resolve/" + file.commit + "/" + encode_path(file.path);
    const std::string key = file.commit + '\0' + file.path;
    std::uint64_t got = 0;
    bool refreshed = false;
    auto attempt = [&]() -> Out {
      const std::uint64_t before = got;
      std::optional<RangeSink> sink;  // fresh per response
      auto prepare = [&](HttpRequest& req, BodySink& body) {
        req.headers = {"Accept-Encoding: identity", "Range: bytes=" + std::to_string(offset + got) +
                                                        "-" + std::to_string(offset + length - 1)};
        sink.emplace(consume, length, &got, offset + got, file.size);
        body = [&sink](const HttpResponse& h, std::span<const std::byte> d) {
          return (*sink)(h, d);
        };
      };
      auto answer = [&](const std::string& url, const HttpResponse& resp) -> NextStep {
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
        if (got == length) return done<HubError>();
        // A short but well-formed answer: ask for the rest at once if it made progress.
        if (got > before) return progress<HubError>();
        return retry(make_error(HubErrorKind::kCorrupt,
                                file.path + ": body ended after " + std::to_string(got) + " of " +
                                    std::to_string(length) + " bytes",
                                status));
      };
      Out o = exchange(cached_url(key).value_or(resolve_url), deadline, abandon, file.path, prepare,
                       answer);
      if (o.kind == Out::Kind::kRetry && got > before) {
        // The try moved bytes before it failed (a connection dropped mid-body, a stall after
        // a while): progress, so the rest is asked for at once and no try is spent: a
        // transfer that keeps moving bytes is never failed for being slow or interrupted.
        spdlog::debug("{}: {} after {} bytes; asking for the rest", file.path, o.error.describe(),
                      got - before);
        if (o.error.kind == HubErrorKind::kTimeout) transport_.stats().stalls++;
        transport_.stats().retries++;
        return progress<HubError>();
      }
      return o;
    };
    // A retried transfer is worth a line in the log (an admin tails it while a read waits);
    // a retried API call only at debug (a mount's start says one line, whatever it tried).
    return run_with_retries(attempt, deadline, "read " + file.path, spdlog::level::info);
  }

  const HubStats& stats() const override { return transport_.stats(); }

  void cancel() override {
    api_slots_.cancel();
    transport_.cancel();
  }

 private:
  // The transport's retries, in the words a person reads: the last cause, how many tries over
  // how long. The kind stays the cause's (a refused connection is not a timeout because the
  // deadline came).
  template <class Attempt>
  Expected<void, HubError> run_with_retries(Attempt&& attempt, Deadline deadline,
                                            const std::string& what,
                                            spdlog::level::level_enum retry_level) {
    RetryRun<HubError> run;
    run.deadline = deadline;
    run.on_failed_try = [this](const HubError& e) {
      if (e.kind == HubErrorKind::kTimeout) transport_.stats().stalls++;
    };
    run.on_retry = [&](const HubError& last, int tries, std::chrono::milliseconds delay,
                       bool at_once) {
      if (at_once) {
        spdlog::log(retry_level, "{}: {}; retry {} now", what, last.describe(), tries);
      } else {
        spdlog::log(retry_level, "{}: {}; retry {} in {} ms", what, last.describe(), tries,
                    delay.count());
      }
    };
    run.give_up = [&](std::optional<HubError> tried_last, int tries, std::chrono::seconds took,
                      const char* why) {
      HubError last =
          tried_last ? std::move(*tried_last)
                     : with_cause(make_error(HubErrorKind::kTimeout, what + ": deadline passed"),
                                  "timed out");
      const std::string tried =
          tries > 1 ? std::to_string(tries) + " tries in " + std::to_string(took.count()) + " s"
                    : "";
      if (last.cause.empty()) last.cause = last.message;
      if (!tried.empty()) last.cause += " (" + tried + ")";
      if (!tried.empty() || *why != '\0') {
        last.message += " (" + tried + (!tried.empty() && *why != '\0' ? "; " : "") + why + ")";
      }
      return last;
    };
    run.cancelled = [&] { return make_error(HubErrorKind::kCancelled, what + ": shutting down"); };
    return transport_.run_with_retries<HubError>(attempt, run);
  }

  // One attempt of a call: the transport's exchange (redirects followed by hand, the token to
  // the endpoint's origin only), with the client's words for its failures.
  template <class Prepare, class Answer>
  Out exchange(const std::string& url, Deadline deadline, const CancelFlag* abandon,
               const std::string& what, Prepare&& prepare, Answer&& answer) {
    ExchangeOptions options;
    options.follow = Redirects::kAll;
    options.max_redirects = kMaxRedirects;
    options.deadline = deadline;
    options.abandon = abandon;
    ExchangeWords<HubError> words{
        [&](const TransferError& e) { return transfer_error(e, what); },
        [&] { return make_error(HubErrorKind::kBadResponse, what + ": too many redirects"); }};
    return transport_.exchange<HubError>(url, options, prepare, answer, words);
  }

  // GET an API URL (JSON); the final 2xx response with its body.
  Expected<HttpResponse, HubError> api_get(const std::string& start_url, Deadline deadline) {
    HttpResponse result;
    const std::string what = redact(start_url);
    auto attempt = [&]() -> Out {
      if (!api_slots_.acquire(deadline)) {
        if (api_slots_.cancelled()) {
          return fail(make_error(HubErrorKind::kCancelled, what + ": shutting down"));
        }
        return fail(make_error(HubErrorKind::kTimeout,
                               what + ": " + std::to_string(config_.max_api_requests) +
                                   " other API requests took the time it had (api_requests=)"));
      }
      struct Release {
        ApiSlots& slots;
        ~Release() { slots.release(); }
      } release{api_slots_};
      return exchange(
          start_url, deadline, nullptr, what,
          [](HttpRequest& req, BodySink&) {
            req.headers = {"Accept: application/json", "Accept-Encoding: identity"};
          },
          [&](const std::string&, HttpResponse& resp) -> NextStep {
            if (resp.status < 200 || resp.status >= 300) return status_outcome(resp, what);
            result = std::move(resp);
            return done<HubError>();
          });
    };
    auto r = run_with_retries(attempt, deadline, "GET " + what, spdlog::level::debug);
    if (!r) return unexpected(std::move(r).error());
    return result;
  }

  Out status_outcome(const HttpResponse& resp, const std::string& what) {
    return hub::status_outcome(resp, response_error(resp, what));
  }

  HubError response_error(const HttpResponse& resp, const std::string& what) {
    return hub::response_error(resp, what, transport_.tokens().token().has_value());
  }

  std::optional<std::string> cached_url(const std::string& key) {
    std::lock_guard lock(url_mu_);
    const auto it = urls_.find(key);
    if (it == urls_.end()) return std::nullopt;
    if (Clock::now() >= it->second.good_until) {
      urls_.erase(it);
      return std::nullopt;
    }
    transport_.stats().url_reuses++;
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
  HubTransport transport_;
  ApiSlots api_slots_;
  std::string api_base_;
  std::string file_base_;

  std::mutex url_mu_;  // guards urls_; never held across I/O
  std::unordered_map<std::string, CachedUrl> urls_;
};

}  // namespace

std::unique_ptr<HubClient> make_hub_client(HubClientConfig config) {
  return std::make_unique<CurlHubClient>(std::move(config));
}

}  // namespace whfs::hub
