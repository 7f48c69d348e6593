#!/usr/bin/env bash
# The whole product in a minute, with no network and no GPU: a generated wheelhouse served by
# the test Hub emulator, mounted with a chosen target, current/ and its .target shown, one
# wheel pip-installed into a scratch folder. Cleans up after itself.
#   tools/dev.sh demo                     (builds first)
#   tools/dev/demo.sh [ARCH] [TORCH] [CUDA]   (defaults: sm89 2.9 12.8; this machine's Python)
set -euo pipefail
cd "$(dirname "$0")/../.."
arch=${1:-sm89}
torch=${2:-2.9}
cuda=${3:-12.8}
build=${WHFS_BUILD_DIR:-build}
bin=$build/fs/wheelhousefs
[[ -x $bin ]] || { echo "demo: build first (tools/dev.sh demo)" >&2; exit 2; }

work=$(mktemp -d /tmp/wheelhouse-demo-XXXXXX)
hub_pid=""
cleanup() {
  local rc=$?
  set +e
  mountpoint -q "$work/mnt" 2>/dev/null && fusermount3 -u "$work/mnt"
  [[ -n $hub_pid ]] && kill "$hub_pid" 2>/dev/null && wait "$hub_pid" 2>/dev/null
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. a test wheelhouse (7 packages x 4 GPU archs x 2 torch, real wheels)"
python3 tests/fakehub/gen_wheelhouse.py "$work/data" --small
step "2. the Hub emulator serving it as DoctorPopi/python_wheelhouse on 127.0.0.1"
python3 tests/fakehub/fakehub.py --repo DoctorPopi/python_wheelhouse="$work/data/tree" \
  --ports-file "$work/ports.json" >/dev/null 2>"$work/hub.log" &
hub_pid=$!
for _ in $(seq 100); do [[ -s $work/ports.json ]] && break; sleep 0.1; done
hub=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hub"])' "$work/ports.json")
echo "hub: $hub"
step "3. mount it, as if this machine had an $arch GPU and torch $torch+cu${cuda/./}"
mkdir -p "$work/mnt"
"$bin" -o "endpoint=$hub,cache_dir=$work/cache,arch=$arch,torch=$torch,cuda=$cuda" \
  DoctorPopi/python_wheelhouse "$work/mnt"
echo "\$ ls $work/mnt"; ls "$work/mnt"
step "4. current/: one installable wheel per package"
(cd "$work/mnt/current" && for p in */; do echo "$p $(ls "$p")"; done)
step "5. current/.target: what was detected and why each folder was chosen"
python3 - "$work/mnt/current/.target" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for axis, a in r["target"].items():
    if isinstance(a, dict) and "value" in a:
        value = a.get("value") or "-"
        why = a.get("source") or a.get("missing", "")
        print(f"  {axis:10} {value:8} {why}")
fa = r["packages"]["flash_attn"]
print(f"  flash_attn: {fa['folder']} - {fa['reason']}")
PY
step "6. pip install --no-deps --target <scratch> current/flash_attn/*.whl"
python3 -m pip install -q --root-user-action=ignore --no-index --no-deps --target "$work/site" "$work"/mnt/current/flash_attn/*.whl
python3 -c "import sys; sys.path.insert(0, '$work/site'); import flash_attn; print('imported flash_attn from', flash_attn.where())"
step "done: unmounting and cleaning up"
