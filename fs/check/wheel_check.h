#pragma once
// What `wheelhouse publish` checks in a wheel before anything leaves the machine: a valid file
// name (PEP 427), one dist-info folder named after it with METADATA, WHEEL and RECORD, a
// METADATA whose Name and Version are the file name's (pip refuses a wheel whose metadata
// disagrees with its name), and a RECORD that lists every member with the sha256 of its bytes
// (each member inflated and hashed, its CRC-32 checked too). The file is read in pieces: a
// wheel of several GiB is never held in memory.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "fs/check/checked_file.h"
#include "fs/common/expected.h"
#include "fs/targeting/wheel_name.h"

namespace whfs::check {

// A file's identity as the Hub names it: the sha256 of an LFS file, the git blob id of a
// plain one.
struct Content {
  std::uint64_t size = 0;
  std::string sha256;    // 64 hex
  std::string git_sha1;  // 40 hex: sha1("blob <size>\0" + bytes)
};

struct WheelFacts {
  std::filesystem::path local;
  std::shared_ptr<const CheckedFile> file;  // the open file that was checked (and is uploaded)
  std::string file_name;
  target::WheelName name;
  Content content;
  std::string sample;       // the first 512 bytes (the Hub's preupload decides LFS from them)
  std::size_t members = 0;  // files in the zip, each checked against RECORD
};

// The wheel at `path`, checked. The error is one line naming the file and what is wrong.
Expected<WheelFacts, std::string> inspect_wheel(const std::filesystem::path& path);

}  // namespace whfs::check
