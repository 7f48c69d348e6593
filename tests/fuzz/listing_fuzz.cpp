// Fuzzes the Hub listing parsers with arbitrary bytes: tree pages (with the folder and mode
// taken from the first bytes), revision info and Link headers. Any crash, sanitizer report or
// accepted entry with an unsafe path is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fs/hub/listing.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // First byte: mode and folder length; then the folder; then the body.
  const bool recursive = !in.empty() && (in[0] & 1) != 0;
  const std::size_t folder_len = in.empty() ? 0 : static_cast<unsigned char>(in[0]) >> 4;
  in.remove_prefix(in.empty() ? 0 : 1);
  const std::string_view folder = in.substr(0, std::min(folder_len, in.size()));
  const std::string_view body = in.substr(folder.size());

  auto page = whfs::hub::parse_tree_page(body, folder, recursive);
  if (page) {
    for (const auto& e : page->entries) {
      // Whatever the parser accepts must pass the path check it promises.
      if (whfs::hub::check_remote_path(e.path, folder, recursive)) std::abort();
    }
  }
  (void)whfs::hub::parse_revision_info(body);
  (void)whfs::hub::parse_link_next(body);
  return 0;
}
