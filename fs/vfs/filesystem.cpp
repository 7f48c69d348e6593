#include "fs/vfs/filesystem.h"

#include <spdlog/spdlog.h>

namespace whfs {
namespace {

constexpr const char* kXattrPrefix = "user.wheelhouse.";

bool ends_with_whl(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".whl") == 0;
}

// The node whose content `n` shows: its alias, or itself.
const ns::Node& shown_by(const ns::Node& n) {
  const auto* f = n.as<ns::Node::SyntheticFile>();
  return f != nullptr && f->alias ? *f->alias : n;
}

}  // namespace

std::optional<reader::FileContent> content_of(const ns::Node& node) {
  const auto* f = shown_by(node).as<ns::Node::File>();
  if (f == nullptr) return std::nullopt;
  auto id = cache::ContentId::of(f->entry);
  if (!id) return std::nullopt;
  return reader::FileContent{f->commit, f->entry.path, f->entry.size, *id};
}

Filesystem::Filesystem(ns::Namespace& names, reader::Reader& reader, FilesystemConfig config)
    : names_(names), reader_(reader), config_(std::move(config)) {}

std::string Filesystem::report_of(const ns::Node& node, const Caller& caller) {
  const auto* r = node.as<ns::Node::Report>();
  const std::string folder_report = r != nullptr && r->folder_report ? *r->folder_report : "";
  return callers_ != nullptr ? callers_->report(caller, r != nullptr ? r->key : "", folder_report)
                             : folder_report;
}

void Filesystem::per_caller_attr(const ns::Node& node, ns::Attr& attr, const Caller& caller) {
  const auto* report = node.as<ns::Node::Report>();
  if (!node.per_caller()) return;
  // Sizes as far as they are known now (0 until then): a link is read whole whatever its
  // size, and a report is read with direct I/O, up to its end.
  attr.size = 0;
  if (callers_ == nullptr) {
    if (report != nullptr) attr.size = node.size();
    return;
  }
  if (report == nullptr) {
    if (const auto l = callers_->link_now(caller)) attr.size = l->size();
  } else if (const auto r = callers_->report_now(
                 caller, report->key, report->folder_report ? *report->folder_report : "")) {
    attr.size = r->size();
  }
}

Expected<ns::Attr, FsErr> Filesystem::lookup(Ino parent, const std::string& name,
                                             const Caller& caller) {
  auto r = names_.lookup(parent, name, caller.uid);
  if (!r) return unexpected(r.error());
  if (r->per_caller) {
    if (auto node = names_.node(r->ino)) per_caller_attr(**node, *r, caller);
  }
  return *r;
}

bool Filesystem::absence_is_pinned(Ino parent) {
  auto node = names_.node(parent);
  return node && (*node)->kind() == ns::NodeKind::kDir;
}

Expected<ns::Attr, FsErr> Filesystem::getattr(Ino ino, const Caller& caller) {
  auto r = names_.getattr(ino);
  if (!r) return unexpected(r.error());
  if (r->per_caller) {
    if (auto node = names_.node(ino)) per_caller_attr(**node, *r, caller);
  }
  return *r;
}

Expected<std::string, FsErr> Filesystem::readlink(Ino ino, const Caller& caller) {
  auto node = names_.node(ino);
  if (!node) return unexpected(node.error());
  if ((*node)->kind() != ns::NodeKind::kSymlink) {
    return unexpected(FsErr{FsErrorKind::kInvalid, "not a symbolic link"});
  }
  if (callers_ == nullptr) return unexpected(FsErr{FsErrorKind::kNotFound, (*node)->name});
  return callers_->link(caller);
}

Expected<std::unique_ptr<DirHandle>, FsErr> Filesystem::opendir(Ino ino) {
  auto entries = names_.readdir(ino, false);
  if (!entries) return unexpected(entries.error());
  auto h = std::make_unique<DirHandle>();
  h->entries = std::move(entries).value();
  if (auto node = names_.node(ino)) {
    const auto* made = (*node)->as<ns::Node::SyntheticDir>();
    h->cacheable = made == nullptr || !made->make_missing;
  }
  return h;
}

Expected<std::unique_ptr<FileHandle>, FsErr> Filesystem::open(Ino ino, bool for_writing,
                                                              const Caller& caller) {
  auto node = names_.node(ino);
  if (!node) return unexpected(node.error());
  if ((*node)->is_dir()) return unexpected(FsErr{FsErrorKind::kIsDir, (*node)->name});
  if (for_writing) return unexpected(FsErr{FsErrorKind::kReadOnly, (*node)->name});
  auto h = std::make_unique<FileHandle>();
  h->node = *node;
  if (auto content = content_of(**node)) {
    h->remote = reader_.open(*content, ends_with_whl((*node)->name));
  } else if ((*node)->per_caller()) {
    h->bytes = std::make_shared<const std::string>(report_of(**node, caller));
    h->direct_io = true;
  } else if (const auto* f = (*node)->as<ns::Node::SyntheticFile>()) {
    h->bytes = f->bytes;
  }
  return h;
}

Expected<void, FsErr> Filesystem::read(FileHandle& fh, std::uint64_t offset, std::size_t size,
                                       CancelFlag* cancel, reader::Reader::ReplyFn reply) {
  if (!fh.remote) {
    // A synthetic file: its bytes are in memory.
    static const std::string kNone;
    const std::string& bytes = fh.bytes ? *fh.bytes : kNone;  // no copy
    iovec iov{};
    if (offset < bytes.size()) {
      iov.iov_base = const_cast<char*>(bytes.data() + offset);
      iov.iov_len = std::min<std::size_t>(size, bytes.size() - offset);
    }
    reply(std::span<const iovec>(&iov, iov.iov_len > 0 ? 1 : 0));
    return {};
  }
  const reader::WaitPolicy wait{config_.read_timeout, cancel};
  auto r = reader_.read(*fh.remote, offset, size, wait, reply);
  if (!r) {
    // Once per cause: a failed download is logged by the fetcher, not by each read it failed;
    // a read its caller or a shutdown interrupted is not an error of the mount.
    const bool quiet = r.error().logged || r.error().kind == FsErrorKind::kInterrupted;
    spdlog::log(quiet ? spdlog::level::debug : spdlog::level::err, "read {} at {} (+{}): {}",
                fh.remote->content().path, offset, size, r.error().message);
    return unexpected(std::move(r.error()));
  }
  return {};
}

void Filesystem::release(FileHandle& fh) {
  if (fh.remote) reader_.release(*fh.remote);
}

Expected<std::vector<std::string>, FsErr> Filesystem::listxattr(Ino ino) {
  auto node = names_.node(ino);
  if (!node) return unexpected(node.error());
  const std::string p = kXattrPrefix;
  if (ino == ns::kRootIno) {
    std::vector<std::string> names = {p + "repo", p + "revision", p + "commit"};
    if (status_) names.push_back(p + "status");
    if (callers_ != nullptr) names.push_back(p + "key");
    return names;
  }
  const ns::Node& n = **node;
  const ns::Node& shown = shown_by(n);
  std::vector<std::string> names;
  if (const auto* remote = shown.remote()) {
    names = {p + "path", p + "commit"};
    if (shown.kind() == ns::NodeKind::kFile) {
      names.push_back(p + "oid");
      if (remote->entry.is_lfs()) names.push_back(p + "sha256");
    }
  }
  if (&shown != &n) names.push_back(p + "source");
  return names;
}

Expected<std::string, FsErr> Filesystem::getxattr(Ino ino, const std::string& name,
                                                  const Caller& caller) {
  auto node = names_.node(ino);
  if (!node) return unexpected(node.error());
  if (!name.starts_with(kXattrPrefix)) return unexpected(FsErr{FsErrorKind::kNoAttr, name});
  const std::string key = name.substr(std::string(kXattrPrefix).size());
  if (ino == ns::kRootIno) {
    if (key == "repo") return config_.repo;
    if (key == "revision") return config_.revision;
    if (key == "commit") return names_.commit();
    if (key == "status" && status_) return status_();
    if (key == "key" && callers_ != nullptr) {
      std::string link = callers_->link(caller);
      const auto slash = link.find('/');
      return slash == std::string::npos ? link : link.substr(slash + 1);
    }
    if (key == "hint" && callers_ != nullptr) {
      auto r = callers_->adopt(caller);
      return r ? *r : "! " + r.error();
    }
    return unexpected(FsErr{FsErrorKind::kNoAttr, name});
  }
  const ns::Node& n = **node;
  const ns::Node& shown = shown_by(n);
  const auto* remote = shown.remote();
  const bool file = shown.kind() == ns::NodeKind::kFile;
  if (remote != nullptr && key == "path") return remote->entry.path;
  if (remote != nullptr && key == "commit") return remote->commit;
  if (file && key == "oid") return remote->entry.oid;
  if (file && key == "sha256" && remote->entry.is_lfs()) return remote->entry.lfs_sha256;
  if (&shown != &n && remote != nullptr && key == "source") return remote->entry.path;
  return unexpected(FsErr{FsErrorKind::kNoAttr, name});
}

std::vector<Ino> Filesystem::inodes_with_content(const cache::ContentId& id) {
  return names_.inodes_where([&](const ns::Node& n) {
    const auto c = content_of(n);
    return c && c->id == id;
  });
}

FsStats Filesystem::statfs() {
  FsStats s;
  s.blocks = config_.cache_cap / s.block_size;
  s.files = names_.inode_count();
  return s;
}

}  // namespace whfs
