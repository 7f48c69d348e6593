#include "fs/publish/publisher.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>

#include "fs/common/clock.h"

namespace whfs::publish {
namespace {

using Kind = PublishError::Kind;

// Objects per preupload and batch call: huggingface.js's chunk (huggingface_hub sends 256).
constexpr std::size_t kPerCall = 100;
constexpr auto kReadTimeout = std::chrono::minutes(5);

}  // namespace

PublishError Publisher::from_hub(const hub::HubError& e, const std::string& revision) const {
  const std::string repo = writer_.repo_id();
  switch (e.kind) {
    case hub::HubErrorKind::kNotFound:
      if (e.code == "RevisionNotFound") {
        return {Kind::kNotFound, "the repository " + repo + " has no branch " + revision};
      }
      return {Kind::kNotFound,
              "repository " + repo + " not found, or private and " +
                  (writer_.has_token()
                       ? "the token from " + writer_.token_origin() + " has no access to it"
                       : std::string("no token was sent"))};
    case hub::HubErrorKind::kUnauthorized:
      return {Kind::kDenied,
              "the Hub refused the token from " + writer_.token_origin() + " (invalid or expired)"};
    case hub::HubErrorKind::kForbidden:
      return {Kind::kDenied, e.message};
    default:
      return {Kind::kFailed, e.message};
  }
}

namespace {

std::string folder_of(const std::string& path) { return path.substr(0, path.rfind('/')); }

bool to_send(const check::Decision& d) {
  return d.action == check::Action::kUpload || d.action == check::Action::kReplace;
}

// A regular (non-LFS) file travels inside the commit; the Hub takes those up to 10 MiB. Read
// from the file that was checked.
Expected<std::string, PublishError> read_whole(const check::CheckedFile& f, std::uint64_t size) {
  std::string data(static_cast<std::size_t>(size), '\0');
  std::size_t got = 0;
  while (got < data.size()) {
    const ssize_t n =
        ::pread(f.fd(), data.data() + got, data.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return unexpected(PublishError{Kind::kFailed, f.path().string() + ": cannot read it"});
    got += static_cast<std::size_t>(n);
  }
  return data;
}

// The checked copy is still what was checked.
Expected<void, PublishError> unchanged(const check::CheckedFile& f) {
  if (auto why = f.changed(); !why.empty()) return unexpected(PublishError{Kind::kFailed, why});
  return {};
}

}  // namespace

Expected<Survey, PublishError> Publisher::survey(const std::vector<PublishItem>& items,
                                                 const std::string& revision, bool replace) {
  const Deadline deadline = Clock::now() + kReadTimeout;
  auto rev = reader_.resolve_revision(revision, deadline);
  if (!rev) return unexpected(from_hub(rev.error(), revision));
  Survey s{rev->commit, {}};
  std::map<std::string, std::vector<RemoteEntry>> listed;  // by folder
  for (const auto& item : items) {
    const std::string folder = folder_of(item.path);
    auto it = listed.find(folder);
    if (it == listed.end()) {
      auto entries = reader_.list_folder(s.head, folder, false, deadline);
      if (!entries && entries.error().code != "EntryNotFound") {
        return unexpected(from_hub(entries.error(), revision));
      }
      it = listed.emplace(folder, entries ? std::move(*entries) : std::vector<RemoteEntry>{}).first;
    }
    const auto found = std::find_if(it->second.begin(), it->second.end(),
                                    [&](const RemoteEntry& e) { return e.path == item.path; });
    s.decisions.push_back(
        check::decide(item.wheel.content, found == it->second.end() ? nullptr : &*found, replace));
  }
  return s;
}

Expected<PublishResult, PublishError> Publisher::publish(const std::vector<PublishItem>& items,
                                                         const PublishRequest& request) {
  PublishResult result;
  for (int round = 0;; ++round) {
    auto s = survey(items, request.revision, request.replace);
    if (!s) return unexpected(std::move(s).error());
    result.survey = std::move(*s);
    std::string conflicts;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const check::Decision& d = result.survey.decisions[i];
      if (d.action == check::Action::kConflict) {
        conflicts += (conflicts.empty() ? "" : "; ") + items[i].path + ": " + d.reason;
      }
    }
    if (!conflicts.empty()) return unexpected(PublishError{Kind::kConflict, conflicts});
    if (std::none_of(result.survey.decisions.begin(), result.survey.decisions.end(), to_send)) {
      return result;
    }
    auto sent = send(items, result.survey, request);
    if (sent) {
      result.commit = std::move(*sent);
      return result;
    }
    if (sent.error().kind != Kind::kStale) return unexpected(std::move(sent).error());
    if (round == 1) {
      return unexpected(PublishError{Kind::kFailed, "the branch " + request.revision +
                                                        " moved again while publishing; nothing "
                                                        "was committed; try again"});
    }
    ++result.replans;
    spdlog::warn("{}; planning again from its new head", sent.error().message);
  }
}

Expected<std::optional<CommitAnswer>, PublishError> Publisher::send(
    const std::vector<PublishItem>& items, Survey& s, const PublishRequest& request) {
  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (to_send(s.decisions[i])) todo.push_back(i);
  }
  std::map<std::string, PreuploadAnswer> modes;
  for (std::size_t at = 0; at < todo.size(); at += kPerCall) {
    std::vector<PreuploadFile> files;
    for (std::size_t k = at; k < std::min(todo.size(), at + kPerCall); ++k) {
      const auto& w = items[todo[k]].wheel;
      files.push_back({items[todo[k]].path, w.content.size, w.sample});
    }
    auto answers = writer_.preupload(request.revision, files);
    if (!answers) return unexpected(std::move(answers).error());
    for (auto& a : *answers) modes[a.path] = std::move(a);
  }
  std::vector<CommitFile> commit_files;
  std::vector<const PublishItem*> lfs;
  for (const std::size_t i : todo) {
    const PublishItem& item = items[i];
    const auto it = modes.find(item.path);
    if (it == modes.end()) {
      return unexpected(PublishError{Kind::kFailed, "preupload: no answer for " + item.path});
    }
    const PreuploadAnswer& a = it->second;
    if (a.should_ignore) {
      return unexpected(PublishError{
          Kind::kFailed, item.path + ": the repository's .gitignore ignores it; not published"});
    }
    const check::Content& c = item.wheel.content;
    if (!a.oid.empty() && a.oid == (a.lfs ? c.sha256 : c.git_sha1)) {
      s.decisions[i] = {check::Action::kSame, "the same bytes arrived there meanwhile"};
      continue;
    }
    CommitFile f{item.path, c.size, c.sha256, a.lfs, ""};
    if (!a.lfs) {
      auto data = read_whole(*item.wheel.file, c.size);
      if (!data) return unexpected(std::move(data).error());
      f.content = std::move(*data);
    } else {
      lfs.push_back(&item);
    }
    commit_files.push_back(std::move(f));
  }
  if (commit_files.empty()) return std::optional<CommitAnswer>();
  if (auto up = upload_lfs(lfs, request.revision); !up) return unexpected(std::move(up).error());
  // Nothing is committed unless every file is still the one that was checked and sent.
  for (const auto* item : lfs) {
    if (auto ok = unchanged(*item->wheel.file); !ok) return unexpected(std::move(ok).error());
  }
  for (const auto& item : items) {
    if (auto ok = unchanged(*item.wheel.file); !ok) return unexpected(std::move(ok).error());
  }
  const std::string payload =
      commit_payload(CommitHeader{request.summary, request.description, s.head}, commit_files);
  auto c = writer_.commit(request.revision, payload);
  if (!c) return unexpected(std::move(c).error());
  return std::optional<CommitAnswer>(std::move(*c));
}

Expected<void, PublishError> Publisher::upload_lfs(const std::vector<const PublishItem*>& lfs,
                                                   const std::string& revision) {
  // One upload per object, however many paths share its bytes.
  std::vector<const PublishItem*> distinct;
  std::set<std::string> seen;
  for (const auto* item : lfs) {
    if (seen.insert(item->wheel.content.sha256).second) distinct.push_back(item);
  }
  for (std::size_t at = 0; at < distinct.size(); at += kPerCall) {
    std::vector<LfsObject> objects;
    const std::size_t end = std::min(distinct.size(), at + kPerCall);
    for (std::size_t k = at; k < end; ++k) {
      objects.push_back({distinct[k]->wheel.content.sha256, distinct[k]->wheel.content.size});
    }
    auto answers = writer_.batch(revision, objects);
    if (!answers) return unexpected(std::move(answers).error());
    for (std::size_t k = at; k < end; ++k) {
      if (auto ok = unchanged(*distinct[k]->wheel.file); !ok) return ok;
      auto up = writer_.upload((*answers)[k - at], *distinct[k]->wheel.file, distinct[k]->path);
      if (!up) return up;
    }
  }
  return {};
}

}  // namespace whfs::publish
