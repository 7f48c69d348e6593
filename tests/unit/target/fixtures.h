#pragma once
// Test fixtures for fs/target: a temporary folder, fake torch installs and fake Python
// interpreters in it, and scoped environment variables for the fake vendor libraries.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace whfs::target::testing {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "whfs-target-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  std::string str(const std::string& sub = "") const {
    return sub.empty() ? path_.string() : (path_ / sub).string();
  }

 private:
  fs::path path_;
};

inline void write_file(const fs::path& p, const std::string& text, bool executable = false) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
  if (executable) ::chmod(p.c_str(), 0755);
}

// <site>/torch/version.py as torch writes it; cuda "" writes `cuda: Optional[str] = None`.
inline void write_torch(const fs::path& site, const std::string& version, const std::string& cuda) {
  write_file(site / "torch" / "version.py",
             "from typing import Optional\n\n"
             "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']\n"
             "__version__ = '" +
                 version +
                 "'\n"
                 "debug = False\n"
                 "cuda: Optional[str] = " +
                 (cuda.empty() ? "None" : "'" + cuda + "'") +
                 "\n"
                 "git_version = '0123456789abcdef'\n"
                 "hip: Optional[str] = None\n"
                 "xpu: Optional[str] = None\n");
}

// An executable that answers the Python probe like a CPython 3.<minor> with glibc 2.<glibc>
// whose only folder is `site`: a shell script, so no second Python is needed.
inline std::string write_fake_python(const fs::path& dir, int minor, int glibc_minor,
                                     const fs::path& site) {
  const fs::path exe = dir / ("python3." + std::to_string(minor));
  write_file(exe,
             "#!/bin/sh\n"
             "cat <<'EOF'\n"
             "{\"implementation\": \"cpython\", \"major\": 3, \"minor\": " +
                 std::to_string(minor) + ", \"abiflags\": \"\", \"executable\": \"" + exe.string() +
                 "\", \"libc\": \"glibc 2." + std::to_string(glibc_minor) +
                 "\", \"platform\": \"linux-x86_64\", \"pointer_bits\": 64, "
                 "\"site_dirs\": [\"" +
                 site.string() +
                 "\"]}\n"
                 "EOF\n",
             true);
  return exe.string();
}

// Sets (or unsets, with nullopt) an environment variable for the scope of a test. The
// probes' children inherit it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace whfs::target::testing
