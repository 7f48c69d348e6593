"""Generated datasets shared by the tests, built once per build folder.

Tests run in parallel under ctest, so generation is serialised with a file lock; the generator
itself is idempotent, so later callers only check the manifest."""
import fcntl
import os

import gen_wheelhouse

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("WHFS_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BUILD_DIR = os.environ.get("WHFS_BUILD_DIR", os.path.join(SOURCE_DIR, "build"))


def dataset(profile="small", **params):
    """Path of <out> (with <out>/tree and <out>/manifest.json) for a profile: "small" (~15 MiB,
    for most tests) or "default" (~170 MiB, real sizes up to 64 MiB)."""
    out = os.path.join(BUILD_DIR, "testdata", profile)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(BUILD_DIR, "testdata", f".{profile}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        gen_wheelhouse.generate(out, small=(profile == "small"), quiet=True, **params)
    return out


if __name__ == "__main__":
    import sys
    print(dataset(sys.argv[1] if len(sys.argv) > 1 else "small"))
