#pragma once
// Retry timing, as pure functions: exponential backoff with jitter, and the server's own hint
// on 429/503 (Retry-After in integer seconds, or the RateLimit header's t= when r=0).

#include <chrono>
#include <optional>
#include <string_view>

namespace whfs::hub {

struct RetryPolicy {
  int max_attempts = 6;                  // the first try plus 5 retries, as huggingface_hub
  std::chrono::milliseconds base{1000};  // first backoff
  std::chrono::milliseconds cap{8000};   // longest backoff
};

// Delay before retry number `retry` (0 for the first retry): base * 2^retry capped at `cap`,
// scaled into [50%, 100%] by `jitter01` in [0, 1) so that many clients do not retry in step.
std::chrono::milliseconds backoff_delay(const RetryPolicy& p, int retry, double jitter01);

// What the server asked for: RateLimit `"bucket";r=0;t=N` gives N, else Retry-After as an
// integer number of seconds (the HTTP-date form is ignored, as the official clients do).
std::optional<std::chrono::seconds> server_retry_hint(std::string_view retry_after,
                                                      std::string_view ratelimit);

// True for the statuses worth another try: 408, 429, 500, 502, 503, 504.
bool retryable_status(int status);

}  // namespace whfs::hub
