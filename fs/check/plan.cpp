#include "fs/check/plan.h"

#include "fs/check/local_version.h"
#include "fs/targeting/tags.h"

namespace whfs::check {
namespace {

std::string platform_words(const target::Target& t) {
  return t.machine + (t.libc.empty() ? " without glibc" : " glibc " + t.libc);
}

// "cp312-cp312-linux_x86_64": the last three fields of the file name.
std::string tag_text(const target::WheelName& wheel) {
  std::string name = target::wheel_file_name(wheel);
  name.resize(name.size() - 4);  // ".whl"
  std::size_t at = name.size();
  for (int i = 0; i < 3; ++i) at = name.rfind('-', at - 1);
  return name.substr(at + 1);
}

}  // namespace

Expected<TargetFolder, std::string> target_folder(const target::Target& t) {
  for (const auto* a : {&t.arch, &t.torch, &t.cuda}) {
    if (!a->has_value()) return unexpected(a->missing);
  }
  if (t.arch.value.find('+') != std::string::npos) {
    return unexpected("the target has several GPU archs (" + t.arch.value +
                      "); a folder holds builds for one arch: choose one GPU with "
                      "CUDA_VISIBLE_DEVICES, or give --target KEY with one arch");
  }
  const std::string& cuda = t.cuda.value;  // normalised "12.8"
  const auto dot = cuda.find('.');
  TargetFolder f;
  f.folder =
      t.arch.value + "/torch" + t.torch.value + "-cu" + cuda.substr(0, dot) + cuda.substr(dot + 1);
  // "sm89: <source>; torch 2.9, CUDA 12.8: <source>": a source shared by axes named once.
  const std::pair<std::string, const std::string*> parts[] = {
      {t.arch.value, &t.arch.source},
      {"torch " + t.torch.value, &t.torch.source},
      {"CUDA " + cuda, &t.cuda.source}};
  std::string names;
  for (std::size_t i = 0; i < 3; ++i) {
    names += (names.empty() ? "" : ", ") + parts[i].first;
    if (i == 2 || *parts[i].second != *parts[i + 1].second) {
      f.why += (f.why.empty() ? "" : "; ") + names + ": " + *parts[i].second;
      names.clear();
    }
  }
  return f;
}

std::optional<std::string> misfit(const target::WheelName& wheel, const target::Target& t) {
  if (t.tags.empty()) return "the target's Python is not known: " + t.python_tag.missing;
  if (!target::wheel_rank(wheel, t.tags)) {
    return "its tags " + tag_text(wheel) + " do not run on the target's Python " +
           t.python_tag.value + " on " + platform_words(t);
  }
  return local_version_conflict(wheel.version, t.torch.value, t.cuda.value);
}

std::string repo_path(const WheelFacts& wheel, const TargetFolder& folder) {
  return wheel.name.distribution + "/" + folder.folder + "/" + wheel.file_name;
}

const char* to_string(Action a) {
  switch (a) {
    case Action::kUpload:
      return "upload";
    case Action::kSame:
      return "same";
    case Action::kReplace:
      return "replace";
    case Action::kConflict:
      return "conflict";
  }
  return "?";
}

Decision decide(const Content& local, const RemoteEntry* remote, bool replace) {
  if (remote == nullptr) return {Action::kUpload, "new"};
  if (remote->is_dir()) return {Action::kConflict, "a folder of that name is already there"};
  const bool same = remote->is_lfs()
                        ? remote->lfs_sha256 == local.sha256 && remote->size == local.size
                        : remote->oid == local.git_sha1;
  if (same) return {Action::kSame, "the same bytes are already there"};
  const std::string other = "another file is there (" + std::to_string(remote->size) + " bytes" +
                            (remote->is_lfs() ? ", sha256 " + remote->lfs_sha256.substr(0, 12)
                                              : ", git blob " + remote->oid.substr(0, 12)) +
                            ")";
  if (replace) return {Action::kReplace, other + "; replaced (--replace)"};
  return {Action::kConflict, other + "; --replace replaces it"};
}

}  // namespace whfs::check
