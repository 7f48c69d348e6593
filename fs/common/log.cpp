#include "fs/common/log.h"

#include <fcntl.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
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

// Formatted lines into a LogFile.
class OwnFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit OwnFileSink(std::unique_ptr<LogFile> file) : file_(std::move(file)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    file_->write(std::string_view(line.data(), line.size()));
  }
  void flush_() override {}  // each line is written at once

 private:
  std::unique_ptr<LogFile> file_;
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

Expected<std::string, std::string> log_detached(std::unique_ptr<LogFile> file,
                                                const std::string& fallback_file,
                                                std::uint64_t rotate_at) {
  const auto level = spdlog::default_logger()->level();
  // Debug and trace lines within a second (the thread is started here, after the fork).
  spdlog::flush_every(std::chrono::seconds(1));
  if (!file) {
    struct stat st {};
    if (::stat("/dev/log", &st) == 0 && S_ISSOCK(st.st_mode)) {
      install(std::make_shared<spdlog::sinks::syslog_sink_mt>("wheelhousefs", LOG_PID, LOG_DAEMON,
                                                              false),
              level);
      return std::string("syslog (the journal)");
    }
    if (fallback_file.empty()) return unexpected(std::string("no log file (HOME is not set)"));
    auto fallback = LogFile::open(fallback_file, rotate_at, fallback_file);
    if (!fallback) return unexpected(fallback.error());
    file = std::move(*fallback);
  }
  std::string where = file->path();
  auto sink = std::make_shared<OwnFileSink>(std::move(file));
  sink->set_pattern("%Y-%m-%d %H:%M:%S.%e %l [%P/%t] %v");
  install(std::move(sink), level);
  return where;
}

// ---- LogFile ---------------------------------------------------------------------------

std::string rotated_name(const std::string& name, int n) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == name.size()) {
    return name + "." + std::to_string(n);
  }
  return name.substr(0, dot) + "." + std::to_string(n) + name.substr(dot);
}

LogFile::LogFile(OwnFolder folder, std::string name, std::string path, int fd, std::uint64_t size,
                 std::uint64_t rotate_at)
    : folder_(std::move(folder)),
      name_(std::move(name)),
      path_(std::move(path)),
      fd_(fd),
      size_(size),
      rotate_at_(rotate_at) {}

LogFile::~LogFile() { ::close(fd_); }

Expected<std::unique_ptr<LogFile>, std::string> LogFile::open(const std::string& path,
                                                              std::uint64_t rotate_at,
                                                              const std::string& what) {
  const auto slash = path.rfind('/');
  if (path.empty() || path[0] != '/' || slash == std::string::npos || slash + 1 == path.size()) {
    return unexpected(what + ": not an absolute path to a file");
  }
  const std::string name = path.substr(slash + 1);
  if (name == "." || name == "..") return unexpected(what + ": not an absolute path to a file");
  auto folder = OwnFolder::open(slash == 0 ? "/" : path.substr(0, slash), true, what);
  if (!folder) return unexpected(folder.error());
  // Created private: the log names the paths users read.
  auto fd = open_own_file(*folder, name, 0600, what);
  if (!fd) return unexpected(fd.error());
  struct stat st {};
  ::fstat(*fd, &st);
  return std::unique_ptr<LogFile>(new LogFile(std::move(*folder), name, path, *fd,
                                              static_cast<std::uint64_t>(st.st_size), rotate_at));
}

void LogFile::write(std::string_view text) {
  if (size_ > 0 && size_ + text.size() > rotate_at_) rotate();
  std::size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a full disk: the line is lost (the problems list keeps it)
    off += static_cast<std::size_t>(n);
  }
  size_ += off;
}

void LogFile::rotate() {
  struct stat open_st {};
  if (::fstat(fd_, &open_st) == 0 && static_cast<std::uint64_t>(open_st.st_size) < size_) {
    size_ = static_cast<std::uint64_t>(open_st.st_size);  // truncated by another (copytruncate)
    return;
  }
  std::string problem;
  // Renamed only while PATH is still this file (another tool may have moved it away: then a
  // new PATH is made, or the one it made taken when it is this user's own).
  struct stat named {};
  if (::fstatat(folder_.fd(), name_.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
      named.st_dev == open_st.st_dev && named.st_ino == open_st.st_ino) {
    for (int i = kLogsKept - 1; i >= 1; --i) {
      const std::string from = rotated_name(name_, i);
      const std::string to = rotated_name(name_, i + 1);
      ::renameat(folder_.fd(), from.c_str(), folder_.fd(), to.c_str());
    }
    const std::string first = rotated_name(name_, 1);
    if (::renameat(folder_.fd(), name_.c_str(), folder_.fd(), first.c_str()) != 0) {
      problem = path_ + ": cannot rename it to " + first + ": " + std::strerror(errno);
    }
  }
  if (problem.empty()) {
    auto fd = open_own_file(folder_, name_, 0600, path_);
    if (fd) {
      ::close(fd_);
      fd_ = *fd;
      struct stat st {};
      ::fstat(fd_, &st);
      size_ = static_cast<std::uint64_t>(st.st_size);
      rotation_problem_.clear();
      return;
    }
    problem = fd.error();
  }
  // Lines go on to the file open until now; the next try is another rotate_at bytes away.
  rotation_problem_ = problem;
  const std::string line = "wheelhousefs: cannot rotate the log: " + problem + "\n";
  (void)!::write(fd_, line.data(), line.size());
  size_ = 0;
}

std::vector<Problem> recent_problems() { return problem_sink()->problems(); }

std::array<std::uint64_t, 6> log_line_counts() { return problem_sink()->counts(); }

}  // namespace whfs
