# wheelhouse-fs: the prompt hook of `wheelhouse shell-hook` for every interactive bash and zsh,
# so that after `source venv/bin/activate` (conda activate, pyenv shell, export PATH=...) the
# shell's own globs of /mnt/wheelhouse/current/... follow the Python it now runs.
# Read by login shells from /etc/profile.d, and by the other interactive bash and zsh from the
# line `wheelhouse shell-hook --install` adds to /etc/bash.bashrc and /etc/zsh/zshrc (an admin's
# command: the package edits no other package's file). To opt out: WHEELHOUSE_NO_HOOK=1 in
# the environment (e.g. ~/.pam_environment, or exported before this runs).
case $- in
  *i*) ;;
  *) return 0 2>/dev/null || exit 0 ;;
esac
if [ -z "${WHEELHOUSE_NO_HOOK-}" ] && [ -z "${__wheelhouse_hooked-}" ] &&
   command -v wheelhouse >/dev/null 2>&1; then
  __wheelhouse_hooked=1
  if [ -n "${BASH_VERSION-}" ]; then
    eval "$(wheelhouse shell-hook bash)"
  elif [ -n "${ZSH_VERSION-}" ]; then
    eval "$(wheelhouse shell-hook zsh)"
  fi
fi
