#include "fs/target/python_probe.h"

#include <gtest/gtest.h>

#include "tests/unit/target/fixtures.h"

namespace whfs::target {
namespace {

using testing::TempDir;
using testing::write_file;

TEST(PythonProbe, AsksThisMachinesPython) {
  const auto p = probe_python(PYTHON3_EXECUTABLE);
  ASSERT_TRUE(p) << p.error();
  EXPECT_TRUE(p->is_cpython());
  EXPECT_EQ(p->python_tag(), PYTHON3_TAG);  // cp311 on Debian 12
  EXPECT_FALSE(p->executable.empty());
  EXPECT_FALSE(p->site_dirs.empty());
  EXPECT_TRUE(p->platform.starts_with("linux-")) << p->platform;
  EXPECT_FALSE(linux_wheel_arch(*p).empty());
  EXPECT_GT(parse_glibc_version(p->glibc).first, 0) << p->glibc;
}

TEST(PythonProbe, Python3OnPathByDefault) {
  const auto p = probe_python("");
  ASSERT_TRUE(p) << p.error();
  EXPECT_EQ(p->major, 3);
}

TEST(PythonProbe, MissingInterpreterIsAClearError) {
  auto p = probe_python("/nonexistent/bin/python3");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error(),
            "python interpreter '/nonexistent/bin/python3' could not start: "
            "/nonexistent/bin/python3: No such file or directory");
  p = probe_python("whfs-no-such-python");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error(),
            "python interpreter 'whfs-no-such-python' not found on PATH (set "
            "python=/path/to/python)");
}

TEST(PythonProbe, BrokenInterpreterSaysWhatItPrinted) {
  TempDir dir;
  write_file(dir.path() / "python", "#!/bin/sh\necho 'Fatal Python error: init' >&2\nexit 1\n",
             true);
  auto p = probe_python(dir.str("python"));
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().find("exited with status 1: Fatal Python error: init"), std::string::npos)
      << p.error();

  write_file(dir.path() / "notpython", "#!/bin/sh\necho hello\n", true);
  p = probe_python(dir.str("notpython"));
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().find("is not usable: no probe result in its output: \"hello\""),
            std::string::npos)
      << p.error();

  write_file(dir.path() / "slow", "#!/bin/sh\nexec sleep 60\n", true);
  p = probe_python(dir.str("slow"), std::chrono::milliseconds(200));
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().find("did not finish within 0.2 s"), std::string::npos) << p.error();
}

TEST(PythonProbe, ParsesTheProbeOutput) {
  const auto p = parse_python_probe(
      "some banner from sitecustomize\n"
      R"({"implementation": "cpython", "major": 3, "minor": 12, "abiflags": "", )"
      R"("executable": "/usr/bin/python3.12", "libc": "glibc 2.36", "platform": "linux-x86_64", )"
      R"("pointer_bits": 64, "site_dirs": ["/a", "/b"]})"
      "\n");
  ASSERT_TRUE(p) << p.error();
  EXPECT_EQ(p->python_tag(), "cp312");
  EXPECT_EQ(p->version(), "3.12");
  EXPECT_EQ(p->glibc, "2.36");
  EXPECT_EQ(p->site_dirs, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(linux_wheel_arch(*p), "x86_64");

  auto musl = parse_python_probe(
      R"({"implementation": "cpython", "major": 3, "minor": 12, "libc": "", "platform": "linux-x86_64", "pointer_bits": 32})");
  ASSERT_TRUE(musl);
  EXPECT_EQ(musl->glibc, "");
  EXPECT_EQ(linux_wheel_arch(*musl), "i686");  // a 32-bit interpreter takes i686 wheels

  EXPECT_FALSE(parse_python_probe(""));
  EXPECT_FALSE(parse_python_probe("[1, 2]"));
  EXPECT_FALSE(parse_python_probe(R"({"implementation": "cpython"})"));
}

TEST(PythonProbe, GlibcVersions) {
  EXPECT_EQ(parse_glibc_version("2.36"), std::make_pair(2, 36));
  EXPECT_EQ(parse_glibc_version("2.20-2014.11"), std::make_pair(2, 20));
  EXPECT_EQ(parse_glibc_version(""), std::make_pair(0, 0));
  EXPECT_EQ(parse_glibc_version("musl"), std::make_pair(0, 0));
}

}  // namespace
}  // namespace whfs::target
