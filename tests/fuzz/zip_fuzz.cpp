// Fuzzes the zip reading of fs/wheel (a wheel's end, its central directory, a member) and the
// METADATA/RECORD helpers, over bytes that stand for a whole wheel from the network. Any crash,
// sanitizer report or read outside the input is a bug; so is an offset that points past the
// file once accepted.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include "fs/wheel/wheel_metadata.h"
#include "fs/wheel/zip.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace whfs::wheel;
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)requires_python_of(text);
  (void)served_metadata(text);
  (void)record_sha256(text, "a-1.dist-info/METADATA");

  const std::size_t tail_len = std::min<std::size_t>(size, 4096);
  auto cd = find_central_directory(file.subspan(size - tail_len), size);
  if (!cd) return 0;
  if (cd->offset > size || cd->size > size - cd->offset) std::abort();
  auto entries = parse_central_directory(
      file.subspan(static_cast<std::size_t>(cd->offset), static_cast<std::size_t>(cd->size)),
      cd->entries, 4096);
  if (!entries) return 0;
  for (const auto& e : *entries) {
    if (e.local_header_offset >= size) continue;
    const std::size_t at = static_cast<std::size_t>(e.local_header_offset);
    auto off = member_data_offset(file.subspan(at, std::min<std::size_t>(30, size - at)), e);
    if (!off || *off > size || e.compressed_size > size - *off) continue;
    (void)extract_member(
        file.subspan(static_cast<std::size_t>(*off), static_cast<std::size_t>(e.compressed_size)),
        e, 1 << 20);
  }
  (void)find_dist_info_file(*entries, "METADATA");
  return 0;
}
