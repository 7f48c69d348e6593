#!/usr/bin/env bash
# Installs everything wheelhouse-fs needs on Debian 12 (idempotent: installs only what is
# missing). `setup.sh` = build and run; `setup.sh --tests` adds what the tests need (node/npm
# and the pinned @huggingface/hub of the fidelity test, debugging and fuzzing tools);
# `setup.sh --try` what tools/dev/try.sh needs; `setup.sh --package` what cpack needs.
set -euo pipefail
cd "$(dirname "$0")/../.."

want_tests=0 want_try=0 want_package=0
[[ ${1:-} == --tests ]] && want_tests=1
# --try: what tools/dev/try.sh needs (a venv with pip), nothing of the tests' (no npm: it runs
# offline); --package: dpkg-dev for cpack's dependency lists.
[[ ${1:-} == --try ]] && want_try=1
[[ ${1:-} == --package ]] && want_package=1

pkgs=(
  # build
  build-essential cmake ninja-build pkg-config ca-certificates
  libfuse3-dev libcurl4-openssl-dev libspdlog-dev nlohmann-json3-dev libssl-dev
  libxxhash-dev libcli11-dev libsystemd-dev libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev prometheus-cpp-dev help2man
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  # run
  fuse3 lmdb-utils python3
)
if ((want_tests)); then
  pkgs+=(python3-pip python3-venv clang clang-format clang-tidy libclang-rt-14-dev systemd curl
        procps util-linux unzip psmisc
        dpkg-dev lintian nginx-light file zsh python3-pexpect prometheus
        podman runc debootstrap python3-grpcio python3-protobuf python3-yaml)
fi

if ((want_try)); then
  pkgs+=(python3-pip python3-venv)
fi
if ((want_package)); then
  pkgs+=(dpkg-dev file)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The fidelity test needs node >= 18 and npm; keep a node that is already there (e.g. from
# NodeSource, which bundles npm), else take Debian's.
if ((want_tests)) && ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ((want_tests)); then
  fid=tests/fakehub/fidelity
  if [[ ! -d $fid/node_modules/@huggingface/hub ]] ||
     [[ $fid/package-lock.json -nt $fid/node_modules/.package-lock.json ]]; then
    echo "setup: npm ci in $fid"
    (cd "$fid" && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
echo "setup: ok"
