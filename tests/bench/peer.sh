#!/usr/bin/env bash
# wheelhouse-fs as a peer of ../shared/bench (run_peers.sh): the Hub emulator serves the Hub API
# for $DATA_DIR and sends every download (a 302, as the Hub sends to its CDN) to the harness's
# nginx at $SERVER_URL; wheelhousefs mounts it with its cache in $CACHE_DIR.
#   PEERS="curl aria2c rclone-full $PWD/tests/bench/peer.sh" ../shared/bench/run_peers.sh
# The binary: $WHFS_BIN, else wheelhousefs on PATH, else build/fs/wheelhousefs of this checkout;
# the column's title: $WHFS_LABEL (two builds side by side: two wrappers setting both).
source "${BENCH_DIR:-$(cd "$(dirname "$0")/../../../shared/bench" 2>/dev/null && pwd)}/peers/_lib.sh"
repo_root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${WHFS_BIN:-$(command -v wheelhousefs || echo "$repo_root/build/fs/wheelhousefs")}
opts=${WHFS_OPTS:-}

start_hub() {
  local ports=$STATE_DIR/fakehub.json
  rm -f "$ports"
  setsid python3 "$repo_root/tests/fakehub/fakehub.py" --repo "bench/wheels=$DATA_DIR" --lfs all \
    --redirect-base "$SERVER_URL" --ports-file "$ports" >/dev/null 2>"$STATE_DIR/fakehub.log" </dev/null &
  echo $! >"$STATE_DIR/fakehub.pid"
  for _ in $(seq 600); do [[ -s $ports ]] && break; sleep 0.05; done
  [[ -s $ports ]] || { echo "peer.sh: the Hub emulator did not start" >&2; cat "$STATE_DIR/fakehub.log" >&2; return 1; }
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["hub"])' "$ports"
}

stop_hub() {
  local pid
  pid=$(cat "$STATE_DIR/fakehub.pid" 2>/dev/null || true)
  [[ -n $pid ]] && kill "$pid" 2>/dev/null || true
  rm -f "$STATE_DIR/fakehub.pid"
}

case "${1:-}" in
info)    echo "label=${WHFS_LABEL:-wheelhouse-fs}"; echo "kind=mount"; echo "persistent_cache=yes"; echo "cold=fresh"
         echo 'cmd=wheelhousefs -f -o endpoint=$HUB,cache_dir=$CACHE_DIR,nocurrent bench/wheels $MOUNTPOINT' ;;
version) echo "$("$bin" --version 2>/dev/null) ($(git -C "$repo_root" rev-parse --short HEAD 2>/dev/null || echo '?'))" ;;
check)   [[ -x $bin ]] || { echo "wheelhousefs not built: $bin"; exit 1; }
         command -v python3 >/dev/null || { echo "python3 missing"; exit 1; } ;;
mount)   need_env SERVER_URL MOUNTPOINT STATE_DIR CACHE_DIR DATA_DIR; mkdir -p "$CACHE_DIR" "$STATE_DIR"
         hub=$(start_hub)
         start_daemon "$bin" -f -o "endpoint=$hub,cache_dir=$CACHE_DIR,nocurrent,log_level=warn${opts:+,$opts}" \
             bench/wheels "$MOUNTPOINT"
         wait_mounted ;;
unmount) unmount_daemon; stop_hub ;;
*)       echo "usage: $0 info|version|check|mount|unmount" >&2; exit 2 ;;
esac
