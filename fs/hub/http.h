#pragma once
// One HTTP exchange over libcurl, with no redirect following (the client decides, hop by hop,
// whether the token may go to the next origin). A pool of easy handles, each keeping its own
// connections alive, serves many threads at once; DNS answers and TLS sessions are shared
// between handles. Connections themselves are not put in the share object: libcurl documents
// connection sharing between concurrent threads as unsafe, and a reused handle already reuses
// its connection.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fs/common/cancel.h"
#include "fs/common/clock.h"
#include "fs/common/expected.h"

namespace whfs::hub {

// The body of a PUT, read on demand so that a large file is never held in memory: `read`
// fills `out` with the bytes at `offset` of the body and returns how many it wrote (fewer
// than asked only at the end), or nullopt when the source cannot be read. Offsets may go
// back: a transfer that is retried, or rewound by libcurl, reads from the start again.
struct BodySource {
  std::uint64_t size = 0;
  std::function<std::optional<std::size_t>(std::uint64_t offset, std::span<std::byte> out)> read;
};

struct HttpRequest {
  std::string method = "GET";  // GET, POST or PUT
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string post_body;             // POST only
  BodySource put_body;               // PUT only
};

// Response header names are stored lower case; the last value of a repeated header wins,
// except Link, whose values are joined with ", ".
struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string body;  // non-2xx bodies (capped at 64 KiB), or every body without a sink
  std::uint64_t body_bytes = 0;

  std::string header(const std::string& lower_name) const;
};

struct TransferError {
  // kStalled: the connection made no progress for the stall limit (the deadline had not
  // passed); a fresh connection may well do better at once.
  enum class Kind {
    kConnect,
    kTimeout,
    kStalled,
    kReset,
    kTruncated,
    kTooLarge,
    kCancelled,  // cancel(): shutting down
    kAbandoned,  // the caller's flag: nobody wants the answer any more
    kOther
  };
  Kind kind = Kind::kOther;
  std::string message;
  std::uint64_t body_bytes = 0;  // bytes delivered before the failure
};

// Receives the body of a 2xx response in order. Return false to stop the transfer early (the
// caller has what it needs); that is not an error.
using BodySink = std::function<bool(const HttpResponse& head, std::span<const std::byte>)>;

struct HttpConfig {
  std::string user_agent;
  std::string proxy;  // empty: libcurl's own handling of http_proxy/HTTPS_PROXY/NO_PROXY
  std::chrono::milliseconds connect_timeout{10000};
  // A transfer that moves no byte for this long is a stall: the connection is dropped (the
  // caller retries on a fresh one). Waiting for an answer counts too.
  std::chrono::seconds low_speed_time{5};
  std::size_t max_handles = 32;
  std::size_t max_body = 8u << 20;  // for bodies collected in memory (a listing page)
};

class HttpTransport {
 public:
  explicit HttpTransport(HttpConfig config);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Blocks until the response is complete, the deadline passes or cancel() is called.
  // `abandon` (may be null) ends the transfer at once when raised.
  Expected<HttpResponse, TransferError> perform(const HttpRequest& req, Deadline deadline,
                                                const BodySink& sink = nullptr,
                                                const CancelFlag* abandon = nullptr);

  // Aborts every transfer in flight and makes new ones fail at once (shutdown).
  void cancel();
  bool cancelled() const { return cancelled_.load(); }

  static std::string curl_version();

 private:
  struct Handle;
  std::unique_ptr<Handle> acquire(Deadline deadline);
  void release(std::unique_ptr<Handle> h);

  HttpConfig config_;
  struct Share;
  std::unique_ptr<Share> share_;
  std::mutex pool_mu_;  // guards free_ and created_
  std::condition_variable pool_cv_;
  std::vector<std::unique_ptr<Handle>> free_;
  std::size_t created_ = 0;
  std::atomic<bool> cancelled_{false};
};

}  // namespace whfs::hub
