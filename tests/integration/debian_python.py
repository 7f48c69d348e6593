"""Tests that need a module of Debian's python3-* packages (python3-grpcio, python3-yaml) run
under Debian's Python: a Python of its own (a pyenv, a venv) that lacks the module runs the test
again as /usr/bin/python3, which tools/dev/setup.sh gives those packages."""
import importlib.util
import os
import sys

DEBIAN = "/usr/bin/python3"


def need(module):
    if importlib.util.find_spec(module) is not None:
        return
    if os.path.exists(DEBIAN) and os.path.realpath(sys.executable) != os.path.realpath(DEBIAN):
        os.execv(DEBIAN, [DEBIAN] + sys.argv)
    raise ImportError(f"no module {module}: apt-get install python3-{module} "
                      "(tools/dev/setup.sh --tests does)")
