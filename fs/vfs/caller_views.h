#pragma once
// The per-caller answers of the mount (Filesystem's CallerViews) from the targets of the
// processes that ask (fs/targeting/caller_targets.h).

#include <string>

#include "fs/targeting/caller_targets.h"
#include "fs/vfs/filesystem.h"

namespace whfs {

class TargetCallerViews : public CallerViews {
 public:
  explicit TargetCallerViews(target::CallerTargets& targets) : targets_(targets) {}

  // "targets/<key>" of the process.
  std::string link(const Caller& caller) override;
  // The folder's report with, for the process whose current/ it is, its own target: each
  // axis's value and where it came from, its interpreter and why, its GPUs and why; for any
  // other process a line naming its own folder.
  std::string report(const Caller& caller, const std::string& key,
                     const std::string& folder_report) override;
  std::optional<std::string> link_now(const Caller& caller) override;
  Expected<std::string, std::string> adopt(const Caller& caller) override;
  std::optional<std::string> report_now(const Caller& caller, const std::string& key,
                                        const std::string& folder_report) override;

 private:
  std::string report_for(const Caller& caller, const std::string& key,
                         const std::string& folder_report, const target::Resolution& r);
  target::CallerTargets& targets_;
};

}  // namespace whfs
