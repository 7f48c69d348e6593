#pragma once
// The body of a ranged GET, checked and handed on in order: a 206 must start at the asked
// offset and name the listed size; a 200 (a server that ignored Range) is the whole file,
// skipped to the offset; anything else, or an encoded body, is a mismatch. Fresh per response:
// its first bytes decide whether the body is usable. Content-Range parsing is pure and fuzzed
// (tests/fuzz/hub_parse_fuzz.cpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "fs/common/function_ref.h"
#include "fs/hub/http.h"

namespace whfs::hub {

struct ContentRange {
  std::uint64_t first = 0;
  std::uint64_t last = 0;              // inclusive
  std::optional<std::uint64_t> total;  // nullopt for "*"
};

// "bytes 0-99/1234" or "bytes 0-99/*"; nullopt for anything else (last < first, garbage,
// numbers that do not fit).
std::optional<ContentRange> parse_content_range(std::string_view value);

class RangeSink {
 public:
  using Consume = FunctionRef<void(std::span<const std::byte>)>;
  // Hands the bytes of file offset `start` on to `consume`, at most `length` - *got of them,
  // and counts them in *got; `file_size` is as listed.
  RangeSink(Consume consume, std::uint64_t length, std::uint64_t* got, std::uint64_t start,
            std::uint64_t file_size)
      : consume_(consume), length_(length), got_(got), start_(start), file_size_(file_size) {}

  // A BodySink: false ends the transfer (full, or a mismatch).
  bool operator()(const HttpResponse& head, std::span<const std::byte> data);

  // Why the body was refused; empty when it was taken.
  const std::string& mismatch() const { return mismatch_; }

 private:
  bool check(const HttpResponse& head);

  Consume consume_;
  std::uint64_t length_;
  std::uint64_t* got_;
  std::uint64_t start_;
  std::uint64_t file_size_;
  std::uint64_t skip_ = 0;
  bool checked_ = false;
  int status_ = 0;
  std::string mismatch_;
};

}  // namespace whfs::hub
