#!/usr/bin/env bash
# One entry point for developers and CI (run as root, or with sudo, on Debian 12):
#   tools/dev.sh build                 set up, build the programs and man pages (build/), no tests
#   tools/dev.sh package               build, and make the .deb (build/wheelhouse-fs_*.deb)
#   tools/dev.sh try [ARCH TORCH CUDA] build the programs, then mount a generated wheelhouse
#                                      from the Hub emulator (no network, no GPU needed) on
#                                      /tmp/wheelhouse-try/mnt and leave it up;
#   tools/dev.sh try stop              unmount it and stop the emulator
#   tools/dev.sh test [CTEST ARGS]     set up, build, run every test (ctest): label by label,
#                                      each with its seconds (a table at the end), unless
#                                      CTEST ARGS select tests
#   tools/dev.sh soak-tests N          the mounted and container tests N times in a row under
#                                      load (stress-ng, or WHFS_SOAK_LOAD); a table of every
#                                      test that failed at least once, with its failure
#   tools/dev.sh clean-images          remove the podman images the container tests made
#   tools/dev.sh mount [REPO] [DIR]    set up, build, mount REPO (DoctorPopi/python_wheelhouse)
#                                      on DIR (/mnt/wheelhouse)
#   tools/dev.sh sanitize address|thread [CTEST ARGS]
#                                      build with sanitizers and run the unit tests: ASan+UBSan
#                                      in build-asan/ (clang, shared with fuzz), TSan in
#                                      build-thread/ (the tests tests/CMakeLists.txt names)
#   tools/dev.sh fuzz [SECONDS]        build the libFuzzer targets (clang) in build-asan/ and run
#                                      each for SECONDS (default 60) from tests/fuzz/corpus/
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
jobs=${WHFS_JOBS:-$(nproc)}

configure_and_build() {  # build_dir [cmake args...]
  local dir=$1
  shift
  cmake -S "$src" -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

# The programs and their man pages, without the tests and benchmarks.
build_programs() {
  cmake -S "$src" -B build -G Ninja >/dev/null
  cmake --build build -j "$jobs" --target wheelhousefs wheelhouse wheelhouse-hint wheelhouse-csi man
}

# Seconds per step, printed as a table at the end (and appended to $WHFS_STAGES_FILE for
# .ci/run's table when it is set).
steps=()
timed() {  # timed NAME COMMAND...: runs it, records its seconds; returns its status
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s)
  "$@" || rc=$?
  local line
  line=$(printf '%-44s %6ds%s' "$name" $(($(date +%s) - t0)) "$( ((rc == 0)) || echo "  FAILED")")
  steps+=("$line")
  [[ -z ${WHFS_STAGES_FILE:-} ]] || echo "$line" >>"$WHFS_STAGES_FILE"
  return "$rc"
}
print_steps() {
  ((${#steps[@]})) || return 0
  echo
  printf '%s\n' "${steps[@]}"
}

# One clang build with ASan+UBSan at -O1 -g1 (build-asan/) for the sanitized unit tests and
# the libFuzzer targets alike: the libraries are compiled once for both (the fuzzers' coverage
# instrumentation costs the unit tests nothing: ASan's runtime answers its hooks).
configure_asan() {
  CC=clang CXX=clang++ cmake -S "$src" -B build-asan -G Ninja -DWHFS_SANITIZE=address \
    -DWHFS_FUZZ=ON -DWHFS_BENCH=OFF -DCMAKE_UNITY_BUILD=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" >/dev/null
}

# The labels of the tests, in the order they run (each label's tests in parallel): the unit
# tests' CPU-bound bursts never share the machine with the timing-sensitive mounted tests.
test_labels=(unit fakehub ops mount container)

cmd=${1:-test}
shift || true
case $cmd in
  build)
    tools/dev/setup.sh
    build_programs
    ;;
  package)
    tools/dev/setup.sh --package
    build_programs
    (cd build && cpack -G DEB >/dev/null)
    ls build/wheelhouse-fs_*.deb
    ;;
  try)
    if [[ ${1:-} != stop ]]; then
      tools/dev/setup.sh --try
      build_programs
    fi
    exec tools/dev/try.sh "$@"
    ;;
  test)
    trap print_steps EXIT
    timed "setup (tools/dev/setup.sh --tests)" tools/dev/setup.sh --tests
    # WHFS_UNITY=ON (.ci/run): a unity build, batches of 16 files, as the sanitizer builds
    # (a clean build in 242 s instead of 415 s here; a developer's incremental build stays
    # file by file).
    timed "build" configure_and_build build -DWHFS_DEBUG_INFO="${WHFS_DEBUG_INFO:-ON}" \
      -DCMAKE_UNITY_BUILD="${WHFS_UNITY:-OFF}"
    rm -f build/ctest-junit*.xml
    if (($#)); then
      timed "ctest $*" ctest --test-dir build --output-on-failure -j "$jobs" \
        --output-junit ctest-junit.xml "$@"
      exit
    fi
    failed=0
    for label in "${test_labels[@]}"; do
      timed "ctest -L $label" ctest --test-dir build --output-on-failure -j "$jobs" -L "^$label\$" \
        --output-junit "ctest-junit-$label.xml" || failed=1
    done
    # A test with none of these labels would run nowhere: fail instead.
    unlabeled=$(ctest --test-dir build -N -LE "^($(IFS='|'; echo "${test_labels[*]}"))\$" |
                sed -n 's/^ *Test *#[0-9]*: //p')
    if [[ -n $unlabeled ]]; then
      echo "dev.sh: tests with no label of (${test_labels[*]}): $unlabeled" >&2
      failed=1
    fi
    exit "$failed"
    ;;
  soak-tests)
    rounds=${1:?usage: dev.sh soak-tests N}
    tools/dev/setup.sh --tests
    command -v stress-ng >/dev/null || apt-get install -y -qq --no-install-recommends stress-ng >/dev/null
    configure_and_build build
    soak=build/soak
    rm -rf "$soak"
    mkdir -p "$soak"
    load=${WHFS_SOAK_LOAD:-stress-ng --cpu "$jobs" --cpu-load 90 --quiet}
    for ((i = 1; i <= rounds; i++)); do
      echo "soak: round $i of $rounds under load: $load"
      # shellcheck disable=SC2086
      setsid $load &
      loader=$!
      ctest --test-dir build --output-on-failure -j "$jobs" -L '^(mount|container)$' \
        --output-junit "soak/round-$i.xml" >"$soak/round-$i.log" 2>&1 || true
      kill -- -"$loader" 2>/dev/null || kill "$loader" 2>/dev/null || true
      wait "$loader" 2>/dev/null || true
      grep -E '^[0-9]+% tests passed' "$soak/round-$i.log" || tail -n 3 "$soak/round-$i.log"
    done
    exec python3 tools/dev/soak_report.py "$soak" "$rounds"
    ;;
  clean-images)
    tools/dev/setup.sh --tests >/dev/null
    export CONTAINERS_CONF=${CONTAINERS_CONF:-$src/build/podman/containers.conf}
    [[ -f $CONTAINERS_CONF ]] || unset CONTAINERS_CONF
    mapfile -t images < <(podman images --format '{{.Repository}}:{{.Tag}}' 2>/dev/null |
                          grep '^localhost/whfs-' || true)
    if ((${#images[@]})); then
      podman rmi --force "${images[@]}" >/dev/null
      podman image prune --force >/dev/null || true
    fi
    echo "clean-images: removed ${#images[@]} image(s)"
    ;;
  sanitize)
    kind=${1:?usage: dev.sh sanitize address|thread [ctest args]}
    shift
    tools/dev/setup.sh --tests
    trap print_steps EXIT
    if [[ $kind == address ]]; then
      # ASan+UBSan: the one clang build the fuzzers use too (build-asan/).
      configure_asan
      timed "build (ASan+UBSan, clang)" cmake --build build-asan -j "$jobs" --target unit_tests
      timed "ctest -L unit (ASan+UBSan)" ctest --test-dir build-asan --output-on-failure \
        -j "$jobs" -L unit "$@"
      exit
    fi
    # TSan: at -O1 -g1 (its own advice; a third less compile time than -O2 -g), the unit tests
    # of the modules with threads and locks (tsan_tests); a unity build (CMakeLists.txt lists
    # the files compiled alone): every header is parsed once per batch instead of once per file.
    cmake -S "$src" -B "build-$kind" -G Ninja -DWHFS_SANITIZE="$kind" -DWHFS_BENCH=OFF \
      -DCMAKE_UNITY_BUILD=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" >/dev/null
    timed "build ($kind)" cmake --build "build-$kind" -j "$jobs" --target tsan_tests
    timed "ctest (TSan)" ctest --test-dir "build-$kind" --output-on-failure -j "$jobs" -L unit \
      -R "$(cat "build-$kind/tsan_tests.txt")" "$@"
    ;;
  fuzz)
    secs=${1:-60}
    tools/dev/setup.sh --tests
    fuzzers=()
    for f in tests/fuzz/*_fuzz.cpp; do fuzzers+=("$(basename "$f" .cpp)"); done
    configure_asan
    trap print_steps EXIT
    timed "build (fuzzers)" cmake --build build-asan -j "$jobs" --target "${fuzzers[@]}"
    # Each fuzzer on a core of its own ($jobs at a time); any failure fails the run.
    fuzz_one() {
      local name=$1 work=build-asan/corpus/$1
      mkdir -p "$work"
      if ! build-asan/tests/fuzz/"$name" -max_total_time="$secs" -timeout=10 \
             -print_final_stats=1 -artifact_prefix="build-asan/$name-" "$work" \
             "tests/fuzz/corpus/$name" >"build-asan/$name.log" 2>&1; then
        tail -n 40 "build-asan/$name.log"
        echo "fuzz: $name FAILED (crash input saved as build-asan/$name-*)" >&2
        return 1
      fi
      echo "fuzz: $name: $(grep -E '^stat::number_of_executed_units' "build-asan/$name.log")"
    }
    pids=() failed=0 fuzz_t0=$(date +%s)
    for name in "${fuzzers[@]}"; do
      echo "fuzz: $name for ${secs}s"
      fuzz_one "$name" &
      pids+=($!)
      if ((${#pids[@]} >= jobs)); then
        wait "${pids[0]}" || failed=1
        pids=("${pids[@]:1}")
      fi
    done
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
    steps+=("$(printf '%-44s %6ds' "run ${#fuzzers[@]} fuzzers, ${secs}s each" $(($(date +%s) - fuzz_t0)))")
    [[ -z ${WHFS_STAGES_FILE:-} ]] || echo "${steps[-1]}" >>"$WHFS_STAGES_FILE"
    ((failed == 0)) || exit 1
    ;;
  mount)
    repo=${1:-DoctorPopi/python_wheelhouse}
    dir=${2:-/mnt/wheelhouse}
    tools/dev/setup.sh
    build_programs
    if [[ ! -x build/fs/wheelhousefs ]]; then
      echo "dev.sh: build/fs/wheelhousefs is missing after the build (see its output above)" >&2
      exit 2
    fi
    mkdir -p "$dir"
    exec build/fs/wheelhousefs "$repo" "$dir"
    ;;
  *)
    echo "usage: tools/dev.sh build|package|test|try [stop]|mount [REPO] [DIR]|sanitize address|thread|fuzz [SECONDS]|soak-tests N|clean-images" >&2
    exit 2
    ;;
esac
