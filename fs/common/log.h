#pragma once
// Logging goes through spdlog's default logger; this sets it up once, in main.

#include <string>
#include <string_view>

namespace whfs {

// Level names: trace, debug, info, warn, error, critical, off. Returns false on an unknown
// name (the caller reports it as a bad option). Logs go to stderr (the journal under systemd).
bool setup_logging(std::string_view level);

}  // namespace whfs
