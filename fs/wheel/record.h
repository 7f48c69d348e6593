#pragma once
// A wheel's RECORD (PEP 376 / PEP 427): one CSV line per file of the wheel, "path,hash,size",
// the hash as "sha256=<urlsafe base64, no padding>"; RECORD's own line (and signature files')
// leaves hash and size empty. Parsed whole, with CSV quoting, for both readers: record_sha256
// (wheel_metadata.h) looks one member up for fs/index, fs/check checks every member. Pure.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/common/expected.h"

namespace whfs::wheel {

struct RecordLine {
  std::string path;
  std::string hash;  // "sha256=..." as written; empty when none
  std::optional<std::uint64_t> size;
};

// Every line of a RECORD file; the error names the first malformed line (an unterminated
// quote, more than three fields, a size that is not a number).
Expected<std::vector<RecordLine>, std::string> parse_record(std::string_view text);

}  // namespace whfs::wheel
