#pragma once
// torch and the CUDA it was built with, read from torch/version.py in the target Python's
// folders. torch is never imported: importing it takes seconds, initialises CUDA and may
// fail for reasons that have nothing to do with which wheels fit.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/common/expected.h"

namespace whfs::target {

struct TorchInfo {
  std::string version;      // __version__: 2.9.0+cu128
  std::string major_minor;  // 2.9
  std::string cuda;         // cuda: 12.8; empty for a CPU or ROCm build
  std::string hip;          // hip: the ROCm version of a ROCm build, else empty
  std::string path;         // the version.py read
};

// Parses version.py text: top-level assignments `__version__ = '2.9.0+cu128'` and
// `cuda = '12.8'` or `cuda: Optional[str] = '12.8'` (None for a CPU build). Pure.
Expected<TorchInfo, std::string> parse_torch_version_py(std::string_view text);

// Reads a small file (nullopt: missing or not a regular file); a caller's files are read
// inside its own root (root_fs.h).
using FileReader = std::function<std::optional<std::string>(const std::string& path)>;

// The first <dir>/torch/version.py among `site_dirs` (import order), parsed. Absent torch is
// "torch not found in <dirs>"; an unparsable file names the file.
Expected<TorchInfo, std::string> find_torch(const std::vector<std::string>& site_dirs,
                                            const FileReader& read);

}  // namespace whfs::target
