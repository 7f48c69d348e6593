#include "fs/namespace/target_folder.h"

#include <spdlog/spdlog.h>

#include <map>
#include <nlohmann/json.hpp>

#include "fs/common/hash.h"
#include "fs/target/policy.h"
#include "fs/target/wheel_name.h"

namespace whfs::ns {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A wheel of a target folder: a synthetic file showing the bytes of a remote file. One wheel
// is one inode in every folder that shows it (its name and content make the identity): the
// kernel keeps its pages once.
std::shared_ptr<Node> alias_of(const RemoteEntry& e, const std::string& commit) {
  auto src = std::make_shared<Node>();
  src->kind = NodeKind::kFile;
  src->name = e.name();
  src->entry = e;
  src->commit = commit;
  auto n = std::make_shared<Node>();
  n->kind = NodeKind::kSyntheticFile;
  n->name = e.name();
  n->alias = src;
  n->identity = "wheel/" + e.name() + ":" + (e.is_lfs() ? e.lfs_sha256 : e.oid);
  return n;
}

}  // namespace

Expected<std::vector<std::shared_ptr<Node>>, FsErr> build_target_folder(
    ListingSource& source, const std::string& commit, const std::string& key,
    const target::Target* t, const std::string& why_empty) {
  const std::string prefix = "targets/" + key;
  nlohmann::json report;
  report["key"] = key;
  report["commit"] = commit;
  nlohmann::json packages = nlohmann::json::object();
  nlohmann::json unmatched = nlohmann::json::object();
  std::vector<std::shared_ptr<Node>> out;

  if (!t) {
    report["why_empty"] = why_empty;
  } else {
    report["target"] = target::to_json(*t);
    if (!t->arch.has_value() || t->tags.empty()) {
      // No GPU and no override (or no usable Python): never a guess.
      report["why_empty"] = !t->arch.has_value() ? "no GPU architecture: " + t->arch.missing +
                                                       " (set arch=smXY to choose one)"
                                                 : "no Python wheel tags: " + t->python_tag.missing;
    }
  }
  const bool usable = t && t->arch.has_value() && !t->tags.empty();
  if (usable) {
    auto root = source.list(commit, "");
    if (!root) return unexpected(root.error());
    for (const auto& pkg : *root) {
      if (!pkg.is_dir() || pkg.name().starts_with(".")) continue;
      const std::string name = pkg.name();
      auto archs = source.list(commit, name);
      if (!archs) return unexpected(archs.error());
      target::PackageFolders folders;
      for (const auto& a : *archs) {
        if (!a.is_dir()) continue;
        auto torches = source.list(commit, a.path);
        if (!torches) return unexpected(torches.error());
        auto& list = folders[a.name()];
        for (const auto& tf : *torches) {
          if (tf.is_dir()) list.push_back(tf.name());
        }
      }
      const target::FolderChoice choice = target::choose_folder(*t, folders);
      if (!choice.found) {
        unmatched[name] = choice.reason;
        continue;
      }
      auto files = source.list(commit, name + "/" + choice.path());
      if (!files) return unexpected(files.error());
      // Per project (normalized distribution name): the wheels and the one pip would take.
      std::map<std::string, std::vector<std::pair<target::WheelName, RemoteEntry>>> projects;
      nlohmann::json rejected = nlohmann::json::array();
      for (const auto& f : *files) {
        if (f.is_dir() || !ends_with(f.name(), ".whl")) continue;
        auto wn = target::parse_wheel_name(f.name());
        if (!wn) {
          rejected.push_back({{"wheel", f.name()}, {"why", "not a valid wheel file name"}});
          continue;
        }
        if (!target::wheel_rank(*wn, t->tags)) {
          rejected.push_back(
              {{"wheel", f.name()},
               {"why", "its tags do not fit the target Python (" + t->python_tag.value + ")"}});
          continue;
        }
        projects[target::normalize_project_name(wn->distribution)].emplace_back(*wn, f);
      }
      auto pkg_dir = synthetic_dir(name, prefix + "/" + name);
      nlohmann::json chosen = nlohmann::json::array();
      for (auto& [project, wheels] : projects) {
        std::vector<target::WheelName> names;
        for (const auto& [wn, e] : wheels) names.push_back(wn);
        const auto best = target::best_wheel(names, t->tags);
        if (!best) continue;
        for (std::size_t i = 0; i < wheels.size(); ++i) {
          if (i != *best) {
            rejected.push_back({{"wheel", wheels[i].second.name()},
                                {"why", "pip prefers " + wheels[*best].second.name()}});
          }
        }
        auto alias = alias_of(wheels[*best].second, commit);
        chosen.push_back(wheels[*best].second.name());
        pkg_dir->children[alias->name] = alias;
      }
      if (pkg_dir->children.empty()) {
        unmatched[name] = choice.path() + " has no wheel the target Python can install";
        packages[name] = {{"folder", choice.path()},
                          {"reason", choice.reason},
                          {"wheels", chosen},
                          {"rejected", rejected}};
        continue;
      }
      pkg_dir->listed = true;
      packages[name] = {{"folder", choice.path()},
                        {"reason", choice.reason},
                        {"wheels", chosen},
                        {"rejected", rejected}};
      out.push_back(pkg_dir);
    }
  }
  report["packages"] = packages;
  report["unmatched"] = unmatched;
  auto target_file = std::make_shared<Node>();
  target_file->kind = NodeKind::kSyntheticFile;
  target_file->name = kReportName;
  target_file->bytes = std::make_shared<const std::string>(report.dump(2) + "\n");
  target_file->identity = prefix + "/" + kReportName + ":" + sha256_hex(*target_file->bytes);
  target_file->per_caller = true;  // the caller whose current/ this is also reads why
  target_file->key = key;
  out.push_back(target_file);
  spdlog::info("targets/{} at {}: {} packages match, {} do not", key, commit.substr(0, 12),
               out.size() - 1, unmatched.size());
  return out;
}

}  // namespace whfs::ns
