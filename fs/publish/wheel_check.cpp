#include "fs/publish/wheel_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <utility>
#include <vector>

#include "fs/common/base64.h"
#include "fs/common/hash.h"
#include "fs/wheel/record.h"
#include "fs/wheel/wheel_metadata.h"
#include "fs/wheel/zip.h"

namespace whfs::publish {
namespace {

using wheel::RecordLine;
using wheel::ZipEntry;

constexpr std::size_t kChunk = 1 << 20;
constexpr std::uint64_t kMaxSmallMember = 64 << 20;  // METADATA, WHEEL, RECORD
constexpr std::uint64_t kMaxCentralDirectory = 64 << 20;

std::string errno_text() { return std::error_code(errno, std::generic_category()).message(); }

// A local file read with pread; the error says which file and why.
class LocalFile {
 public:
  static Expected<LocalFile, std::string> open(const std::filesystem::path& path) {
    auto f = CheckedFile::open(path);
    if (!f) return unexpected(f.error());
    return LocalFile(std::move(*f));
  }

  std::uint64_t size() const { return size_; }
  const std::shared_ptr<const CheckedFile>& file() const { return file_; }

  Expected<std::string, std::string> read(std::uint64_t offset, std::uint64_t length) const {
    if (offset > size_ || length > size_ - offset) {
      return unexpected("a zip record points past the end of the file");
    }
    std::string out(static_cast<std::size_t>(length), '\0');
    std::size_t got = 0;
    while (got < out.size()) {
      const ssize_t n =
          ::pread(fd_, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return unexpected("read error: " + errno_text());
      if (n == 0) return unexpected(std::string("the file shrank while it was read"));
      got += static_cast<std::size_t>(n);
    }
    return out;
  }

 private:
  explicit LocalFile(std::shared_ptr<const CheckedFile> f)
      : file_(std::move(f)), fd_(file_->fd()), size_(file_->size()) {}
  std::shared_ptr<const CheckedFile> file_;
  int fd_;
  std::uint64_t size_;
};

std::span<const std::byte> bytes_of(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// sha256 and git blob id of the whole file, and its first 512 bytes.
Expected<Content, std::string> hash_file(const LocalFile& f, std::string* sample) {
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

Expected<std::vector<ZipEntry>, std::string> read_directory(const LocalFile& f) {
  const std::uint64_t tail_len = std::min(f.size(), wheel::kMaxTail);
  auto tail = f.read(f.size() - tail_len, tail_len);
  if (!tail) return unexpected(tail.error());
  auto cd = wheel::find_central_directory(bytes_of(*tail), f.size());
  if (!cd) return unexpected(cd.error());
  if (cd->size > kMaxCentralDirectory)
    return unexpected(std::string("its zip index is over 64 MiB"));
  auto dir = f.read(cd->offset, cd->size);
  if (!dir) return unexpected(dir.error());
  return wheel::parse_central_directory(bytes_of(*dir), cd->entries);
}

// Where the member's compressed bytes start.
Expected<std::uint64_t, std::string> data_offset(const LocalFile& f, const ZipEntry& e) {
  auto header = f.read(e.local_header_offset, 30);
  if (!header) return unexpected(header.error());
  return wheel::member_data_offset(bytes_of(*header), e);
}

Expected<std::string, std::string> small_member(const LocalFile& f, const ZipEntry& e) {
  auto at = data_offset(f, e);
  if (!at) return unexpected(at.error());
  if (e.compressed_size > kMaxSmallMember) return unexpected(e.name + " is over 64 MiB");
  auto data = f.read(*at, e.compressed_size);
  if (!data) return unexpected(data.error());
  return wheel::extract_member(bytes_of(*data), e, kMaxSmallMember);
}

// The sha256 of a member's bytes (inflated as they are read), as RECORD writes it; its size
// and CRC-32 are checked on the way.
Expected<std::string, std::string> member_digest(const LocalFile& f, const ZipEntry& e) {
  if (e.method != 0 && e.method != 8) {
    return unexpected(e.name + " uses compression method " + std::to_string(e.method) +
                      " (wheels use stored or deflated)");
  }
  auto at = data_offset(f, e);
  if (!at) return unexpected(at.error());
  Hasher sha(HashAlgo::kSha256);
  uLong crc = crc32(0, nullptr, 0);
  std::uint64_t produced = 0;
  auto take = [&](const char* p, std::size_t n) {
    sha.update(std::string_view(p, n));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(p), static_cast<uInt>(n));
    produced += n;
  };
  z_stream z{};
  if (e.method == 8 && inflateInit2(&z, -MAX_WBITS) != Z_OK) {
    return unexpected(std::string("zlib cannot start"));
  }
  std::string out(e.method == 8 ? kChunk : 0, '\0');
  int rc = Z_OK;
  for (std::uint64_t done = 0; done < e.compressed_size;) {
    auto in = f.read(*at + done, std::min<std::uint64_t>(kChunk, e.compressed_size - done));
    if (!in) {
      if (e.method == 8) inflateEnd(&z);
      return unexpected(in.error());
    }
    done += in->size();
    if (e.method == 0) {
      take(in->data(), in->size());
      continue;
    }
    z.next_in = reinterpret_cast<Bytef*>(in->data());
    z.avail_in = static_cast<uInt>(in->size());
    while (z.avail_in > 0 && rc != Z_STREAM_END) {
      z.next_out = reinterpret_cast<Bytef*>(out.data());
      z.avail_out = static_cast<uInt>(out.size());
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) break;
      take(out.data(), out.size() - z.avail_out);
    }
    if (rc != Z_OK && rc != Z_STREAM_END) break;
  }
  if (e.method == 8) inflateEnd(&z);
  if ((e.method == 8 && rc != Z_STREAM_END) || produced != e.size) {
    return unexpected(e.name + ": its compressed data does not give " + std::to_string(e.size) +
                      " bytes");
  }
  if (crc != e.crc32) return unexpected(e.name + ": CRC-32 mismatch");
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
Expected<void, std::string> check_record(const LocalFile& f, const std::vector<ZipEntry>& entries,
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
  auto file = LocalFile::open(path);
  if (!file) return unexpected(file.error());
  auto content = hash_file(*file, &facts.sample);
  if (!content) return unexpected(content.error());
  facts.content = std::move(*content);
  auto entries = read_directory(*file);
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

}  // namespace whfs::publish
