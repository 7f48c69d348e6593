#pragma once
// Test fixtures for fs/targeting: a temporary folder, fake torch installs and fake Python
// interpreters in it, and scoped environment variables for the fake vendor libraries.

#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
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

// An ELF executable at `path` that stands for an interpreter (a copy of /bin/true: the
// product reads an interpreter's files and never runs it).
inline void write_fake_interpreter(const fs::path& path) {
  fs::create_directories(path.parent_path());
  fs::copy_file(fs::canonical("/bin/true"), path, fs::copy_options::overwrite_existing);
  ::chmod(path.c_str(), 0755);
}

// A libc.so.6 image for a root folder: what the glibc scan looks for.
inline void write_fake_libc(const fs::path& root, int glibc_minor) {
  std::string image =
      "\x7f"
      "ELF fake libc";
  for (int m = 2; m <= glibc_minor; ++m) image += std::string("\0GLIBC_2.", 9) + std::to_string(m);
  image += std::string("\0GLIBC_PRIVATE\0", 15);
  write_file(root / "lib" / "x86_64-linux-gnu" / "libc.so.6", image);
}

// A venv at `dir` whose pyvenv.cfg says Python `version` (3.12.1) with `home` as its base
// interpreter's folder; bin/python3 is `interpreter` (a link), or a fake one when empty.
inline void write_venv(const fs::path& dir, const std::string& version, const std::string& home,
                       bool system_site, const std::string& interpreter = "") {
  write_file(dir / "pyvenv.cfg", "home = " + home + "\ninclude-system-site-packages = " +
                                     (system_site ? "true" : "false") + "\nversion = " + version +
                                     "\n");
  if (interpreter.empty()) {
    write_fake_interpreter(dir / "bin" / "python3");
  } else {
    fs::create_directories(dir / "bin");
    fs::create_symlink(interpreter, dir / "bin" / "python3");
  }
  fs::create_symlink("python3", dir / "bin" / "python");
  const std::string minor = version.substr(0, version.find('.', 2));
  fs::create_directories(dir / "lib" / ("python" + minor) / "site-packages");
}

// A process that runs /bin/sleep 60 with exactly this environment (and, optionally, as another
// user) until the test ends: a caller whose /proc the code under test reads. The constructor
// returns once the exec happened.
class Sleeper {
 public:
  explicit Sleeper(std::vector<std::string> env, uid_t uid = 0) {
    pid_ = ::fork();
    if (pid_ == 0) {
      if (uid != 0 && (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0)) {
        ::_exit(126);
      }
      std::vector<char*> e;
      for (auto& v : env) e.push_back(v.data());
      e.push_back(nullptr);
      char sleep[] = "/bin/sleep";
      char sixty[] = "60";
      char* argv[] = {sleep, sixty, nullptr};
      ::execve(argv[0], argv, e.data());
      ::_exit(127);
    }
    const std::string exe = "/proc/" + std::to_string(pid_) + "/exe";
    const std::string environ = "/proc/" + std::to_string(pid_) + "/environ";
    for (int i = 0; i < 1000; ++i) {
      std::error_code ec;
      // The exec is done once its environment is there too: /proc/PID/exe names the new
      // program a moment before the kernel has laid out its environment (an empty environ
      // then; seen under TSan on a loaded machine).
      if (fs::read_symlink(exe, ec).filename() == "sleep") {
        std::ifstream in(environ, std::ios::binary);
        char first = 0;
        if (env.empty() || in.get(first)) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::abort();  // the fork or the exec failed: nothing this test could check
  }
  ~Sleeper() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  Sleeper(const Sleeper&) = delete;
  Sleeper& operator=(const Sleeper&) = delete;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

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
