#include "fs/namespace/target_folder.h"

#include <spdlog/spdlog.h>

#include <map>
#include <nlohmann/json.hpp>

#include "fs/common/hash.h"
#include "fs/namespace/index_pages.h"
#include "fs/targeting/policy.h"
#include "fs/targeting/wheel_name.h"

namespace whfs::ns {
namespace {

using nlohmann::json;

// A wheel of a target folder: a synthetic file showing the bytes of a remote file. One wheel
// is one inode in every folder that shows it (its name and content make the identity): the
// kernel keeps its pages once.
std::shared_ptr<Node> alias_of(const RemoteEntry& e, const std::string& commit) {
  auto src = std::make_shared<const Node>(e.name(), Node::File{{e, commit}});
  return std::make_shared<Node>(
      e.name(), Node::SyntheticFile{"wheel/" + e.name() + ":" + (e.is_lfs() ? e.lfs_sha256 : e.oid),
                                    nullptr, std::move(src)});
}

std::shared_ptr<Node> bytes_file(const std::string& name, std::string bytes,
                                 const std::string& identity_prefix) {
  auto content = std::make_shared<const std::string>(std::move(bytes));
  std::string identity = identity_prefix + ":" + sha256_hex(*content);
  return std::make_shared<Node>(
      name, Node::SyntheticFile{std::move(identity), std::move(content), nullptr});
}

// A wheel chosen for the target, by its PEP 503 project name.
struct Chosen {
  std::string project;
  RemoteEntry entry;
};

// One package folder's choice: its folder, its wheels (one per project), what was passed over.
struct PackageChoice {
  target::FolderChoice folder;
  std::vector<Chosen> wheels;
  json rejected = json::array();
};

Expected<PackageChoice, FsErr> choose_package(ListingSource& source, const std::string& commit,
                                              const target::Target& t, const std::string& name) {
  PackageChoice out;
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
  out.folder = target::choose_folder(t, folders);
  if (!out.folder.found) return out;
  auto files = source.list(commit, name + "/" + out.folder.path());
  if (!files) return unexpected(files.error());
  // Per project (normalized distribution name): the wheels and the one pip would take.
  std::map<std::string, std::vector<std::pair<target::WheelName, RemoteEntry>>> projects;
  for (const auto& f : *files) {
    if (f.is_dir() || !f.name().ends_with(".whl")) continue;
    auto wn = target::parse_wheel_name(f.name());
    if (!wn) {
      out.rejected.push_back({{"wheel", f.name()}, {"why", "not a valid wheel file name"}});
    } else if (!target::wheel_rank(*wn, t.tags)) {
      out.rejected.push_back(
          {{"wheel", f.name()},
           {"why", "its tags do not fit the target Python (" + t.python_tag.value + ")"}});
    } else {
      projects[target::normalize_project_name(wn->distribution)].emplace_back(*wn, f);
    }
  }
  for (auto& [project, wheels] : projects) {
    std::vector<target::WheelName> names;
    for (const auto& [wn, e] : wheels) names.push_back(wn);
    const auto best = target::best_wheel(names, t.tags);
    if (!best) continue;
    for (std::size_t i = 0; i < wheels.size(); ++i) {
      if (i != *best) {
        out.rejected.push_back({{"wheel", wheels[i].second.name()},
                                {"why", "pip prefers " + wheels[*best].second.name()}});
      }
    }
    out.wheels.push_back(Chosen{project, wheels[*best].second});
  }
  return out;
}

// simple/<project>/: the page, the wheels and their .metadata files, made when first listed
// (the metadata may need ranged reads of the wheels).
std::shared_ptr<Node> project_folder(const std::string& prefix, const std::string& project,
                                     const std::vector<RemoteEntry>& wheels,
                                     const std::string& commit, IndexMetadataSource* metadata) {
  return synthetic_dir(
      project, prefix + "/simple/" + project,
      [prefix, project, wheels, commit,
       metadata]() -> Expected<std::vector<std::shared_ptr<Node>>, FsErr> {
        std::vector<std::shared_ptr<Node>> out;
        std::vector<PageLink> links;
        for (const auto& w : wheels) {
          PageLink link{w.name(), w.is_lfs() ? w.lfs_sha256 : "", "", std::nullopt};
          if (metadata != nullptr) {
            if (auto m = metadata->metadata(w, commit)) {
              link.requires_python = m->requires_python;
              link.metadata_sha256 = m->sha256;
              out.push_back(std::make_shared<Node>(
                  w.name() + ".metadata",
                  Node::SyntheticFile{"wheel-metadata/" + m->sha256, m->bytes, nullptr}));
            } else {
              spdlog::warn("simple/{}: {} is linked without its metadata: {}", project, w.name(),
                           m.error());
            }
          }
          out.push_back(alias_of(w, commit));
          links.push_back(std::move(link));
        }
        out.push_back(bytes_file("index.html", simple_project_page(project, links),
                                 prefix + "/simple/" + project + "/index.html"));
        return out;
      });
}

// simple/ and all/ for the wheels chosen.
std::vector<std::shared_ptr<Node>> index_folders(const std::string& prefix,
                                                 const std::vector<Chosen>& chosen,
                                                 const std::string& commit,
                                                 IndexMetadataSource* metadata) {
  std::map<std::string, std::vector<RemoteEntry>> by_project;
  auto all = synthetic_dir(kAll, prefix + "/" + kAll);
  for (const auto& c : chosen) {
    by_project[c.project].push_back(c.entry);
    auto alias = alias_of(c.entry, commit);
    all->children[alias->name] = alias;
  }
  all->listed = true;
  auto simple = synthetic_dir(kSimple, prefix + "/" + kSimple);
  std::vector<std::string> projects;
  for (const auto& [project, wheels] : by_project) {
    projects.push_back(project);
    simple->children[project] = project_folder(prefix, project, wheels, commit, metadata);
  }
  auto root_page =
      bytes_file("index.html", simple_root_page(projects), prefix + "/simple/index.html");
  simple->children[root_page->name] = root_page;
  simple->listed = true;
  return {simple, all};
}

}  // namespace

Expected<std::vector<std::shared_ptr<Node>>, FsErr> build_target_folder(
    ListingSource& source, const std::string& commit, const std::string& key,
    const target::Target* t, const std::string& why_empty, IndexMetadataSource* metadata) {
  const std::string prefix = "targets/" + key;
  json report;
  report["key"] = key;
  report["commit"] = commit;
  json packages = json::object();
  json unmatched = json::object();
  std::vector<std::shared_ptr<Node>> out;
  std::vector<Chosen> chosen;

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
  if (t && t->arch.has_value() && !t->tags.empty()) {
    auto root = source.list(commit, "");
    if (!root) return unexpected(root.error());
    for (const auto& pkg : *root) {
      if (!pkg.is_dir() || pkg.name().starts_with(".")) continue;
      const std::string name = pkg.name();
      auto choice = choose_package(source, commit, *t, name);
      if (!choice) return unexpected(choice.error());
      if (!choice->folder.found) {
        unmatched[name] = choice->folder.reason;
        continue;
      }
      json wheels = json::array();
      auto pkg_dir = synthetic_dir(name, prefix + "/" + name);
      for (const auto& c : choice->wheels) {
        wheels.push_back(c.entry.name());
        auto alias = alias_of(c.entry, commit);
        pkg_dir->children[alias->name] = alias;
        chosen.push_back(c);
      }
      packages[name] = {{"folder", choice->folder.path()},
                        {"reason", choice->folder.reason},
                        {"wheels", wheels},
                        {"rejected", choice->rejected}};
      if (pkg_dir->children.empty()) {
        unmatched[name] = choice->folder.path() + " has no wheel the target Python can install";
        continue;
      }
      if (name == kSimple || name == kAll) {
        // The index folder of that name shadows it; its wheels are in both index folders.
        packages[name]["shadowed"] = "by the index folder " + name + "/";
        continue;
      }
      pkg_dir->listed = true;
      out.push_back(pkg_dir);
    }
  }
  const std::size_t matched = out.size();
  // The index folders are there whatever matched, empty when nothing does (a process with no
  // torch, no GPU): a site-wide find-links to current/all/ must name a folder, else pip warns
  // on every run that the location is ignored.
  for (auto& n : index_folders(prefix, chosen, commit, metadata)) out.push_back(std::move(n));
  report["packages"] = packages;
  report["unmatched"] = unmatched;
  // The caller whose current/ this is also reads why (per caller).
  auto text = std::make_shared<const std::string>(report.dump(2) + "\n");
  std::string identity = prefix + "/" + kReportName + ":" + sha256_hex(*text);
  out.push_back(
      std::make_shared<Node>(kReportName, Node::Report{std::move(identity), std::move(text), key}));
  spdlog::info("targets/{} at {}: {} packages match, {} do not", key, commit.substr(0, 12), matched,
               unmatched.size());
  return out;
}

}  // namespace whfs::ns
