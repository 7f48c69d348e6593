#include "fs/hub/transport.h"

#include <algorithm>
#include <cstdlib>

#include "fs/common/version.h"

namespace whfs::hub {
namespace {

HttpConfig with_user_agent(HttpConfig http) {
  if (http.user_agent.empty()) http.user_agent = default_user_agent();
  return http;
}

}  // namespace

std::string default_user_agent() {
  std::string ua =
      std::string("wheelhouse-fs/") + kVersion + "; libcurl/" + HttpTransport::curl_version();
  if (const char* origin = std::getenv("HF_HUB_USER_AGENT_ORIGIN"); origin && *origin) {
    ua += std::string("; origin/") + origin;
  }
  return ua;
}

HubTransport::HubTransport(TransportConfig config)
    : config_(std::move(config)),
      tokens_(config_.token_file),
      http_(with_user_agent(config_.http)),
      endpoint_origin_(origin_of(config_.endpoint)),
      rng_(std::random_device{}()) {
  token_may_travel_ = endpoint_origin_ &&
                      (endpoint_origin_->scheme == "https" ||
                       is_loopback_host(endpoint_origin_->host) || config_.allow_insecure_token);
}

bool HubTransport::on_endpoint_origin(std::string_view url) const {
  const auto origin = origin_of(url);
  return origin && endpoint_origin_ && *origin == *endpoint_origin_;
}

// The token goes to the endpoint's origin and nowhere else (not to a CDN, not after a
// redirect to another host or port).
void HubTransport::add_auth(HttpRequest& req) {
  if (!token_may_travel_) return;
  if (!on_endpoint_origin(req.url)) return;
  if (auto token = tokens_.token()) req.headers.push_back("Authorization: Bearer " + *token);
}

bool HubTransport::follows(Redirects follow, int status) {
  switch (follow) {
    case Redirects::kNone:
      return false;
    case Redirects::kSameMethod:
      return status == 307 || status == 308;
    case Redirects::kAll:
      return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
  }
  return false;
}

std::chrono::milliseconds HubTransport::retry_delay(int retry_index,
                                                    std::optional<std::chrono::seconds> hint,
                                                    std::chrono::seconds longest_server_wait) {
  std::uniform_real_distribution<double> dist(0.0, 1.0);
  double u = 0;
  {
    std::lock_guard lock(rng_mu_);
    u = dist(rng_);
  }
  auto delay = backoff_delay(config_.retry, retry_index, u);
  if (hint) {
    // The server's wait plus one second, as the official clients do.
    delay = std::max<std::chrono::milliseconds>(
        delay,
        std::min<std::chrono::seconds>(*hint + std::chrono::seconds(1), longest_server_wait));
  }
  return delay;
}

bool HubTransport::sleep_for(std::chrono::milliseconds d) {
  std::unique_lock lock(sleep_mu_);
  sleep_cv_.wait_for(lock, d, [this] { return cancelled_; });
  return !cancelled_;
}

void HubTransport::cancel() {
  {
    std::lock_guard lock(sleep_mu_);
    cancelled_ = true;
  }
  sleep_cv_.notify_all();
  http_.cancel();
}

}  // namespace whfs::hub
