#pragma once
// Just enough of the zip format to take one member out of a wheel without reading the rest:
// the end-of-central-directory record (and its zip64 form) from the file's tail, the central
// directory, a member's local header, and its bytes (stored or deflated). Pure functions over
// bytes that come from the network: every length and offset is checked, sizes are bounded,
// and a member's CRC-32 is checked after inflating.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fs/common/expected.h"

namespace whfs::wheel {

// How many bytes at the end of a file hold the end-of-central-directory record whatever its
// comment (22 + a 65535-byte comment), and the zip64 locator before it.
inline constexpr std::uint64_t kMaxTail = 22 + 65535 + 20;

struct CentralDirectory {
  std::uint64_t offset = 0;  // where it starts in the file
  std::uint64_t size = 0;
  std::uint64_t entries = 0;
};

// Where the central directory is, from the last `tail.size()` bytes of a file of `file_size`
// bytes. The error says what is wrong ("not a zip file: no end of central directory ...").
// `need_more` is set when the record may lie further back than this tail (read kMaxTail).
Expected<CentralDirectory, std::string> find_central_directory(std::span<const std::byte> tail,
                                                               std::uint64_t file_size,
                                                               bool* need_more = nullptr);

struct ZipEntry {
  std::string name;
  std::uint16_t method = 0;  // 0 stored, 8 deflated
  std::uint32_t crc32 = 0;
  std::uint64_t compressed_size = 0;
  std::uint64_t size = 0;
  std::uint64_t local_header_offset = 0;
};

// The entries of a central directory (its bytes, as found above), at most `max_entries`.
Expected<std::vector<ZipEntry>, std::string> parse_central_directory(
    std::span<const std::byte> bytes, std::uint64_t expected_entries,
    std::uint64_t max_entries = 1u << 20);

// The local header of `entry` is 30 bytes plus its own name and extra field lengths: the offset
// of the member's data, from at least the first 30 bytes of the local header.
Expected<std::uint64_t, std::string> member_data_offset(std::span<const std::byte> local_header,
                                                        const ZipEntry& entry);

// The member's bytes from its compressed data, at most `max_size` of them, checked against its
// CRC-32.
Expected<std::string, std::string> extract_member(std::span<const std::byte> data,
                                                  const ZipEntry& entry, std::uint64_t max_size);

// The wheel's own metadata file among the entries: "<name>-<version>.dist-info/<file>" at the
// top level (exactly one such folder must hold it). Null when there is none or several.
const ZipEntry* find_dist_info_file(const std::vector<ZipEntry>& entries, std::string_view file);

}  // namespace whfs::wheel
