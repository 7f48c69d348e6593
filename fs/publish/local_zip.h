#pragma once
// A wheel on this machine, read as a zip with pread: its central directory, and a member's
// bytes, inflated as they are read (never written anywhere). wheel_check.cpp hashes members
// through it; run_check.cpp reads the shared objects in it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fs/common/expected.h"
#include "fs/common/function_ref.h"
#include "fs/publish/checked_file.h"
#include "fs/wheel/zip.h"

namespace whfs::publish {

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

  // Where the member's compressed bytes start.
  Expected<std::uint64_t, std::string> data_offset(const wheel::ZipEntry& e) const;

  // The member's bytes, inflated a piece at a time, `take`n in order; its size and CRC-32 are
  // checked at the end. The error names the member.
  using Sink = FunctionRef<void(const char* data, std::size_t size)>;
  Expected<void, std::string> stream_member(const wheel::ZipEntry& e, Sink take) const;

  // The member's bytes, at most `max` of them (the error says so, with its size).
  Expected<std::string, std::string> member(const wheel::ZipEntry& e, std::uint64_t max) const;

 private:
  std::shared_ptr<const CheckedFile> file_;
  int fd_;
  std::uint64_t size_;
};

}  // namespace whfs::publish
