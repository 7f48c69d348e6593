#include "fs/hub/token.h"

#include <spdlog/spdlog.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
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

TokenSource::TokenSource(std::filesystem::path token_file, GetEnv getenv) {
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
      if (auto t = clean_token(v)) {
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
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(file_, ec);
  if (ec) {
    if (cached_) spdlog::info("token file {} is gone; continuing without a token", file_.string());
    cached_.reset();
    size_ = static_cast<std::uintmax_t>(-1);
    return cached_;
  }
  const auto size = std::filesystem::file_size(file_, ec);
  if (!ec && mtime == mtime_ && size == size_) return cached_;
  std::ifstream in(file_);
  if (!in) {
    spdlog::warn("cannot read the token file {}; continuing without a token", file_.string());
    cached_.reset();
    return cached_;
  }
  std::ostringstream text;
  text << in.rdbuf();
  const bool had = cached_.has_value();
  cached_ = clean_token(text.str());
  if (had) spdlog::info("token file {} changed; using the new token", file_.string());
  mtime_ = mtime;
  size_ = ec ? static_cast<std::uintmax_t>(-1) : size;
  return cached_;
}

std::string TokenSource::describe() const { return origin_; }

}  // namespace whfs::hub
