#include "fs/check/wheel_check.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "fs/check/local_zip.h"
#include "fs/common/base64.h"
#include "fs/common/hash.h"
#include "fs/wheel/record.h"
#include "fs/wheel/wheel_metadata.h"
#include "fs/wheel/zip.h"

namespace whfs::check {
namespace {

using wheel::RecordLine;
using wheel::ZipEntry;

constexpr std::size_t kChunk = 1 << 20;
constexpr std::uint64_t kMaxSmallMember = 64 << 20;  // METADATA, WHEEL, RECORD

// sha256 and git blob id of the whole file, and its first 512 bytes.
Expected<Content, std::string> hash_file(const LocalZip& f, std::string* sample) {
  Hasher sha256(HashAlgo::kSha256);
  Hasher git = git_blob_hasher(f.size());
  for (std::uint64_t at = 0; at < f.size(); at += kChunk) {
    auto piece = f.read(at, std::min<std::uint64_t>(kChunk, f.size() - at));
    if (!piece) return unexpected(piece.error());
    if (at == 0) *sample = piece->substr(0, 512);
    sha256.update(*piece);
    git.update(*piece);
  }
  return Content{f.size(), to_hex(sha256.finish()), to_hex(git.finish())};
}

Expected<std::string, std::string> small_member(const LocalZip& f, const ZipEntry& e) {
  if (e.compressed_size > kMaxSmallMember) return unexpected(e.name + " is over 64 MiB");
  return f.member(e, kMaxSmallMember);
}

// The sha256 of a member's bytes (inflated as they are read), as RECORD writes it; its size
// and CRC-32 are checked on the way.
Expected<std::string, std::string> member_digest(const LocalZip& f, const ZipEntry& e) {
  Hasher sha(HashAlgo::kSha256);
  auto ok =
      f.stream_member(e, [&](const char* p, std::size_t n) { sha.update(std::string_view(p, n)); });
  if (!ok) return unexpected(ok.error());
  const std::vector<std::uint8_t> digest = sha.finish();
  return "sha256=" + base64url_nopad(std::as_bytes(std::span(digest)));
}

// The wheel's dist-info folder must be <name>-<version>.dist-info of its file name.
Expected<void, std::string> check_dist_info(const target::WheelName& w, const ZipEntry& metadata) {
  const std::string dir = metadata.name.substr(0, metadata.name.find('/'));
  const std::string stem = dir.substr(0, dir.size() - std::string_view(".dist-info").size());
  const auto dash = stem.rfind('-');
  if (dash == std::string::npos ||
      target::normalize_project_name(stem.substr(0, dash)) !=
          target::normalize_project_name(w.distribution) ||
      stem.substr(dash + 1) != w.version) {
    return unexpected("its metadata folder " + dir + " is not " + w.distribution + "-" + w.version +
                      ".dist-info");
  }
  return {};
}

Expected<void, std::string> check_metadata(const target::WheelName& w, std::string_view text) {
  const auto name = wheel::metadata_header(text, "Name");
  const auto version = wheel::metadata_header(text, "Version");
  if (!name || !version) return unexpected(std::string("its METADATA has no Name or no Version"));
  if (target::normalize_project_name(*name) != target::normalize_project_name(w.distribution)) {
    return unexpected("its METADATA names the project " + *name + ", its file name " +
                      w.distribution);
  }
  if (*version != w.version) {
    return unexpected("its METADATA has version " + *version + ", its file name " + w.version);
  }
  return {};
}

Expected<void, std::string> check_wheel_file(std::string_view text) {
  const auto v = wheel::metadata_header(text, "Wheel-Version");
  if (!v) return unexpected(std::string("its WHEEL file has no Wheel-Version"));
  if (!v->starts_with("1.")) {
    return unexpected("its WHEEL file has Wheel-Version " + *v + " (installers read 1.x)");
  }
  return {};
}

bool unhashed_allowed(std::string_view member, std::string_view record_name) {
  // RECORD cannot hold its own hash; signatures of RECORD are written after it.
  return member == record_name || member == std::string(record_name) + ".jws" ||
         member == std::string(record_name) + ".p7s";
}

// Every member is in RECORD with the sha256 of its bytes, and RECORD lists nothing else.
Expected<void, std::string> check_record(const LocalZip& f, const std::vector<ZipEntry>& entries,
                                         const std::string& record_name, std::string_view text) {
  auto lines = wheel::parse_record(text);
  if (!lines) return unexpected(lines.error());
  std::map<std::string, const RecordLine*> by_path;
  for (const auto& l : *lines) by_path[l.path] = &l;
  std::set<std::string> held;
  for (const auto& e : entries) {
    held.insert(e.name);
    if (e.name.ends_with('/')) continue;  // a folder entry holds no bytes
    const auto it = by_path.find(e.name);
    if (it == by_path.end()) return unexpected("RECORD has no line for " + e.name);
    const RecordLine& line = *it->second;
    if (line.hash.empty() && unhashed_allowed(e.name, record_name)) continue;
    if (!line.hash.starts_with("sha256=")) {
      return unexpected("RECORD gives " + e.name + " no sha256 hash");
    }
    if (line.size && *line.size != e.size) {
      return unexpected("RECORD gives " + e.name + " the size " + std::to_string(*line.size) +
                        ", the zip " + std::to_string(e.size));
    }
    auto digest = member_digest(f, e);
    if (!digest) return unexpected(digest.error());
    if (*digest != line.hash) return unexpected(e.name + " does not match its hash in RECORD");
  }
  for (const auto& entry : by_path) {
    if (!held.contains(entry.first)) {
      return unexpected("RECORD lists " + entry.first + ", which the wheel does not hold");
    }
  }
  return {};
}

Expected<WheelFacts, std::string> inspect(const std::filesystem::path& path, WheelFacts facts) {
  auto opened = CheckedFile::open(path);
  if (!opened) return unexpected(opened.error());
  auto file = std::make_unique<LocalZip>(std::move(*opened));
  auto content = hash_file(*file, &facts.sample);
  if (!content) return unexpected(content.error());
  facts.content = std::move(*content);
  auto entries = file->directory();
  if (!entries) return unexpected(entries.error());
  const ZipEntry* metadata = wheel::find_dist_info_file(*entries, "METADATA");
  const ZipEntry* wheel = wheel::find_dist_info_file(*entries, "WHEEL");
  const ZipEntry* record = wheel::find_dist_info_file(*entries, "RECORD");
  const std::pair<const ZipEntry*, const char*> needed[] = {
      {metadata, "METADATA"}, {wheel, "WHEEL"}, {record, "RECORD"}};
  for (const auto& [entry, name] : needed) {
    if (entry == nullptr) return unexpected(std::string("no single *.dist-info/") + name);
  }
  const std::string dir = metadata->name.substr(0, metadata->name.find('/') + 1);
  if (!wheel->name.starts_with(dir) || !record->name.starts_with(dir)) {
    return unexpected(std::string("METADATA, WHEEL and RECORD are not in one dist-info folder"));
  }
  if (auto ok = check_dist_info(facts.name, *metadata); !ok) return unexpected(ok.error());
  for (const auto* e : {metadata, wheel, record}) {
    auto text = small_member(*file, *e);
    if (!text) return unexpected(text.error());
    auto ok = e == metadata ? check_metadata(facts.name, *text)
              : e == wheel  ? check_wheel_file(*text)
                            : check_record(*file, *entries, record->name, *text);
    if (!ok) return unexpected(ok.error());
  }
  facts.file = file->file();
  facts.members = static_cast<std::size_t>(std::count_if(
      entries->begin(), entries->end(), [](const ZipEntry& e) { return !e.name.ends_with('/'); }));
  return facts;
}

}  // namespace

Expected<WheelFacts, std::string> inspect_wheel(const std::filesystem::path& path) {
  WheelFacts facts;
  facts.local = path;
  facts.file_name = path.filename().string();
  auto name = target::parse_wheel_name(facts.file_name);
  if (!name) {
    return unexpected(facts.file_name +
                      ": not a valid wheel file name (name-version[-build]-python-abi-"
                      "platform.whl)");
  }
  facts.name = std::move(*name);
  auto checked = inspect(path, std::move(facts));
  if (!checked) return unexpected(path.filename().string() + ": " + checked.error());
  return checked;
}

}  // namespace whfs::check
