#include "fs/namespace/targets_view.h"

#include <spdlog/spdlog.h>

#include <atomic>

#include "fs/namespace/target_folder.h"
#include "fs/target/target.h"

namespace whfs::ns {

std::shared_ptr<Node> TargetsView::key_folder(const std::string& commit, const std::string& name) {
  if (name == kUnresolved) {
    auto d = synthetic_dir(name, std::string(kTargets) + "/" + name);
    d->generate = [this, commit] {
      return build_target_folder(source_, commit, kUnresolved, nullptr,
                                 "the target of the process that reads this is not known "
                                 "(its caller section says why)",
                                 metadata_);
    };
    return d;
  }
  auto key = target::parse_key(name, host_);
  if (!key) {
    spdlog::debug("targets/{}: {}", name, key.error());
    return nullptr;
  }
  auto d = synthetic_dir(name, std::string(kTargets) + "/" + name);
  d->generate = [this, commit, name, k = *key] {
    const target::Target t = target::target_of(k, host_);
    return build_target_folder(source_, commit, name, &t, "", metadata_);
  };
  return d;
}

std::vector<std::shared_ptr<Node>> TargetsView::root_entries(const std::string& commit) {
  auto link = std::make_shared<Node>();
  link->kind = NodeKind::kSymlink;
  link->name = kCurrent;
  link->identity = kCurrent;
  link->per_caller = true;

  auto targets = synthetic_dir(kTargets, kTargets);
  targets->generate = [this, commit]() -> Expected<std::vector<std::shared_ptr<Node>>, FsErr> {
    return std::vector<std::shared_ptr<Node>>{key_folder(commit, kUnresolved)};
  };
  auto made = std::make_shared<std::atomic<std::size_t>>(0);
  targets->make_missing = [this, commit, made](const std::string& name) -> std::shared_ptr<Node> {
    auto folder = key_folder(commit, name);
    if (!folder) return nullptr;
    if (made->fetch_add(1) >= max_keys_) {
      if (made->load() == max_keys_ + 1) {
        spdlog::warn(
            "targets/: {} target folders exist; new keys are refused until the next "
            "refresh",
            max_keys_);
      }
      return nullptr;
    }
    return folder;
  };
  return {link, targets};
}

}  // namespace whfs::ns
