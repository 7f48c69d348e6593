#include "fs/wheel/zip.h"

#include <zlib.h>

#include <cstring>
#include <limits>

#include "fs/wheel/little_endian.h"

namespace whfs::wheel {
namespace {

constexpr std::uint32_t kEocdSig = 0x06054b50;
constexpr std::uint32_t kZip64LocatorSig = 0x07064b50;
constexpr std::uint32_t kZip64EocdSig = 0x06064b50;
constexpr std::uint32_t kCentralSig = 0x02014b50;
constexpr std::uint32_t kLocalSig = 0x04034b50;

Unexpected<std::string> bad(const std::string& why) {
  return unexpected("not a valid zip file: " + why);
}

}  // namespace

Expected<CentralDirectory, std::string> find_central_directory(std::span<const std::byte> tail,
                                                               std::uint64_t file_size,
                                                               bool* need_more) {
  if (need_more != nullptr) *need_more = false;
  if (tail.size() > file_size) return bad("the tail is longer than the file");
  if (tail.size() < 22) return bad("shorter than an end of central directory record");
  // The record is the last one whose comment length reaches exactly to the end.
  std::size_t at = tail.size() - 22;
  bool found = false;
  for (;; --at) {
    if (little_endian(tail, at, 4) == kEocdSig &&
        at + 22 + little_endian(tail, at + 20, 2) == tail.size()) {
      found = true;
      break;
    }
    if (at == 0 || tail.size() - at > 22 + 65535) break;
  }
  if (!found) {
    if (need_more != nullptr && tail.size() < file_size && tail.size() < kMaxTail)
      *need_more = true;
    return bad("no end of central directory record in its last " + std::to_string(tail.size()) +
               " bytes");
  }
  const std::uint64_t tail_start = file_size - tail.size();
  CentralDirectory cd;
  cd.entries = little_endian(tail, at + 10, 2);
  cd.size = little_endian(tail, at + 12, 4);
  cd.offset = little_endian(tail, at + 16, 4);
  const bool zip64 = cd.entries == 0xffff || cd.size == 0xffffffff || cd.offset == 0xffffffff;
  if (zip64) {
    if (at < 20 || little_endian(tail, at - 20, 4) != kZip64LocatorSig)
      return bad("zip64 fields without a locator");
    const std::uint64_t record = little_endian(tail, at - 20 + 8, 8);
    if (record < tail_start || record - tail_start + 56 > tail.size()) {
      if (need_more != nullptr && tail.size() < file_size && tail.size() < kMaxTail)
        *need_more = true;
      return bad("its zip64 end of central directory is outside the last " +
                 std::to_string(tail.size()) + " bytes");
    }
    const auto r = static_cast<std::size_t>(record - tail_start);
    if (little_endian(tail, r, 4) != kZip64EocdSig)
      return bad("a zip64 locator that points at nothing");
    cd.entries = little_endian(tail, r + 32, 8);
    cd.size = little_endian(tail, r + 40, 8);
    cd.offset = little_endian(tail, r + 48, 8);
  }
  if (cd.offset > file_size || cd.size > file_size - cd.offset) {
    return bad("its central directory lies outside the file");
  }
  return cd;
}

Expected<std::vector<ZipEntry>, std::string> parse_central_directory(
    std::span<const std::byte> bytes, std::uint64_t expected_entries, std::uint64_t max_entries) {
  if (expected_entries > max_entries) {
    return bad(std::to_string(expected_entries) + " entries (at most " +
               std::to_string(max_entries) + " are read)");
  }
  std::vector<ZipEntry> out;
  out.reserve(static_cast<std::size_t>(expected_entries));
  std::size_t at = 0;
  while (out.size() < expected_entries) {
    if (bytes.size() - at < 46 || little_endian(bytes, at, 4) != kCentralSig) {
      return bad("entry " + std::to_string(out.size()) + " of the central directory is malformed");
    }
    ZipEntry e;
    e.method = static_cast<std::uint16_t>(little_endian(bytes, at + 10, 2));
    e.crc32 = static_cast<std::uint32_t>(little_endian(bytes, at + 16, 4));
    e.compressed_size = little_endian(bytes, at + 20, 4);
    e.size = little_endian(bytes, at + 24, 4);
    const std::size_t name_len = little_endian(bytes, at + 28, 2);
    const std::size_t extra_len = little_endian(bytes, at + 30, 2);
    const std::size_t comment_len = little_endian(bytes, at + 32, 2);
    e.local_header_offset = little_endian(bytes, at + 42, 4);
    if (bytes.size() - at - 46 < name_len + extra_len + comment_len) {
      return bad("entry " + std::to_string(out.size()) + " runs past the central directory");
    }
    e.name.assign(reinterpret_cast<const char*>(bytes.data() + at + 46), name_len);
    // The zip64 extra field holds, in this order, whichever of the three were 0xffffffff.
    std::size_t x = at + 46 + name_len;
    const std::size_t x_end = x + extra_len;
    while (x + 4 <= x_end) {
      const auto id = little_endian(bytes, x, 2);
      const std::size_t len = little_endian(bytes, x + 2, 2);
      if (x + 4 + len > x_end) break;
      if (id == 0x0001) {
        std::size_t f = x + 4;
        auto take = [&](std::uint64_t& field) {
          if (field != 0xffffffff) return true;
          if (f + 8 > x + 4 + len) return false;
          field = little_endian(bytes, f, 8);
          f += 8;
          return true;
        };
        if (!take(e.size) || !take(e.compressed_size) || !take(e.local_header_offset)) {
          return bad("a zip64 extra field too short for " + e.name);
        }
      }
      x += 4 + len;
    }
    at += 46 + name_len + extra_len + comment_len;
    out.push_back(std::move(e));
  }
  return out;
}

Expected<std::uint64_t, std::string> member_data_offset(std::span<const std::byte> local_header,
                                                        const ZipEntry& entry) {
  if (local_header.size() < 30 || little_endian(local_header, 0, 4) != kLocalSig) {
    return bad("no local header for " + entry.name);
  }
  const std::uint64_t name_len = little_endian(local_header, 26, 2);
  const std::uint64_t extra_len = little_endian(local_header, 28, 2);
  if (entry.local_header_offset >
      std::numeric_limits<std::uint64_t>::max() - 30 - name_len - extra_len) {
    return bad("the local header of " + entry.name + " overflows");
  }
  return entry.local_header_offset + 30 + name_len + extra_len;
}

Expected<std::string, std::string> extract_member(std::span<const std::byte> data,
                                                  const ZipEntry& entry, std::uint64_t max_size) {
  if (entry.size > max_size) {
    return unexpected(entry.name + " is " + std::to_string(entry.size) + " bytes (at most " +
                      std::to_string(max_size) + " are read)");
  }
  if (data.size() != entry.compressed_size) return bad(entry.name + ": truncated data");
  std::string out;
  if (entry.method == 0) {
    if (entry.compressed_size != entry.size) return bad(entry.name + ": stored sizes differ");
    out.assign(reinterpret_cast<const char*>(data.data()), data.size());
  } else if (entry.method == 8) {
    out.resize(static_cast<std::size_t>(entry.size));
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return unexpected(std::string("zlib: cannot start"));
    z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(data.data()));
    z.avail_in = static_cast<uInt>(data.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    const int rc = inflate(&z, Z_FINISH);
    const std::uint64_t produced = z.total_out;
    inflateEnd(&z);
    if (rc != Z_STREAM_END || produced != entry.size) {
      return bad(entry.name + ": its deflated data does not inflate to " +
                 std::to_string(entry.size) + " bytes");
    }
  } else {
    return unexpected(entry.name + " uses compression method " + std::to_string(entry.method) +
                      " (only stored and deflated are read)");
  }
  const auto crc = static_cast<std::uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(out.size())));
  if (crc != entry.crc32) return bad(entry.name + ": CRC-32 mismatch");
  return out;
}

const ZipEntry* find_dist_info_file(const std::vector<ZipEntry>& entries, std::string_view file) {
  const ZipEntry* found = nullptr;
  for (const auto& e : entries) {
    const auto slash = e.name.find('/');
    if (slash == std::string::npos || e.name.find('/', slash + 1) != std::string::npos) continue;
    const std::string_view dir(e.name.data(), slash);
    if (!dir.ends_with(".dist-info") || std::string_view(e.name).substr(slash + 1) != file)
      continue;
    if (found != nullptr) return nullptr;  // two dist-info folders: which one is the wheel's?
    found = &e;
  }
  return found;
}

}  // namespace whfs::wheel
