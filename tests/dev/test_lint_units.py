#!/usr/bin/env python3
"""tools/dev/lint_units.py over a compile database of its own: which units hold which sources,
and a source in no unit is an error.

Run: python3 tests/dev/test_lint_units.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(SOURCE, "tools", "dev", "lint_units.py")


class LintUnits(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="whfs-lint-units-")
        self.addCleanup(shutil.rmtree, self.root)
        self.build = self.path("build")
        for rel in ("fs/a/one.cpp", "fs/a/two.cpp", "fs/b/alone.cpp", "fs/b/orphan.cpp"):
            self.write(rel, "int f() { return 0; }\n")
        self.unity = self.path("build/fs/a/CMakeFiles/a.dir/Unity/unity_0_cxx.cxx")
        self.write(self.unity, f'/* generated */\n\n#include "{self.path("fs/a/one.cpp")}"\n\n'
                               f'#include "{self.path("fs/a/two.cpp")}"\n')
        self.write("build/lmdb_unity.c", "")
        db = [{"directory": self.build, "file": self.unity, "command": "c++ -c x"},
              {"directory": self.build, "file": self.path("fs/b/alone.cpp"), "command": "c++ -c x"},
              {"directory": self.build, "file": self.path("build/lmdb_unity.c"), "command": "cc -c x"}]
        self.write("build/compile_commands.json", json.dumps(db))

    def path(self, rel):
        return os.path.join(self.root, rel)

    def write(self, rel, text):
        p = self.path(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)

    def run_units(self, *rels):
        return subprocess.run([sys.executable, SCRIPT, self.build, *(self.path(r) for r in rels)],
                              capture_output=True, text=True, check=False)

    def test_a_source_maps_to_its_unity_unit_once(self):
        r = self.run_units("fs/a/one.cpp", "fs/a/two.cpp")
        self.assertEqual((r.returncode, r.stdout.split()), (0, [self.unity]))

    def test_a_source_compiled_alone_is_its_own_unit(self):
        r = self.run_units("fs/b/alone.cpp", "fs/a/two.cpp")
        self.assertEqual((r.returncode, sorted(r.stdout.split())),
                         (0, sorted([self.unity, self.path("fs/b/alone.cpp")])))

    def test_a_source_in_no_unit_fails_and_is_named(self):
        r = self.run_units("fs/a/one.cpp", "fs/b/orphan.cpp")
        self.assertEqual((r.returncode, r.stdout), (1, ""))
        self.assertIn("fs/b/orphan.cpp", r.stderr)


if __name__ == "__main__":
    unittest.main()
