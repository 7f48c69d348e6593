#include "fs/hub/token.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace whfs::hub {
namespace {

bool truthy(const char* v) {
  if (v == nullptr) return false;
  std::string s(v);
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s == "1" || s == "ON" || s == "YES" || s == "TRUE";
}

}  // namespace

std::optional<std::string> clean_token(std::string_view raw) {
  const auto first = raw.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return std::nullopt;
  const auto last = raw.find_last_not_of(" \t\r\n");
  return std::string(raw.substr(first, last - first + 1));
}

TokenSource::TokenSource(std::filesystem::path token_file, GetEnv getenv,
                         std::chrono::milliseconds recheck)
    : recheck_(recheck) {
  if (!getenv) getenv = [](const char* name) { return std::getenv(name); };
  if (!token_file.empty()) {
    file_ = std::move(token_file);
    origin_ = "token_file option (" + file_.string() + ")";
    return;
  }
  if (truthy(getenv("HF_HUB_DISABLE_IMPLICIT_TOKEN"))) {
    origin_ = "none (HF_HUB_DISABLE_IMPLICIT_TOKEN is set)";
    return;
  }
  for (const char* var : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    if (const char* v = getenv(var)) {
      if (auto t = clean_token(v); t && !valid_token_text(*t)) {
        spdlog::warn("{} holds more than one line or control characters; not used", var);
      } else if (t) {
        env_token_ = std::move(t);
        origin_ = var;
        return;
      }
    }
  }
  if (const char* p = getenv("HF_TOKEN_PATH"); p != nullptr && *p != '\0') {
    file_ = p;
    origin_ = "HF_TOKEN_PATH (" + file_.string() + ")";
    return;
  }
  std::filesystem::path home;
  if (const char* h = getenv("HF_HOME"); h != nullptr && *h != '\0') {
    home = h;
  } else if (const char* x = getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    home = std::filesystem::path(x) / "huggingface";
  } else if (const char* u = getenv("HOME"); u != nullptr && *u != '\0') {
    home = std::filesystem::path(u) / ".cache" / "huggingface";
  }
  if (!home.empty()) {
    file_ = home / "token";
    origin_ = file_.string();
  } else {
    origin_ = "none";
  }
}

std::optional<std::string> TokenSource::token() {
  std::lock_guard lock(mu_);
  if (env_token_) return env_token_;
  if (file_.empty()) return std::nullopt;
  const auto now = std::chrono::steady_clock::now();
  if (checked_ != std::chrono::steady_clock::time_point{} && now - checked_ < recheck_) {
    return cached_;
  }
  checked_ = now;
  return read_file_locked();
}

std::optional<std::string> TokenSource::read_file_locked() {
  // Non-blocking: a FIFO (or a device) named as the token file must not hold up requests.
  const int fd = ::open(file_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) {
      if (cached_)
        spdlog::info("token file {} is gone; continuing without a token", file_.string());
    } else {
      spdlog::warn("cannot read the token file {} ({}); continuing without a token", file_.string(),
                   std::strerror(errno));
    }
    cached_.reset();
    size_ = static_cast<std::uintmax_t>(-1);
    return cached_;
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    cached_.reset();
    return cached_;
  }
  const auto mtime = std::chrono::nanoseconds(std::uint64_t(st.st_mtim.tv_sec) * 1000000000 +
                                              std::uint64_t(st.st_mtim.tv_nsec));
  if (S_ISREG(st.st_mode) && mtime == mtime_ && static_cast<std::uintmax_t>(st.st_size) == size_) {
    return cached_;
  }
  const bool had = cached_.has_value();
  cached_.reset();
  mtime_ = mtime;
  size_ = static_cast<std::uintmax_t>(st.st_size);
  auto refuse = [&](const std::string& why) {
    spdlog::warn("token file {} {}; continuing without a token", file_.string(), why);
    return cached_;
  };
  if (!S_ISREG(st.st_mode)) return refuse("is not a regular file");
  if (st.st_size > static_cast<off_t>(kMaxTokenFileBytes)) {
    return refuse("is larger than " + std::to_string(kMaxTokenFileBytes) + " bytes");
  }
  if ((st.st_mode & 077) != 0) {
    spdlog::warn("token file {} can be read by other users (mode {:04o}); chmod 600 it",
                 file_.string(), st.st_mode & 07777);
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  auto token = clean_token(text);
  if (token && !valid_token_text(*token)) {
    return refuse("holds more than one line or control characters");
  }
  cached_ = std::move(token);
  if (had) spdlog::info("token file {} changed; using the new token", file_.string());
  return cached_;
}

bool valid_token_text(std::string_view token) {
  return std::none_of(token.begin(), token.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
}

std::string TokenSource::describe() const { return origin_; }

}  // namespace whfs::hub
