#pragma once
// One publish: what the Hub holds at each wheel's path, then (when something is to be sent)
// preupload, the LFS uploads and ONE commit of every file against the commit it was planned
// against. When the branch moves in between (412), the plan is made again from the new head
// and the commit retried once: objects already uploaded are not sent again (the batch API
// says the repository has them), and a file that someone else published meanwhile with the
// same bytes drops out. Nothing is committed unless every file is.

#include <optional>
#include <string>
#include <vector>

#include "fs/check/plan.h"
#include "fs/check/wheel_check.h"
#include "fs/common/expected.h"
#include "fs/hub/hub_client.h"
#include "fs/publish/hub_writer.h"
#include "fs/publish/publish_error.h"

namespace whfs::publish {

struct PublishItem {
  check::WheelFacts wheel;
  std::string path;  // in the repository
};

struct Survey {
  std::string head;                        // the commit the decisions were made against
  std::vector<check::Decision> decisions;  // one per item, in order
};

struct PublishRequest {
  std::string revision = "main";  // a branch
  bool replace = false;
  std::string summary;
  std::string description;
};

struct PublishResult {
  Survey survey;                       // the last one (after a re-plan, the second)
  std::optional<CommitAnswer> commit;  // none: every file was already there
  int replans = 0;
};

class Publisher {
 public:
  Publisher(hub::HubClient& reader, HubWriter& writer) : reader_(reader), writer_(writer) {}

  // What the branch holds at each item's path now; reads only (no token needed).
  Expected<Survey, PublishError> survey(const std::vector<PublishItem>& items,
                                        const std::string& revision, bool replace);

  // Publishes the items; a conflict (another file at a path, without --replace) fails before
  // anything is sent.
  Expected<PublishResult, PublishError> publish(const std::vector<PublishItem>& items,
                                                const PublishRequest& request);

 private:
  // A read error in the words of a publish (the repository, the branch, the token's origin).
  PublishError from_hub(const hub::HubError& e, const std::string& revision) const;
  // One try against `s`: kStale when the branch moved before the commit; nullopt when the
  // Hub had every file already (preupload found the same bytes).
  Expected<std::optional<CommitAnswer>, PublishError> send(const std::vector<PublishItem>& items,
                                                           Survey& s,
                                                           const PublishRequest& request);
  Expected<void, PublishError> upload_lfs(const std::vector<const PublishItem*>& lfs,
                                          const std::string& revision);

  hub::HubClient& reader_;
  HubWriter& writer_;
};

}  // namespace whfs::publish
