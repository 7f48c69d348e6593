#pragma once
// Wheels for the publish tests, written in C++: a zip of members (stored or deflated) with a
// dist-info whose RECORD is computed from the members, unless a test writes its own.

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fs/common/base64.h"
#include "fs/common/hash.h"

namespace whfs::publish::test {

struct Member {
  std::string name;
  std::string data;
  bool deflate = false;
  bool bad_crc = false;  // write a CRC-32 that does not match the data
};

inline void put_le(std::string& s, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

inline std::string deflate_raw(const std::string& in) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
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

inline std::string make_zip(const std::vector<Member>& members) {
  std::string out;
  std::string central;
  for (const auto& m : members) {
    const std::string data = m.deflate ? deflate_raw(m.data) : m.data;
    auto crc = static_cast<std::uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(m.data.data()), static_cast<uInt>(m.data.size())));
    if (m.bad_crc) crc ^= 1;
    const std::uint64_t offset = out.size();
    std::string common;
    put_le(common, 0, 2);  // flags
    put_le(common, m.deflate ? 8 : 0, 2);
    put_le(common, 0, 4);  // time, date
    put_le(common, crc, 4);
    put_le(common, data.size(), 4);
    put_le(common, m.data.size(), 4);
    put_le(common, m.name.size(), 2);
    put_le(common, 0, 2);  // extra
    put_le(out, 0x04034b50, 4);
    put_le(out, 20, 2);
    out += common + m.name + data;
    put_le(central, 0x02014b50, 4);
    put_le(central, 20, 2);
    put_le(central, 20, 2);
    central += common;
    put_le(central, 0, 2);  // comment
    put_le(central, 0, 2);  // disk
    put_le(central, 0, 2);  // internal attributes
    put_le(central, 0, 4);  // external attributes
    put_le(central, offset, 4);
    central += m.name;
  }
  const std::uint64_t cd_offset = out.size();
  out += central;
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 4);
  put_le(out, members.size(), 2);
  put_le(out, members.size(), 2);
  put_le(out, central.size(), 4);
  put_le(out, cd_offset, 4);
  put_le(out, 0, 2);
  return out;
}

// "sha256=<urlsafe base64>" of `data`, as RECORD writes it.
inline std::string record_hash(const std::string& data) {
  Hasher h(HashAlgo::kSha256);
  h.update(data);
  const auto d = h.finish();
  return "sha256=" + base64url_nopad(std::as_bytes(std::span(d)));
}

inline std::string record_for(const std::vector<Member>& members, const std::string& record) {
  std::string out;
  for (const auto& m : members) {
    out += m.name + "," + record_hash(m.data) + "," + std::to_string(m.data.size()) + "\n";
  }
  return out + record + ",,\n";
}

// The members of a good wheel of `dist` `version` tagged `tag`, without RECORD.
inline std::vector<Member> wheel_members(const std::string& dist, const std::string& version,
                                         const std::string& tag = "py3-none-any",
                                         const std::string& payload = "x = 1\n") {
  const std::string info = dist + "-" + version + ".dist-info/";
  return {{dist + "/__init__.py", payload, true},
          {info + "METADATA",
           "Metadata-Version: 2.1\nName: " + dist + "\nVersion: " + version + "\n\nbody\n", true},
          {info + "WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: " + tag + "\n"}};
}

// Writes the wheel (members + a RECORD computed from them) as `dir`/`file`; its path.
inline std::filesystem::path write_wheel(const std::filesystem::path& dir, const std::string& file,
                                         std::vector<Member> members,
                                         const std::string* record_text = nullptr) {
  std::string dist_info;
  for (const auto& m : members) {
    if (const auto at = m.name.find(".dist-info/"); at != std::string::npos) {
      dist_info = m.name.substr(0, at + 11);
    }
  }
  const std::string record_name = dist_info + "RECORD";
  members.push_back(
      {record_name, record_text != nullptr ? *record_text : record_for(members, record_name)});
  const auto path = dir / file;
  std::ofstream(path, std::ios::binary) << make_zip(members);
  return path;
}

}  // namespace whfs::publish::test
