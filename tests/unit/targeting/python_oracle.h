#pragma once
// The test oracle for python_layout.h: runs an interpreter (no shell, a deadline) and asks it
// about itself. The product never does this (a root daemon must not run a user's interpreter);
// the tests check that reading the files gives the interpreter's own answer.

#include <chrono>
#include <string>
#include <string_view>

#include "fs/common/expected.h"
#include "fs/targeting/python_info.h"

namespace whfs::target::testing {

// Runs `interpreter -c <probe>` and parses its answer. A missing interpreter, a crash, a
// timeout, a non-zero exit or output that is not the probe's JSON give one sentence.
Expected<PythonInfo, std::string> probe_python(
    const std::string& interpreter,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

// Parses the probe's output (the last non-empty line must be its JSON object).
Expected<PythonInfo, std::string> parse_python_probe(std::string_view output);

}  // namespace whfs::target::testing
