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

#include "fs/check/plan.h"
#include "fs/check/run_check.h"
#include "fs/check/wheel_check.h"
#include "fs/common/units.h"
#include "fs/common/version.h"
#include "fs/hub/hub_client.h"
#include "fs/publish/hub_writer.h"
#include "fs/publish/publisher.h"
#include "tools/cli/cli_commands.h"
#include "tools/cli/cli_target.h"

namespace whfs::cli {
namespace {

using check::Action;
using publish::PublishError;

constexpr const char* kDefaultRepo = "DoctorPopi/python_wheelhouse";

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

Expected<publish::WriterConfig, Failure> writer_config(const PublishOptions& o,
                                                       const std::string& repo) {
  auto ref = hub::parse_repo_ref(repo);
  if (!ref) return unexpected(Failure{kUsage, ref.error()});
  publish::WriterConfig c;
  c.transport.endpoint = hub::resolve_endpoint(o.endpoint);
  c.transport.token_file = o.token_file;
  c.transport.http.low_speed_time = std::chrono::seconds(o.stall_timeout);
  c.repo = *ref;
  return c;
}

// The client that reads what the Hub holds before the writer sends anything: the same
// transport settings.
hub::HubClientConfig reader_config(const publish::WriterConfig& w) {
  hub::HubClientConfig c;
  c.transport = w.transport;
  c.repo = w.repo;
  return c;
}

// Every wheel checked and placed; each refusal is one line, and all of them are reported.
Expected<std::vector<publish::PublishItem>, Failure> check_wheels(
    const std::vector<std::string>& files, const target::Target& t,
    const check::TargetFolder& folder) {
  std::vector<publish::PublishItem> items;
  std::string refused;
  for (const auto& file : files) {
    auto wheel = check::inspect_wheel(file);
    if (!wheel) {
      refused += (refused.empty() ? "" : "\n") + wheel.error();
      continue;
    }
    if (auto why = check::misfit(wheel->name, t)) {
      refused += (refused.empty() ? "" : "\n") + wheel->file_name + ": " + *why;
      continue;
    }
    const std::string path = check::repo_path(*wheel, folder);
    items.push_back({std::move(*wheel), path});
  }
  if (!refused.empty()) {
    return unexpected(Failure{kWheelRefused, refused + "\nnothing was uploaded"});
  }
  return items;
}

// The run check of every wheel (run_check.h); what it refuses is refused with every reason,
// unless --force, which the commit description then says. `forced` gets one line per problem.
Expected<void, Failure> check_runs(const std::vector<publish::PublishItem>& items,
                                   const ResolvedTarget& t, const PublishOptions& o,
                                   std::vector<std::string>* forced) {
  auto setup = run_setup(t, o.torch);
  if (!setup) return unexpected(setup.error());
  std::string refused;
  for (const auto& item : items) {
    check::LocalZip zip(item.wheel.file);
    auto r = check::check_runs(zip, item.wheel.file_name, (*setup)->run);
    if (!r) return unexpected(Failure{kWheelRefused, item.wheel.file_name + ": " + r.error()});
    for (const auto& n : r->notes) std::printf("check %s: %s\n", r->wheel.c_str(), n.c_str());
    for (const auto& obj : r->objects) {
      for (const auto& n : obj.notes) {
        std::printf("check %s: %s: %s\n", r->wheel.c_str(), obj.member.c_str(), n.c_str());
      }
    }
    for (const auto& p : r->problems()) {
      const std::string line = r->wheel + ": " + p;
      if (o.force) {
        std::printf("check %s: refused, published anyway (--force): %s\n", r->wheel.c_str(),
                    p.c_str());
        forced->push_back(line);
      } else {
        refused += (refused.empty() ? "" : "\n") + line;
      }
    }
  }
  if (!refused.empty()) {
    return unexpected(
        Failure{kWheelRefused, refused + "\nnothing was uploaded (wheelhouse check tells more; "
                                         "--force publishes anyway)"});
  }
  return {};
}

void print_plan(const ResolvedTarget& t, const check::TargetFolder& folder,
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
                               const ResolvedTarget& t, const std::vector<std::string>& forced) {
  std::string d =
      std::string("Published by wheelhouse publish ") + kVersion + " for target " + t.key + ".\n\n";
  for (const auto& item : items) {
    d += item.path + "  sha256 " + item.wheel.content.sha256 + "\n";
  }
  if (!forced.empty()) {
    d += "\nPublished with --force although wheelhouse check refused it:\n";
    for (const auto& line : forced) d += "  " + line + "\n";
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
  auto t = resolve_target({o.target, o.python, o.cudart});
  if (!t) return report(t.error());
  auto folder = check::target_folder(t->target);
  if (!folder) return report({o.target == "auto" ? kFailed : kUsage, folder.error()});
  auto items = check_wheels(files, t->target, *folder);
  if (!items) return report(items.error());
  std::vector<std::string> forced;
  if (auto runs = check_runs(*items, *t, o, &forced); !runs) return report(runs.error());
  print_plan(*t, *folder, *items);

  auto reader = hub::make_hub_client(reader_config(*w));
  publish::HubWriter writer(*w);
  publish::Publisher publisher(*reader, writer);
  return o.dry_run ? survey_only(publisher, *items, o)
                   : upload(publisher, writer, *items, o,
                            {o.revision, o.replace, commit_summary(*items, t->key),
                             commit_description(*items, *t, forced)});
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
