#include "fs/index/metadata_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "fs/common/hash.h"
#include "fs/wheel/wheel_metadata.h"
#include "fs/wheel/zip.h"

namespace whfs::index {
namespace {

constexpr std::uint64_t kFirstTail = 16 << 10;
constexpr std::uint64_t kMaxCentralDirectory = 16 << 20;
constexpr std::size_t kMaxRemembered = 8192;

std::span<const std::byte> bytes_of(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

}  // namespace

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
  auto cd = wheel::find_central_directory(bytes_of(*tail), w.size, &more);
  if (!cd && more) {
    const std::uint64_t len = std::min(w.size, wheel::kMaxTail);
    tail = peek(w.size - len, len);
    if (!tail) return unexpected(tail.error());
    cd = wheel::find_central_directory(bytes_of(*tail), w.size);
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
  auto entries = wheel::parse_central_directory(bytes_of(dir), cd->entries, 200000);
  if (!entries) return unexpected(w.path + ": " + entries.error());
  auto member = [&](const char* file) -> Expected<std::string, std::string> {
    const wheel::ZipEntry* e = wheel::find_dist_info_file(*entries, file);
    if (e == nullptr) return unexpected(w.path + ": no single *.dist-info/" + file);
    if (std::string_view(file) == "METADATA") *metadata_name = e->name;
    if (e->compressed_size > cache::kMaxWheelMetadata || e->size > cache::kMaxWheelMetadata) {
      return unexpected(w.path + ": " + e->name + " is too large");
    }
    auto header = peek(e->local_header_offset, 30);
    if (!header) return unexpected(header.error());
    auto at = wheel::member_data_offset(bytes_of(*header), *e);
    if (!at) return unexpected(w.path + ": " + at.error());
    if (*at > w.size || e->compressed_size > w.size - *at) {
      return unexpected(w.path + ": " + e->name + " runs past the end of the file");
    }
    auto data = peek(*at, e->compressed_size);
    if (!data) return unexpected(data.error());
    auto out = wheel::extract_member(bytes_of(*data), *e, cache::kMaxWheelMetadata);
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
  m->requires_python = wheel::requires_python_of(bytes);
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
    const auto want = wheel::record_sha256(record, metadata_name);
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

}  // namespace whfs::index
