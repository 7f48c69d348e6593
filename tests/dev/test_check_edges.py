#!/usr/bin/env python3
"""tools/dev/check_edges.py over small trees of its own: what it finds, and what it lets pass.

Run: python3 tests/dev/test_check_edges.py
"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

SOURCE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(SOURCE, "tools", "dev", "check_edges.py")

TOP = """\
cmake_minimum_required(VERSION 3.25)
project(t)

# The edges:
#   whfs_a  fs/a  -> -
#   whfs_b  fs/b  -> a
#   whfs_c  fs/c  -> a,
#                    b
add_subdirectory(fs)
"""


class CheckEdges(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="whfs-check-edges-")
        self.addCleanup(shutil.rmtree, self.root)
        os.makedirs(os.path.join(self.root, "tools", "dev"))
        shutil.copy(SCRIPT, os.path.join(self.root, "tools", "dev"))
        self.write("CMakeLists.txt", TOP)
        self.write("fs/a/CMakeLists.txt", "add_library(whfs_a STATIC a.cpp)\n")
        self.write("fs/a/a.h", "#pragma once\nint a();\n")
        self.write("fs/a/a.cpp", '#include "fs/a/a.h"\nint a() { return 1; }\n')
        self.write("fs/b/CMakeLists.txt", """\
            # b uses a
            add_library(whfs_b STATIC b.cpp)
            target_link_libraries(whfs_b PUBLIC whfs_a
                                         PRIVATE ZLIB::ZLIB)
            """)
        self.write("fs/b/b.h", '#pragma once\n#include "fs/a/a.h"\n')
        self.write("fs/b/b.cpp", '#include "fs/b/b.h"\n#include <zlib.h>\n')
        self.write("fs/c/CMakeLists.txt",
                   "add_library(whfs_c STATIC c.cpp)\n"
                   "target_link_libraries(whfs_c PRIVATE whfs_b whfs_a)\n"
                   "add_executable(prog main.cpp)\n"
                   "target_link_libraries(prog PRIVATE whfs_c)\n")
        self.write("fs/c/c.h", "#pragma once\n")
        self.write("fs/c/c.cpp", '#include "fs/a/a.h"\n#include "fs/b/b.h"\n')
        # The program's own file: its includes are its, not the library's beside it.
        self.write("fs/c/main.cpp", '#include "fs/c/c.h"\n')

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text))

    def run_it(self, *args):
        script = os.path.join(self.root, "tools", "dev", "check_edges.py")
        return subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                              timeout=60)

    def findings(self):
        r = self.run_it()
        lines = [l for l in r.stderr.splitlines() if l]
        self.assertEqual(r.returncode, 1 if lines else 0, r.stdout + r.stderr)
        return lines

    def test_a_tree_whose_edges_are_its_includes_passes(self):
        r = self.run_it()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "check_edges: 4 targets, their edges as their includes\n")

    def test_an_include_without_its_edge(self):
        self.write("fs/a/a.cpp", '#include "fs/a/a.h"\n#include "fs/b/b.h"\n')
        self.assertEqual(self.findings(), [
            "check_edges: whfs_a: fs/a/a.cpp includes fs/b/b.h but does not link whfs_b"])

    def test_a_header_counts_for_its_library(self):
        self.write("fs/a/extra.h", '#pragma once\n#include "fs/c/c.h"\n')
        self.assertEqual(self.findings(), [
            "check_edges: whfs_a: fs/a/extra.h includes fs/c/c.h but does not link whfs_c"])

    def test_an_edge_without_an_include(self):
        self.write("fs/c/c.cpp", '#include "fs/b/b.h"\n')
        self.assertEqual(self.findings(), [
            "check_edges: whfs_c: links whfs_a but includes nothing of it"])

    def test_an_edge_through_another_library_is_not_enough(self):
        # c reaches a through b's PUBLIC edge, but includes a itself: it must name it.
        self.write("fs/c/CMakeLists.txt",
                   "add_library(whfs_c STATIC c.cpp)\n"
                   "target_link_libraries(whfs_c PRIVATE whfs_b)\n")
        self.assertEqual(self.findings(), [
            "check_edges: whfs_c: fs/c/c.cpp includes fs/a/a.h but does not link whfs_a",
            "check_edges: CMakeLists.txt: the edge list says whfs_c -> a, b; CMake says b",
        ])

    def test_a_program_is_checked_like_a_library(self):
        self.write("fs/c/main.cpp", '#include "fs/c/c.h"\n#include "fs/a/a.h"\n')
        self.assertEqual(self.findings(), [
            "check_edges: prog: fs/c/main.cpp includes fs/a/a.h but does not link whfs_a"])

    def test_a_fuzzer_links_what_it_parses(self):
        self.write("tests/fuzz/CMakeLists.txt", "whfs_fuzzer(b_fuzz whfs_b whfs_c)\n")
        self.write("tests/fuzz/b_fuzz.cpp", '#include "fs/b/b.h"\n')
        self.assertEqual(self.findings(), [
            "check_edges: b_fuzz: links whfs_c but includes nothing of it"])

    def test_the_list_at_the_top_must_match(self):
        self.write("CMakeLists.txt", TOP.replace("whfs_b  fs/b  -> a", "whfs_b  fs/b  -> -")
                   .replace("#   whfs_a  fs/a  -> -\n", ""))
        self.assertEqual(self.findings(), [
            "check_edges: CMakeLists.txt: the edge list has no line for whfs_a",
            "check_edges: CMakeLists.txt: the edge list says whfs_b -> -; CMake says a",
        ])

    def test_list_prints_the_edges(self):
        r = self.run_it("--list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), [
            "whfs_a          fs/a           -> -",
            "whfs_b          fs/b           -> a",
            "whfs_c          fs/c           -> b, a",
            "prog                           -> c",
        ])


if __name__ == "__main__":
    unittest.main()
