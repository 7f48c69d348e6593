#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (never in CI): confirm that wheelhouse-fs detects the real
# compute capability, with `wheelhouse detect` and with a mount against the Hub emulator whose
# current/.target must name the GPU's arch. The binaries and the libraries they link come from a
# bundle (default build-gpu/: bin/ and lib/) so that the GPU host needs no build tools:
#   strip -o build-gpu/bin/wheelhousefs build/fs/wheelhousefs  (and wheelhouse; lib/ from ldd)
# Writes its findings to $OUT (default /tmp/whfs-gpu-check) and prints a summary.
set -u
cd "$(dirname "$0")/../.."
bundle=${WHFS_GPU_BUNDLE:-build-gpu}
out=${OUT:-/tmp/whfs-gpu-check}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
py=$(command -v python3 || true)
# The Python whose torch current/ should match: a torch venv if there is one.
torch_py=${TORCH_PYTHON:-}
for cand in /opt/torch/.venv/bin/python /opt/conda/bin/python "$py"; do
  [[ -z $torch_py && -x $cand ]] && "$cand" -c 'import importlib.util,sys; sys.exit(importlib.util.find_spec("torch") is None)' 2>/dev/null && torch_py=$cand
done
torch_py=${torch_py:-$py}
{
  echo "== nvidia-smi"; nvidia-smi --query-gpu=index,name,compute_cap,driver_version --format=csv 2>&1
  echo "== python: $py, torch python: $torch_py"
} | tee "$out/host.txt"

echo "== wheelhouse detect" | tee -a "$out/host.txt"
"$bundle/bin/wheelhouse" detect -o "python=$torch_py" | tee "$out/detect.txt"
"$bundle/bin/wheelhouse" detect --json -o "python=$torch_py" >"$out/detect.json"
arch=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["arch"]["value"])' "$out/detect.json")
want=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
echo "detected arch: $arch; nvidia-smi: sm$want" | tee -a "$out/host.txt"

echo "== mount against the emulator" | tee -a "$out/host.txt"
work=$(mktemp -d /tmp/whfs-gpu-XXXXXX)
"$py" tests/fakehub/gen_wheelhouse.py "$work/data" --small --quiet
# A folder for this GPU and this torch, so that current/ has something to choose.
tv=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print(f"torch{t[\"torch\"][\"value\"]}-cu{t[\"cuda\"][\"value\"].replace(\".\",\"\")}")' "$out/detect.json" 2>/dev/null || echo torch2.9-cu128)
mkdir -p "$work/data/tree/flash_attn/$arch/$tv"
cp "$work"/data/tree/flash_attn/sm89/torch2.9-cu128/*.whl "$work/data/tree/flash_attn/$arch/$tv/"
"$py" tests/fakehub/fakehub.py --repo "DoctorPopi/python_wheelhouse=$work/data/tree" \
  --ports-file "$work/ports.json" >/dev/null 2>"$out/fakehub.log" &
hub_pid=$!
for _ in $(seq 100); do [[ -s $work/ports.json ]] && break; sleep 0.1; done
hub=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hub"])' "$work/ports.json")
mkdir -p "$work/mnt"
if "$bundle/bin/wheelhousefs" -o "endpoint=$hub,cache_dir=$work/cache,python=$torch_py" \
     DoctorPopi/python_wheelhouse "$work/mnt" 2>"$out/mount.log"; then
  cp "$work/mnt/current/.target" "$out/current.target.json"
  ls -R "$work/mnt/current" | tee "$out/current.txt"
  python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["target"]; print("current/.target arch:", t["arch"].get("value"), "from", t["arch"].get("source") or t["arch"].get("missing"))' "$out/current.target.json" | tee -a "$out/host.txt"
  fusermount3 -u "$work/mnt" 2>/dev/null || umount "$work/mnt"
else
  echo "mount failed: $(cat "$out/mount.log")" | tee -a "$out/host.txt"
fi
kill "$hub_pid" 2>/dev/null
rm -rf "$work"
[[ $arch == "sm$want" ]] && echo "RESULT: detection matches the hardware (sm$want)" || echo "RESULT: MISMATCH ($arch vs sm$want)"
