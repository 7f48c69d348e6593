#include "fs/vfs/caller_views.h"

#include <nlohmann/json.hpp>

#include "fs/namespace/targets_view.h"

namespace whfs {

std::string TargetCallerViews::link(const Caller& caller) {
  return std::string(ns::TargetsView::kTargets) + "/" +
         targets_.resolve(caller.pid, caller.uid)->key;
}

std::optional<std::string> TargetCallerViews::link_now(const Caller& caller) {
  const auto r = targets_.resolve(caller.pid, caller.uid, false);
  if (!r) return std::nullopt;
  return std::string(ns::TargetsView::kTargets) + "/" + r->key;
}

Expected<std::string, std::string> TargetCallerViews::adopt(const Caller& caller) {
  auto r = targets_.adopt(caller.pid, caller.uid);
  if (!r) return unexpected(r.error());
  return std::string(ns::TargetsView::kTargets) + "/" + (*r)->key;
}

std::string TargetCallerViews::report(const Caller& caller, const std::string& key,
                                      const std::string& folder_report) {
  return report_for(caller, key, folder_report, *targets_.resolve(caller.pid, caller.uid));
}

std::optional<std::string> TargetCallerViews::report_now(const Caller& caller,
                                                         const std::string& key,
                                                         const std::string& folder_report) {
  const auto r = targets_.resolve(caller.pid, caller.uid, false);
  if (!r) return std::nullopt;
  return report_for(caller, key, folder_report, *r);
}

std::string TargetCallerViews::report_for(const Caller& caller, const std::string& key,
                                          const std::string& folder_report,
                                          const target::Resolution& r) {
  auto j = nlohmann::json::parse(folder_report, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return folder_report;
  if (r.key == key) {
    j["caller"] = r.caller;
    if (key == target::CallerTargets::kUnresolved) {
      j["why_empty"] = r.why_unresolved;
    }
    j["target"] = target::to_json(r.target);
  } else {
    j["caller"] = {{"pid", caller.pid},
                   {"note", "this is the folder of " + key + "; the current/ of this process is " +
                                std::string(ns::TargetsView::kTargets) + "/" + r.key}};
  }
  return j.dump(2) + "\n";
}

}  // namespace whfs
