// wheelhouse shell-hook, pip-config, and detect --key through the mount: how an interactive
// shell, a script and a plain `pip install` reach the right wheels; shell-hook --install and
// --uninstall: the admin's command that adds the hook to the shells' system-wide rc files.

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/common/mounts.h"
#include "tools/cli_commands.h"

namespace whfs::cli {
namespace {

// Single quotes for the shells: 'it'\''s'.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

// wheelhouse-hint beside this program (the installed pair), else on PATH.
std::string hint_helper() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = self.parent_path() / "wheelhouse-hint";
    if (::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return "wheelhouse-hint";
}

// What the hook compares before each prompt: everything that decides the Python (and the GPUs)
// of a shell; when none changed, the prompt costs a string comparison and nothing else.
constexpr const char* kState =
    "${VIRTUAL_ENV-}|${CONDA_PREFIX-}|${PYENV_VERSION-}|${PYENV_ROOT-}|${PYTHONPATH-}|"
    "${CUDA_VISIBLE_DEVICES-}|${PATH-}|${PWD-}";

}  // namespace

int run_shell_hook(const std::string& shell, const std::vector<std::string>& mounts) {
  std::string call = quoted(hint_helper());
  for (const auto& m : mounts) call += " " + quoted(m);
  call += " >/dev/null 2>&1";
  if (shell == "bash" || shell == "zsh") {
    std::printf(
        "# wheelhouse-fs: before each prompt, when what decides this shell's Python changed,\n"
        "# tell the wheelhouse mounts (a child with this shell's current environment), so that\n"
        "# the shell's own globs of current/ follow `source activate`, `conda activate`, pyenv.\n"
        "__wheelhouse_hook() {\n"
        "  local __wh_status=$?\n"
        "  local __wh_state=\"%s\"\n"
        "  if [ \"$__wh_state\" != \"${__wheelhouse_state-}\" ]; then\n"
        "    __wheelhouse_state=$__wh_state\n"
        "    %s\n"
        "  fi\n"
        "  return $__wh_status\n"
        "}\n",
        kState, call.c_str());
    if (shell == "bash") {
      std::printf(
          "case \";${PROMPT_COMMAND-};\" in\n"
          "  *\";__wheelhouse_hook;\"*) ;;\n"
          "  *) PROMPT_COMMAND=\"__wheelhouse_hook${PROMPT_COMMAND:+;$PROMPT_COMMAND}\" ;;\n"
          "esac\n");
    } else {
      std::printf(
          "typeset -ag precmd_functions\n"
          "if (( ! ${precmd_functions[(I)__wheelhouse_hook]} )); then\n"
          "  precmd_functions=(__wheelhouse_hook $precmd_functions)\n"
          "fi\n");
    }
    return kOk;
  }
  if (shell == "fish") {
    std::string state = kState;
    // fish has no ${VAR-}: "$VAR" is empty when unset.
    for (const char* v : {"VIRTUAL_ENV", "CONDA_PREFIX", "PYENV_VERSION", "PYENV_ROOT",
                          "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "PATH", "PWD"}) {
      const std::string from = std::string("${") + v + "-}";
      state.replace(state.find(from), from.size(), std::string("$") + v);
    }
    std::printf(
        "# wheelhouse-fs: tell the wheelhouse mounts this shell's Python before each prompt\n"
        "function __wheelhouse_hook --on-event fish_prompt\n"
        "  set -l __wh_state \"%s\"\n"
        "  if test \"$__wh_state\" != \"$__wheelhouse_state\"\n"
        "    set -g __wheelhouse_state $__wh_state\n"
        "    %s\n"
        "  end\n"
        "end\n",
        state.c_str(), call.c_str());
    return kOk;
  }
  std::fprintf(stderr, "wheelhouse: shell-hook knows bash, zsh and fish, not '%s'\n",
               shell.c_str());
  return kUsage;
}

namespace {

// The line --install adds: the package's hook file, read where it exists (the line stays
// harmless once the package is removed).
constexpr std::string_view kRcLine =
    "[ -r /etc/profile.d/wheelhouse-fs.sh ] && . /etc/profile.d/wheelhouse-fs.sh  # wheelhouse-fs";
constexpr const char* kHookFile = "/etc/profile.d/wheelhouse-fs.sh";
constexpr const char* kDefaultRcFiles[] = {"/etc/bash.bashrc", "/etc/zsh/zshrc"};

std::string describe_errno(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

// An rc file as read: its bytes and the identity, owner and mode its replacement keeps. The fd
// stays open for its extended attributes (ACLs, SELinux label), copied onto the replacement.
struct RcFile {
  std::string text;
  struct stat st {};
  int fd = -1;
  RcFile() = default;
  RcFile(const RcFile&) = delete;
  RcFile& operator=(const RcFile&) = delete;
  ~RcFile() {
    if (fd >= 0) ::close(fd);
  }
};

// A symbolic link is refused (the file it leads to may be anyone's, and a rename would replace
// the link), as is a file with hard links (a rename would split them).
std::optional<std::string> read_rc(const std::string& path, RcFile& rc) {
  struct stat ls {};
  if (::lstat(path.c_str(), &ls) != 0) return describe_errno(path, errno);
  if (S_ISLNK(ls.st_mode)) {
    std::error_code ec;
    const auto to = std::filesystem::read_symlink(path, ec);
    return path + ": a symbolic link (to " + (ec ? std::string("?") : to.string()) +
           "): name the file itself";
  }
  if (!S_ISREG(ls.st_mode)) return path + ": not a regular file";
  if (ls.st_nlink > 1) {
    return path + ": has " + std::to_string(ls.st_nlink) +
           " hard links, which replacing it would split: edit it by hand";
  }
  rc.fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (rc.fd < 0) return describe_errno(path, errno);
  if (::fstat(rc.fd, &rc.st) != 0) return describe_errno(path, errno);
  if (rc.st.st_dev != ls.st_dev || rc.st.st_ino != ls.st_ino) {
    return path + ": replaced while being read; run again";
  }
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(rc.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return describe_errno(path, errno);
    if (n == 0) break;
    rc.text.append(buf, static_cast<std::size_t>(n));
  }
  return std::nullopt;
}

void copy_xattrs(int from, int to) {
  std::vector<char> names(65536);
  const ssize_t n = ::flistxattr(from, names.data(), names.size());
  if (n <= 0) return;
  std::vector<char> value(65536);
  for (ssize_t i = 0; i < n; i += static_cast<ssize_t>(std::strlen(names.data() + i)) + 1) {
    const char* name = names.data() + i;
    const ssize_t v = ::fgetxattr(from, name, value.data(), value.size());
    if (v >= 0) ::fsetxattr(to, name, value.data(), static_cast<std::size_t>(v), 0);
  }
}

// Replaces `path` atomically with `text`: a temporary file beside it, with its owner, mode and
// extended attributes, synced, then renamed over it (a reader sees the old file or the new one).
std::optional<std::string> replace_rc(const std::string& path, const RcFile& rc,
                                      const std::string& text) {
  const std::filesystem::path p(path);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  std::string tmp = dir + "/." + p.filename().string() + ".wheelhouse-XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return describe_errno(path + ": a file beside it", errno);
  // what: the step that failed (with errno's text), or the whole message (errno 0).
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return err == 0 ? path + ": " + what : describe_errno(path + ": " + what, err);
  };
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write", errno);
    done += static_cast<std::size_t>(n);
  }
  if (::fchown(fd, rc.st.st_uid, rc.st.st_gid) != 0) return fail("keep its owner", errno);
  copy_xattrs(rc.fd, fd);
  if (::fchmod(fd, rc.st.st_mode & 07777) != 0) return fail("keep its mode", errno);
  if (::fsync(fd) != 0) return fail("fsync", errno);
  // Someone else's edit since it was read is not overwritten.
  struct stat now {};
  if (::lstat(path.c_str(), &now) != 0 || now.st_dev != rc.st.st_dev ||
      now.st_ino != rc.st.st_ino || now.st_size != rc.st.st_size ||
      now.st_mtim.tv_sec != rc.st.st_mtim.tv_sec || now.st_mtim.tv_nsec != rc.st.st_mtim.tv_nsec) {
    return fail("changed while being edited; run again", 0);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename", errno);
  ::close(fd);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return std::nullopt;
}

// `text` without the lines that are exactly kRcLine (an admin's own lines stay, even one that
// ends in the same comment).
std::string without_hook_line(const std::string& text, bool* found) {
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const std::size_t end = nl == std::string::npos ? text.size() : nl;
    const std::size_t next = nl == std::string::npos ? text.size() : nl + 1;
    if (std::string_view(text).substr(pos, end - pos) == kRcLine) {
      *found = true;
    } else {
      out.append(text, pos, next - pos);
    }
    pos = next;
  }
  return out;
}

}  // namespace

int run_shell_hook_files(bool install, const std::vector<std::string>& files) {
  std::vector<std::string> paths = files;
  if (paths.empty()) {
    for (const char* f : kDefaultRcFiles) {
      struct stat st {};
      if (::lstat(f, &st) == 0) paths.emplace_back(f);
    }
    if (paths.empty()) {
      std::fprintf(stderr,
                   "wheelhouse: neither /etc/bash.bashrc nor /etc/zsh/zshrc exists; name "
                   "the rc files to edit\n");
      return install ? kFailed : kOk;
    }
  }
  int rc_status = kOk;
  for (const auto& path : paths) {
    RcFile rc;
    if (auto err = read_rc(path, rc)) {
      std::fprintf(stderr, "wheelhouse: %s\n", err->c_str());
      rc_status = kFailed;
      continue;
    }
    bool found = false;
    std::string text = without_hook_line(rc.text, &found);
    const char* done = nullptr;
    if (install) {
      if (found) {
        std::printf("%s: has the hook line already\n", path.c_str());
        continue;
      }
      text = rc.text;
      if (!text.empty() && text.back() != '\n') text.push_back('\n');
      text.append(kRcLine).push_back('\n');
      done = "added the hook line";
    } else {
      if (!found) {
        std::printf("%s: has no hook line\n", path.c_str());
        continue;
      }
      done = "removed the hook line";
    }
    if (auto err = replace_rc(path, rc, text)) {
      std::fprintf(stderr, "wheelhouse: %s\n", err->c_str());
      rc_status = kFailed;
      continue;
    }
    std::printf("%s: %s\n", path.c_str(), done);
  }
  if (install && rc_status == kOk && ::access(kHookFile, R_OK) != 0) {
    std::printf("note: %s is missing; the line reads it once the package installs it\n", kHookFile);
  }
  return rc_status;
}

std::string default_mount(const std::vector<std::string>& mounts) {
  return mounts.size() == 1 ? mounts.front() : "/mnt/wheelhouse";
}

int run_pip_config(const std::string& mount_arg) {
  const std::string mount = mount_arg.empty() ? default_mount(wheelhouse_mounts()) : mount_arg;
  std::printf(
      "# wheelhouse-fs: `pip install flash-attn` in any venv takes the wheelhouse's wheel for\n"
      "# that venv (its Python, torch, CUDA and this machine's GPU). Install as /etc/pip.conf,\n"
      "# ~/.config/pip/pip.conf, or point PIP_CONFIG_FILE at it.\n"
      "[global]\n"
      "find-links = %s/current/all/\n"
      "# a wheel is preferred to a newer source release, which would compile for hours\n"
      "prefer-binary = true\n",
      std::filesystem::path(mount).lexically_normal().string().c_str());
  return kOk;
}

Expected<std::string, std::string> key_from_mount(const std::string& mount) {
  char value[4096];
  const ssize_t n = ::getxattr(mount.c_str(), "user.wheelhouse.key", value, sizeof value - 1);
  if (n < 0) {
    return unexpected(mount + ": " +
                      (errno == ENODATA || errno == ENOTSUP
                           ? std::string("not a wheelhouse mount (or one without current/)")
                           : std::string(std::strerror(errno))));
  }
  return std::string(value, static_cast<std::size_t>(n));
}

}  // namespace whfs::cli
