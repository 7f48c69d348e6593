#!/usr/bin/env python3
"""The library edges of CMake against the includes of the code (run by tools/dev/lint.sh).

Each module folder (fs/<name>/, cache/) is one library: the add_library of its CMakeLists.txt
whose sources lie in the folder. A target's files are its sources and, for a library, every
other .cpp and .h of its folder. An include "fs/<name>/..." or "cache/..." of another folder's
header (or any folder of a library, such as tools/csi/) is an edge to that folder's library; target_link_libraries must name exactly those
libraries (PUBLIC or PRIVATE): an include without its edge, or an edge without an include, is a
finding. Checked: the libraries, the programs and the fuzzers (tests/fuzz: whfs_fuzzer) that
link a library of a module folder. The edge list at the top of CMakeLists.txt is checked
against the same edges.

    tools/dev/check_edges.py           the findings, one a line; exit 1 when there is one
    tools/dev/check_edges.py --list    the edges, as the top of CMakeLists.txt lists them
"""

import os
import re
import sys

SCANNED = ("fs", "cache", "tools", "tests/fuzz")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+/[^"]+)"', re.M)


def cmake_commands(text):
    """(name, [arguments]) of each command of a CMakeLists.txt, its comments removed."""
    text = re.sub(r"#[^\n]*", "", text)
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)", text):
        yield m.group(1), m.group(2).split()


class Target:
    def __init__(self, name, folder, sources, library):
        self.name = name
        self.folder = folder  # relative to the root
        self.sources = sources  # relative to the root
        self.library = library
        self.links = []  # the libraries of module folders it names, in order


def read_targets(root):
    targets = {}
    for top in SCANNED:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d not in ("third_party", "corpus", "node_modules"))
            if "CMakeLists.txt" not in files:
                continue
            rel = os.path.relpath(folder, root)
            with open(os.path.join(folder, "CMakeLists.txt"), encoding="utf-8") as f:
                commands = list(cmake_commands(f.read()))
            for cmd, args in commands:
                if cmd in ("add_library", "add_executable") and args:
                    srcs = [a for a in args[1:] if a.endswith((".cpp", ".cc", ".c"))]
                    srcs = [os.path.normpath(os.path.join(rel, s)) for s in srcs if "$" not in s]
                    targets[args[0]] = Target(args[0], rel, srcs, cmd == "add_library")
                elif cmd == "whfs_fuzzer" and args:
                    t = Target(args[0], rel, [os.path.join(rel, args[0] + ".cpp")], False)
                    t.links = [a for a in args[1:] if not a.startswith("$")]
                    targets[args[0]] = t
            for cmd, args in commands:
                if cmd == "target_link_libraries" and args and args[0] in targets:
                    kinds = ("PUBLIC", "PRIVATE", "INTERFACE")
                    targets[args[0]].links += [a for a in args[1:] if a not in kinds]
    return targets


def module_libraries(targets):
    """folder -> the library of that module folder (its sources lie in the folder itself)."""
    owner = {}
    for t in targets.values():
        if t.library and t.sources and all(os.path.dirname(s) == t.folder for s in t.sources):
            owner[t.folder] = t.name
    return owner


def files_of(root, t, owner, targets):
    """The files whose includes are the target's."""
    files = set(t.sources)
    if owner.get(t.folder) == t.name:
        others = {s for o in targets.values() if o is not t for s in o.sources}
        for name in os.listdir(os.path.join(root, t.folder)):
            path = os.path.join(t.folder, name)
            if name.endswith((".cpp", ".h")) and path not in others:
                files.add(path)
    return sorted(files)


def includes_of(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return INCLUDE.findall(f.read())


def edges(root):
    """name -> (links, needed: {library: first file that includes it}) of each checked target."""
    targets = read_targets(root)
    owner = module_libraries(targets)
    libs = set(owner.values())
    out = {}
    for t in targets.values():
        links = [l for l in t.links if l in libs]
        if not links and owner.get(t.folder) != t.name:
            continue  # links no library of ours (wheelhouse-hint), or not a module library
        needed = {}
        for path in files_of(root, t, owner, targets):
            for inc in includes_of(root, path):
                lib = owner.get(os.path.dirname(inc))
                if lib is None:
                    continue
                if lib != t.name:
                    needed.setdefault(lib, f"{path} includes {inc}")
        out[t.name] = (links, needed)
    return out, owner


def short(lib):
    return lib[len("whfs_"):] if lib.startswith("whfs_") else lib


def listed_edges(root):
    """name -> [library] from the list at the top of CMakeLists.txt: '#   whfs_x  folder -> a, b',
    a list that ends with a comma going on on the next line."""
    listed = {}
    last = None  # the entry whose list goes on
    with open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8") as f:
        for line in f:  # the file's first comment
            if not line.startswith("#"):
                if listed or last is not None:
                    break
                continue
            m = re.match(r"#\s+(\S+)\s.*->\s*(.*)$", line.rstrip())
            if m:
                last, text = m.group(1), m.group(2)
                listed[last] = []
            elif last is not None:
                text = line[1:].strip()
            else:
                continue
            names = [n.strip() for n in text.split(",")]
            listed[last] += ["whfs_" + n for n in names if n not in ("", "-")]
            if not text.endswith(","):
                last = None
    return listed


def main(argv):
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    found, owner = edges(root)
    folder = {lib: f for f, lib in owner.items()}
    if argv[1:] == ["--list"]:
        for name in sorted(found, key=lambda n: (n not in folder, folder.get(n, ""), n)):
            links = found[name][0]
            print(f"{name:15} {folder.get(name, ''):14} -> {', '.join(map(short, links)) or '-'}")
        return 0
    if argv[1:]:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    problems = []
    for name, (links, needed) in sorted(found.items()):
        for lib, why in sorted(needed.items()):
            if lib not in links:
                problems.append(f"{name}: {why} but does not link {lib}")
        for lib in links:
            if lib not in needed:
                problems.append(f"{name}: links {lib} but includes nothing of it")
    listed = listed_edges(root)
    for name, (links, _) in sorted(found.items()):
        if name in folder and name not in listed:
            problems.append(f"CMakeLists.txt: the edge list has no line for {name}")
        elif name in listed and sorted(listed[name]) != sorted(links):
            problems.append(f"CMakeLists.txt: the edge list says {name} -> "
                            f"{', '.join(map(short, listed[name])) or '-'}; CMake says "
                            f"{', '.join(map(short, links)) or '-'}")
    for name in sorted(set(listed) - set(found)):
        problems.append(f"CMakeLists.txt: the edge list names {name}, which is no checked target")
    for p in problems:
        print(f"check_edges: {p}", file=sys.stderr)
    if not problems:
        print(f"check_edges: {len(found)} targets, their edges as their includes")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
