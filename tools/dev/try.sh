#!/usr/bin/env bash
# wheelhouse-fs on this machine with no network and no GPU: a generated wheelhouse (7 packages,
# 4 GPU archs, 2 torch versions, real wheels) served by the project's Hub emulator on
# 127.0.0.1, mounted as if this machine had an ARCH GPU and torch TORCH+cuCUDA. It stays up
# until `tools/dev.sh try stop`.
#   tools/dev.sh try [ARCH] [TORCH] [CUDA]   (builds the programs first; sm89 2.9 12.8)
#   tools/dev.sh try stop
# Where: $WHEELHOUSE_TRY (default /tmp/wheelhouse-try): data/, cache/, mnt/, the emulator's pid.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=${WHEELHOUSE_TRY:-/tmp/wheelhouse-try}
build=${WHFS_BUILD_DIR:-build}
bin=$build/fs/wheelhousefs
cli=$build/tools/wheelhouse

stop() {
  local rc=0
  if mountpoint -q "$root/mnt" 2>/dev/null; then
    "$cli" stop "$root/mnt" >/dev/null || fusermount3 -u -z "$root/mnt" || rc=1
  fi
  if [[ -s $root/hub.pid ]]; then
    kill "$(cat "$root/hub.pid")" 2>/dev/null || true
  fi
  rm -rf "$root"
  echo "try: stopped; $root removed"
  return "$rc"
}

if [[ ${1:-} == stop ]]; then
  stop
  exit
fi
arch=${1:-sm89}
torch=${2:-2.9}
cuda=${3:-12.8}
[[ -x $bin && -x $cli ]] || { echo "try: build first (tools/dev.sh try builds)" >&2; exit 2; }
if mountpoint -q "$root/mnt" 2>/dev/null; then
  echo "try: already running on $root/mnt (tools/dev.sh try stop first)" >&2
  exit 2
fi
rm -rf "$root"
mkdir -p "$root/mnt"
chmod 755 "$root"
python3 tests/fakehub/gen_wheelhouse.py "$root/data" --small >/dev/null
# The emulator, detached from this shell (it outlives the command; `try stop` ends it).
setsid python3 tests/fakehub/fakehub.py --repo DoctorPopi/python_wheelhouse="$root/data/tree" \
  --ports-file "$root/ports.json" >/dev/null 2>"$root/hub.log" </dev/null &
echo $! >"$root/hub.pid"
for _ in $(seq 100); do [[ -s $root/ports.json ]] && break; sleep 0.1; done
[[ -s $root/ports.json ]] || { echo "try: the emulator did not start:" >&2; cat "$root/hub.log" >&2; exit 1; }
hub=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hub"])' "$root/ports.json")
opts="endpoint=$hub,cache_dir=$root/cache,state_dir=$root/state,arch=$arch,torch=$torch,cuda=$cuda"
[[ $(id -u) == 0 ]] && opts+=",allow_other"
"$bin" -o "$opts" DoctorPopi/python_wheelhouse "$root/mnt"
m=$root/mnt
echo "try: mounted on $m (an emulated Hub on $hub, as if this machine had an $arch GPU"
echo "     and torch $torch+cu${cuda/./}). Next:"
row() { printf '  %-58s # %s\n' "$1" "$2"; }
row "ls $m" "the dataset at one commit"
row "ls $m/current/" "the wheels that run for this shell's Python"
row "cat $m/current/.target" "what was detected, and why"
row "python3 -m venv /tmp/try-venv && . /tmp/try-venv/bin/activate" "a venv"
row "pip install --no-deps $m/current/flash_attn/*.whl" "its wheel, prebuilt"
row "$cli status $m" "the mount's figures"
row "tools/dev.sh try stop" "unmount, stop the emulator"
