#!/usr/bin/env bash
# Builds the wheelhouse-csi image (tools/kubernetes/Containerfile) from the project's .deb on a
# Debian 12 base image, tagged wheelhouse-fs:<the .deb's version>, the image daemonset.yaml
# names; prints the tag.
#
#   tools/kubernetes/build-image.sh [--network MODE] [--no-pull] [--tag TAG] BASE_IMAGE DEB
#
#   BASE_IMAGE  e.g. docker.io/library/debian:12-slim: dpkg installs the .deb, and apt-get
#               fetches its dependencies when the base lacks them (a base that has them all
#               builds with --network none)
#   DEB         the .deb: cpack -G DEB in the build folder makes it
#   --network   the build's network (none: nothing is fetched)
#   --no-pull   never pull the base (podman: --pull=never; docker pulls nothing it has)
#   --tag       another tag (the tests' own)
#
# The engine is podman, else docker ($ENGINE names another).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: build-image.sh [--network MODE] [--no-pull] [--tag TAG] BASE_IMAGE DEB"
network=""
tag=""
no_pull=0
while (($#)); do
  case $1 in
    --network) [[ $# -ge 2 ]] || { echo "$usage" >&2; exit 2; }; network=$2; shift 2 ;;
    --tag) [[ $# -ge 2 ]] || { echo "$usage" >&2; exit 2; }; tag=$2; shift 2 ;;
    --no-pull) no_pull=1; shift ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "build-image.sh: unknown option $1" >&2; echo "$usage" >&2; exit 2 ;;
    *) break ;;
  esac
done
if (($# != 2)); then
  echo "$usage" >&2
  exit 2
fi
base=$1
deb=$2
if [[ ! -f $deb ]]; then
  echo "build-image.sh: $deb: no such file" >&2
  exit 2
fi
if ! package=$(dpkg-deb -f "$deb" Package 2>/dev/null) || [[ $package != wheelhouse-fs ]]; then
  echo "build-image.sh: $deb is not the wheelhouse-fs .deb" >&2
  exit 2
fi
version=$(dpkg-deb -f "$deb" Version)
tag=${tag:-wheelhouse-fs:${version%-*}}  # the upstream version, without the Debian revision
engine=${ENGINE:-$(command -v podman || command -v docker || true)}
if [[ -z $engine ]]; then
  echo "build-image.sh: neither podman nor docker is installed (or set ENGINE)" >&2
  exit 2
fi
ctx=$(mktemp -d /tmp/whfs-image-XXXXXX)
trap 'rm -rf "$ctx"' EXIT
cp "$here/Containerfile" "$ctx/Containerfile"
cp "$deb" "$ctx/wheelhouse-fs.deb"
args=(build --build-arg "BASE=$base" -t "$tag" -f "$ctx/Containerfile")
[[ -z $network ]] || args+=(--network "$network")
if ((no_pull)) && [[ $(basename "$engine") == podman ]]; then args+=(--pull=never); fi
"$engine" "${args[@]}" "$ctx" >&2
echo "$tag"
