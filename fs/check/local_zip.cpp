#include "fs/check/local_zip.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

namespace whfs::check {
namespace {

constexpr std::size_t kChunk = 1 << 20;
constexpr std::size_t kInput = 256 << 10;  // compressed bytes read at a time
constexpr std::size_t kPiece = 64 << 10;   // inflated bytes a read takes at a time
constexpr std::size_t kRecent = 1 << 20;   // inflated bytes kept behind the last read
constexpr std::uint64_t kMaxRatio = 1032;  // deflate: 258 bytes from 2 bits at best
constexpr std::uint64_t kMaxCentralDirectory = 64 << 20;

std::string errno_text() { return std::error_code(errno, std::generic_category()).message(); }

std::span<const std::byte> bytes_of(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// Whether the member's declared sizes can be right: the size of a stored member is its
// compressed size; a deflated one cannot give more than kMaxRatio bytes a byte.
Expected<void, std::string> plausible(const wheel::ZipEntry& e) {
  if (e.method != 0 && e.method != 8) {
    return unexpected(e.name + " uses compression method " + std::to_string(e.method) +
                      " (wheels use stored or deflated)");
  }
  if (e.method == 0 && e.compressed_size != e.size) {
    return unexpected(e.name + ": stored sizes differ");
  }
  if (e.method == 8 && e.size / kMaxRatio > e.compressed_size) {
    return unexpected(e.name + " declares " + std::to_string(e.size) + " bytes from " +
                      std::to_string(e.compressed_size) +
                      " compressed (deflate gives at most 1032 bytes a byte)");
  }
  return {};
}

std::string too_long(const wheel::ZipEntry& e) {
  return e.name + ": its compressed data gives more than the " + std::to_string(e.size) +
         " bytes it declares";
}

}  // namespace

// A raw deflate stream over `compressed` bytes of the file from `data_at`, inflated a piece at
// a time, from the start or from a restart point.
class Inflater {
 public:
  Inflater(LocalZip zip, std::uint64_t data_at, std::uint64_t compressed)
      : zip_(std::move(zip)), data_at_(data_at), compressed_(compressed) {}
  ~Inflater() {
    if (live_) inflateEnd(&z_);
  }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // From compressed byte `in`, with the `bits` last bits of the byte before it and the 32 KiB
  // `window` inflated before it (none at the start).
  Expected<void, std::string> start(std::uint64_t in = 0, int bits = 0,
                                    const std::string& window = "") {
    if (inflateInit2(&z_, -MAX_WBITS) != Z_OK) return unexpected(std::string("zlib cannot start"));
    live_ = true;
    read_ = in;
    if (bits > 0) {
      if (in == 0) return unexpected(std::string("a restart point before the start"));
      auto byte = zip_.read(data_at_ + in - 1, 1);
      if (!byte) return unexpected(byte.error());
      inflatePrime(&z_, bits, static_cast<unsigned char>((*byte)[0]) >> (8 - bits));
    }
    if (!window.empty()) {
      inflateSetDictionary(&z_, reinterpret_cast<const Bytef*>(window.data()),
                           static_cast<uInt>(window.size()));
    }
    return {};
  }

  // Up to `room` (> 0) inflated bytes into `out`: how many (0 once the stream has ended).
  // `flush` Z_BLOCK stops at each deflate block's end, where a restart point may be taken.
  Expected<std::size_t, std::string> next(char* out, std::size_t room, int flush = Z_NO_FLUSH) {
    if (ended_) return std::size_t{0};
    for (;;) {
      if (z_.avail_in == 0 && read_ < compressed_) {
        auto in = zip_.read(data_at_ + read_, std::min<std::uint64_t>(kInput, compressed_ - read_));
        if (!in) return unexpected(in.error());
        read_ += in->size();
        input_ = std::move(*in);
        z_.next_in = reinterpret_cast<Bytef*>(input_.data());
        z_.avail_in = static_cast<uInt>(input_.size());
      }
      z_.next_out = reinterpret_cast<Bytef*>(out);
      z_.avail_out = static_cast<uInt>(room);
      const int rc = inflate(&z_, flush);
      const std::size_t n = room - z_.avail_out;
      if (rc == Z_STREAM_END) {
        ended_ = true;
        return n;
      }
      if (rc == Z_OK) {
        if (n > 0 || flush == Z_BLOCK) return n;
        continue;  // input taken, no output yet
      }
      if (rc == Z_BUF_ERROR) {
        if (z_.avail_in == 0 && read_ < compressed_) continue;
        return unexpected(std::string("its compressed data ends before its last block"));
      }
      return unexpected(std::string("its compressed data is not valid deflate (") +
                        (z_.msg != nullptr ? z_.msg : "zlib error") + ")");
    }
  }

  bool ended() const { return ended_; }
  // Compressed bytes taken so far, and whether the last call stopped at a block's end (not the
  // last block's): where a restart point can be taken.
  std::uint64_t consumed() const { return read_ - z_.avail_in; }
  bool at_block_boundary() const { return (z_.data_type & 128) != 0 && (z_.data_type & 64) == 0; }
  int bits() const { return z_.data_type & 7; }
  std::string window() {
    std::string w(32768, '\0');
    uInt n = 0;
    inflateGetDictionary(&z_, reinterpret_cast<Bytef*>(w.data()), &n);
    w.resize(n);
    return w;
  }

 private:
  LocalZip zip_;
  std::uint64_t data_at_;
  std::uint64_t compressed_;
  std::uint64_t read_ = 0;  // compressed bytes read from the file
  std::string input_;
  z_stream z_{};
  bool live_ = false;
  bool ended_ = false;
};

Expected<std::string, std::string> LocalZip::read(std::uint64_t offset,
                                                  std::uint64_t length) const {
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

Expected<std::vector<wheel::ZipEntry>, std::string> LocalZip::directory() const {
  const std::uint64_t tail_len = std::min(size_, wheel::kMaxTail);
  auto tail = read(size_ - tail_len, tail_len);
  if (!tail) return unexpected(tail.error());
  auto cd = wheel::find_central_directory(bytes_of(*tail), size_);
  if (!cd) return unexpected(cd.error());
  if (cd->size > kMaxCentralDirectory)
    return unexpected(std::string("its zip index is over 64 MiB"));
  auto dir = read(cd->offset, cd->size);
  if (!dir) return unexpected(dir.error());
  return wheel::parse_central_directory(bytes_of(*dir), cd->entries);
}

Expected<std::uint64_t, std::string> LocalZip::data_offset(const wheel::ZipEntry& e) const {
  auto header = read(e.local_header_offset, 30);
  if (!header) return unexpected(header.error());
  auto at = wheel::member_data_offset(bytes_of(*header), e);
  if (at && (*at > size_ || e.compressed_size > size_ - *at)) {
    return unexpected(e.name + ": its data runs past the end of the file");
  }
  return at;
}

Expected<void, std::string> LocalZip::stream_member(const wheel::ZipEntry& e, Sink take) const {
  if (auto ok = plausible(e); !ok) return ok;
  auto at = data_offset(e);
  if (!at) return unexpected(at.error());
  uLong crc = crc32(0, nullptr, 0);
  auto give = [&](const char* p, std::size_t n) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(p), static_cast<uInt>(n));
    take(p, n);
  };
  if (e.method == 0) {
    for (std::uint64_t done = 0; done < e.size;) {
      auto in = read(*at + done, std::min<std::uint64_t>(kChunk, e.size - done));
      if (!in) return unexpected(in.error());
      done += in->size();
      give(in->data(), in->size());
    }
  } else {
    Inflater z(*this, *at, e.compressed_size);
    if (auto s = z.start(); !s) return unexpected(e.name + ": " + s.error());
    std::string out(static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, e.size + 1)), '\0');
    std::uint64_t produced = 0;
    while (!z.ended()) {
      // One byte more than it declares at most: enough to tell that it gives more.
      const auto room =
          static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), e.size - produced + 1));
      auto n = z.next(out.data(), room);
      if (!n) return unexpected(e.name + ": " + n.error());
      produced += *n;
      if (produced > e.size) return unexpected(too_long(e));
      give(out.data(), *n);
    }
    if (produced != e.size) {
      return unexpected(e.name + ": its compressed data gives " + std::to_string(produced) +
                        " bytes, not the " + std::to_string(e.size) + " it declares");
    }
  }
  if (crc != e.crc32) return unexpected(e.name + ": CRC-32 mismatch");
  return {};
}

Expected<std::string, std::string> LocalZip::member(const wheel::ZipEntry& e,
                                                    std::uint64_t max) const {
  // The central directory's size is the one to trust before inflating: inflating stops there.
  if (e.size > max) {
    return unexpected(e.name + " is " + std::to_string(e.size) + " bytes uncompressed (at most " +
                      std::to_string(max) + " are read)");
  }
  if (auto ok = plausible(e); !ok) return unexpected(ok.error());
  std::string out;
  out.reserve(static_cast<std::size_t>(e.size));
  auto ok = stream_member(e, [&](const char* p, std::size_t n) { out.append(p, n); });
  if (!ok) return unexpected(ok.error());
  return out;
}

// ---- MemberReader ----------------------------------------------------------------------

MemberReader::MemberReader(LocalZip zip, wheel::ZipEntry e, std::uint64_t data_at)
    : zip_(std::move(zip)), entry_(std::move(e)), data_at_(data_at) {}

MemberReader::~MemberReader() = default;

Expected<std::unique_ptr<MemberReader>, std::string> MemberReader::open(const LocalZip& zip,
                                                                        const wheel::ZipEntry& e,
                                                                        std::uint64_t span) {
  if (auto ok = plausible(e); !ok) return unexpected(ok.error());
  auto at = zip.data_offset(e);
  if (!at) return unexpected(at.error());
  std::unique_ptr<MemberReader> r(new MemberReader(zip, e, *at));
  if (e.method == 0) {
    // Read where it lies; its CRC-32 checked once, as a deflated member's is.
    if (auto ok = zip.stream_member(e, [](const char*, std::size_t) {}); !ok) {
      return unexpected(ok.error());
    }
    return r;
  }
  if (auto ok = r->index(std::max<std::uint64_t>(span, 1)); !ok) return unexpected(ok.error());
  return r;
}

// The one whole pass: size and CRC-32 checked, a restart point at the first block boundary
// after every `span` bytes.
Expected<void, std::string> MemberReader::index(std::uint64_t span) {
  const wheel::ZipEntry& e = entry_;
  Inflater z(zip_, data_at_, e.compressed_size);
  if (auto s = z.start(); !s) return unexpected(e.name + ": " + s.error());
  points_.push_back(Point{});
  std::string out(static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, e.size + 1)), '\0');
  uLong crc = crc32(0, nullptr, 0);
  std::uint64_t produced = 0;
  while (!z.ended()) {
    const auto room =
        static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), e.size - produced + 1));
    auto n = z.next(out.data(), room, Z_BLOCK);
    if (!n) return unexpected(e.name + ": " + n.error());
    produced += *n;
    if (produced > e.size) return unexpected(too_long(e));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(*n));
    if (z.at_block_boundary() && produced - points_.back().out >= span && produced < e.size) {
      points_.push_back(Point{produced, z.consumed(), z.bits(), z.window()});
    }
  }
  if (produced != e.size) {
    return unexpected(e.name + ": its compressed data gives " + std::to_string(produced) +
                      " bytes, not the " + std::to_string(e.size) + " it declares");
  }
  if (crc != e.crc32) return unexpected(e.name + ": CRC-32 mismatch");
  return {};
}

Expected<std::string, std::string> MemberReader::read(std::uint64_t offset, std::uint64_t length) {
  if (offset > entry_.size || length > entry_.size - offset) {
    return unexpected(std::string("a read past the end of the object"));
  }
  if (entry_.method == 0) return zip_.read(data_at_ + offset, length);
  std::string out;
  out.reserve(static_cast<std::size_t>(length));
  // What the last MiB inflated holds.
  const std::uint64_t recent_from = pos_ - recent_.size();
  if (cursor_ && offset >= recent_from && offset < pos_) {
    const std::uint64_t n = std::min(length, pos_ - offset);
    out.append(recent_, static_cast<std::size_t>(offset - recent_from),
               static_cast<std::size_t>(n));
  }
  if (out.size() == length) return out;
  // Go on from where the last read ended, unless it is past the bytes wanted or a restart
  // point lies between it and them.
  const std::uint64_t want = offset + out.size();
  const auto point =
      std::prev(std::upper_bound(points_.begin(), points_.end(), want,
                                 [](std::uint64_t v, const Point& p) { return v < p.out; }));
  if (!cursor_ || pos_ > want || point->out > pos_) {
    cursor_ = std::make_unique<Inflater>(zip_, data_at_, entry_.compressed_size);
    if (auto s = cursor_->start(point->in, point->bits, point->window); !s) {
      cursor_.reset();
      return unexpected(entry_.name + ": " + s.error());
    }
    pos_ = point->out;
    recent_.clear();
  }
  piece_.resize(kPiece);
  while (out.size() < length) {
    const auto room =
        static_cast<std::size_t>(std::min<std::uint64_t>(piece_.size(), entry_.size - pos_));
    auto n = room == 0 ? Expected<std::size_t, std::string>(std::size_t{0})
                       : cursor_->next(piece_.data(), room);
    if (!n || *n == 0) {
      cursor_.reset();  // the file changed since it was checked at open
      return unexpected(entry_.name + ": " +
                        (n ? std::string("its compressed data ends early") : n.error()));
    }
    inflated_ += *n;
    const std::uint64_t need = offset + out.size();
    if (pos_ + *n > need) {
      const auto from = static_cast<std::size_t>(need - pos_);
      out.append(piece_, from, std::min<std::size_t>(*n - from, length - out.size()));
    }
    pos_ += *n;
    recent_.append(piece_, 0, *n);
    if (recent_.size() > 2 * kRecent) recent_.erase(0, recent_.size() - kRecent);
  }
  return out;
}

}  // namespace whfs::check
