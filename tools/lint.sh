#!/usr/bin/env bash
# Lint, as CI runs it: clang-format over every C++ source (the repo's .clang-format; vendored
# code excluded), then clang-tidy with .clang-tidy over fs/, cache/ and tools/, every finding an
# error. Needs a configured build/ (compile_commands.json): tools/dev.sh build makes one.
#   tools/lint.sh            everything
#   tools/lint.sh --changed  only the sources changed since origin/main (or HEAD~1)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${WHFS_JOBS:-$(nproc)}

mapfile -t sources < <(git ls-files '*.cpp' '*.h' | grep -v '/third_party/')
echo "lint: clang-format on ${#sources[@]} files"
clang-format --dry-run --Werror "${sources[@]}"

[[ -f build/compile_commands.json ]] || cmake -S . -B build -G Ninja >/dev/null
if [[ ${1:-} == --changed ]]; then
  base=$(git merge-base HEAD origin/main 2>/dev/null || git rev-parse HEAD~1)
  mapfile -t tidy < <(git diff --name-only "$base" -- 'fs/*.cpp' 'cache/*.cpp' 'tools/*.cpp' |
                      grep -v '/third_party/' || true)
else
  mapfile -t tidy < <(git ls-files 'fs/*.cpp' 'cache/*.cpp' 'tools/*.cpp' | grep -v '/third_party/')
fi
if ((${#tidy[@]} == 0)); then
  echo "lint: no source for clang-tidy"
  exit 0
fi
echo "lint: clang-tidy on ${#tidy[@]} files"
# run-clang-tidy takes regexes: one exact path each. The GCC-only warning flags of the build are
# unknown to clang.
regex=$(printf '%s$|' "${tidy[@]}")
run-clang-tidy -p build -j "$jobs" -quiet -extra-arg=-Wno-unknown-warning-option "${regex%|}" \
  >build/lint-tidy.log 2>&1 || {
  sed 's/\x1b\[[0-9;]*m//g' build/lint-tidy.log | grep -E "(warning|error):" | sort -u >&2
  echo "lint: clang-tidy found the above" >&2
  exit 1
}
echo "lint: clean"
