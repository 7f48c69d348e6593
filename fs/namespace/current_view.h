#pragma once
// current/: the wheels that run on this machine. For each package folder of the remote tree,
// the policy (fs/target/policy.h) picks one arch/torch folder for the detected target, and of
// its wheels the one pip would install for the target Python (exactly one per project, so
// `pip install current/<pkg>/*.whl` gets one installable wheel). Each entry shows the same
// content as its source (same cache blocks); its user.wheelhouse.source attribute and
// current/.target say where it came from and why.

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fs/namespace/namespace.h"
#include "fs/target/target.h"

namespace whfs::ns {

class CurrentView : public SyntheticRoot {
 public:
  static constexpr const char* kName = "current";

  explicit CurrentView(ListingSource& source) : source_(source) {}

  // The target the view matches; takes effect for trees built from now on (a refresh).
  void set_target(target::Target t);
  // A one-line description for status output ("sm89, torch 2.9, CUDA 12.8, cp311").
  std::string summary() const;

  std::vector<std::shared_ptr<Node>> root_entries(const std::string& commit) override;

 private:
  Expected<std::vector<std::shared_ptr<Node>>, FsErr> build(
      const std::string& commit, const std::shared_ptr<const target::Target>& t);

  ListingSource& source_;
  mutable std::mutex mu_;  // guards target_
  std::shared_ptr<const target::Target> target_;
};

}  // namespace whfs::ns
