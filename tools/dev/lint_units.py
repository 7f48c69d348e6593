#!/usr/bin/env python3
"""The translation units clang-tidy runs on, for lint.sh: lint_units.py BUILD SOURCE...

BUILD is a unity build's folder (CMAKE_UNITY_BUILD): most sources are compiled inside a
generated Unity/unity_N_cxx.cxx that #includes 16 of them, a few alone. clang-tidy's matchers
walk every header of a unit, so one unity unit costs about what one of its files alone costs:
linting the unity units gives the same findings (their sources are under the header filter)
for a fifth of the CPU. Prints, one per line, the units (paths as the compile database has
them) that hold at least one SOURCE; fails, naming them, when a SOURCE is in no unit, so that
lint never skips a file in silence.
"""
import json
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    build, wanted = sys.argv[1], {os.path.realpath(s) for s in sys.argv[2:]}
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        db = json.load(f)
    units, covered = [], set()
    for entry in db:
        unit = os.path.join(entry["directory"], entry["file"])
        if not unit.endswith((".cpp", ".cxx", ".cc")):
            continue  # (the vendored C of LMDB)
        if os.sep + "Unity" + os.sep in unit:
            with open(unit, encoding="utf-8") as f:
                held = {os.path.realpath(m.group(1)) for line in f if (m := INCLUDE.match(line))}
        else:
            held = {os.path.realpath(unit)}
        if held & wanted and unit not in units:
            units.append(unit)
            covered |= held
    missing = sorted(wanted - covered)
    if missing:
        print("lint_units: in no translation unit of " + build + ": " + " ".join(missing),
              file=sys.stderr)
        return 1
    print("\n".join(units))
    return 0


if __name__ == "__main__":
    sys.exit(main())
