#!/usr/bin/env bash
# Benchmark (not a test) of the Hub transport's ranged reads: one 256 MiB file from the Hub
# emulator in WAN mode (default 50 MB/s per connection, like a CDN stream), fetched by
#   curl (one stream) | aria2c -x16 -s16 | HubClient with N parallel ranged GETs.
# Usage: tests/bench/hub_fetch.sh [RATE] [LATENCY_MS]     (RATE e.g. 50m; 0 = unthrottled)
set -euo pipefail
cd "$(dirname "$0")/../.."
rate=${1:-50m}
latency=${2:-0}
bin=${WHFS_BUILD_DIR:-build}/tests/bench/hub_fetch_bench
work=$(mktemp -d /tmp/whfs-hubbench-XXXXXX)
trap 'kill "$hub_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/tree/big"
file=big/big-1.0+cu128-cp312-cp312-linux_x86_64.whl
head -c $((256 << 20)) /dev/urandom >"$work/tree/$file"
printf '*.whl filter=lfs diff=lfs merge=lfs -text\n' >"$work/tree/.gitattributes"
python3 tests/fakehub/fakehub.py --repo bench/wheels="$work/tree" --rate "$rate" \
  --latency-ms "$latency" >"$work/ports.json" &
hub_pid=$!
while [[ ! -s $work/ports.json ]]; do sleep 0.1; done
hub=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hub"])' "$work/ports.json")
url="$hub/datasets/bench/wheels/resolve/main/${file//+/%2B}"
size=$((256 << 20))
echo "256 MiB file, per-connection rate $rate, first-byte latency ${latency} ms"
t0=$(date +%s.%N); curl -sfL -o /dev/null "$url"; t1=$(date +%s.%N)
echo "curl single stream: $(python3 -c "print(f'{256/($t1-$t0):.1f} MiB/s ({$t1-$t0:.2f} s)')")"
rm -f "$work/aria.out"
t0=$(date +%s.%N)
aria2c -q -x16 -s16 -k1M --file-allocation=none -d "$work" -o aria.out "$url"
t1=$(date +%s.%N)
echo "aria2c -x16 -s16: $(python3 -c "print(f'{256/($t1-$t0):.1f} MiB/s ({$t1-$t0:.2f} s)')")"
for n in 1 4 8 16 32; do
  echo "HubClient $n parallel ranges (8 MiB): $("$bin" "$hub" bench/wheels "$file" "$size" "$n" 8)"
done
