#include "fs/publish/hub_writer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

namespace whfs::publish {
namespace {

using hub::BodySink;
using hub::HttpRequest;
using hub::HttpResponse;
using hub::TransferError;
using Kind = PublishError::Kind;
using Out = hub::Outcome<PublishError>;

constexpr int kMaxRedirects = 5;
// A storage PUT may take long on a slow line; a stalled one is cut by the stall limit.
constexpr auto kStorageDeadline = std::chrono::hours(24);
constexpr auto kLongestServerWait = std::chrono::seconds(300);
constexpr const char* kLfsJson = "application/vnd.git-lfs+json";

PublishError failed(std::string message) { return {Kind::kFailed, std::move(message)}; }

bool ok_status(int s) { return s >= 200 && s < 300; }

// <Code> or <Message> of an S3-style XML error body; "" when absent.
std::string xml_field(const std::string& body, const std::string& tag) {
  const auto open = body.find("<" + tag + ">");
  if (open == std::string::npos) return {};
  const auto start = open + tag.size() + 2;
  const auto close = body.find("</" + tag + ">", start);
  return close == std::string::npos ? std::string() : body.substr(start, close - start);
}

// The Hub's own words: X-Error-Message, else the JSON body's "error".
std::string hub_message(const HttpResponse& r) {
  std::string m = r.header("x-error-message");
  if (m.empty()) {
    const auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_object() && j.contains("error") && j["error"].is_string()) {
      m = j["error"].get<std::string>();
    }
  }
  return m;
}

}  // namespace

namespace {

// A failed transfer in publishing's words (whether it is retried is the transport's rule).
PublishError transfer_error(const TransferError& e, const std::string& what) {
  if (e.kind == TransferError::Kind::kStalled)
    return failed(what + ": stalled (" + e.message + ")");
  return failed(what + ": " + e.message);
}

// An exchange's failures in publishing's words; `what` must outlive them.
hub::ExchangeWords<PublishError> exchange_words(const std::string& what) {
  return {[&what](const TransferError& e) { return transfer_error(e, what); },
          [&what] { return failed(what + ": too many redirects"); }};
}

hub::TransportConfig transport_config(hub::TransportConfig c) {
  c.allow_insecure_token = false;  // a write token never crosses a network in clear text
  return c;
}

}  // namespace

HubWriter::HubWriter(WriterConfig config)
    : config_(std::move(config)), transport_(transport_config(config_.transport)) {
  const bool dataset = config_.repo.type == hub::RepoType::kDataset;
  const std::string& endpoint = transport_.endpoint();
  api_base_ = endpoint + (dataset ? "/api/datasets/" : "/api/models/") + config_.repo.id;
  git_base_ = endpoint + (dataset ? "/datasets/" : "/") + config_.repo.id + ".git";
}

WriterStats HubWriter::stats() const {
  WriterStats s = stats_;
  s.requests = transport_.stats().requests.load();
  s.retries = transport_.stats().retries.load();
  return s;
}

Expected<void, PublishError> HubWriter::ready() {
  if (!transport_.tokens().token()) {
    return unexpected(PublishError{
        Kind::kDenied,
        "no token (looked in " + transport_.tokens().describe() +
            "): publishing needs a write token; set HF_TOKEN, run `hf auth login`, or give "
            "--token-file"});
  }
  if (!transport_.token_may_travel()) {
    return unexpected(PublishError{Kind::kDenied, "the endpoint " + transport_.endpoint() +
                                                      " is plain http on another machine: the "
                                                      "token is not sent in clear text"});
  }
  return {};
}

// The transport's retries, in publishing's words: a warning for each retry, and how many tries
// were made when they are spent. No deadline: each request has its own limit, and the server's
// own wait is obeyed up to kLongestServerWait.
template <class Attempt>
Expected<void, PublishError> HubWriter::with_retries(const std::string& what, Attempt&& attempt) {
  hub::RetryRun<PublishError> run;
  run.longest_server_wait = kLongestServerWait;
  run.on_retry = [this](const PublishError& last, int tries, std::chrono::milliseconds delay,
                        bool) {
    spdlog::warn("{}; retry {} of {} in {:.1f} s", last.message, tries,
                 config_.transport.retry.max_attempts - 1,
                 static_cast<double>(delay.count()) / 1000);
  };
  run.give_up = [&](std::optional<PublishError> last, int, std::chrono::seconds, const char*) {
    PublishError e = last ? std::move(*last) : failed(what + ": not tried");
    e.message +=
        " (gave up after " + std::to_string(config_.transport.retry.max_attempts) + " tries)";
    return e;
  };
  // Nothing cancels a writer's transport; said in case something does one day.
  run.cancelled = [&] { return failed(what + ": cancelled"); };
  return transport_.run_with_retries<PublishError>(attempt, run);
}

Expected<HttpResponse, PublishError> HubWriter::api_post(const std::string& url,
                                                         const std::string& content_type,
                                                         const std::string& body,
                                                         const std::string& what, bool token) {
  HttpResponse out;
  hub::ExchangeOptions options;
  // 307/308 keep the method and body (a renamed repository); no other redirect is followed.
  options.follow = hub::Redirects::kSameMethod;
  options.max_redirects = kMaxRedirects;
  options.token = token;
  options.per_request = config_.api_timeout;
  const auto words = exchange_words(what);
  auto prepare = [&](HttpRequest& req, BodySink&) {
    req.method = "POST";
    req.headers = {
        std::string("Accept: ") + (content_type == kLfsJson ? kLfsJson : "application/json"),
        "Content-Type: " + content_type};
    req.post_body = body;
  };
  auto answer = [&](const std::string&, HttpResponse& resp) -> hub::Next<PublishError> {
    if (ok_status(resp.status)) {
      out = std::move(resp);
      return hub::done<PublishError>();
    }
    return hub::status_outcome(resp, api_error(resp, what));
  };
  auto r = with_retries(what, [&] {
    return transport_.exchange<PublishError>(url, options, prepare, answer, words);
  });
  if (!r) return unexpected(std::move(r).error());
  return out;
}

PublishError HubWriter::api_error(const HttpResponse& resp, const std::string& what) const {
  const std::string code = resp.header("x-error-code");
  const std::string said_raw = hub_message(resp);
  const std::string said = said_raw.empty() ? "" : " (Hub: " + said_raw + ")";
  const std::string token = "the token from " + transport_.tokens().describe();
  switch (resp.status) {
    case 401:
      if (code == "GatedRepo") {
        return {Kind::kDenied,
                what + ": gated repository; request access on the Hub's website" + said};
      }
      if (said_raw.find("Invalid credentials") != std::string::npos) {
        return {Kind::kDenied, what + ": the Hub refused " + token + " (invalid or expired)"};
      }
      return {Kind::kNotFound, what + ": repository not found, or private and no token was sent"};
    case 403:
      if (code == "GatedRepo") {
        return {Kind::kDenied, what + ": gated repository and " + token +
                                   " has no access; request access on the Hub's website"};
      }
      if (said_raw.find("write token") != std::string::npos) {
        return {Kind::kDenied, what + ": " + token +
                                   " can only read; publishing needs a token "
                                   "with write access" +
                                   said};
      }
      return {Kind::kDenied, what + ": the Hub refused " + token + said};
    case 404:
      if (code == "RevisionNotFound") {
        return {Kind::kNotFound, what + ": no such branch to commit to" + said};
      }
      return {Kind::kNotFound,
              what + ": repository not found, or private and " + token + " has no access" + said};
    case 412:
      return {Kind::kStale, what + ": the branch moved since the commit was planned" + said};
    default:
      return failed(what + ": HTTP " + std::to_string(resp.status) + said);
  }
}

Expected<std::vector<PreuploadAnswer>, PublishError> HubWriter::preupload(
    const std::string& revision, const std::vector<PreuploadFile>& files) {
  auto resp = api_post(api_base_ + "/preupload/" + hub::encode_segment(revision),
                       "application/json", preupload_body(files), "preupload", true);
  if (!resp) return unexpected(std::move(resp).error());
  auto parsed = parse_preupload(resp->body);
  if (!parsed) return unexpected(failed("preupload: " + parsed.error()));
  return std::move(*parsed);
}

Expected<std::vector<BatchAnswer>, PublishError> HubWriter::batch(
    const std::string& revision, const std::vector<LfsObject>& objects) {
  auto resp = api_post(git_base_ + "/info/lfs/objects/batch", kLfsJson,
                       batch_body(revision, objects), "LFS batch", true);
  if (!resp) return unexpected(std::move(resp).error());
  auto parsed = parse_batch(resp->body, objects);
  if (!parsed) return unexpected(failed("LFS batch: " + parsed.error()));
  return std::move(*parsed);
}

Expected<std::string, PublishError> HubWriter::put(const std::string& url, int fd,
                                                   std::uint64_t offset, std::uint64_t size,
                                                   const std::string& what) {
  std::string etag;
  hub::ExchangeOptions options;
  options.follow = hub::Redirects::kNone;
  options.token = false;  // a presigned URL: no token, whatever its origin
  options.per_request = kStorageDeadline;
  const auto words = exchange_words(what);
  auto prepare = [&](HttpRequest& req, BodySink&) {
    req.method = "PUT";
    req.put_body.size = size;
    req.put_body.read = [fd, offset](std::uint64_t at,
                                     std::span<std::byte> out) -> std::optional<std::size_t> {
      ssize_t n = -1;
      do {
        n = ::pread(fd, out.data(), out.size(), static_cast<off_t>(offset + at));
      } while (n < 0 && errno == EINTR);
      if (n < 0) return std::nullopt;
      return static_cast<std::size_t>(n);
    };
  };
  auto answer = [&](const std::string&, HttpResponse& resp) -> hub::Next<PublishError> {
    if (ok_status(resp.status)) {
      stats_.bytes_uploaded += size;
      etag = resp.header("etag");
      return hub::done<PublishError>();
    }
    const std::string code = xml_field(resp.body, "Code");
    const std::string message = xml_field(resp.body, "Message");
    PublishError e =
        failed(what + ": the storage host answered HTTP " + std::to_string(resp.status) +
               (code.empty() ? "" : " " + code + (message.empty() ? "" : ": " + message)));
    Out o = hub::status_outcome(resp, std::move(e));
    o.hint.reset();  // a storage host's own wait is not obeyed, only the backoff
    return o;
  };
  auto attempt = [&] {
    return transport_.exchange<PublishError>(url, options, prepare, answer, words);
  };
  auto r = with_retries(what, attempt);
  if (!r) return unexpected(std::move(r).error());
  return etag;
}

Expected<void, PublishError> HubWriter::multipart(const BatchAnswer& object, int fd,
                                                  const std::string& name) {
  const std::size_t n = object.parts.size();
  std::vector<std::string> etags(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t offset = i * object.chunk_size;
    const std::uint64_t size = std::min(object.chunk_size, object.size - offset);
    const std::string what =
        "part " + std::to_string(i + 1) + " of " + std::to_string(n) + " of " + name;
    auto etag = put(object.parts[i], fd, offset, size, what);
    if (!etag) return unexpected(std::move(etag).error());
    if (etag->empty()) return unexpected(failed(what + ": the storage host gave no ETag"));
    etags[i] = std::move(*etag);
    ++stats_.parts;
  }
  // The completion URL is signed in its query: like the official clients, no token.
  auto resp = api_post(object.href, kLfsJson, completion_body(object.oid, etags),
                       "completing the upload of " + name, false);
  if (!resp) return unexpected(std::move(resp).error());
  return {};
}

Expected<void, PublishError> HubWriter::upload(const BatchAnswer& object,
                                               const check::CheckedFile& file,
                                               const std::string& name) {
  if (object.stored) return {};
  if (object.chunk_size == 0) {
    auto etag = put(object.href, file.fd(), 0, object.size, "upload of " + name);
    if (!etag) return unexpected(std::move(etag).error());
  } else if (auto ok = multipart(object, file.fd(), name); !ok) {
    return ok;
  }
  if (object.verify_href.empty()) return {};
  // JSON, as huggingface_hub posts it; the href is the Hub's (it gets the token only if so).
  auto verified =
      api_post(object.verify_href, "application/json", verify_body({object.oid, object.size}),
               "verifying the upload of " + name, true);
  if (!verified) return unexpected(std::move(verified).error());
  return {};
}

Expected<CommitAnswer, PublishError> HubWriter::commit(const std::string& revision,
                                                       const std::string& payload) {
  auto resp = api_post(api_base_ + "/commit/" + hub::encode_segment(revision),
                       "application/x-ndjson", payload, "commit", true);
  if (!resp) return unexpected(std::move(resp).error());
  auto parsed = parse_commit(resp->body);
  if (!parsed) return unexpected(failed("commit: " + parsed.error()));
  return std::move(*parsed);
}

}  // namespace whfs::publish
