#include "fs/hub/http.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "fs/common/text.h"

namespace whfs::hub {
namespace {

// curl_global_init is not thread-safe; do it once, before any handle exists.
struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
};

void ensure_curl_global() { static CurlGlobal global; }

// The sockets a handle has open (its connection cache), so that each arriving body can be
// acknowledged at once: a server that holds back the tail of a response until its earlier
// segments are acknowledged (Nagle after TCP_CORK, as nginx's tcp_nopush with sendfile does)
// otherwise waits for our delayed ACK, 40 ms on every response a little over one segment.
// TCP_QUICKACK does not stay set, so it is set again for each piece of body in the last
// kQuickAckTail bytes of a response (the held tail is at most one segment, 64 KiB on loopback;
// a setsockopt per piece of a whole 4 MiB body was 3-4% of the daemon's CPU on a cold read),
// and for every piece of a body of unknown length. All of the handle's sockets, not
// CURLINFO_ACTIVESOCKET: during a transfer that names the connection of the handle's previous
// transfer (measured: 200 cold random reads 0.07 s -> 0.66 s with it).
struct SocketSet {
  std::mutex mu;
  std::vector<curl_socket_t> fds;
};
constexpr std::uint64_t kQuickAckTail = 256u << 10;

// State of one transfer, reached from the curl callbacks.
struct Transfer {
  SocketSet* sockets = nullptr;
  const BodySink* sink = nullptr;
  HttpResponse response;
  // The response's Content-Length, read once from its headers (for kQuickAckTail).
  std::optional<std::uint64_t> body_length;
  std::size_t max_body = 0;
  bool stopped_by_sink = false;
  bool too_large = false;
  const std::atomic<bool>* cancelled = nullptr;
  const CancelFlag* abandon = nullptr;
  bool abandoned = false;
  // Stall detection: the time of the last byte moved either way. (libcurl's low-speed limit
  // averages over a window of several seconds, so after a burst it notices a stall late.)
  std::chrono::steady_clock::duration stall_limit{};
  std::chrono::steady_clock::time_point last_progress{};
  curl_off_t last_down = 0;
  curl_off_t last_up = 0;
  bool stalled = false;
  // A PUT's body: where libcurl reads next, and whether the source failed.
  const BodySource* put = nullptr;
  std::uint64_t put_offset = 0;
  bool put_unreadable = false;
};

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {
    // A new response (e.g. after "100 Continue"): start its headers afresh.
    t->response.headers.clear();
    t->body_length.reset();
    const auto sp = line.find(' ');
    t->response.status =
        sp == std::string_view::npos ? 0 : std::atoi(std::string(line.substr(sp + 1, 3)).c_str());
    return size * n;
  }
  const auto colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  std::string name = lower(line.substr(0, colon));
  std::string value(trim(line.substr(colon + 1)));
  if (name == "content-length") {
    std::uint64_t length = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
    if (ec == std::errc() && end == value.data() + value.size()) t->body_length = length;
  }
  auto& slot = t->response.headers[name];
  if (name == "link" && !slot.empty()) {
    slot += ", " + value;
  } else {
    slot = std::move(value);
  }
  return size * n;
}

int on_sockopt(void* user, curl_socket_t fd, curlsocktype) {
  auto* set = static_cast<SocketSet*>(user);
  std::lock_guard lock(set->mu);
  set->fds.push_back(fd);
  return CURL_SOCKOPT_OK;
}

int on_close_socket(void* user, curl_socket_t fd) {
  auto* set = static_cast<SocketSet*>(user);
  {
    std::lock_guard lock(set->mu);
    std::erase(set->fds, fd);
  }
  return ::close(fd);
}

void ack_now(SocketSet* set) {
  if (set == nullptr) return;
  std::lock_guard lock(set->mu);
  const int one = 1;
  for (curl_socket_t fd : set->fds) ::setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
}

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t len = size * n;
  // (Unless the body is known to go on past kQuickAckTail more bytes.)
  if (!t->body_length || t->response.body_bytes + len + kQuickAckTail >= *t->body_length) {
    ack_now(t->sockets);
  }
  const int status = t->response.status;
  if (t->sink != nullptr && *t->sink && status >= 200 && status < 300) {
    t->response.body_bytes += len;
    if (!(*t->sink)(t->response, std::span(reinterpret_cast<const std::byte*>(data), len))) {
      t->stopped_by_sink = true;
      return 0;  // ends the transfer with CURLE_WRITE_ERROR, which perform() treats as done
    }
    return len;
  }
  // Bodies kept in memory: error bodies are only for messages, so a small cap is enough.
  const std::size_t cap = (status >= 200 && status < 300) ? t->max_body : (64u << 10);
  t->response.body_bytes += len;
  if (t->response.body.size() + len > cap) {
    if (status >= 200 && status < 300) {
      t->too_large = true;
      return 0;
    }
    t->response.body.append(data, cap - std::min(cap, t->response.body.size()));
    return len;
  }
  t->response.body.append(data, len);
  return len;
}

std::size_t on_read(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::uint64_t left = t->put->size - t->put_offset;
  const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(size * n, left));
  if (want == 0) return 0;
  const auto got = t->put->read(t->put_offset, std::span(reinterpret_cast<std::byte*>(data), want));
  if (!got || *got == 0 || *got > want) {
    // A source that fails or ends before its announced size: never send a short body.
    t->put_unreadable = true;
    return CURL_READFUNC_ABORT;
  }
  t->put_offset += *got;
  return *got;
}

// libcurl rewinds the body when it must send it again on the same request.
int on_seek(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<std::uint64_t>(offset) > t->put->size) {
    return CURL_SEEKFUNC_CANTSEEK;
  }
  t->put_offset = static_cast<std::uint64_t>(offset);
  return CURL_SEEKFUNC_OK;
}

// Called at least once a second while a transfer runs, idle or not.
int on_progress(void* user, curl_off_t, curl_off_t down, curl_off_t, curl_off_t up) {
  auto* t = static_cast<Transfer*>(user);
  if (t->cancelled->load()) return 1;
  if (t->abandon != nullptr && t->abandon->cancelled()) {
    t->abandoned = true;
    return 1;
  }
  const auto now = std::chrono::steady_clock::now();
  if (down != t->last_down || up != t->last_up) {
    t->last_down = down;
    t->last_up = up;
    t->last_progress = now;
  } else if (now - t->last_progress >= t->stall_limit) {
    t->stalled = true;
    return 1;
  }
  return 0;
}

// What went wrong, as a person says it: "connection refused", "name not resolved", "timed
// out", "TLS: ..."; libcurl's own sentence otherwise.
std::string in_words(CURLcode rc, int os_errno) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
      if (os_errno == ECONNREFUSED) return "connection refused";
      if (os_errno == ENETUNREACH) return "network unreachable";
      if (os_errno == EHOSTUNREACH) return "host unreachable";
      if (os_errno == ETIMEDOUT) return "connection timed out";
      return "cannot connect";
    case CURLE_COULDNT_RESOLVE_HOST:
      return "name not resolved (DNS)";
    case CURLE_COULDNT_RESOLVE_PROXY:
      return "the proxy's name not resolved (DNS)";
    case CURLE_OPERATION_TIMEDOUT:
      return "timed out";
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
      return std::string("TLS: ") + curl_easy_strerror(rc);
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
      return os_errno == ECONNRESET ? "connection reset" : curl_easy_strerror(rc);
    case CURLE_GOT_NOTHING:
      return "the server closed the connection without answering";
    default:
      return curl_easy_strerror(rc);
  }
}

TransferError::Kind classify(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
      return TransferError::Kind::kConnect;
    case CURLE_OPERATION_TIMEDOUT:
      return TransferError::Kind::kTimeout;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return TransferError::Kind::kReset;
    case CURLE_PARTIAL_FILE:
      return TransferError::Kind::kTruncated;
    case CURLE_ABORTED_BY_CALLBACK:
      return TransferError::Kind::kCancelled;
    default:
      return TransferError::Kind::kOther;
  }
}

}  // namespace

std::string HttpResponse::header(const std::string& lower_name) const {
  const auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

struct HttpTransport::Share {
  CURLSH* sh = nullptr;
  std::array<std::mutex, CURL_LOCK_DATA_LAST> locks;

  Share() {
    sh = curl_share_init();
    curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    curl_share_setopt(sh, CURLSHOPT_USERDATA, this);
    curl_share_setopt(
        sh, CURLSHOPT_LOCKFUNC, +[](CURL*, curl_lock_data d, curl_lock_access, void* u) {
          static_cast<Share*>(u)->locks[d].lock();
        });
    curl_share_setopt(
        sh, CURLSHOPT_UNLOCKFUNC,
        +[](CURL*, curl_lock_data d, void* u) { static_cast<Share*>(u)->locks[d].unlock(); });
  }
  ~Share() { curl_share_cleanup(sh); }
};

struct HttpTransport::Handle {
  CURL* curl = nullptr;
  SocketSet sockets;
  explicit Handle(CURLSH* share) {
    curl = curl_easy_init();
    if (curl == nullptr) throw std::runtime_error("curl_easy_init failed");
    curl_easy_setopt(curl, CURLOPT_SHARE, share);
  }
  ~Handle() { curl_easy_cleanup(curl); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

HttpTransport::HttpTransport(HttpConfig config) : config_(std::move(config)) {
  ensure_curl_global();
  share_ = std::make_unique<Share>();
}

HttpTransport::~HttpTransport() {
  cancel();
  free_.clear();  // handles before the share they use
}

void HttpTransport::cancel() {
  cancelled_ = true;
  pool_cv_.notify_all();
}

std::string HttpTransport::curl_version() {
  const auto* info = curl_version_info(CURLVERSION_NOW);
  return info != nullptr ? info->version : "unknown";
}

std::unique_ptr<HttpTransport::Handle> HttpTransport::acquire(Deadline deadline) {
  std::unique_lock lock(pool_mu_);
  while (true) {
    if (cancelled_) return nullptr;
    if (!free_.empty()) {
      auto h = std::move(free_.back());
      free_.pop_back();
      return h;
    }
    if (created_ < config_.max_handles) {
      ++created_;
      lock.unlock();
      return std::make_unique<Handle>(share_->sh);
    }
    if (pool_cv_.wait_until(lock, deadline) == std::cv_status::timeout) return nullptr;
  }
}

void HttpTransport::release(std::unique_ptr<Handle> h) {
  {
    std::lock_guard lock(pool_mu_);
    free_.push_back(std::move(h));
  }
  pool_cv_.notify_one();
}

Expected<HttpResponse, TransferError> HttpTransport::perform(const HttpRequest& req,
                                                             Deadline deadline,
                                                             const BodySink& sink,
                                                             const CancelFlag* abandon) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  if (req.method != "GET" && req.method != "POST" && req.method != "PUT") {
    return unexpected(
        TransferError{TransferError::Kind::kOther, "unsupported HTTP method " + req.method, 0});
  }
  auto handle = acquire(deadline);
  if (!handle) {
    if (cancelled_)
      return unexpected(TransferError{TransferError::Kind::kCancelled, "shutting down", 0});
    return unexpected(
        TransferError{TransferError::Kind::kTimeout, "no connection free before the deadline", 0});
  }
  CURL* c = handle->curl;
  curl_easy_reset(c);  // keeps the connection cache, DNS cache and share
  curl_easy_setopt(c, CURLOPT_SHARE, share_->sh);

  const auto left = duration_cast<milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) {
    release(std::move(handle));
    return unexpected(TransferError{TransferError::Kind::kTimeout, "deadline passed", 0});
  }
  Transfer t;
  t.sockets = &handle->sockets;
  t.sink = &sink;
  t.max_body = config_.max_body;
  t.cancelled = &cancelled_;
  t.abandon = abandon;
  t.stall_limit = config_.low_speed_time;
  t.last_progress = std::chrono::steady_clock::now();

  curl_slist* headers = nullptr;
  for (const auto& h : req.headers) headers = curl_slist_append(headers, h.c_str());

  curl_easy_setopt(c, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_USERAGENT, config_.user_agent.c_str());
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_2TLS);
  curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  // 128 KiB: as fast as 512 KiB on a cold read (0.53 against 0.54 CPU-s per 256 MiB, 5
  // alternated pairs) with a quarter of the memory each handle touches (faults 9.3k -> 5.7k).
  curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 128L * 1024);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   std::min<long>(static_cast<long>(config_.connect_timeout.count()), left));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(left));
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(c, CURLOPT_SOCKOPTFUNCTION, on_sockopt);
  curl_easy_setopt(c, CURLOPT_SOCKOPTDATA, &handle->sockets);
  curl_easy_setopt(c, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
  curl_easy_setopt(c, CURLOPT_CLOSESOCKETDATA, &handle->sockets);
  if (!config_.proxy.empty()) curl_easy_setopt(c, CURLOPT_PROXY, config_.proxy.c_str());
  if (req.method == "POST") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, req.post_body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(req.post_body.size()));
  } else if (req.method == "PUT") {
    t.put = &req.put_body;
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.put_body.size));
    curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(c, CURLOPT_READDATA, &t);
    curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
    curl_easy_setopt(c, CURLOPT_SEEKDATA, &t);
  }

  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  release(std::move(handle));

  if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && t.stopped_by_sink)) {
    t.response.status = static_cast<int>(status);
    return std::move(t.response);
  }
  TransferError err;
  err.kind = t.too_large   ? TransferError::Kind::kTooLarge
             : t.abandoned ? TransferError::Kind::kAbandoned
             : t.stalled   ? TransferError::Kind::kStalled
                           : classify(rc);
  if (err.kind == TransferError::Kind::kCancelled && !cancelled_) {
    err.kind = TransferError::Kind::kOther;
  }
  long os_errno = 0;
  curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &os_errno);
  err.message = t.too_large        ? "response body too large"
                : t.put_unreadable ? "the body to send could not be read"
                : t.stalled
                    ? "no progress for " + std::to_string(config_.low_speed_time.count()) + " s"
                    : in_words(rc, static_cast<int>(os_errno));
  err.body_bytes = t.response.body_bytes;
  return unexpected(std::move(err));
}

}  // namespace whfs::hub
