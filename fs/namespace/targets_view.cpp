#include "fs/namespace/targets_view.h"

#include <spdlog/spdlog.h>

#include <map>
#include <mutex>
#include <set>

#include "fs/namespace/target_folder.h"
#include "fs/targeting/target.h"

namespace whfs::ns {

std::shared_ptr<Node> TargetsView::key_folder(const std::string& commit, const std::string& name) {
  if (name == kUnresolved) {
    return synthetic_dir(name, std::string(kTargets) + "/" + name, [this, commit] {
      return build_target_folder(source_, commit, kUnresolved, nullptr,
                                 "the target of the process that reads this is not known "
                                 "(its caller section says why)",
                                 metadata_);
    });
  }
  auto key = target::parse_key(name, host_);
  if (!key) {
    spdlog::debug("targets/{}: {}", name, key.error());
    return nullptr;
  }
  return synthetic_dir(name, std::string(kTargets) + "/" + name, [this, commit, name, k = *key] {
    const target::Target t = target::target_of(k, host_);
    return build_target_folder(source_, commit, name, &t, "", metadata_);
  });
}

// Who made which key folder of one tree, and the counts the bounds are checked against.
struct TargetsView::Budget {
  std::mutex mu;
  std::map<std::string, uid_t> made_by;  // folders made for a lookup (not current/'s keys)
  std::map<uid_t, std::size_t> per_uid;
  std::set<uid_t> warned;  // one warning per user and tree
  void forget(const std::vector<std::string>& names) {
    for (const auto& n : names) {
      const auto it = made_by.find(n);
      if (it == made_by.end()) continue;
      if (--per_uid[it->second] == 0) per_uid.erase(it->second);
      made_by.erase(it);
    }
  }
};

std::shared_ptr<Node> TargetsView::make_key(const std::shared_ptr<Budget>& budget,
                                            const std::string& commit, const std::string& name,
                                            const MakeContext& ctx) {
  auto folder = key_folder(commit, name);
  if (!folder) return nullptr;
  // Where a process's current/ leads is never refused, whoever spent the budget.
  if (is_current_key_ && is_current_key_(name)) return folder;
  const uid_t uid = ctx.uid;
  std::unique_lock lock(budget->mu);
  if (budget->made_by.count(name) != 0) return folder;  // a racing lookup of the same name
  const auto over = [&] {
    const auto it = budget->per_uid.find(uid);
    const std::size_t mine = it == budget->per_uid.end() ? 0 : it->second;
    return mine >= max_keys_per_uid_ || budget->made_by.size() >= max_keys_;
  };
  if (over() && ctx.drop_unused) {
    // Folders nobody holds go first: this user's own when it is at its bound, else anyone's.
    const auto it = budget->per_uid.find(uid);
    const bool own = it != budget->per_uid.end() && it->second >= max_keys_per_uid_;
    std::map<std::string, uid_t> made = budget->made_by;
    lock.unlock();
    const auto dropped = ctx.drop_unused([&](const std::string& n) {
      const auto m = made.find(n);
      return m != made.end() && (!own || m->second == uid);
    });
    lock.lock();
    budget->forget(dropped);
  }
  if (over()) {
    if (budget->warned.insert(uid).second) {
      spdlog::warn(
          "targets/: user {} looked up {} target keys that no process's current/ leads to, and "
          "the kernel still holds them; more are refused until some are let go or the next "
          "refresh ({} in all, at most {} per user)",
          uid, budget->per_uid[uid], budget->made_by.size(), max_keys_per_uid_);
    }
    return nullptr;
  }
  budget->made_by[name] = uid;
  ++budget->per_uid[uid];
  return folder;
}

std::vector<std::shared_ptr<Node>> TargetsView::root_entries(const std::string& commit) {
  auto link = std::make_shared<Node>(kCurrent, Node::Link{kCurrent});
  auto budget = std::make_shared<Budget>();
  auto targets = synthetic_dir(
      kTargets, kTargets,
      [this, commit]() -> Expected<std::vector<std::shared_ptr<Node>>, FsErr> {
        return std::vector<std::shared_ptr<Node>>{key_folder(commit, kUnresolved)};
      },
      [this, commit, budget](const std::string& name, const MakeContext& ctx) {
        return make_key(budget, commit, name, ctx);
      });
  return {link, targets};
}

}  // namespace whfs::ns
