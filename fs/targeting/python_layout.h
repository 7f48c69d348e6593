#pragma once
// Which Python a process would use, and what that Python is, read from files only: the
// interpreter is never run (it may be a user's, and the daemon is root). What decides a wheel's
// tags is all in the installation's layout:
//
//   version      pyvenv.cfg's version (a venv), else the interpreter's file name
//                (python3.12), else its prefix's lib/python3.X folder
//   abiflags     "t" for a free-threaded build (python3.13t, lib/python3.13t)
//   platform     the interpreter's ELF header (x86_64, aarch64; 32-bit -> i686)
//   glibc        the highest GLIBC_2.N version in the root's libc.so.6 (none: musl)
//   site dirs    sys.path's order: PYTHONPATH, the user site (unless a venv without system
//                site-packages, or PYTHONNOUSERSITE), the venv's site-packages, the base
//                installation's site-packages and Debian's dist-packages folders
//
// Everything is read through a RootFs: a caller's files inside its own root.

#include <string>
#include <utility>
#include <vector>

#include "fs/common/expected.h"
#include "fs/targeting/caller.h"
#include "fs/targeting/python_info.h"
#include "fs/targeting/root_fs.h"

namespace whfs::target {

struct InterpreterChoice {
  std::string path;  // in the caller's root, as it would be run (a venv's bin/python)
  std::string why;   // "the process is python3.11, started as /home/u/venv/bin/python"
};

// The Python a process would use: itself when it is a Python interpreter (as argv[0] names it:
// a bare name is looked up on its PATH, so an unactivated venv/bin/pip counts as that venv),
// else $VIRTUAL_ENV, else $CONDA_PREFIX, else the first python3 on its PATH.
Expected<InterpreterChoice, std::string> choose_interpreter(const CallerProcess& process,
                                                            const RootFs& root);

// A file whose stamp a cached detection depends on.
struct Input {
  std::string path;
  FileStamp stamp;
  bool operator==(const Input&) const = default;
};

struct PythonLayout {
  PythonInfo info;
  std::vector<Input> inputs;  // what was read (re-checked before a cached answer is reused)
};

// The interpreter at `interpreter` (in `root`); `process` gives PYTHONPATH, HOME and the like
// (null: none of them). The error is one sentence naming the path.
Expected<PythonLayout, std::string> read_python_layout(const RootFs& root,
                                                       const std::string& interpreter,
                                                       const CallerProcess* process);

// Parses pyvenv.cfg ("key = value" lines). Pure.
struct VenvConfig {
  std::string home;          // the base interpreter's folder
  std::string version;       // 3.12.1 (or version_info 3.12.1.final.0)
  bool system_site = false;  // include-system-site-packages
};
VenvConfig parse_pyvenv_cfg(std::string_view text);

// The highest "GLIBC_2.N" in a libc image, as "2.N"; "" when there is none. Pure.
std::string glibc_version_in(std::string_view libc_image);

// "python3.12" -> {3, 12, ""}, "python3.13t" -> {3, 13, "t"}; nullopt otherwise. Pure.
struct PythonName {
  int major = 0;
  int minor = 0;
  std::string abiflags;
};
std::optional<PythonName> parse_python_name(std::string_view file_name);

}  // namespace whfs::target
