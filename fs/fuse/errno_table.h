#pragma once

#include "fs/common/fs_error.h"

namespace whfs::fuse {

// The one place where errors become errno values.
int to_errno(FsErrorKind kind);

}  // namespace whfs::fuse
