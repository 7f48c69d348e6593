#pragma once
// Where the Hub token comes from, and picking up a changed token file without a restart.
//
// Order: the token_file option > HF_TOKEN (legacy HUGGING_FACE_HUB_TOKEN) > the file at
// HF_TOKEN_PATH > $HF_HOME/token (HF_HOME defaults to ${XDG_CACHE_HOME:-~/.cache}/huggingface).
// HF_HUB_DISABLE_IMPLICIT_TOKEN leaves only the explicit option. A token is trimmed; an empty
// one is no token. Tokens are never logged. A token file must be a regular file of at most
// kMaxTokenFileBytes holding one line; it is opened without blocking (a FIFO never holds up a
// request), and a file other users can read is reported.

#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace whfs::hub {

class TokenSource {
 public:
  using GetEnv = std::function<const char*(const char*)>;

  // `token_file` is the option (empty: none). `getenv` is injectable for tests. A changed
  // token file is noticed at most `recheck` after the change.
  explicit TokenSource(std::filesystem::path token_file = {}, GetEnv getenv = nullptr,
                       std::chrono::milliseconds recheck = std::chrono::milliseconds(1000));

  // The current token, re-reading the file when its mtime or size changed (checked at most
  // once per `recheck`).
  std::optional<std::string> token();

  // Where the token comes from, in words, for `wheelhouse status` and logs.
  std::string describe() const;

 private:
  std::optional<std::string> read_file_locked();

  std::mutex mu_;  // guards everything below
  std::optional<std::string> env_token_;
  std::filesystem::path file_;
  std::string origin_;  // "option token_file", "HF_TOKEN", ...
  std::optional<std::string> cached_;
  std::chrono::nanoseconds mtime_{-1};
  std::uintmax_t size_ = static_cast<std::uintmax_t>(-1);
  std::chrono::steady_clock::time_point checked_{};
  const std::chrono::milliseconds recheck_;
};

// Trims spaces, tabs, CR and LF; nullopt when nothing is left.
std::optional<std::string> clean_token(std::string_view raw);

// False when a (trimmed) token holds a line break or another control character: it would
// split the Authorization header, and is not a token.
bool valid_token_text(std::string_view token);

// A token file is a small regular file; anything larger is refused rather than read.
inline constexpr std::size_t kMaxTokenFileBytes = 4096;

}  // namespace whfs::hub
