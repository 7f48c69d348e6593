// wheelhouse publish: check wheels built here, work out their folder of the dataset from the
// target (this machine's GPU and the torch of the Python that will use them, or a key), and
// upload them in one commit. Everything about a wheel is checked before anything leaves the
// machine; --dry-run stops after saying what would happen.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "fs/common/units.h"
#include "fs/common/version.h"
#include "fs/hub/hub_client.h"
#include "fs/publish/hub_writer.h"
#include "fs/publish/plan.h"
#include "fs/publish/publisher.h"
#include "fs/publish/wheel_check.h"
#include "fs/target/caller_targets.h"
#include "fs/target/gpu_probe.h"
#include "fs/target/key.h"
#include "tools/cli_commands.h"

namespace whfs::cli {
namespace {

using publish::Action;
using publish::PublishError;

constexpr const char* kDefaultRepo = "DoctorPopi/python_wheelhouse";

struct Failure {
  int code = kFailed;
  std::string message;
};

// One line per problem (a message may hold several, one per line).
int report(const Failure& f) {
  std::size_t at = 0;
  while (at <= f.message.size()) {
    const auto nl = std::min(f.message.find('\n', at), f.message.size());
    std::fprintf(stderr, "wheelhouse publish: %s\n", f.message.substr(at, nl - at).c_str());
    at = nl + 1;
  }
  return f.code;
}

int exit_code(PublishError::Kind kind) {
  switch (kind) {
    case PublishError::Kind::kDenied:
      return kDenied;
    case PublishError::Kind::kConflict:
      return kConflict;
    case PublishError::Kind::kNotFound:
      return kNotFound;
    default:
      return kFailed;
  }
}

struct ResolvedTarget {
  target::Target target;
  std::string key;
};

Expected<ResolvedTarget, Failure> target_from_key(const std::string& text) {
  const auto host = target::host_platform();
  auto key = target::parse_key(text, host);
  if (!key) return unexpected(Failure{kUsage, key.error()});
  return ResolvedTarget{target::target_of(*key, host), target::format_key(*key, host)};
}

// This process's target, as `wheelhouse detect` finds it: the GPUs it may use (a single arch
// is required, checked with the folder) and the torch of --python, else of the Python this
// shell would run.
Expected<ResolvedTarget, Failure> target_auto(const PublishOptions& o) {
  TargetOverrides ov;
  ov.python = o.python;
  ov.cudart = o.cudart;
  if (ov.cudart.empty()) {
    if (const char* env = std::getenv("WHEELHOUSE_CUDART")) ov.cudart = env;
  }
  if (auto trusted = target::check_trusted_library(ov.cudart); !trusted) {
    return unexpected(Failure{kUsage, trusted.error()});
  }
  target::GpuProbeOptions probe;
  probe.cudart = ov.cudart;
  target::CallerTargetsConfig config;
  config.deadline = std::chrono::minutes(1);  // no FUSE request waits on it here
  config.overrides = ov;
  target::CallerTargets targets(config, target::probe_gpus(probe), target::host_platform());
  const auto r = targets.resolve(::getpid());
  if (r->key == target::CallerTargets::kUnresolved) {
    return unexpected(Failure{kFailed, "cannot tell this machine's target (" + r->why_unresolved +
                                           "); give --target KEY, e.g. sm89-torch2.9-cu128-cp312"});
  }
  return ResolvedTarget{r->target, r->key};
}

Expected<publish::WriterConfig, Failure> writer_config(const PublishOptions& o,
                                                       const std::string& repo) {
  auto ref = hub::parse_repo_ref(repo);
  if (!ref) return unexpected(Failure{kUsage, ref.error()});
  publish::WriterConfig c;
  c.endpoint = hub::resolve_endpoint(o.endpoint);
  c.repo = *ref;
  c.token_file = o.token_file;
  c.http.low_speed_time = std::chrono::seconds(o.stall_timeout);
  return c;
}

hub::HubClientConfig reader_config(const publish::WriterConfig& w) {
  hub::HubClientConfig c;
  c.endpoint = w.endpoint;
  c.repo = w.repo;
  c.token_file = w.token_file;
  c.http.low_speed_time = w.http.low_speed_time;
  return c;
}

// Every wheel checked and placed; each refusal is one line, and all of them are reported.
Expected<std::vector<publish::PublishItem>, Failure> check_wheels(
    const std::vector<std::string>& files, const target::Target& t,
    const publish::TargetFolder& folder) {
  std::vector<publish::PublishItem> items;
  std::string refused;
  for (const auto& file : files) {
    auto wheel = publish::inspect_wheel(file);
    if (!wheel) {
      refused += (refused.empty() ? "" : "\n") + wheel.error();
      continue;
    }
    if (auto why = publish::misfit(wheel->name, t)) {
      refused += (refused.empty() ? "" : "\n") + wheel->file_name + ": " + *why;
      continue;
    }
    const std::string path = publish::repo_path(*wheel, folder);
    items.push_back({std::move(*wheel), path});
  }
  if (!refused.empty()) {
    return unexpected(Failure{kWheelRefused, refused + "\nnothing was uploaded"});
  }
  return items;
}

void print_plan(const ResolvedTarget& t, const publish::TargetFolder& folder,
                const std::vector<publish::PublishItem>& items) {
  std::printf("target %s: %s\n", t.key.c_str(), folder.why.c_str());
  for (const auto& item : items) {
    const auto& c = item.wheel.content;
    std::printf("%s\n  %s (%llu bytes), sha256 %s, %zu files match RECORD\n", item.path.c_str(),
                format_bytes(c.size).c_str(), static_cast<unsigned long long>(c.size),
                c.sha256.c_str(), item.wheel.members);
  }
}

void print_decisions(const std::vector<publish::PublishItem>& items, const publish::Survey& s) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    std::printf("%s: %s\n", items[i].path.c_str(), s.decisions[i].reason.c_str());
  }
}

std::string commit_summary(const std::vector<publish::PublishItem>& items, const std::string& key) {
  if (items.size() == 1) return "Publish " + items.front().wheel.file_name;
  return "Publish " + std::to_string(items.size()) + " wheels for " + key;
}

// The commit says what and for which target, but not where the target came from: that names
// this machine's paths (a venv, a CUDA runtime), which a public dataset need not know.
std::string commit_description(const std::vector<publish::PublishItem>& items,
                               const ResolvedTarget& t) {
  std::string d =
      std::string("Published by wheelhouse publish ") + kVersion + " for target " + t.key + ".\n\n";
  for (const auto& item : items) {
    d += item.path + "  sha256 " + item.wheel.content.sha256 + "\n";
  }
  return d;
}

// --dry-run: what the branch holds at each path, and the exit status publishing would have.
int survey_only(publish::Publisher& publisher, const std::vector<publish::PublishItem>& items,
                const PublishOptions& o) {
  auto s = publisher.survey(items, o.revision, o.replace);
  if (!s) return report({exit_code(s.error().kind), s.error().message});
  print_decisions(items, *s);
  std::printf("dry run: nothing uploaded (%s at commit %s)\n", o.revision.c_str(), s->head.c_str());
  const bool conflict = std::any_of(s->decisions.begin(), s->decisions.end(),
                                    [](const auto& d) { return d.action == Action::kConflict; });
  return conflict ? kConflict : kOk;
}

int upload(publish::Publisher& publisher, publish::HubWriter& writer,
           const std::vector<publish::PublishItem>& items, const PublishOptions& o,
           const publish::PublishRequest& request) {
  if (auto ready = writer.ready(); !ready) return report({kDenied, ready.error().message});
  const auto start = std::chrono::steady_clock::now();
  auto r = publisher.publish(items, request);
  if (!r) return report({exit_code(r.error().kind), r.error().message});
  print_decisions(items, r->survey);
  if (!r->commit) {
    std::printf("nothing to do: every wheel is already there (%s at commit %s)\n",
                o.revision.c_str(), r->survey.head.c_str());
    return kOk;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto& st = writer.stats();
  const std::string url = r->commit->url.empty() ? "" : " (" + r->commit->url + ")";
  std::printf(
      "published in commit %s on %s%s: %s uploaded in %.1f s, %llu requests, %llu "
      "retries%s\n",
      r->commit->commit.c_str(), o.revision.c_str(), url.c_str(),
      format_bytes(st.bytes_uploaded).c_str(), secs, static_cast<unsigned long long>(st.requests),
      static_cast<unsigned long long>(st.retries),
      r->replans > 0 ? ", planned again once (the branch moved)" : "");
  return kOk;
}

int run(const PublishOptions& o, const std::string& repo, const std::vector<std::string>& files) {
  auto w = writer_config(o, repo);
  if (!w) return report(w.error());
  if (o.target != "auto" && !o.python.empty()) {
    return report({kUsage, "--python applies to --target auto only"});
  }
  auto t = o.target == "auto" ? target_auto(o) : target_from_key(o.target);
  if (!t) return report(t.error());
  auto folder = publish::target_folder(t->target);
  if (!folder) return report({o.target == "auto" ? kFailed : kUsage, folder.error()});
  auto items = check_wheels(files, t->target, *folder);
  if (!items) return report(items.error());
  print_plan(*t, *folder, *items);

  auto reader = hub::make_hub_client(reader_config(*w));
  publish::HubWriter writer(*w);
  publish::Publisher publisher(*reader, writer);
  return o.dry_run ? survey_only(publisher, *items, o)
                   : upload(publisher, writer, *items, o,
                            {o.revision, o.replace, commit_summary(*items, t->key),
                             commit_description(*items, *t)});
}

}  // namespace

int run_publish(const PublishOptions& o) {
  std::string repo = kDefaultRepo;
  std::vector<std::string> files = o.args;
  // The first argument is the repository when it reads as one (owner/name) and is no file:
  // `publish build/x.tar.gz` is a file that is not a wheel, not a repository named so.
  if (!files.empty() && !files.front().ends_with(".whl")) {
    const std::string& first = files.front();
    struct stat st {};
    if (::stat(first.c_str(), &st) == 0 || !hub::parse_repo_ref(first)) {
      return report({kUsage, first + " is not a wheel (*.whl) nor a repository (owner/name)"});
    }
    repo = first;
    files.erase(files.begin());
  }
  if (files.empty()) return report({kUsage, "no wheel given"});
  for (const auto& f : files) {
    if (!f.ends_with(".whl")) return report({kUsage, f + " is not a wheel (*.whl)"});
  }
  std::set<std::string> names;
  for (const auto& f : files) {
    const std::string name = f.substr(f.rfind('/') + 1);
    if (!names.insert(name).second) {
      return report({kUsage, name + " is given twice: one path of the dataset holds one file"});
    }
  }
  return run(o, repo, files);
}

}  // namespace whfs::cli
