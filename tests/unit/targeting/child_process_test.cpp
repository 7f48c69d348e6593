#include "fs/targeting/child_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>

namespace whfs::target {
namespace {

using std::chrono::milliseconds;

TEST(ChildProcess, RunsAProgramWithoutAShell) {
  const auto r = run_program({"sh", "-c", "echo out; echo err >&2; exit 3"}, milliseconds(10000));
  EXPECT_EQ(r.end, ChildResult::End::kExited);
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_EQ(r.describe(), "exited with status 3");
  // No shell: the metacharacters reach the program as they are.
  const auto echo = run_program({"echo", "$HOME;", "*"}, milliseconds(10000));
  EXPECT_TRUE(echo.ok());
  EXPECT_EQ(echo.out, "$HOME; *\n");
}

TEST(ChildProcess, AMissingProgramDoesNotStart) {
  const auto r = run_program({"whfs-no-such-program"}, milliseconds(10000));
  EXPECT_EQ(r.end, ChildResult::End::kStartFailed);
  EXPECT_NE(r.describe().find("No such file or directory"), std::string::npos) << r.describe();
}

TEST(ChildProcess, AHangingProgramIsKilledAtTheDeadline) {
  const auto r = run_program({"sleep", "60"}, milliseconds(200));
  EXPECT_EQ(r.end, ChildResult::End::kTimedOut);
  EXPECT_EQ(r.describe(), "did not finish within 0.2 s and was killed");
}

TEST(ChildProcess, FunctionResultComesBack) {
  const auto r = run_in_child([] { return std::string(100000, 'x'); }, milliseconds(10000));
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.out, std::string(100000, 'x'));
}

TEST(ChildProcess, ACrashInTheChildLeavesTheParentRunning) {
  const auto r = run_in_child([]() -> std::string { std::abort(); }, milliseconds(10000));
  EXPECT_EQ(r.end, ChildResult::End::kSignaled);
  EXPECT_EQ(r.code, SIGABRT);
  EXPECT_NE(r.describe().find("killed by signal 6"), std::string::npos) << r.describe();
}

TEST(ChildProcess, AHangInTheChildIsKilled) {
  const auto r = run_in_child(
      []() -> std::string {
        for (;;) ::pause();
      },
      milliseconds(200));
  EXPECT_EQ(r.end, ChildResult::End::kTimedOut);
}

TEST(ChildProcess, AnExceptionInTheChildIsAnExitStatus) {
  const auto r = run_in_child([]() -> std::string { throw 1; }, milliseconds(10000));
  EXPECT_EQ(r.end, ChildResult::End::kExited);
  EXPECT_EQ(r.code, 70);
}

TEST(ChildProcess, SecondsText) {
  EXPECT_EQ(seconds_text(milliseconds(10000)), "10 s");
  EXPECT_EQ(seconds_text(milliseconds(500)), "0.5 s");
  EXPECT_EQ(seconds_text(milliseconds(1250)), "1.25 s");
}

}  // namespace
}  // namespace whfs::target
