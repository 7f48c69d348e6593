#pragma once
// A running mount's status (the JSON of its root's user.wheelhouse.status attribute), for
// `wheelhouse status` and the progress of `wheelhouse prefetch`.

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "fs/common/expected.h"

namespace whfs::cli {

// The status, or (exit code, one sentence): kNotOurs when `mountpoint` is no wheelhouse mount.
Expected<nlohmann::json, std::pair<int, std::string>> read_status(const std::string& mountpoint);

}  // namespace whfs::cli
