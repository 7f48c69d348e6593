#include "fs/common/log.h"

#include <fcntl.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>

namespace whfs {
namespace {

constexpr const char* kLoggerName = "wheelhouse-fs";
constexpr std::size_t kRecent = 20;

std::string timestamp(spdlog::log_clock::time_point t) {
  const std::time_t secs = spdlog::log_clock::to_time_t(t);
  std::tm tm{};
  ::localtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S%z", &tm);
  return buf;
}

// Counts every line by level, and keeps the last kRecent distinct warnings and errors.
class ProblemSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<Problem> problems() {
    std::lock_guard lock(mutex_);
    return {recent_.begin(), recent_.end()};
  }
  std::array<std::uint64_t, 6> counts() {
    std::lock_guard lock(mutex_);
    return counts_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const auto lvl = static_cast<std::size_t>(msg.level);
    if (lvl < counts_.size()) counts_[lvl]++;
    if (msg.level < spdlog::level::warn || msg.level == spdlog::level::off) return;
    std::string text(msg.payload.data(), msg.payload.size());
    const std::string when = timestamp(msg.time);
    const auto it = std::find_if(recent_.begin(), recent_.end(),
                                 [&](const Problem& p) { return p.message == text; });
    Problem p;
    if (it != recent_.end()) {
      p = std::move(*it);
      recent_.erase(it);
    } else {
      p.message = std::move(text);
      p.first = when;
    }
    p.level = msg.level == spdlog::level::warn  ? "warning"
              : msg.level == spdlog::level::err ? "error"
                                                : "critical";
    p.last = when;
    p.count++;
    recent_.push_back(std::move(p));
    if (recent_.size() > kRecent) recent_.pop_front();
  }
  void flush_() override {}

 private:
  std::deque<Problem> recent_;
  std::array<std::uint64_t, 6> counts_{};
};

std::shared_ptr<ProblemSink> problem_sink() {
  static const auto sink = std::make_shared<ProblemSink>();
  return sink;
}

void install(std::shared_ptr<spdlog::sinks::sink> main_sink, spdlog::level::level_enum level) {
  auto logger = std::make_shared<spdlog::logger>(
      kLoggerName, spdlog::sinks_init_list{std::move(main_sink), problem_sink()});
  logger->set_level(level);
  // Info and above at once: the mount, refresh and fallback lines are what an admin tails.
  logger->flush_on(spdlog::level::info);
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
  // Debug and trace lines within a second (the thread is started here, after the fork).
  spdlog::flush_every(std::chrono::seconds(1));
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

std::vector<Problem> recent_problems() { return problem_sink()->problems(); }

std::array<std::uint64_t, 6> log_line_counts() { return problem_sink()->counts(); }

}  // namespace whfs
