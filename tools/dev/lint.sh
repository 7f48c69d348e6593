#!/usr/bin/env bash
# Lint, as CI runs it: the library edges against the includes (check_edges.py), clang-format
# over every C++ source (the repo's .clang-format; vendored code excluded), then clang-tidy with
# .clang-tidy over fs/, cache/ and tools/, every finding an error, from a unity build's compile
# database of its own in build-lint/ (WHFS_LINT_BUILD).
#   tools/dev/lint.sh            everything
#   tools/dev/lint.sh --changed  only the sources changed since origin/main (or HEAD~1)
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=${WHFS_JOBS:-$(nproc)}

# The sources are found on disk, not with git: a copy without .git (or a machine without git)
# must lint the same files, and a lint that finds none fails instead of passing.
list_sources() {  # folder... : the C++ sources under them, vendored and generated code excluded
  find "$@" -type f \( -name '*.cpp' -o -name '*.h' \) -not -path '*/third_party/*' \
       -not -path '*/node_modules/*' -not -path '*/generated/*' | sort
}
mapfile -t sources < <(list_sources fs cache tools tests)
if ((${#sources[@]} < 100)); then
  echo "lint: found only ${#sources[@]} C++ sources under fs/ cache/ tools/ tests/; is this the project root?" >&2
  exit 1
fi
step() {  # the seconds of a step, for .ci/run's table
  [[ -z ${WHFS_STAGES_FILE:-} ]] || printf '%-44s %6ds\n' "$1" "$2" >>"$WHFS_STAGES_FILE"
}
tools/dev/check_edges.py  # the CMake edges against the includes
echo "lint: clang-format on ${#sources[@]} files"
t0=$(date +%s)
clang-format --dry-run --Werror "${sources[@]}"
step "clang-format (${#sources[@]} files)" $(($(date +%s) - t0))

# A compile database of its own (configured, not built: only the generated sources are made),
# so that lint can run beside a build of build/ (.ci/run runs it beside the tests).
lint_build=${WHFS_LINT_BUILD:-build-lint}
# clang-tidy finds .clang-tidy beside its files, generated unity files included: the lint build
# must be inside the checkout.
case $(cd "$(dirname "$lint_build")" && pwd)/ in
  "$PWD"/*) ;;
  *) echo "lint: WHFS_LINT_BUILD must be a folder inside the checkout ($PWD)" >&2; exit 2 ;;
esac
# A unity build's compile database (configured, not built): clang-tidy on each unity file (16
# sources, all under the header filter) finds what it finds on them one by one, for about a
# fifth of the CPU (its matchers walk every header of a unit; tools/dev/lint_units.py).
cmake -S . -B "$lint_build" -G Ninja -DWHFS_BENCH=OFF -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build "$lint_build" --target csi_generated >/dev/null
if [[ ${1:-} == --changed ]]; then
  base=$(git merge-base HEAD origin/main 2>/dev/null || git rev-parse HEAD~1)
  mapfile -t changed < <(git diff --name-only --diff-filter=d "$base" -- 'fs/*.cpp' 'cache/*.cpp' \
                         'tools/*.cpp' | grep -v '/third_party/' || true)
else
  mapfile -t changed < <(list_sources fs cache tools | grep '\.cpp$')
fi
if ((${#changed[@]} == 0)); then
  echo "lint: no source for clang-tidy"
  exit 0
fi
mapfile -t tidy < <(tools/dev/lint_units.py "$lint_build" "${changed[@]}")
((${#tidy[@]})) || exit 1
# bugprone-suspicious-include would flag every unity file's own #includes of .cpp files: the
# same rule for our sources is this grep (no source includes a .c, .cc, .cpp or .cxx file).
if grep -nE '^\s*#\s*include\s*["<][^">]*\.(c|cc|cpp|cxx)[">]' "${sources[@]}"; then
  echo "lint: a source includes an implementation file (above)" >&2
  exit 1
fi
echo "lint: clang-tidy on ${#changed[@]} files, in ${#tidy[@]} translation units"
# run-clang-tidy takes regexes: one exact path each. The GCC-only warning flags of the build are
# unknown to clang.
regex=$(printf '%s$|' "${tidy[@]}")
t0=$(date +%s)
trap 'step "clang-tidy (${#changed[@]} files, ${#tidy[@]} units)" $(($(date +%s) - t0))' EXIT
run-clang-tidy -p "$lint_build" -j "$jobs" -quiet -extra-arg=-Wno-unknown-warning-option \
  -checks=-bugprone-suspicious-include "${regex%|}" >"$lint_build/lint-tidy.log" 2>&1 || {
  sed 's/\x1b\[[0-9;]*m//g' "$lint_build/lint-tidy.log" | grep -E "(warning|error):" | sort -u >&2
  echo "lint: clang-tidy found the above" >&2
  exit 1
}
echo "lint: clean"
