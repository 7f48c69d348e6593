#pragma once
// The one clock for deadlines: steady, so a wall-clock jump never ends or stretches a wait.

#include <chrono>

namespace whfs {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

}  // namespace whfs
