#pragma once
// The Hub's write API over HttpTransport, as huggingface_hub uses it without Xet
// (tests/fakehub/hub-write-api.md): preupload, the LFS batch API, the storage PUTs (basic, or
// multipart with a completion POST), verify, and the ndjson commit.
//
// The token goes only to the endpoint's origin, and only over https or to this machine, as
// for reads (curl_hub_client.cpp); never to a storage or completion URL (the official clients
// send none there, and S3 refuses a presigned request that also carries one), and never into a
// message. Transient failures (connect errors, resets, stalls, 408/429/5xx) are retried with
// backoff; an upload retried is sent again from its start, a multipart upload only the part
// that failed. The commit POST is retried too: it names its parent commit, so a commit that
// did land before its answer was lost makes the retry fail with 412, never commit twice.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fs/common/expected.h"
#include "fs/hub/http.h"
#include "fs/hub/hub_client.h"
#include "fs/hub/retry.h"
#include "fs/hub/token.h"
#include "fs/hub/url.h"
#include "fs/publish/checked_file.h"
#include "fs/publish/publish_error.h"
#include "fs/publish/write_api.h"

namespace whfs::publish {

struct WriterConfig {
  std::string endpoint;  // without a trailing "/" (hub::resolve_endpoint)
  hub::RepoRef repo;
  std::filesystem::path token_file;  // empty: HF_TOKEN, HF_TOKEN_PATH, $HF_HOME/token
  hub::RetryPolicy retry;
  hub::HttpConfig http;                   // user_agent filled in when empty
  std::chrono::seconds api_timeout{600};  // one API call, retries included
};

struct WriterStats {
  std::uint64_t requests = 0;
  std::uint64_t retries = 0;
  std::uint64_t bytes_uploaded = 0;  // request bodies of storage PUTs that succeeded
  std::uint64_t bytes_resent = 0;    // ... of attempts that failed and were sent again
  std::uint64_t parts = 0;           // multipart parts uploaded
};

class HubWriter {
 public:
  explicit HubWriter(WriterConfig config);

  // Fails (kDenied) before anything is sent when there is no token, or when it would cross
  // a network in clear text (a plain http endpoint on another machine).
  Expected<void, PublishError> ready();
  // Where the token comes from, in words (never the token).
  std::string token_origin() const { return tokens_.describe(); }
  bool has_token() { return tokens_.token().has_value(); }
  const std::string& repo_id() const { return config_.repo.id; }

  Expected<std::vector<PreuploadAnswer>, PublishError> preupload(
      const std::string& revision, const std::vector<PreuploadFile>& files);
  Expected<std::vector<BatchAnswer>, PublishError> batch(const std::string& revision,
                                                         const std::vector<LfsObject>& objects);
  // Sends the object's bytes from `file` as the batch answer says, then verifies it.
  Expected<void, PublishError> upload(const BatchAnswer& object, const CheckedFile& file,
                                      const std::string& name);
  // kStale when the branch moved since `payload`'s parent commit.
  Expected<CommitAnswer, PublishError> commit(const std::string& revision,
                                              const std::string& payload);

  const WriterStats& stats() const { return stats_; }

 public:
  struct Step;  // one attempt's outcome (hub_writer.cpp)

 private:
  template <class Attempt>
  Expected<void, PublishError> with_retries(const std::string& what, Attempt&& attempt);
  // `token`: whether the token may go (to the endpoint's origin only).
  Expected<hub::HttpResponse, PublishError> api_post(const std::string& url,
                                                     const std::string& content_type,
                                                     const std::string& body,
                                                     const std::string& what, bool token);
  Step api_attempt(const std::string& url, const std::string& content_type, const std::string& body,
                   const std::string& what, bool token, hub::HttpResponse* out);
  Expected<std::string, PublishError> put(const std::string& url, int fd, std::uint64_t offset,
                                          std::uint64_t size, const std::string& what);
  Expected<void, PublishError> multipart(const BatchAnswer& object, int fd,
                                         const std::string& name);
  PublishError api_error(const hub::HttpResponse& resp, const std::string& what) const;
  void add_auth(hub::HttpRequest& req);

  WriterConfig config_;
  hub::TokenSource tokens_;
  hub::HttpTransport transport_;
  std::optional<hub::Origin> endpoint_origin_;
  bool token_may_travel_ = false;
  std::string api_base_;  // {endpoint}/api/datasets/{id}
  std::string git_base_;  // {endpoint}/datasets/{id}.git
  WriterStats stats_;
};

}  // namespace whfs::publish
