#pragma once
// The synthetic top of the mount: targets/<key>/ for any target key (fs/targeting/key.h), made
// when first looked up, and `current`, a symbolic link to the folder of whoever follows it.
//
//   current -> targets/sm89-torch2.9-cu128-cp312     (for a process in a 3.12 venv)
//   current -> targets/sm89-torch2.8-cu126-cp311     (for another user's 3.11 env)
//   current -> targets/unresolved                    (no Python, no GPU, ...: .target says why)
//
// Why a link: the kernel caches names, attributes and folder listings per inode for everyone.
// A folder whose contents differ per process would need zero cache timeouts on every name in
// it, and a directory inode cannot be shared between two paths. A link is read again on every
// path walk (the mount does not let the kernel cache link targets), costs one request, and
// everything behind it, targets/<key>/..., is the same for everyone and fully cacheable.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fs/namespace/namespace.h"
#include "fs/namespace/target_folder.h"
#include "fs/targeting/key.h"

namespace whfs::ns {

class TargetsView : public SyntheticRoot {
 public:
  static constexpr const char* kCurrent = "current";
  static constexpr const char* kTargets = "targets";
  static constexpr const char* kUnresolved = "unresolved";

  // Folders of keys looked up by name (each a walk of the listings) are bounded: at most
  // `max_keys` per tree and `max_keys_per_uid` for one user, so that a process that looks up
  // many made-up keys can neither make the mount hold unbounded trees nor spend the budget of
  // others. A user at its bound first drops its own folders that the kernel no longer holds
  // (nobody uses them); the keys that current/ leads to are never refused (is_current_key).
  // `metadata` (may be null) gives the index pages the wheels' METADATA.
  TargetsView(ListingSource& source, target::HostPlatform host,
              IndexMetadataSource* metadata = nullptr, std::size_t max_keys = 1024,
              std::size_t max_keys_per_uid = 64)
      : source_(source),
        host_(std::move(host)),
        metadata_(metadata),
        max_keys_(max_keys),
        max_keys_per_uid_(max_keys_per_uid) {}

  std::vector<std::shared_ptr<Node>> root_entries(const std::string& commit) override;

  // Whether some process's current/ leads to the key now (set once, before serving).
  void set_current_keys(std::function<bool(const std::string& key)> is_current_key) {
    is_current_key_ = std::move(is_current_key);
  }

 private:
  struct Budget;  // one per tree (targets_view.cpp)
  std::shared_ptr<Node> key_folder(const std::string& commit, const std::string& name);
  std::shared_ptr<Node> make_key(const std::shared_ptr<Budget>& budget, const std::string& commit,
                                 const std::string& name, const MakeContext& ctx);

  ListingSource& source_;
  const target::HostPlatform host_;
  IndexMetadataSource* const metadata_;
  const std::size_t max_keys_;
  const std::size_t max_keys_per_uid_;
  std::function<bool(const std::string& key)> is_current_key_;
};

}  // namespace whfs::ns
