#include "fs/common/log.h"

#include <fcntl.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>

namespace whfs {
namespace {

constexpr const char* kLoggerName = "wheelhouse-fs";
constexpr std::size_t kRecent = 20;

std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> recent_sink() {
  static const auto sink = [] {
    auto s = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(kRecent);
    s->set_level(spdlog::level::warn);
    s->set_pattern("%Y-%m-%dT%H:%M:%S%z %l %v");
    return s;
  }();
  return sink;
}

void install(std::shared_ptr<spdlog::sinks::sink> main_sink, spdlog::level::level_enum level) {
  auto logger = std::make_shared<spdlog::logger>(
      kLoggerName, spdlog::sinks_init_list{std::move(main_sink), recent_sink()});
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  spdlog::drop(kLoggerName);
  spdlog::register_logger(logger);
  spdlog::set_default_logger(logger);
}

}  // namespace

bool setup_logging(std::string_view level) {
  const std::string name(level);
  const auto lvl = spdlog::level::from_str(name);
  // from_str maps unknown names to "off"; only accept "off" when asked for literally.
  if (lvl == spdlog::level::off && name != "off") return false;
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  // Under systemd the journal adds its own timestamp and the unit name.
  if (std::getenv("JOURNAL_STREAM") != nullptr) {
    sink->set_pattern("<%l> %v");
  } else {
    sink->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ [%t] %v");
  }
  install(std::move(sink), lvl);
  return true;
}

std::string log_detached(const std::string& file, const std::string& fallback_file) {
  const auto level = spdlog::default_logger()->level();
  std::string target = file;
  if (target.empty()) {
    struct stat st {};
    if (::stat("/dev/log", &st) == 0 && S_ISSOCK(st.st_mode)) {
      install(std::make_shared<spdlog::sinks::syslog_sink_mt>("wheelhousefs", LOG_PID, LOG_DAEMON,
                                                              false),
              level);
      return "syslog (the journal)";
    }
    target = fallback_file;
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(target).parent_path(), ec);
  // Created private: the log names the paths users read.
  const int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return "";
  ::close(fd);
  try {
    auto sink = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(target, 10u << 20, 3, false);
    sink->set_pattern("%Y-%m-%d %H:%M:%S.%e %l [%P/%t] %v");
    install(std::move(sink), level);
  } catch (const spdlog::spdlog_ex&) {
    return "";
  }
  return target;
}

std::vector<std::string> recent_problems() { return recent_sink()->last_formatted(); }

}  // namespace whfs
