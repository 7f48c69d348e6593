#pragma once
// The bodies of the Hub's write API and the parsing of its answers, as pure functions
// (tests/fakehub/hub-write-api.md): preupload, the Git LFS batch API (basic and multipart),
// the multipart completion, and the ndjson commit.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fs/common/expected.h"

namespace whfs::publish {

struct PreuploadFile {
  std::string path;
  std::uint64_t size = 0;
  std::string sample;  // the file's first 512 bytes
};
std::string preupload_body(const std::vector<PreuploadFile>& files);

struct PreuploadAnswer {
  std::string path;
  bool lfs = false;            // uploadMode "lfs" (else "regular")
  bool should_ignore = false;  // the repo's .gitignore ignores it
  std::string oid;             // what is at the path now (sha256 if LFS, else blob id), or ""
};
// The error names what is malformed.
Expected<std::vector<PreuploadAnswer>, std::string> parse_preupload(const std::string& body);

struct LfsObject {
  std::string oid;  // sha256 hex
  std::uint64_t size = 0;
};
// `ref`: the branch the objects are for (huggingface_hub sends it; read-only users leave it
// out to open a pull request, which publish never does).
std::string batch_body(const std::string& ref, const std::vector<LfsObject>& objects);

struct BatchAnswer {
  std::string oid;
  std::uint64_t size = 0;
  bool stored = false;  // the repo already has it: no actions
  // Basic: one PUT of the whole object to `href`. Multipart: a PUT of each `chunk_size` bytes
  // to parts[i] (part i + 1), then a POST of their ETags to `href`, the completion URL.
  std::string href;
  std::uint64_t chunk_size = 0;  // 0: basic
  std::vector<std::string> parts;
  std::string verify_href;  // may be empty
};
// Every object asked for must be answered; a per-object error is an error.
Expected<std::vector<BatchAnswer>, std::string> parse_batch(const std::string& body,
                                                            const std::vector<LfsObject>& asked);

// {"oid": ..., "parts": [{"partNumber": 1, "etag": ...}, ...]}, the ETags as received.
std::string completion_body(const std::string& oid, const std::vector<std::string>& etags);
// {"oid": ..., "size": ...}
std::string verify_body(const LfsObject& object);

struct CommitHeader {
  std::string summary;
  std::string description;
  std::string parent_commit;  // 40 hex; the commit fails (412) if the branch moved since
};
struct CommitFile {
  std::string path;
  std::uint64_t size = 0;
  std::string sha256;
  bool lfs = true;
  std::string content;  // a regular file's bytes (sent base64); empty for LFS
};
// One JSON object per line: the header, then an lfsFile or a base64 file per file.
std::string commit_payload(const CommitHeader& header, const std::vector<CommitFile>& files);

struct CommitAnswer {
  std::string commit;  // commitOid
  std::string url;     // commitUrl
};
Expected<CommitAnswer, std::string> parse_commit(const std::string& body);

}  // namespace whfs::publish
