#include "tests/unit/fuse/fake_fuse.h"

#include <cstring>
#include <stdexcept>

namespace {

int replied(fuse_req_t req, const char* what) {
  req->reply = what;
  req->replies++;
  return 0;
}

std::size_t add_name(char* buf, std::size_t size, const char* name) {
  const std::size_t need = std::strlen(name) + 1;
  if (need <= size) std::memcpy(buf, name, need);
  return need;
}

}  // namespace

extern "C" {

void* fuse_req_userdata(fuse_req_t req) {
  return const_cast<void*>(static_cast<const void*>(req->session));
}
const struct fuse_ctx* fuse_req_ctx(fuse_req_t req) { return &req->ctx; }
void fuse_req_interrupt_func(fuse_req_t, fuse_interrupt_func_t, void*) {}

int fuse_reply_err(fuse_req_t req, int err) {
  req->err = err;
  return replied(req, "err");
}
void fuse_reply_none(fuse_req_t req) { replied(req, "none"); }
int fuse_reply_entry(fuse_req_t req, const struct fuse_entry_param* e) {
  req->entry = *e;
  return replied(req, "entry");
}
int fuse_reply_attr(fuse_req_t req, const struct stat* attr, double timeout) {
  req->attr = *attr;
  req->attr_timeout = timeout;
  return replied(req, "attr");
}
int fuse_reply_readlink(fuse_req_t req, const char* link) {
  req->bytes = link;
  return replied(req, "readlink");
}
int fuse_reply_open(fuse_req_t req, const struct fuse_file_info* fi) {
  req->fi = *fi;
  return replied(req, "open");
}
int fuse_reply_buf(fuse_req_t req, const char* buf, size_t size) {
  req->bytes.assign(buf, size);
  return replied(req, "buf");
}
int fuse_reply_iov(fuse_req_t req, const struct iovec* iov, int count) {
  req->bytes.clear();
  for (int i = 0; i < count; ++i) {
    req->bytes.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  }
  replied(req, "iov");
  if (req->throw_after_reply) throw std::runtime_error("after the reply");
  return 0;
}
int fuse_reply_statfs(fuse_req_t req, const struct statvfs*) { return replied(req, "statfs"); }
int fuse_reply_xattr(fuse_req_t req, size_t count) {
  req->xattr_size = count;
  return replied(req, "xattr");
}
size_t fuse_add_direntry(fuse_req_t, char* buf, size_t bufsize, const char* name,
                         const struct stat*, off_t) {
  return add_name(buf, bufsize, name);
}
size_t fuse_add_direntry_plus(fuse_req_t, char* buf, size_t bufsize, const char* name,
                              const struct fuse_entry_param*, off_t) {
  return add_name(buf, bufsize, name);
}

}  // extern "C"

namespace whfs::fuse::testing {

std::vector<std::string> names_in(const std::string& buf) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at < buf.size();) {
    const std::size_t end = buf.find('\0', at);
    out.push_back(buf.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

}  // namespace whfs::fuse::testing
