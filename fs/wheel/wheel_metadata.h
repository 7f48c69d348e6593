#pragma once
// A wheel's METADATA and RECORD as text: the headers pip reads, the .metadata file an index
// serves (PEP 658), the sha256 RECORD lists for a member. Pure: fs/index reads them from the
// wheels of a mount, fs/check from a wheel on this machine.

#include <optional>
#include <string>
#include <string_view>

namespace whfs::wheel {

// The value of the first header `name` of a METADATA or WHEEL file: RFC 822 headers up to the
// first empty line (LF or CRLF line ends), the name matched case-insensitively, the value
// without spaces and tabs at either end; nullopt when there is none. Pure.
std::optional<std::string> metadata_header(std::string_view text, std::string_view name);

// The first Requires-Python header of a METADATA file (metadata_header); "" when there is none.
// Pure.
std::string requires_python_of(std::string_view metadata);

// The .metadata file an index serves for a wheel: its METADATA with the Name header's value in
// its PEP 503 form, the name the index lists it by ("Name: flash_attn" -> "Name: flash-attn";
// every Name header, its name matched case-insensitively as by metadata_header).
// pip 23.0 (Debian 12's) compares that header with the requirement exactly as typed, so
// `pip install flash-attn` would fail against "Name: flash_attn" (later pips compare
// normalized names, and pip 23.0 cannot do without the header). Everything else is the
// wheel's, byte for byte. Pure.
std::string served_metadata(std::string_view metadata);

// The sha256 RECORD lists for `member` ("name,sha256=<urlsafe base64>,size", CSV: a quoted
// name may hold commas), as hex; nullopt when RECORD is malformed (parse_record, record.h), has
// no line for `member` or no sha256 on its line. Pure.
std::optional<std::string> record_sha256(std::string_view record, std::string_view member);

}  // namespace whfs::wheel
