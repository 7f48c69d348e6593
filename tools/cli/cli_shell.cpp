// wheelhouse shell-hook: how an interactive shell's own globs of current/ follow the Python it
// runs; shell-hook --install and --uninstall: the admin's command that adds the hook to the
// shells' system-wide rc files.

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
#include "tools/cli/cli_commands.h"
#include "tools/cli/file_replace.h"

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
    EditedFile rc;
    if (auto err = read_for_edit(path, rc)) {
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
    if (auto err = replace_edited(path, rc, text)) {
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

}  // namespace whfs::cli
