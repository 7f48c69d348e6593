#pragma once
// Internal to fs/fuse: what every request reaches through fuse_req_userdata, and the op table
// (fuse_ops.cpp) the session is made with (fuse_mount.cpp).

#define FUSE_USE_VERSION 35
#include <fuse_lowlevel.h>

#include "fs/fuse/fuse_mount.h"

namespace whfs::fuse {

// What every request reaches through fuse_req_userdata: the filesystem and the kernel cache
// timeouts (set once, before the first request).
struct FuseMount::SessionData {
  Filesystem* fs = nullptr;
  double entry_timeout = 86400;
  double attr_timeout = 86400;
};

// The low-level operations: each decodes a request, calls one Filesystem method and replies.
fuse_lowlevel_ops make_ops();

}  // namespace whfs::fuse
