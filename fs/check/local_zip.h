#pragma once
// A wheel on this machine, read as a zip with pread: its central directory, and a member's
// bytes, inflated as they are read (never written anywhere). wheel_check.cpp hashes members
// through it; run_check.cpp reads the shared objects in it.
//
// The bytes are hostile: a member never inflates past the size the central directory declares
// for it (a member that would is an error that names it), and a declared size that its
// compressed bytes cannot give (deflate gives at most 1032 bytes a byte) is refused before
// anything is inflated.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fs/check/checked_file.h"
#include "fs/common/expected.h"
#include "fs/common/function_ref.h"
#include "fs/wheel/zip.h"

namespace whfs::check {

class Inflater;  // a member's deflated bytes, inflated from the file (local_zip.cpp)

class LocalZip {
 public:
  explicit LocalZip(std::shared_ptr<const CheckedFile> f)
      : file_(std::move(f)), fd_(file_->fd()), size_(file_->size()) {}

  std::uint64_t size() const { return size_; }
  const std::shared_ptr<const CheckedFile>& file() const { return file_; }

  // `length` bytes at `offset`; an error when they are not all there.
  Expected<std::string, std::string> read(std::uint64_t offset, std::uint64_t length) const;

  // The entries of the central directory (at most 64 MiB of it).
  Expected<std::vector<wheel::ZipEntry>, std::string> directory() const;

  // Where the member's compressed bytes start (an error when they do not all lie in the file).
  Expected<std::uint64_t, std::string> data_offset(const wheel::ZipEntry& e) const;

  // The member's bytes, inflated a piece at a time, `take`n in order; its size and CRC-32 are
  // checked at the end, and inflating stops at its declared size. The error names the member.
  using Sink = FunctionRef<void(const char* data, std::size_t size)>;
  Expected<void, std::string> stream_member(const wheel::ZipEntry& e, Sink take) const;

  // The member's bytes, at most `max` of them (the error says so, with its size).
  Expected<std::string, std::string> member(const wheel::ZipEntry& e, std::uint64_t max) const;

 private:
  std::shared_ptr<const CheckedFile> file_;
  int fd_;
  std::uint64_t size_;
};

// Reads anywhere in one member without holding it whole. A stored member is read where it
// lies (its CRC-32 checked at open). A deflated one is inflated once at open (its size and CRC-32
// checked), keeping a point to restart inflating from every `span` bytes (zlib's zran: the 32 KiB
// window and the bit position at a block boundary); a read then inflates from the last point before
// it, or goes on from where the last read ended, and the last MiB inflated is kept for reads just
// behind it. Memory: 32 KiB a point (16 MiB for a 2 GiB member), 2 MiB of recent bytes, what is
// read.
class MemberReader {
 public:
  static constexpr std::uint64_t kSpan = 4 << 20;
  static Expected<std::unique_ptr<MemberReader>, std::string> open(const LocalZip& zip,
                                                                   const wheel::ZipEntry& e,
                                                                   std::uint64_t span = kSpan);
  ~MemberReader();
  MemberReader(const MemberReader&) = delete;
  MemberReader& operator=(const MemberReader&) = delete;

  std::uint64_t size() const { return entry_.size; }
  // `length` bytes at `offset` of the member's inflated bytes.
  Expected<std::string, std::string> read(std::uint64_t offset, std::uint64_t length);

  std::size_t points() const { return points_.size(); }
  std::uint64_t inflated_by_reads() const { return inflated_; }

 private:
  struct Point {
    std::uint64_t out = 0;  // inflated bytes before it
    std::uint64_t in = 0;   // compressed bytes before it
    int bits = 0;           // bits of the byte before `in` that belong after the point
    std::string window;     // the last 32 KiB inflated before it
  };
  MemberReader(LocalZip zip, wheel::ZipEntry e, std::uint64_t data_at);
  Expected<void, std::string> index(std::uint64_t span);

  LocalZip zip_;
  wheel::ZipEntry entry_;
  std::uint64_t data_at_;
  std::vector<Point> points_;
  std::unique_ptr<Inflater> cursor_;  // positioned at pos_
  std::uint64_t pos_ = 0;
  std::string recent_;  // the bytes just before pos_
  std::string piece_;
  std::uint64_t inflated_ = 0;
};

}  // namespace whfs::check
