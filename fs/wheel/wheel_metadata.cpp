#include "fs/wheel/wheel_metadata.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "fs/common/base64.h"
#include "fs/common/hash.h"
#include "fs/common/text.h"
#include "fs/targeting/wheel_name.h"
#include "fs/wheel/record.h"
#include "fs/wheel/zip.h"

namespace whfs::wheel {
namespace {

constexpr std::uint64_t kFirstTail = 16 << 10;
constexpr std::uint64_t kMaxCentralDirectory = 16 << 20;
constexpr std::size_t kMaxRemembered = 8192;

std::span<const std::byte> bytes_of(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// `s` without spaces and tabs at either end.
std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The value of the header `line` (its line end removed) when its name is `key` (in lower
// case), trimmed of spaces and tabs; nullopt when it is another header or none.
std::optional<std::string_view> header_value(std::string_view line, std::string_view key) {
  const auto colon = line.find(':');
  if (colon != key.size() || lower(line.substr(0, colon)) != key) return std::nullopt;
  return trim_blanks(line.substr(colon + 1));
}

}  // namespace

std::optional<std::string> metadata_header(std::string_view text, std::string_view name) {
  const std::string key = lower(name);
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;  // the body starts
    if (const auto value = header_value(line, key)) return std::string(*value);
  }
  return std::nullopt;
}

std::string requires_python_of(std::string_view metadata) {
  return metadata_header(metadata, "Requires-Python").value_or("");
}

std::string served_metadata(std::string_view metadata) {
  std::string out;
  out.reserve(metadata.size());
  bool headers = true;
  while (!metadata.empty()) {
    const auto nl = metadata.find('\n');
    const std::string_view line =
        metadata.substr(0, nl == std::string_view::npos ? metadata.size() : nl + 1);
    metadata.remove_prefix(line.size());
    std::string_view bare = line;
    while (!bare.empty() && (bare.back() == '\n' || bare.back() == '\r')) bare.remove_suffix(1);
    if (headers && bare.empty()) headers = false;
    const auto value = headers ? header_value(bare, "name") : std::nullopt;
    if (!value) {
      out.append(line);
      continue;
    }
    out.append(bare.substr(0, 5)).append(" ").append(target::normalize_project_name(*value));
    out.append(line.substr(bare.size()));  // the line's own ending
  }
  return out;
}

std::optional<std::string> record_sha256(std::string_view record, std::string_view member) {
  const auto lines = parse_record(record);
  if (!lines) return std::nullopt;  // a malformed RECORD vouches for nothing
  for (const auto& line : *lines) {
    if (line.path != member) continue;
    const std::string_view hash = line.hash;
    if (!hash.starts_with("sha256=")) return std::nullopt;
    const auto raw = base64url_decode(hash.substr(7));
    if (!raw || raw->size() != 32) return std::nullopt;
    return to_hex(*raw);
  }
  return std::nullopt;
}

WheelMetadataService::WheelMetadataService(reader::Reader& reader, cache::MetadataStore& store,
                                           const cache::AccessScope& scope,
                                           std::chrono::milliseconds patience, bool trust_store)
    : reader_(reader),
      store_(store),
      scope_(scope),
      patience_(patience),
      trust_store_(trust_store) {}

WheelMetadataStats WheelMetadataService::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

Expected<std::string, std::string> WheelMetadataService::extract(const reader::FileContent& w,
                                                                 std::string* record,
                                                                 std::string* metadata_name) {
  const reader::WaitPolicy wait{patience_, nullptr};
  auto peek = [&](std::uint64_t offset, std::uint64_t size) -> Expected<std::string, std::string> {
    auto r = reader_.peek(w, offset, static_cast<std::size_t>(size), wait);
    if (!r) return unexpected(r.error().message);
    if (r->size() != size) return unexpected(w.path + ": short read");
    return std::move(*r);
  };
  const std::uint64_t first = std::min(w.size, kFirstTail);
  auto tail = peek(w.size - first, first);
  if (!tail) return unexpected(tail.error());
  bool more = false;
  auto cd = find_central_directory(bytes_of(*tail), w.size, &more);
  if (!cd && more) {
    const std::uint64_t len = std::min(w.size, kMaxTail);
    tail = peek(w.size - len, len);
    if (!tail) return unexpected(tail.error());
    cd = find_central_directory(bytes_of(*tail), w.size);
  }
  if (!cd) return unexpected(w.path + ": " + cd.error());
  if (cd->size > kMaxCentralDirectory) {
    return unexpected(w.path + ": its central directory is over 16 MiB");
  }
  std::string dir;
  const std::uint64_t tail_start = w.size - tail->size();
  if (cd->offset >= tail_start) {
    dir = tail->substr(static_cast<std::size_t>(cd->offset - tail_start),
                       static_cast<std::size_t>(cd->size));
  } else {
    auto d = peek(cd->offset, cd->size);
    if (!d) return unexpected(d.error());
    dir = std::move(*d);
  }
  auto entries = parse_central_directory(bytes_of(dir), cd->entries, 200000);
  if (!entries) return unexpected(w.path + ": " + entries.error());
  auto member = [&](const char* file) -> Expected<std::string, std::string> {
    const ZipEntry* e = find_dist_info_file(*entries, file);
    if (e == nullptr) return unexpected(w.path + ": no single *.dist-info/" + file);
    if (std::string_view(file) == "METADATA") *metadata_name = e->name;
    if (e->compressed_size > cache::kMaxWheelMetadata || e->size > cache::kMaxWheelMetadata) {
      return unexpected(w.path + ": " + e->name + " is too large");
    }
    auto header = peek(e->local_header_offset, 30);
    if (!header) return unexpected(header.error());
    auto at = member_data_offset(bytes_of(*header), *e);
    if (!at) return unexpected(w.path + ": " + at.error());
    if (*at > w.size || e->compressed_size > w.size - *at) {
      return unexpected(w.path + ": " + e->name + " runs past the end of the file");
    }
    auto data = peek(*at, e->compressed_size);
    if (!data) return unexpected(data.error());
    auto out = extract_member(bytes_of(*data), *e, cache::kMaxWheelMetadata);
    if (!out) return unexpected(w.path + ": " + out.error());
    return out;
  };
  auto metadata = member("METADATA");
  if (!metadata) return metadata;
  if (record != nullptr) {
    auto r = member("RECORD");
    if (!r) return unexpected(r.error());
    *record = std::move(*r);
  }
  return metadata;
}

std::shared_ptr<const WheelMetadata> WheelMetadataService::remember(
    const reader::FileContent& wheel, std::string bytes, bool verified) {
  auto m = std::make_shared<WheelMetadata>();
  m->sha256 = sha256_hex(bytes);
  m->requires_python = requires_python_of(bytes);
  m->bytes = std::move(bytes);
  m->verified = verified;
  std::lock_guard lock(mu_);
  if (memory_.size() >= kMaxRemembered) memory_.clear();
  memory_[wheel.id.to_string()] = m;
  return m;
}

Expected<std::shared_ptr<const WheelMetadata>, std::string> WheelMetadataService::get(
    const reader::FileContent& wheel) {
  const std::string id = wheel.id.to_string();
  std::shared_ptr<const WheelMetadata> known;
  {
    std::lock_guard lock(mu_);
    if (const auto it = memory_.find(id); it != memory_.end()) known = it->second;
  }
  if (!known && trust_store_) {
    if (auto rec = store_.get_wheel_metadata(id, scope_.readable()); rec && *rec) {
      known = remember(wheel, std::move((*rec)->metadata), (*rec)->verified);
      std::lock_guard lock(mu_);
      stats_.from_store++;
    }
  }
  const bool wheel_verified = reader_.verified(wheel);
  if (known && (known->verified || !wheel_verified)) return known;

  // Not known, or known from ranged reads and the wheel is verified now: read it (again), and
  // when the wheel is verified check it against RECORD.
  std::string record;
  std::string metadata_name;
  auto bytes = extract(wheel, wheel_verified ? &record : nullptr, &metadata_name);
  if (!bytes) return unexpected(bytes.error());
  bool verified = false;
  if (wheel_verified) {
    // The wheel matched the Hub's sha256, so these bytes are the wheel's: RECORD says whether
    // they are the METADATA the wheel was built with.
    const std::string got = sha256_hex(*bytes);
    const auto want = record_sha256(record, metadata_name);
    std::lock_guard lock(mu_);
    stats_.verified++;
    if (want && *want != got) {
      stats_.mismatched++;
      spdlog::warn("{}: its METADATA does not match the sha256 its RECORD lists", wheel.path);
      return unexpected(wheel.path + ": METADATA does not match its RECORD");
    }
    if (known && known->sha256 != got) {
      stats_.mismatched++;
      spdlog::warn(
          "{}: the METADATA read before the wheel was verified differs from the verified "
          "wheel's; replaced",
          wheel.path);
    }
    verified = true;
  }
  {
    std::lock_guard lock(mu_);
    stats_.extracted++;
  }
  if (auto r = store_.put_wheel_metadata(id, scope_.write(),
                                         cache::WheelMetadataRecord{*bytes, verified});
      !r) {
    spdlog::debug("{}: its METADATA is not kept in the cache: {}", wheel.path, r.error().message);
  }
  return remember(wheel, std::move(*bytes), verified);
}

}  // namespace whfs::wheel
