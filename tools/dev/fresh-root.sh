#!/usr/bin/env bash
# .ci/run on a clean clone of this checkout's HEAD in a fresh Debian 12 root (what CI runs on),
# as root: shows every install step a fresh machine needs, and CI's time there.
#   tools/dev/fresh-root.sh [WORKDIR]      (default /var/tmp/whfs-fresh-root; output in
#                                           WORKDIR/ci.log, the stage table at its end)
# WORKDIR/base is debootstrapped once (minbase bookworm from the mirror apt uses here) and
# copied for each run. The root is a mount point of its own (unshare's --propagation and
# podman need one), with /dev, /proc, /sys bound and a tmpfs on /run; the clone is under /ci
# (not /root, 0700: the tests' other users must reach the build). The machine's CA bundle goes
# in as NODE_EXTRA_CA_CERTS (npm's registry may be reached through a proxy).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-/var/tmp/whfs-fresh-root}
base=$work/base root=$work/root
[[ $(id -u) == 0 ]] || { echo "fresh-root: run as root" >&2; exit 2; }

release() {  # every process in the root, then its mounts, deepest first
  local p
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/root" 2>/dev/null) == "$root"* ]] && kill -9 "${p#/proc/}" 2>/dev/null
  done
  awk -v r="$root" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
}
trap release EXIT

mkdir -p "$work"
if [[ ! -x $base/bin/bash ]]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
  # (grep exits 2 when one of the files is missing, as /etc/apt/sources.list is on a machine
  # with deb822 sources only: not a failure here.)
  mirror=$({ grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list.d/*.sources \
               /etc/apt/sources.list 2>/dev/null || true; } | awk '{print $2}' | head -n 1)
  rm -rf "$base"
  debootstrap --variant=minbase bookworm "$base" "${mirror:-http://deb.debian.org/debian}"
fi
release
rm -rf "$root"
cp -a "$base" "$root"
mount --bind "$root" "$root"
mount --make-private "$root"
mkdir -p "$root/ci"
git clone -q "$src" "$root/ci/wheelhouse-fs"
cp /etc/ssl/certs/ca-certificates.crt "$root/ci-ca.crt"
if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
  cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/"
  rm -f "$root/etc/apt/sources.list"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount --rbind /dev "$root/dev"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount -t tmpfs tmpfs "$root/run"
t0=$(date +%s)
rc=0
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  NODE_EXTRA_CA_CERTS=/ci-ca.crt TERM=dumb bash -c 'cd /ci/wheelhouse-fs && .ci/run' \
  >"$work/ci.log" 2>&1 || rc=$?
echo "fresh-root: .ci/run exit $rc in $(($(date +%s) - t0)) s; the log: $work/ci.log"
exit "$rc"
