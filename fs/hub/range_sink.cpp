#include "fs/hub/range_sink.h"

#include <algorithm>
#include <charconv>

namespace whfs::hub {
namespace {

std::optional<std::uint64_t> number(std::string_view s) {
  std::uint64_t v = 0;
  if (s.empty()) return std::nullopt;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<ContentRange> parse_content_range(std::string_view value) {
  constexpr std::string_view kUnit = "bytes ";
  if (!value.starts_with(kUnit)) return std::nullopt;
  value.remove_prefix(kUnit.size());
  const auto dash = value.find('-');
  const auto slash = value.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) {
    return std::nullopt;
  }
  ContentRange r;
  const auto first = number(value.substr(0, dash));
  const auto last = number(value.substr(dash + 1, slash - dash - 1));
  if (!first || !last || *last < *first) return std::nullopt;
  r.first = *first;
  r.last = *last;
  const auto total = value.substr(slash + 1);
  if (total != "*") {
    r.total = number(total);
    if (!r.total || *r.total <= r.last) return std::nullopt;
  }
  return r;
}

bool RangeSink::operator()(const HttpResponse& head, std::span<const std::byte> data) {
  if (!checked_ && !check(head)) return false;
  if (skip_ > 0) {
    const auto n = std::min<std::uint64_t>(skip_, data.size());
    skip_ -= n;
    data = data.subspan(n);
  }
  const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(data.size(), length_ - *got_));
  if (n > 0) consume_(data.first(n));
  *got_ += n;
  if (*got_ < length_) return true;
  // Full. A 206 that ends here completes normally and keeps its connection for the next
  // request; the rest of a 200 (the whole file) or bytes beyond the range are not wanted.
  return status_ == 206 && n == data.size();
}

bool RangeSink::check(const HttpResponse& head) {
  checked_ = true;
  status_ = head.status;
  const std::string enc = head.header("content-encoding");
  if (!enc.empty() && enc != "identity") {
    mismatch_ = "body is " + enc + "-encoded although identity was asked for";
    return false;
  }
  if (head.status == 206) {
    const std::string cr = head.header("content-range");
    const auto range = parse_content_range(cr);
    if (!range) {
      mismatch_ = "206 without a valid Content-Range (\"" + cr + "\")";
      return false;
    }
    if (range->first != start_) {
      mismatch_ =
          "206 for offset " + std::to_string(range->first) + ", asked " + std::to_string(start_);
      return false;
    }
    if (range->total && *range->total != file_size_) {
      mismatch_ = "file is " + std::to_string(*range->total) + " bytes, listed as " +
                  std::to_string(file_size_);
      return false;
    }
    return true;
  }
  if (head.status == 200) {
    // The server ignored Range: the body is the whole file; skip to our offset.
    const std::string cl = head.header("content-length");
    if (!cl.empty() && number(cl) != file_size_) {
      mismatch_ = "200 body of " + cl + " bytes, listed as " + std::to_string(file_size_);
      return false;
    }
    skip_ = start_;
    return true;
  }
  mismatch_ = "unexpected status " + std::to_string(head.status);
  return false;
}

}  // namespace whfs::hub
