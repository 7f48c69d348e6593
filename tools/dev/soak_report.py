#!/usr/bin/env python3
"""soak_report.py DIR ROUNDS: the table of `tools/dev.sh soak-tests`: every test that failed in
at least one of the rounds' JUnit files (DIR/round-N.xml), how often, and its failure (the
assertion or error lines of its output, from the first round it failed in)."""
import os
import re
import sys
import xml.etree.ElementTree as ET

PATTERN = re.compile(r"(Error|error:|FAIL|Failure|assert|Timeout|Traceback|exited)", re.I)


def failure_lines(text, limit=6):
    lines = [line.rstrip() for line in (text or "").splitlines() if PATTERN.search(line)]
    return lines[-limit:] or [line.rstrip() for line in (text or "").splitlines()[-limit:]]


def main(folder, rounds):
    runs, failed, first = {}, {}, {}
    for i in range(1, rounds + 1):
        path = os.path.join(folder, f"round-{i}.xml")
        if not os.path.exists(path):
            print(f"soak: round {i}: no {path} (the round did not finish)")
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            name = case.get("name")
            runs[name] = runs.get(name, 0) + 1
            bad = case.find("failure") is not None or case.get("status") == "fail"
            if case.get("status") == "notrun" and case.find("skipped") is not None:
                bad = True  # a mounted test that skipped where it should run
            if bad:
                failed[name] = failed.get(name, 0) + 1
                if name not in first:
                    out = case.find("system-out")
                    fail = case.find("failure")
                    text = (out.text if out is not None else "") or ""
                    if fail is not None:
                        text += "\n" + (fail.get("message") or "") + "\n" + (fail.text or "")
                    first[name] = (i, failure_lines(text))
    print()
    print(f"soak: {rounds} round(s), {len(runs)} tests")
    if not failed:
        print("soak: no test failed in any round")
        return 0
    width = max(len(n) for n in failed)
    print(f"{'test':<{width}}  failed  first failure")
    for name in sorted(failed, key=lambda n: (-failed[n], n)):
        rnd, lines = first[name]
        print(f"{name:<{width}}  {failed[name]:>2}/{runs[name]:<3}  round {rnd}:")
        for line in lines:
            print(f"{'':<{width}}            {line[:160]}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
