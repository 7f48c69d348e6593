#pragma once
// The synthetic top of the mount: targets/<key>/ for any target key (fs/target/key.h), made
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
#include <memory>
#include <string>
#include <vector>

#include "fs/namespace/namespace.h"
#include "fs/namespace/target_folder.h"
#include "fs/target/key.h"

namespace whfs::ns {

class TargetsView : public SyntheticRoot {
 public:
  static constexpr const char* kCurrent = "current";
  static constexpr const char* kTargets = "targets";
  static constexpr const char* kUnresolved = "unresolved";

  // At most `max_keys` folders per tree (each a walk of the listings): a process that looks
  // up many made-up keys cannot make the mount hold unbounded trees.
  // `metadata` (may be null) gives the index pages the wheels' METADATA.
  TargetsView(ListingSource& source, target::HostPlatform host,
              IndexMetadataSource* metadata = nullptr, std::size_t max_keys = 1024)
      : source_(source), host_(std::move(host)), metadata_(metadata), max_keys_(max_keys) {}

  std::vector<std::shared_ptr<Node>> root_entries(const std::string& commit) override;

 private:
  std::shared_ptr<Node> key_folder(const std::string& commit, const std::string& name);

  ListingSource& source_;
  const target::HostPlatform host_;
  IndexMetadataSource* const metadata_;
  const std::size_t max_keys_;
};

}  // namespace whfs::ns
