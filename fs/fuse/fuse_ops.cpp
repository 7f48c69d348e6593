// The FUSE low-level operations: decode a request, call one Filesystem method, reply. No
// exception crosses into libfuse; errno comes from one table (errno_table.h).
#include "fs/fuse/fuse_ops.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "fs/fuse/errno_table.h"

namespace whfs::fuse {
namespace {

// ---- helpers --------------------------------------------------------------------------------

using SessionData = FuseMount::SessionData;

const SessionData& session_of(fuse_req_t req) {
  return *static_cast<const SessionData*>(fuse_req_userdata(req));
}
Filesystem& fs_of(fuse_req_t req) { return *session_of(req).fs; }

Caller caller_of(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  return Caller{ctx->pid, ctx->uid, ctx->gid};
}

void fill_stat(const ns::Attr& a, struct stat* st) {
  std::memset(st, 0, sizeof *st);
  st->st_ino = a.ino;
  st->st_mode = a.dir ? (S_IFDIR | 0555) : a.symlink ? (S_IFLNK | 0777) : (S_IFREG | 0444);
  st->st_nlink = a.dir ? 2 : 1;
  st->st_size = static_cast<off_t>(a.size);
  st->st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
  st->st_blksize = blksize_t{128} << 10;
  st->st_uid = ::getuid();
  st->st_gid = ::getgid();
  st->st_mtim.tv_sec = a.mtime;
  st->st_ctim.tv_sec = a.mtime;
  st->st_atim.tv_sec = a.mtime;
}

fuse_entry_param entry_of(fuse_req_t req, const ns::Attr& a) {
  fuse_entry_param e{};
  e.ino = a.ino;
  e.generation = 1;
  e.entry_timeout = session_of(req).entry_timeout;
  // What depends on the caller is asked again each time (the name itself may stay cached: it
  // is the same inode for everyone).
  e.attr_timeout = a.per_caller ? 0 : session_of(req).attr_timeout;
  fill_stat(a, &e.attr);
  return e;
}

void reply_error(fuse_req_t req, const FsErr& e) { fuse_reply_err(req, to_errno(e.kind)); }

// No exception may cross into libfuse's C frames: one out of `body` is logged and handed to
// `failed` as an EIO error.
template <class F, class Failed>
void catching(const char* op, F&& body, Failed&& failed) {
  try {
    body();
  } catch (const std::exception& ex) {
    spdlog::error("{}: internal error: {}", op, ex.what());
    failed(FsErr{FsErrorKind::kIo, ex.what()});
  } catch (...) {
    spdlog::error("{}: internal error", op);
    failed(FsErr{FsErrorKind::kIo, "internal error"});
  }
}

// An operation whose failure is replied as an error. (The bodies reply last, so an exception
// always comes before their reply.)
template <class F>
void guarded(fuse_req_t req, const char* op, F&& body) {
  catching(op, std::forward<F>(body), [req](const FsErr& e) { reply_error(req, e); });
}

// ---- operations: decode, call one Filesystem method, reply -----------------------------------

void op_init(void*, fuse_conn_info* conn) {
  // Reads as large as the kernel allows (max_pages follows max_write) and room for the
  // kernel's own readahead; read-only content, so the kernel may cache all it likes.
  conn->max_write = 1u << 20;
  conn->max_readahead = 16u << 20;
  // Let the kernel keep many reads of sequential readers in flight (they block on downloads).
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  const unsigned want = FUSE_CAP_ASYNC_READ | FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_READDIRPLUS |
                        FUSE_CAP_READDIRPLUS_AUTO | FUSE_CAP_EXPLICIT_INVAL_DATA;
  conn->want |= want & conn->capable;
  conn->want &= ~(FUSE_CAP_AUTO_INVAL_DATA & conn->capable);
  // `current` leads each process to its own folder: the kernel must ask for the link's text on
  // every path walk, never keep it.
  conn->want &= ~(FUSE_CAP_CACHE_SYMLINKS & conn->capable);
  conn->time_gran = 1000000000;
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  guarded(req, "lookup", [&] {
    auto r = fs_of(req).lookup(parent, name, caller_of(req));
    if (!r && r.error().kind == FsErrorKind::kNotFound && fs_of(req).absence_is_pinned(parent)) {
      // A negative entry the kernel keeps: tools probe many names that are not there (pip
      // looks for every dist-info spelling), and the tree is a pinned commit.
      fuse_entry_param none{};
      none.entry_timeout = session_of(req).entry_timeout;
      return (void)fuse_reply_entry(req, &none);
    }
    if (!r) return reply_error(req, r.error());
    const auto e = entry_of(req, *r);
    // Interrupted: the kernel never saw the entry, so it will never forget it.
    if (fuse_reply_entry(req, &e) != 0) fs_of(req).forget(e.ino, 1);
  });
}

// FORGET has no reply to send an error with: a failure is logged, and the request answered.
template <class F>
void guarded_no_reply(fuse_req_t req, const char* op, F&& body) {
  catching(op, std::forward<F>(body), [](const FsErr&) {});
  fuse_reply_none(req);
}

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t n) {
  guarded_no_reply(req, "forget", [&] { fs_of(req).forget(ino, n); });
}

void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  guarded_no_reply(req, "forget", [&] {
    for (size_t i = 0; i < count; ++i) fs_of(req).forget(forgets[i].ino, forgets[i].nlookup);
  });
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  guarded(req, "getattr", [&] {
    auto r = fs_of(req).getattr(ino, caller_of(req));
    if (!r) return reply_error(req, r.error());
    struct stat st;
    fill_stat(*r, &st);
    fuse_reply_attr(req, &st, r->per_caller ? 0 : session_of(req).attr_timeout);
  });
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guarded(req, "opendir", [&] {
    auto r = fs_of(req).opendir(ino);
    if (!r) return reply_error(req, r.error());
    fi->cache_readdir = (*r)->cacheable ? 1 : 0;
    fi->keep_cache = (*r)->cacheable ? 1 : 0;
    fi->fh = reinterpret_cast<uint64_t>(r->release());
    if (fuse_reply_open(req, fi) != 0) delete reinterpret_cast<DirHandle*>(fi->fh);
  });
}

void readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
                    bool plus) {
  auto* h = reinterpret_cast<DirHandle*>(fi->fh);
  // Not value-initialised: the kernel asks for up to 128 KiB per call, and zeroing it costs
  // more than filling it (a tenth of the daemon's CPU in a cold `ls -R` of 100k entries).
  const std::unique_ptr<char[]> buf(new char[size]);
  std::vector<fuse_ino_t> counted;  // readdirplus: entries the kernel will hold a reference to
  size_t used = 0;
  const auto total = static_cast<off_t>(h->entries.size()) + 2;
  for (off_t i = off; i < total; ++i) {
    ns::Attr a{};
    std::string name;
    if (i < 2) {
      a = ns::Attr{ino, true, 0, 0};
      name = i == 0 ? "." : "..";
    } else {
      const auto& de = h->entries[static_cast<size_t>(i - 2)];
      a = de.attr;
      name = de.name;
    }
    size_t need = 0;
    if (plus) {
      fuse_entry_param e = entry_of(req, a);
      need = fuse_add_direntry_plus(req, buf.get() + used, size - used, name.c_str(), &e, i + 1);
    } else {
      struct stat st;
      fill_stat(a, &st);
      need = fuse_add_direntry(req, buf.get() + used, size - used, name.c_str(), &st, i + 1);
    }
    if (need > size - used) break;
    used += need;
    if (plus && i >= 2) {
      // Counted before the reply: once it is out, the kernel may forget the entry at once.
      fs_of(req).count_lookup(a.ino);
      counted.push_back(a.ino);
    }
  }
  if (fuse_reply_buf(req, buf.get(), used) != 0) {
    for (fuse_ino_t i : counted) fs_of(req).forget(i, 1);  // interrupted: never seen
  }
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  guarded(req, "readdir", [&] { readdir_common(req, ino, size, off, fi, false); });
}

void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  guarded(req, "readdirplus", [&] { readdir_common(req, ino, size, off, fi, true); });
}

void op_releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  guarded(req, "releasedir", [&] {
    delete reinterpret_cast<DirHandle*>(fi->fh);
    fuse_reply_err(req, 0);
  });
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guarded(req, "open", [&] {
    const bool writing = (fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC) != 0;
    auto r = fs_of(req).open(ino, writing, caller_of(req));
    if (!r) return reply_error(req, r.error());
    if ((*r)->direct_io) {
      fi->direct_io = 1;  // a per-caller report: never from or into the page cache
    } else {
      fi->keep_cache = 1;  // content is immutable for this inode
    }
    fi->fh = reinterpret_cast<uint64_t>(r->release());
    if (fuse_reply_open(req, fi) != 0) {
      auto* h = reinterpret_cast<FileHandle*>(fi->fh);
      fs_of(req).release(*h);
      delete h;
    }
  });
}

// Whether `pid` (in the daemon's PID namespace, as FUSE gives it) still runs: a zombie has
// already lost interest in what it asked for.
bool process_alive(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return errno != ENOENT;  // unreadable (hidepid=): assume alive
  char buf[512];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');  // the name may hold spaces and parentheses
  return close == nullptr || close[1] != ' ' || (close[2] != 'Z' && close[2] != 'X');
}

// FUSE's INTERRUPT (the reader was killed while its read waited) raises the read's flag.
void on_interrupt(fuse_req_t, void* data) { static_cast<CancelFlag*>(data)->cancel(); }

void op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  bool replied = false;
  CancelFlag cancel;
  // The kernel's own readahead gets no INTERRUPT when its reader is killed: the read also
  // stops waiting once the process that asked is gone.
  if (const pid_t pid = fuse_req_ctx(req)->pid; pid > 0) {
    cancel.set_liveness_check([pid] { return !process_alive(pid); });
  }
  fuse_req_interrupt_func(req, on_interrupt, &cancel);
  // Before any reply: once this returns, no interrupt callback runs or will run with `cancel`
  // (libfuse calls it under the request's lock, which this takes).
  auto detach = [&] { fuse_req_interrupt_func(req, nullptr, nullptr); };
  auto fail = [&](const FsErr& e) {
    detach();
    reply_error(req, e);
  };
  catching(
      "read",
      [&] {
        auto* h = reinterpret_cast<FileHandle*>(fi->fh);
        auto r = fs_of(req).read(*h, static_cast<std::uint64_t>(off), size, &cancel,
                                 [&](std::span<const iovec> iov) {
                                   detach();
                                   replied = true;
                                   fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
                                 });
        if (!r && !replied) fail(r.error());
      },
      [&](const FsErr& e) {
        if (!replied) fail(e);
      });
}

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  guarded(req, "release", [&] {
    auto* h = reinterpret_cast<FileHandle*>(fi->fh);
    fs_of(req).release(*h);
    delete h;
    fuse_reply_err(req, 0);
  });
}

void op_statfs(fuse_req_t req, fuse_ino_t) {
  guarded(req, "statfs", [&] {
    const FsStats s = fs_of(req).statfs();
    struct statvfs v {};
    v.f_bsize = s.block_size;
    v.f_frsize = s.block_size;
    v.f_blocks = s.blocks;
    v.f_files = s.files;
    v.f_namemax = 255;
    v.f_flag = ST_RDONLY;
    fuse_reply_statfs(req, &v);
  });
}

void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  guarded(req, "getxattr", [&] {
    auto r = fs_of(req).getxattr(ino, name, caller_of(req));
    if (!r) return reply_error(req, r.error());
    if (size == 0) return (void)fuse_reply_xattr(req, r->size());
    if (size < r->size()) return reply_error(req, FsErr{FsErrorKind::kRange, name});
    fuse_reply_buf(req, r->data(), r->size());
  });
}

void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  guarded(req, "listxattr", [&] {
    auto r = fs_of(req).listxattr(ino);
    if (!r) return reply_error(req, r.error());
    std::string all;
    for (const auto& n : *r) all.append(n).push_back('\0');
    if (size == 0) return (void)fuse_reply_xattr(req, all.size());
    if (size < all.size()) return reply_error(req, FsErr{FsErrorKind::kRange, "listxattr"});
    fuse_reply_buf(req, all.data(), all.size());
  });
}

// Every write-type operation: the filesystem is read-only.
void rofs(fuse_req_t req) { reply_error(req, FsErr{FsErrorKind::kReadOnly, "read-only"}); }

void op_access(fuse_req_t req, fuse_ino_t, int mask) {
  if ((mask & W_OK) != 0) return rofs(req);
  fuse_reply_err(req, 0);
}

void op_readlink(fuse_req_t req, fuse_ino_t ino) {
  guarded(req, "readlink", [&] {
    auto r = fs_of(req).readlink(ino, caller_of(req));
    if (!r) return reply_error(req, r.error());
    fuse_reply_readlink(req, r->c_str());
  });
}
void op_flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

void op_setattr(fuse_req_t req, fuse_ino_t, struct stat*, int, fuse_file_info*) { rofs(req); }
void op_mknod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { rofs(req); }
void op_mkdir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { rofs(req); }
void op_unlink(fuse_req_t req, fuse_ino_t, const char*) { rofs(req); }
void op_rmdir(fuse_req_t req, fuse_ino_t, const char*) { rofs(req); }
void op_symlink(fuse_req_t req, const char*, fuse_ino_t, const char*) { rofs(req); }
void op_rename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) {
  rofs(req);
}
void op_link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { rofs(req); }
void op_write(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) {
  rofs(req);
}
void op_create(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) { rofs(req); }
void op_setxattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) { rofs(req); }
void op_removexattr(fuse_req_t req, fuse_ino_t, const char*) { rofs(req); }
void op_fallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, fuse_file_info*) { rofs(req); }

}  // namespace

fuse_lowlevel_ops make_ops() {
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.forget = op_forget;
  ops.forget_multi = op_forget_multi;
  ops.getattr = op_getattr;
  ops.opendir = op_opendir;
  ops.readdir = op_readdir;
  ops.readdirplus = op_readdirplus;
  ops.releasedir = op_releasedir;
  ops.open = op_open;
  ops.read = op_read;
  ops.release = op_release;
  ops.statfs = op_statfs;
  ops.getxattr = op_getxattr;
  ops.listxattr = op_listxattr;
  ops.access = op_access;
  ops.readlink = op_readlink;
  ops.flush = op_flush;
  ops.setattr = op_setattr;
  ops.mknod = op_mknod;
  ops.mkdir = op_mkdir;
  ops.unlink = op_unlink;
  ops.rmdir = op_rmdir;
  ops.symlink = op_symlink;
  ops.rename = op_rename;
  ops.link = op_link;
  ops.write = op_write;
  ops.create = op_create;
  ops.setxattr = op_setxattr;
  ops.removexattr = op_removexattr;
  ops.fallocate = op_fallocate;
  return ops;
}

}  // namespace whfs::fuse
