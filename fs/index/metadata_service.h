#pragma once
// A wheel's METADATA file (PEP 658), for the index pages: read lazily from the wheel's zip with
// ranged reads of its end (the central directory) and of the one member, so that resolving a
// requirement never downloads whole wheels; kept in the cache by the wheel's content hash.
//
// Those ranged bytes are read before the wheel matched its hash (Fetcher::peek): the record
// says "not verified" until the whole wheel has been downloaded and verified (by a reader, an
// install, a prefetch); the next time it is asked for, it is read again from the verified
// wheel and checked against the wheel's RECORD. Index pages carry the metadata's sha256, so pip
// refuses a metadata file that does not match its page; and pip checks the wheel itself
// against the listing's sha256 whatever the metadata said.

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "cache/metadata_store.h"
#include "fs/common/expected.h"
#include "fs/reader/reader.h"

namespace whfs::index {

struct WheelMetadata {
  std::string bytes;            // the METADATA file
  std::string sha256;           // its hex digest
  std::string requires_python;  // its Requires-Python, "" when it has none
  bool verified = false;        // read from the whole wheel after it matched its hash
};

struct WheelMetadataStats {
  std::uint64_t extracted = 0;   // read from a wheel (ranged reads, or the verified wheel)
  std::uint64_t from_store = 0;  // found in the cache
  std::uint64_t verified = 0;    // checked against a verified wheel's RECORD
  std::uint64_t mismatched = 0;  // ... and found different (replaced)
};

class WheelMetadataService {
 public:
  // `patience`: how long a ranged read may make no progress.
  // `trust_store`: take the METADATA records of the cache as they are (false for a cache
  // others can write: then each is read again from the wheel, and only stored). Records are
  // kept under `scope`'s audience and read from its readable ones (cache/audience.h).
  WheelMetadataService(reader::Reader& reader, cache::MetadataStore& store,
                       const cache::AccessScope& scope, std::chrono::milliseconds patience,
                       bool trust_store = true);

  // The metadata of the wheel `content`; the error says why there is none (not a zip, no
  // METADATA, the network).
  Expected<std::shared_ptr<const WheelMetadata>, std::string> get(const reader::FileContent& wheel);

  WheelMetadataStats stats() const;

 private:
  // METADATA (and, when `record` is given, RECORD) of the wheel, by ranged reads; the name of
  // the METADATA member in `metadata_name`.
  Expected<std::string, std::string> extract(const reader::FileContent& wheel, std::string* record,
                                             std::string* metadata_name);
  std::shared_ptr<const WheelMetadata> remember(const reader::FileContent& wheel, std::string bytes,
                                                bool verified);

  reader::Reader& reader_;
  cache::MetadataStore& store_;
  const cache::AccessScope& scope_;
  const std::chrono::milliseconds patience_;
  const bool trust_store_;
  mutable std::mutex mu_;  // guards memory_ and stats_
  std::unordered_map<std::string, std::shared_ptr<const WheelMetadata>> memory_;
  WheelMetadataStats stats_;
};

}  // namespace whfs::index
