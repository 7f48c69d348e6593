#pragma once
// Wheels for the publish tests, written in C++: a zip of members (stored or deflated) with a
// dist-info whose RECORD is computed from the members, unless a test writes its own.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fs/common/base64.h"
#include "fs/common/hash.h"
#include "tests/support/zip_writer.h"

namespace whfs::check::test {

using whfs::test::make_zip;
using whfs::test::Member;

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

}  // namespace whfs::check::test
