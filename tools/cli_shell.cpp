// wheelhouse shell-hook, pip-config, and detect --key through the mount: how an interactive
// shell, a script and a plain `pip install` reach the right wheels (issue 22).

#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
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
