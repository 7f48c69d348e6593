// Reading a Python installation from its files (python_layout.h), checked against what real
// interpreters say about themselves (the oracle runs them; the product never does).
#include "fs/targeting/python_layout.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "fs/targeting/child_process.h"
#include "tests/unit/targeting/fixtures.h"
#include "tests/unit/targeting/python_oracle.h"

namespace whfs::target {
namespace {

using testing::TempDir;
using testing::write_fake_interpreter;
using testing::write_fake_libc;
using testing::write_file;
using testing::write_venv;
namespace fs = std::filesystem;

RootFs open_root(const std::string& dir) {
  auto r = RootFs::open(dir);
  if (!r) ADD_FAILURE() << r.error();
  return std::move(*r);
}

// The site folders of `layout` must be the oracle's, in its order: sys.path minus what is not
// a site folder (the standard library, lib-dynload, the zip).
// `interpreter` may be a wrapper (a pyenv shim): the interpreter is what it runs.
void expect_same_as_the_interpreter(const std::string& interpreter) {
  SCOPED_TRACE(interpreter);
  const auto real = testing::probe_python(interpreter);
  ASSERT_TRUE(real) << real.error();
  const RootFs root = open_root("/");
  // This process's environment (HOME, PYTHONPATH, ...) is the oracle's.
  const auto self = read_caller(::getpid());
  ASSERT_TRUE(self) << self.error();
  const auto layout = read_python_layout(root, real->executable, &*self);
  ASSERT_TRUE(layout) << layout.error();
  const PythonInfo& p = layout->info;
  EXPECT_EQ(p.major, real->major);
  EXPECT_EQ(p.minor, real->minor);
  EXPECT_EQ(p.abiflags, real->abiflags);
  EXPECT_EQ(p.glibc, real->glibc);
  EXPECT_EQ(p.platform, real->platform);
  EXPECT_EQ(p.pointer_bits, real->pointer_bits);
  std::vector<std::string> expected;
  for (const auto& d : real->site_dirs) {
    if (d.find("-packages") != std::string::npos) expected.push_back(fs::canonical(d).string());
  }
  std::vector<std::string> got;
  for (const auto& d : p.site_dirs) got.push_back(fs::canonical(d).string());
  EXPECT_EQ(got, expected);
}

TEST(PythonLayout, TheSystemPythonAsItSeesItself) {
  expect_same_as_the_interpreter(PYTHON3_EXECUTABLE);
}

// Real venvs of this machine's Python, with and without the system's site-packages.
TEST(PythonLayout, RealVenvsAsTheySeeThemselves) {
  TempDir dir;
  for (const bool system_site : {false, true}) {
    const std::string venv = dir.str(system_site ? "with-system" : "isolated");
    std::vector<std::string> argv = {PYTHON3_EXECUTABLE, "-m", "venv", "--without-pip", venv};
    if (system_site) argv.insert(argv.begin() + 3, "--system-site-packages");
    const auto made = run_program(argv, std::chrono::seconds(60));
    ASSERT_TRUE(made.ok()) << made.describe() << made.err;
    expect_same_as_the_interpreter(venv + "/bin/python");
  }
}

// Another world: an image's root with a Python 3.12 whose folders and libc are its own.
TEST(PythonLayout, AnotherRootsPython) {
  TempDir dir;
  const fs::path root = dir.path() / "image";
  write_fake_interpreter(root / "usr/bin/python3.12");
  fs::create_symlink("python3.12", root / "usr/bin/python3");
  write_fake_libc(root, 31);
  fs::create_directories(root / "usr/lib/python3.12/site-packages");
  fs::create_directories(root / "usr/local/lib/python3.12/dist-packages");
  fs::create_directories(root / "usr/lib/python3/dist-packages");
  fs::create_directories(root / "home/u/.local/lib/python3.12/site-packages");
  const RootFs r = open_root(root.string());
  CallerProcess p;
  p.env["HOME"] = "/home/u";
  const auto layout = read_python_layout(r, "/usr/bin/python3", &p);
  ASSERT_TRUE(layout) << layout.error();
  EXPECT_EQ(layout->info.version(), "3.12");
  EXPECT_EQ(layout->info.glibc, "2.31");
  EXPECT_EQ(layout->info.platform, "linux-x86_64");
  EXPECT_EQ(layout->info.executable, "/usr/bin/python3");
  EXPECT_EQ(layout->info.site_dirs,
            (std::vector<std::string>{
                "/home/u/.local/lib/python3.12/site-packages", "/usr/lib/python3.12/site-packages",
                "/usr/local/lib/python3.12/dist-packages", "/usr/lib/python3/dist-packages"}));
  // PYTHONNOUSERSITE drops the user folder; PYTHONPATH comes first.
  fs::create_directories(root / "src");
  p.env["PYTHONNOUSERSITE"] = "1";
  p.env["PYTHONPATH"] = "/src:relative:/missing";
  const auto again = read_python_layout(r, "/usr/bin/python3", &p);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->info.site_dirs.front(), "/src");
  EXPECT_EQ(std::count(again->info.site_dirs.begin(), again->info.site_dirs.end(),
                       "/home/u/.local/lib/python3.12/site-packages"),
            0);
}

TEST(PythonLayout, VenvVersionsAndFreeThreadedBuilds) {
  TempDir dir;
  const fs::path root = dir.path();
  write_fake_libc(root, 36);
  // A venv whose interpreter is named python3 only: pyvenv.cfg tells the version.
  write_venv(root / "venv", "3.13.1", "/usr/bin", false);
  const RootFs r = open_root(root.string());
  auto layout = read_python_layout(r, "/venv/bin/python", nullptr);
  ASSERT_TRUE(layout) << layout.error();
  EXPECT_EQ(layout->info.version(), "3.13");
  EXPECT_EQ(layout->info.site_dirs, std::vector<std::string>{"/venv/lib/python3.13/site-packages"});
  // A free-threaded build: python3.13t and lib/python3.13t.
  write_fake_interpreter(root / "opt/ft/bin/python3.13t");
  fs::create_directories(root / "opt/ft/lib/python3.13t/site-packages");
  layout = read_python_layout(r, "/opt/ft/bin/python3.13t", nullptr);
  ASSERT_TRUE(layout) << layout.error();
  EXPECT_EQ(layout->info.abiflags, "t");
  EXPECT_EQ(layout->info.site_dirs,
            std::vector<std::string>{"/opt/ft/lib/python3.13t/site-packages"});
  // A bare python3 with one lib/python3.X folder.
  write_fake_interpreter(root / "opt/bare/bin/python3");
  fs::create_directories(root / "opt/bare/lib/python3.10/site-packages");
  layout = read_python_layout(r, "/opt/bare/bin/python3", nullptr);
  ASSERT_TRUE(layout) << layout.error();
  EXPECT_EQ(layout->info.version(), "3.10");
  // ... and with two, it cannot tell.
  fs::create_directories(root / "opt/bare/lib/python3.11");
  layout = read_python_layout(r, "/opt/bare/bin/python3", nullptr);
  ASSERT_FALSE(layout);
  EXPECT_NE(layout.error().find("2 lib/python3.X folders"), std::string::npos) << layout.error();
}

TEST(PythonLayout, WhatIsNotAnInterpreter) {
  TempDir dir;
  const fs::path root = dir.path();
  write_file(root / "bin/python3", "#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n", true);
  write_file(root / "bin/pypy3", "", true);
  const RootFs r = open_root(root.string());
  auto layout = read_python_layout(r, "/bin/python3", nullptr);
  ASSERT_FALSE(layout);
  EXPECT_NE(layout.error().find("not an ELF executable"), std::string::npos) << layout.error();
  layout = read_python_layout(r, "/bin/pypy3", nullptr);
  ASSERT_FALSE(layout);
  EXPECT_NE(layout.error().find("PyPy"), std::string::npos);
  layout = read_python_layout(r, "/bin/missing", nullptr);
  ASSERT_FALSE(layout);
  EXPECT_EQ(layout.error(), "the interpreter /bin/missing does not exist");
  // A pyvenv.cfg that is a FIFO or huge is not read (and does not stall).
  write_fake_interpreter(root / "v/bin/python3.11");
  fs::create_directories(root / "v/lib/python3.11/site-packages");
  ASSERT_EQ(::mkfifo((root / "v/pyvenv.cfg").c_str(), 0644), 0);
  layout = read_python_layout(r, "/v/bin/python3.11", nullptr);
  ASSERT_TRUE(layout) << layout.error();
  EXPECT_EQ(layout->info.version(), "3.11");
}

CallerProcess process(std::vector<std::string> argv, std::map<std::string, std::string> env,
                      const std::string& exe = "bash") {
  CallerProcess p;
  p.argv = std::move(argv);
  p.env = std::move(env);
  p.exe_name = exe;
  p.cwd = "/work";
  return p;
}

TEST(ChooseInterpreter, InTheProcesssOrder) {
  TempDir dir;
  const fs::path root = dir.path();
  write_fake_interpreter(root / "usr/bin/python3.11");
  fs::create_symlink("python3.11", root / "usr/bin/python3");
  write_venv(root / "work/venv", "3.12.0", "/usr/bin", false, "/usr/bin/python3.11");
  write_venv(root / "opt/conda", "3.12.0", "/usr/bin", false);
  write_file(root / "shims/python3", "#!/bin/sh\n", true);  // a pyenv shim
  const RootFs r = open_root(root.string());
  const std::map<std::string, std::string> path = {{"PATH", "/shims:/usr/bin"}};

  // A Python process: as it was started (its venv from argv[0], even unactivated).
  auto c =
      choose_interpreter(process({"/work/venv/bin/python", "-m", "pip"}, path, "python3.11"), r);
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->path, "/work/venv/bin/python");
  c = choose_interpreter(process({"venv/bin/python"}, path, "python3.11"), r);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->path, "/work/venv/bin/python");  // relative to its working folder
  c = choose_interpreter(process({"python3"}, path, "python3.11"), r);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->path, "/usr/bin/python3");  // the shim is passed over
  // Otherwise: $VIRTUAL_ENV, then $CONDA_PREFIX, then python3 on PATH.
  auto env = path;
  env["CONDA_PREFIX"] = "/opt/conda";
  env["VIRTUAL_ENV"] = "/work/venv";
  c = choose_interpreter(process({"ls"}, env), r);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->path, "/work/venv/bin/python3");
  EXPECT_EQ(c->why, "$VIRTUAL_ENV is /work/venv");
  env.erase("VIRTUAL_ENV");
  c = choose_interpreter(process({"ls"}, env), r);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->path, "/opt/conda/bin/python3");
  c = choose_interpreter(process({"ls"}, path), r);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->path, "/usr/bin/python3");
  c = choose_interpreter(process({"ls"}, {{"PATH", "/nowhere"}}), r);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error(), "no python3 on the process's PATH (/nowhere)");
  c = choose_interpreter(process({"ls"}, {{"VIRTUAL_ENV", "/gone"}}), r);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error(), "$VIRTUAL_ENV names /gone, which has no bin/python3");
}

// pyenv's shims decide at run time; what they would decide is read from pyenv's own files,
// nothing is run.
TEST(ChooseInterpreter, PyenvShimsAsPyenvWouldResolveThem) {
  TempDir dir;
  const fs::path root = dir.path();
  write_fake_interpreter(root / "usr/bin/python3.11");
  fs::create_symlink("python3.11", root / "usr/bin/python3");
  const fs::path pyenv = root / "home/u/.pyenv";
  write_file(pyenv / "shims/python3", "#!/usr/bin/env bash\nexec pyenv exec python3\n", true);
  write_fake_interpreter(pyenv / "versions/3.12.1/bin/python3.12");
  fs::create_symlink("python3.12", pyenv / "versions/3.12.1/bin/python3");
  write_venv(pyenv / "versions/proj", "3.12.1", "/home/u/.pyenv/versions/3.12.1/bin", false);
  write_file(root / "work/app/.python-version", "proj\n");
  fs::create_directories(root / "work/app/src");
  const RootFs r = open_root(root.string());
  std::map<std::string, std::string> env = {{"PATH", "/home/u/.pyenv/shims:/usr/bin"},
                                            {"PYENV_VERSION", "3.12.1"}};
  auto p = process({"zsh"}, env);
  auto c = choose_interpreter(p, r);
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->path, "/home/u/.pyenv/versions/3.12.1/bin/python3");
  EXPECT_EQ(c->why, "pyenv 3.12.1 (PYENV_VERSION)");
  // .python-version from the working directory upwards; a version that is a venv.
  env.erase("PYENV_VERSION");
  p = process({"zsh"}, env);
  p.cwd = "/work/app/src";
  c = choose_interpreter(p, r);
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->path, "/home/u/.pyenv/versions/proj/bin/python3");
  EXPECT_EQ(c->why, "pyenv proj (/work/app/.python-version)");
  // $PYENV_ROOT/version, then the system's Python after the shims.
  p.cwd = "/work";
  write_file(pyenv / "version", "3.12.1\n");
  c = choose_interpreter(p, r);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->why, "pyenv 3.12.1 (/home/u/.pyenv/version)");
  fs::remove(pyenv / "version");
  c = choose_interpreter(p, r);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->path, "/usr/bin/python3");
  EXPECT_NE(c->why.find("pyenv system"), std::string::npos) << c->why;
  // A version that is not installed, or that names a path, is said so.
  env["PYENV_VERSION"] = "3.9.0";
  c = choose_interpreter(process({"zsh"}, env), r);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().find("pyenv 3.9.0 (PYENV_VERSION), which is not installed"),
            std::string::npos)
      << c.error();
  env["PYENV_VERSION"] = "../../../usr";
  c = choose_interpreter(process({"zsh"}, env), r);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().find("not a version name"), std::string::npos) << c.error();
}

// A process names as many PATH folders as it likes; the daemon looks at the first 64 (all of a
// 128 KiB PATH would cost 0.1 s of its CPU per detection).
TEST(ChooseInterpreter, OnlyTheFirstFoldersOfAHugePathAreLookedAt) {
  TempDir dir;
  const fs::path root = dir.path();
  write_fake_interpreter(root / "late/bin/python3.11");
  fs::create_symlink("python3.11", root / "late/bin/python3");
  const RootFs r = open_root(root.string());
  std::string path;
  for (int i = 0; i < 64; ++i) path += "/nowhere/" + std::to_string(i) + ":";
  auto c = choose_interpreter(process({"ls"}, {{"PATH", path + "/late/bin"}}), r);
  ASSERT_FALSE(c);  // the 65th folder is not looked at
  EXPECT_NE(c.error().find("no python3 on the process's PATH"), std::string::npos);
  c = choose_interpreter(process({"ls"}, {{"PATH", "/late/bin:" + path}}), r);
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->path, "/late/bin/python3");
  // The reason quotes a huge PATH only in part.
  std::string huge(128 << 10, 'x');
  c = choose_interpreter(process({"ls"}, {{"PATH", "/" + huge}}), r);
  ASSERT_FALSE(c);
  EXPECT_LT(c.error().size(), 700u);
}

TEST(PythonLayout, PureParsers) {
  const auto cfg = parse_pyvenv_cfg(
      "home = /usr/bin\r\ninclude-system-site-packages = True\nversion_info = 3.12.1.final.0\n");
  EXPECT_EQ(cfg.home, "/usr/bin");
  EXPECT_TRUE(cfg.system_site);
  EXPECT_EQ(cfg.version, "3.12.1.final.0");
  EXPECT_EQ(glibc_version_in(std::string("x\0GLIBC_2.2.5\0GLIBC_2.36\0GLIBC_2.4", 34)), "2.36");
  EXPECT_EQ(glibc_version_in("musl"), "");
  EXPECT_EQ(parse_python_name("python3.12")->minor, 12);
  EXPECT_EQ(parse_python_name("python3.13t")->abiflags, "t");
  EXPECT_FALSE(parse_python_name("python3.12-config"));
  EXPECT_FALSE(parse_python_name("python2.7"));
  EXPECT_FALSE(parse_python_name("python3"));
}

}  // namespace
}  // namespace whfs::target
