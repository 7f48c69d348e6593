#pragma once
// The Hub transport: the one place that decides how a request to the Hub travels, for reading
// (CurlHubClient) and for publishing (publish::HubWriter) alike. Over HttpTransport (one HTTP
// exchange, no redirect followed), it adds
//   - the token-to-origin rule: the Authorization header goes to the endpoint's own origin
//     only, and only over https, to this machine, or where the user opted in; never to a
//     redirect target on another origin (a CDN, a storage host), never into a message;
//   - redirects followed by hand, hop by hop, so that the rule holds at every hop;
//   - which failures are worth another try (connect errors, resets, stalls, 408/429/5xx; a
//     stall at once, on a fresh connection), and the retry loop with backoff, the server's own
//     wait and the call's deadline;
//   - the counters of every exchange (HubStats).
// What an error says stays the caller's: both callers keep their own error type (HubError,
// PublishError), so the transport's outcome is a template on it.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "fs/common/cancel.h"
#include "fs/common/clock.h"
#include "fs/common/expected.h"
#include "fs/hub/http.h"
#include "fs/hub/retry.h"
#include "fs/hub/token.h"
#include "fs/hub/url.h"

namespace whfs::hub {

// HTTP exchanges and the body bytes they received: every server (requests, bytes), and of
// them those to another origin than the endpoint's (the CDN a /resolve redirects to).
struct HubStats {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> retries{0};
  std::atomic<std::uint64_t> errors{0};
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> cdn_requests{0};
  std::atomic<std::uint64_t> cdn_bytes{0};
  std::atomic<std::uint64_t> stalls{0};  // tries that timed out (no progress), retried or not
  std::atomic<std::uint64_t> redirects{0};
  std::atomic<std::uint64_t> url_reuses{0};
};

// What one attempt of a call ended with; E is the caller's error type.
template <class E>
struct Outcome {
  // kProgress: a short but well-formed answer moved forward; ask for the rest at once, which
  // does not count as a retry.
  enum class Kind { kDone, kProgress, kRetry, kFail } kind = Kind::kDone;
  E error{};
  std::optional<std::chrono::seconds> hint;  // the server's own wait, for 429/503
  // A stalled connection was dropped: a fresh one is tried at once, without a backoff (the
  // stall limit already waited, and the server is not asking us to slow down).
  bool at_once = false;
};

template <class E>
Outcome<E> done() {
  return {};
}
template <class E>
Outcome<E> progress() {
  return {Outcome<E>::Kind::kProgress, E{}, std::nullopt, false};
}
template <class E>
Outcome<E> fail(E e) {
  return {Outcome<E>::Kind::kFail, std::move(e), std::nullopt, false};
}
template <class E>
Outcome<E> retry(E e, std::optional<std::chrono::seconds> hint = std::nullopt) {
  return {Outcome<E>::Kind::kRetry, std::move(e), hint, false};
}

// Whether a failed transfer is worth another try: not when we are shutting down, nobody waits
// for the answer or the body is too large; a stall at once; anything else (connect errors,
// resets, timeouts, truncated bodies) after a backoff. `error` says it in the caller's words.
template <class E>
Outcome<E> transfer_outcome(const TransferError& e, E error) {
  using K = TransferError::Kind;
  switch (e.kind) {
    case K::kCancelled:
    case K::kAbandoned:
    case K::kTooLarge:
      return fail(std::move(error));
    case K::kStalled: {
      Outcome<E> o = retry(std::move(error));
      o.at_once = true;
      return o;
    }
    case K::kConnect:
    case K::kTimeout:
    case K::kReset:
    case K::kTruncated:
    case K::kOther:
      break;
  }
  return retry(std::move(error));
}

// A response that is not the answer hoped for: another try for 408/429/5xx, with the server's
// own wait when it gave one (Retry-After, RateLimit); a failure otherwise.
template <class E>
Outcome<E> status_outcome(const HttpResponse& resp, E error) {
  if (retryable_status(resp.status)) {
    return retry(std::move(error),
                 server_retry_hint(resp.header("retry-after"), resp.header("ratelimit")));
  }
  return fail(std::move(error));
}

// What to do with a response that is not a redirect to follow: an outcome, or a URL to go to
// instead (a signed URL that was refused: resolve it again).
template <class E>
using Next = std::variant<Outcome<E>, std::string>;

enum class Redirects {
  kNone,        // every response is the answer (a presigned storage PUT)
  kSameMethod,  // 307/308, which keep the method and body (a POST to a renamed repository)
  kAll,         // 301, 302, 303, 307, 308 (GETs)
};

struct ExchangeOptions {
  Redirects follow = Redirects::kAll;
  int max_redirects = 10;
  // Whether the token may go at all; when it may, it still goes to the endpoint's origin only.
  bool token = true;
  Deadline deadline = Deadline::max();
  // Each request's own limit, counted from when it starts (and never past `deadline`).
  std::optional<std::chrono::seconds> per_request;
  const CancelFlag* abandon = nullptr;  // may be null; see HttpTransport::perform
};

// A failed exchange in the caller's words.
template <class E>
struct ExchangeWords {
  std::function<E(const TransferError&)> transfer;
  std::function<E()> too_many_redirects;
};

// One call's retries: its deadline, and the caller's words for what happens.
template <class E>
struct RetryRun {
  Deadline deadline = Deadline::max();
  // The longest server's wait obeyed (a call without a deadline must not wait for hours).
  std::chrono::seconds longest_server_wait = std::chrono::seconds::max();
  // Every try that failed, retried or not (e.g. to count stalls); may be empty.
  std::function<void(const E& error)> on_failed_try;
  // A retry about to happen, after `delay` (zero and `at_once` for a fresh connection now).
  std::function<void(const E& last, int tries, std::chrono::milliseconds delay, bool at_once)>
      on_retry;
  // The error returned when the tries are spent, or the deadline is reached (`why` says which
  // when it is not the number of tries). `last`: nullopt when no try was made.
  std::function<E(std::optional<E> last, int tries, std::chrono::seconds took, const char* why)>
      give_up;
  std::function<E()> cancelled;  // cancel() ended a backoff's sleep
};

struct TransportConfig {
  std::string endpoint;              // without a trailing "/": the origin the token may go to
  std::filesystem::path token_file;  // empty: HF_TOKEN, HF_TOKEN_PATH, $HF_HOME/token
  // The token goes over https, or plain http to a loopback address; plain http to anywhere
  // else only when this is set: it would travel in clear text.
  bool allow_insecure_token = false;
  RetryPolicy retry;
  HttpConfig http;  // user_agent: default_user_agent() when empty
};

// "wheelhouse-fs/<version>; libcurl/<version>[; origin/<HF_HUB_USER_AGENT_ORIGIN>]"
std::string default_user_agent();

class HubTransport {
 public:
  explicit HubTransport(TransportConfig config);
  HubTransport(const HubTransport&) = delete;
  HubTransport& operator=(const HubTransport&) = delete;

  // Whether the token may be sent to the endpoint at all (https, this machine, or opted in).
  bool token_may_travel() const { return token_may_travel_; }
  TokenSource& tokens() { return tokens_; }
  const TokenSource& tokens() const { return tokens_; }
  const std::string& endpoint() const { return config_.endpoint; }
  bool on_endpoint_origin(std::string_view url) const;

  HubStats& stats() { return stats_; }
  const HubStats& stats() const { return stats_; }

  // One attempt of a call: the request `prepare(HttpRequest&, BodySink&)` makes (method,
  // headers, body, sink; the URL is set) for each URL from `url` on, the redirects that
  // `options.follow` allows followed by hand with the token at each hop only if the hop is on
  // the endpoint's origin, and `answer(const std::string& url, HttpResponse&) -> Next<E>` for
  // the first response that is not a redirect to follow.
  template <class E, class Prepare, class Answer>
  Outcome<E> exchange(std::string url, const ExchangeOptions& options, Prepare&& prepare,
                      Answer&& answer, const ExchangeWords<E>& words);

  // Runs `attempt() -> Outcome<E>` until it is done or fails, retrying with backoff (or the
  // server's wait, plus one second, as the official clients do) up to the policy's number of
  // tries, and never waiting past the deadline.
  template <class E, class Attempt>
  Expected<void, E> run_with_retries(Attempt&& attempt, const RetryRun<E>& run);

  // Makes transfers in flight and backoff sleeps end promptly (shutdown).
  void cancel();

 private:
  void add_auth(HttpRequest& req);
  std::chrono::milliseconds retry_delay(int retry_index, std::optional<std::chrono::seconds> hint,
                                        std::chrono::seconds longest_server_wait);
  bool sleep_for(std::chrono::milliseconds d);
  static bool follows(Redirects follow, int status);

  TransportConfig config_;
  TokenSource tokens_;
  HttpTransport http_;
  std::optional<Origin> endpoint_origin_;
  bool token_may_travel_ = false;
  HubStats stats_;

  std::mutex rng_mu_;  // guards rng_
  std::mt19937_64 rng_;

  std::mutex sleep_mu_;  // guards cancelled_ for the backoff sleeps
  std::condition_variable sleep_cv_;
  bool cancelled_ = false;
};

template <class E, class Prepare, class Answer>
Outcome<E> HubTransport::exchange(std::string url, const ExchangeOptions& options,
                                  Prepare&& prepare, Answer&& answer,
                                  const ExchangeWords<E>& words) {
  for (int hop = 0; hop <= options.max_redirects; ++hop) {
    HttpRequest req;
    req.url = url;
    BodySink body;
    prepare(req, body);
    if (options.token) add_auth(req);
    const bool cdn = !on_endpoint_origin(url);
    stats_.requests++;
    if (cdn) stats_.cdn_requests++;
    Deadline deadline = options.deadline;
    if (options.per_request) {
      const auto now = Clock::now();
      if (deadline - now > *options.per_request) deadline = now + *options.per_request;
    }
    auto resp = http_.perform(req, deadline, body, options.abandon);
    const std::uint64_t got = resp ? resp->body_bytes : resp.error().body_bytes;
    stats_.bytes += got;
    if (cdn) stats_.cdn_bytes += got;
    if (!resp) return transfer_outcome<E>(resp.error(), words.transfer(resp.error()));
    if (follows(options.follow, resp->status)) {
      // A redirect without a Location is an answer like any other (an error).
      const std::string loc = resp->header("location");
      if (!loc.empty()) {
        url = resolve_reference(url, loc);
        stats_.redirects++;
        continue;
      }
    }
    Next<E> next = answer(url, *resp);
    if (auto* o = std::get_if<Outcome<E>>(&next)) return std::move(*o);
    url = std::move(std::get<std::string>(next));
  }
  return fail(words.too_many_redirects());
}

template <class E, class Attempt>
Expected<void, E> HubTransport::run_with_retries(Attempt&& attempt, const RetryRun<E>& run) {
  std::optional<E> last;
  const auto started = Clock::now();
  int tries = 0;
  auto give_up = [&](const char* why) {
    const auto took = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started);
    stats_.errors++;
    return unexpected(run.give_up(std::move(last), tries, took, why));
  };
  while (tries < config_.retry.max_attempts) {
    if (Clock::now() >= run.deadline) break;
    Outcome<E> o = attempt();
    if (o.kind == Outcome<E>::Kind::kDone) return {};
    if (o.kind == Outcome<E>::Kind::kFail) {
      stats_.errors++;
      return unexpected(std::move(o.error));
    }
    if (o.kind == Outcome<E>::Kind::kProgress) continue;
    last = std::move(o.error);
    ++tries;
    if (run.on_failed_try) run.on_failed_try(*last);
    if (tries >= config_.retry.max_attempts) break;
    if (o.at_once) {
      stats_.retries++;
      run.on_retry(*last, tries, std::chrono::milliseconds(0), true);
      continue;
    }
    const auto delay = retry_delay(tries - 1, o.hint, run.longest_server_wait);
    if (delay >= run.deadline - Clock::now()) {
      // Waiting would pass the deadline: fail now with what we know.
      return give_up("the next would pass the deadline");
    }
    stats_.retries++;
    run.on_retry(*last, tries, delay, false);
    if (!sleep_for(delay)) {
      stats_.errors++;
      return unexpected(run.cancelled());
    }
  }
  return give_up("");
}

}  // namespace whfs::hub
