#include "fs/publish/local_zip.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

namespace whfs::publish {
namespace {

constexpr std::size_t kChunk = 1 << 20;
constexpr std::uint64_t kMaxCentralDirectory = 64 << 20;

std::string errno_text() { return std::error_code(errno, std::generic_category()).message(); }

std::span<const std::byte> bytes_of(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

}  // namespace

Expected<std::string, std::string> LocalZip::read(std::uint64_t offset,
                                                  std::uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    return unexpected("a zip record points past the end of the file");
  }
  std::string out(static_cast<std::size_t>(length), '\0');
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n =
        ::pread(fd_, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return unexpected("read error: " + errno_text());
    if (n == 0) return unexpected(std::string("the file shrank while it was read"));
    got += static_cast<std::size_t>(n);
  }
  return out;
}

Expected<std::vector<wheel::ZipEntry>, std::string> LocalZip::directory() const {
  const std::uint64_t tail_len = std::min(size_, wheel::kMaxTail);
  auto tail = read(size_ - tail_len, tail_len);
  if (!tail) return unexpected(tail.error());
  auto cd = wheel::find_central_directory(bytes_of(*tail), size_);
  if (!cd) return unexpected(cd.error());
  if (cd->size > kMaxCentralDirectory)
    return unexpected(std::string("its zip index is over 64 MiB"));
  auto dir = read(cd->offset, cd->size);
  if (!dir) return unexpected(dir.error());
  return wheel::parse_central_directory(bytes_of(*dir), cd->entries);
}

Expected<std::uint64_t, std::string> LocalZip::data_offset(const wheel::ZipEntry& e) const {
  auto header = read(e.local_header_offset, 30);
  if (!header) return unexpected(header.error());
  return wheel::member_data_offset(bytes_of(*header), e);
}

Expected<void, std::string> LocalZip::stream_member(const wheel::ZipEntry& e, Sink take) const {
  if (e.method != 0 && e.method != 8) {
    return unexpected(e.name + " uses compression method " + std::to_string(e.method) +
                      " (wheels use stored or deflated)");
  }
  auto at = data_offset(e);
  if (!at) return unexpected(at.error());
  uLong crc = crc32(0, nullptr, 0);
  std::uint64_t produced = 0;
  auto give = [&](const char* p, std::size_t n) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(p), static_cast<uInt>(n));
    produced += n;
    take(p, n);
  };
  z_stream z{};
  if (e.method == 8 && inflateInit2(&z, -MAX_WBITS) != Z_OK) {
    return unexpected(std::string("zlib cannot start"));
  }
  std::string out(e.method == 8 ? kChunk : 0, '\0');
  int rc = Z_OK;
  for (std::uint64_t done = 0; done < e.compressed_size;) {
    auto in = read(*at + done, std::min<std::uint64_t>(kChunk, e.compressed_size - done));
    if (!in) {
      if (e.method == 8) inflateEnd(&z);
      return unexpected(in.error());
    }
    done += in->size();
    if (e.method == 0) {
      give(in->data(), in->size());
      continue;
    }
    z.next_in = reinterpret_cast<Bytef*>(in->data());
    z.avail_in = static_cast<uInt>(in->size());
    while (z.avail_in > 0 && rc != Z_STREAM_END) {
      z.next_out = reinterpret_cast<Bytef*>(out.data());
      z.avail_out = static_cast<uInt>(out.size());
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) break;
      give(out.data(), out.size() - z.avail_out);
    }
    if (rc != Z_OK && rc != Z_STREAM_END) break;
  }
  if (e.method == 8) inflateEnd(&z);
  if ((e.method == 8 && rc != Z_STREAM_END) || produced != e.size) {
    return unexpected(e.name + ": its compressed data does not give " + std::to_string(e.size) +
                      " bytes");
  }
  if (crc != e.crc32) return unexpected(e.name + ": CRC-32 mismatch");
  return {};
}

Expected<std::string, std::string> LocalZip::member(const wheel::ZipEntry& e,
                                                    std::uint64_t max) const {
  // The central directory's size is the one to trust before inflating: the stream is cut off
  // at `max` whatever it claims, and then refused by the size check.
  if (e.size > max) {
    return unexpected(e.name + " is " + std::to_string(e.size) + " bytes uncompressed (at most " +
                      std::to_string(max) + " are read)");
  }
  std::string out;
  out.reserve(static_cast<std::size_t>(e.size));
  bool over = false;
  auto ok = stream_member(e, [&](const char* p, std::size_t n) {
    if (over || out.size() + n > max) {
      over = true;
      return;
    }
    out.append(p, n);
  });
  if (!ok) return unexpected(ok.error());
  return out;
}

}  // namespace whfs::publish
