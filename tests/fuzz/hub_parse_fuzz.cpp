// Fuzzes what a server puts in the answers the client acts on: Content-Range (whether a body
// is the asked range) and signed CDN URLs (when a cached redirect stops working). Invariants:
//   - an accepted Content-Range has first <= last < total, and its canonical text parses back
//     to the same range;
//   - a RangeSink never hands on more than its range, never reports more bytes than it was
//     given or other than it handed on, and a refused body says why (and took nothing);
//   - reading an expiry out of any URL is defined (UBSan: no overflow).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fs/hub/range_sink.h"
#include "fs/hub/url.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace whfs::hub;
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  if (const auto r = parse_content_range(in)) {
    if (r->last < r->first || (r->total && *r->total <= r->last)) std::abort();
    const std::string text = "bytes " + std::to_string(r->first) + "-" + std::to_string(r->last) +
                             "/" + (r->total ? std::to_string(*r->total) : std::string("*"));
    const auto again = parse_content_range(text);
    if (!again || again->first != r->first || again->last != r->last || again->total != r->total) {
      std::abort();
    }
  }

  // The first line is the Content-Range (or Content-Length), the rest the body.
  const auto cut = in.find('\n');
  HttpResponse head;
  head.status = size % 3 == 0 ? 200 : 206;
  head.headers[head.status == 206 ? "content-range" : "content-length"] =
      std::string(in.substr(0, cut));
  const auto body = cut == std::string_view::npos ? std::string_view{} : in.substr(cut + 1);
  const std::uint64_t length = size % 64;
  std::uint64_t got = 0, handed = 0;
  auto take = [&](std::span<const std::byte> b) { handed += b.size(); };
  const std::uint64_t start = size % 7;
  RangeSink sink(take, length, &got, start, 100);
  const auto bytes = std::as_bytes(std::span(body.data(), body.size()));
  // In two pieces, as a transfer delivers it.
  const bool more = sink(head, bytes.first(bytes.size() / 2));
  if (more) (void)sink(head, bytes.subspan(bytes.size() / 2));
  if (got > length || got > body.size() || handed != got) std::abort();
  if (!sink.mismatch().empty() && got != 0) std::abort();

  (void)signed_url_expiry(in);
  return 0;
}
