#pragma once
// Zips as wheels are written, for the tests of the code that reads them (fs/wheel's zip reader,
// fs/check's wheel checks): members stored or deflated, a local extra field the
// reader must skip, an archive comment, the zip64 end records.

#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

namespace whfs::test {

inline void put_le(std::string& s, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

inline std::string deflate_raw(const std::string& in) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(in.size() + in.size() / 100 + 128, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Member {
  std::string name;
  std::string data;
  bool deflate = false;
  bool bad_crc = false;  // write a CRC-32 that does not match the data
};

// A zip as wheels are written: local headers and data, the central directory, the end record
// (with `comment`); with `zip64`, the zip64 end record and locator too.
inline std::string make_zip(const std::vector<Member>& members, const std::string& comment = "",
                            bool zip64 = false) {
  std::string out;
  std::string central;
  for (const auto& m : members) {
    const std::string data = m.deflate ? deflate_raw(m.data) : m.data;
    auto crc = static_cast<std::uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(m.data.data()), static_cast<uInt>(m.data.size())));
    if (m.bad_crc) crc ^= 1;
    const std::uint64_t offset = out.size();
    put_le(out, 0x04034b50, 4);
    put_le(out, 20, 2);
    put_le(out, 0, 2);
    put_le(out, m.deflate ? 8 : 0, 2);
    put_le(out, 0, 4);
    put_le(out, crc, 4);
    put_le(out, data.size(), 4);
    put_le(out, m.data.size(), 4);
    put_le(out, m.name.size(), 2);
    put_le(out, 3, 2);  // an extra field the reader must skip
    out += m.name + "xyz" + data;
    put_le(central, 0x02014b50, 4);
    put_le(central, 20, 2);
    put_le(central, 20, 2);
    put_le(central, 0, 2);
    put_le(central, m.deflate ? 8 : 0, 2);
    put_le(central, 0, 4);
    put_le(central, crc, 4);
    put_le(central, data.size(), 4);
    put_le(central, m.data.size(), 4);
    put_le(central, m.name.size(), 2);
    put_le(central, 0, 2);
    put_le(central, 0, 2);
    put_le(central, 0, 2);
    put_le(central, 0, 2);
    put_le(central, 0, 4);
    put_le(central, offset, 4);
    central += m.name;
  }
  const std::uint64_t cd_offset = out.size();
  out += central;
  if (zip64) {
    const std::uint64_t record = out.size();
    put_le(out, 0x06064b50, 4);
    put_le(out, 44, 8);
    put_le(out, 45, 2);
    put_le(out, 45, 2);
    put_le(out, 0, 4);
    put_le(out, 0, 4);
    put_le(out, members.size(), 8);
    put_le(out, members.size(), 8);
    put_le(out, central.size(), 8);
    put_le(out, cd_offset, 8);
    put_le(out, 0x07064b50, 4);
    put_le(out, 0, 4);
    put_le(out, record, 8);
    put_le(out, 1, 4);
  }
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 2);
  put_le(out, 0, 2);
  put_le(out, zip64 ? 0xffff : members.size(), 2);
  put_le(out, zip64 ? 0xffff : members.size(), 2);
  put_le(out, zip64 ? 0xffffffff : central.size(), 4);
  put_le(out, zip64 ? 0xffffffff : cd_offset, 4);
  put_le(out, comment.size(), 2);
  return out + comment;
}

}  // namespace whfs::test
