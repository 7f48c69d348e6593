#pragma once
// The Hub's write API over hub::HubTransport (fs/hub/transport.h), as huggingface_hub uses it
// without Xet (tests/fakehub/hub-write-api.md): preupload, the LFS batch API, the storage PUTs
// (basic, or multipart with a completion POST), verify, and the ndjson commit. Only these
// protocol steps are here; how a request travels is the transport's, as for reads.
//
// The token goes only to the endpoint's origin, and only over https or to this machine (the
// transport's rule); it is not even offered for a storage or completion URL (the official
// clients send none there, and S3 refuses a presigned request that also carries one), and
// never goes into a message. Transient failures (connect errors, resets, stalls, 408/429/5xx)
// are retried with backoff by the transport; an upload retried is sent again from its start,
// a multipart upload only the part that failed. The commit POST is retried too: it names its
// parent commit, so a commit that did land before its answer was lost makes the retry fail
// with 412, never commit twice.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fs/check/checked_file.h"
#include "fs/common/expected.h"
#include "fs/hub/http.h"
#include "fs/hub/hub_client.h"
#include "fs/hub/transport.h"
#include "fs/publish/publish_error.h"
#include "fs/publish/write_api.h"

namespace whfs::publish {

struct WriterConfig {
  // transport.allow_insecure_token is not used: a write token never crosses a network in
  // clear text.
  hub::TransportConfig transport;
  hub::RepoRef repo;
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
  std::string token_origin() const { return transport_.tokens().describe(); }
  bool has_token() { return transport_.tokens().token().has_value(); }
  const std::string& repo_id() const { return config_.repo.id; }

  Expected<std::vector<PreuploadAnswer>, PublishError> preupload(
      const std::string& revision, const std::vector<PreuploadFile>& files);
  Expected<std::vector<BatchAnswer>, PublishError> batch(const std::string& revision,
                                                         const std::vector<LfsObject>& objects);
  // Sends the object's bytes from `file` as the batch answer says, then verifies it.
  Expected<void, PublishError> upload(const BatchAnswer& object, const check::CheckedFile& file,
                                      const std::string& name);
  // kStale when the branch moved since `payload`'s parent commit.
  Expected<CommitAnswer, PublishError> commit(const std::string& revision,
                                              const std::string& payload);

  // requests and retries are the transport's counts.
  WriterStats stats() const;

 private:
  template <class Attempt>
  Expected<void, PublishError> with_retries(const std::string& what, Attempt&& attempt);
  // `token`: whether the token may go (to the endpoint's origin only).
  Expected<hub::HttpResponse, PublishError> api_post(const std::string& url,
                                                     const std::string& content_type,
                                                     const std::string& body,
                                                     const std::string& what, bool token);
  Expected<std::string, PublishError> put(const std::string& url, int fd, std::uint64_t offset,
                                          std::uint64_t size, const std::string& what);
  Expected<void, PublishError> multipart(const BatchAnswer& object, int fd,
                                         const std::string& name);
  PublishError api_error(const hub::HttpResponse& resp, const std::string& what) const;

  WriterConfig config_;
  hub::HubTransport transport_;
  std::string api_base_;  // {endpoint}/api/datasets/{id}
  std::string git_base_;  // {endpoint}/datasets/{id}.git
  WriterStats stats_;
};

}  // namespace whfs::publish
