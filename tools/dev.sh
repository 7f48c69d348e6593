#!/usr/bin/env bash
# One entry point for developers and CI (run as root, or with sudo, on Debian 12):
#   tools/dev.sh build                 set up, build (build/)
#   tools/dev.sh test                  set up, build, run every test (ctest)
#   tools/dev.sh mount [REPO] [DIR]    set up, build, mount REPO (DoctorPopi/python_wheelhouse)
#                                      on DIR (/mnt/wheelhouse)
#   tools/dev.sh sanitize address|thread [CTEST ARGS]
#                                      build in build-<kind>/ with sanitizers and run the unit tests
#   tools/dev.sh demo [ARCH TORCH CUDA] set up, build, and show the product end to end on a
#                                      generated wheelhouse (no network, no GPU needed)
#   tools/dev.sh fuzz [SECONDS]        build the libFuzzer targets (clang) in build-fuzz/ and run
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

cmd=${1:-test}
shift || true
case $cmd in
  build)
    tools/setup.sh
    configure_and_build build
    ;;
  test)
    tools/setup.sh --tests
    configure_and_build build
    ctest --test-dir build --output-on-failure -j "$jobs" --output-junit ctest-junit.xml "$@"
    ;;
  sanitize)
    kind=${1:?usage: dev.sh sanitize address|thread [ctest args]}
    shift
    tools/setup.sh --tests
    # Only what `ctest -L unit` runs. TSan at -O1 -g1 (its own advice; a third less compile time
    # than -O2 -g); ASan+UBSan at -O0 -g1, which they support fully: its instrumented -O1 build
    # took twice as long to compile per file (downloads.cpp: 56 s against 29 s), more than the
    # slower tests cost.
    opt=-O1
    [[ $kind == address ]] && opt=-O0
    # Unity builds (CMakeLists.txt lists the files compiled alone): every header is parsed once
    # per batch instead of once per file.
    cmake -S "$src" -B "build-$kind" -G Ninja -DWHFS_SANITIZE="$kind" -DWHFS_BENCH=OFF \
      -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt -g1" \
      -DCMAKE_C_FLAGS_RELWITHDEBINFO="$opt -g1" >/dev/null
    cmake --build "build-$kind" -j "$jobs" --target unit_tests
    ctest --test-dir "build-$kind" --output-on-failure -j "$jobs" -L unit "$@"
    ;;
  fuzz)
    secs=${1:-60}
    tools/setup.sh --tests
    fuzzers=()
    for f in tests/fuzz/*_fuzz.cpp; do fuzzers+=("$(basename "$f" .cpp)"); done
    CC=clang CXX=clang++ cmake -S "$src" -B build-fuzz -G Ninja -DWHFS_FUZZ=ON -DWHFS_BENCH=OFF \
      -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
      -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" >/dev/null
    cmake --build build-fuzz -j "$jobs" --target "${fuzzers[@]}"
    # Each fuzzer on a core of its own ($jobs at a time); any failure fails the run.
    fuzz_one() {
      local name=$1 work=build-fuzz/corpus/$1
      mkdir -p "$work"
      if ! build-fuzz/tests/fuzz/"$name" -max_total_time="$secs" -timeout=10 \
             -print_final_stats=1 -artifact_prefix="build-fuzz/$name-" "$work" \
             "tests/fuzz/corpus/$name" >"build-fuzz/$name.log" 2>&1; then
        tail -n 40 "build-fuzz/$name.log"
        echo "fuzz: $name FAILED (crash input saved as build-fuzz/$name-*)" >&2
        return 1
      fi
      echo "fuzz: $name: $(grep -E '^stat::number_of_executed_units' "build-fuzz/$name.log")"
    }
    pids=() failed=0
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
    ((failed == 0)) || exit 1
    ;;
  demo)
    tools/setup.sh --demo
    configure_and_build build
    exec tools/demo.sh "$@"
    ;;
  mount)
    repo=${1:-DoctorPopi/python_wheelhouse}
    dir=${2:-/mnt/wheelhouse}
    tools/setup.sh
    configure_and_build build
    if [[ ! -x build/fs/wheelhousefs ]]; then
      echo "dev.sh: build/fs/wheelhousefs is missing after the build (see its output above)" >&2
      exit 2
    fi
    mkdir -p "$dir"
    exec build/fs/wheelhousefs "$repo" "$dir"
    ;;
  *)
    echo "usage: tools/dev.sh build|test|demo|mount [REPO] [DIR]|sanitize address|thread|fuzz [SECONDS]" >&2
    exit 2
    ;;
esac
