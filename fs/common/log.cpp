#include "fs/common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>

namespace whfs {

bool setup_logging(std::string_view level) {
  const std::string name(level);
  const auto lvl = spdlog::level::from_str(name);
  // from_str maps unknown names to "off"; only accept "off" when asked for literally.
  if (lvl == spdlog::level::off && name != "off") return false;
  spdlog::drop("wheelhouse-fs");
  auto logger = spdlog::stderr_color_mt("wheelhouse-fs");
  spdlog::set_default_logger(logger);
  // Under systemd the journal adds its own timestamp and the unit name.
  if (std::getenv("JOURNAL_STREAM") != nullptr) {
    spdlog::set_pattern("<%l> %v");
  } else {
    spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%t] %v");
  }
  spdlog::set_level(lvl);
  spdlog::flush_on(spdlog::level::warn);
  return true;
}

}  // namespace whfs
