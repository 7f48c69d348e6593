// Fuzzes fs/check's LocalZip and MemberReader (what `wheelhouse check` and `publish` read a
// wheel with) over bytes that stand for a whole wheel file: its directory, each member held
// (with a bounded declared size), streamed, and read at random places from restart points. Any
// crash or sanitizer report is a bug; so are more bytes given than a member declares, and a
// read from restart points that differs from the member's bytes.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fs/check/local_zip.h"

namespace {

constexpr std::uint64_t kMaxHeld = 1 << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace whfs::check;
  const int fd = ::memfd_create("wheel", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  if (::write(fd, data, size) != static_cast<ssize_t>(size)) std::abort();
  auto file = CheckedFile::open("/proc/self/fd/" + std::to_string(fd));
  ::close(fd);
  if (!file) std::abort();
  const LocalZip zip(*file);
  auto entries = zip.directory();
  if (!entries) return 0;
  for (std::size_t i = 0; i < std::min<std::size_t>(entries->size(), 8); ++i) {
    const auto& e = (*entries)[i];
    auto held = zip.member(e, kMaxHeld);
    if (held && held->size() != e.size) std::abort();
    std::uint64_t given = 0;
    auto streamed = zip.stream_member(e, [&](const char*, std::size_t n) { given += n; });
    if (given > e.size) std::abort();
    if (e.size > kMaxHeld) continue;
    if (static_cast<bool>(streamed) != static_cast<bool>(held)) std::abort();
    // Some eight restart points a member.
    const std::uint64_t span = std::max<std::uint64_t>(512, e.size / 8);
    auto reader = MemberReader::open(zip, e, span);
    if (static_cast<bool>(reader) != static_cast<bool>(held)) std::abort();
    if (!reader || e.size == 0) continue;
    // Reads backwards and forwards from one reader (the bytes kept, going on), then a first
    // read of a fresh reader at each eighth (from the restart point before it).
    for (std::uint64_t k = 0; k < 6; ++k) {
      const std::uint64_t off = (e.size * (k % 2 == 0 ? 5 - k : k)) / 7 % e.size;
      const std::uint64_t len = std::min<std::uint64_t>(e.size - off, 1 + (k * 997) % 3000);
      auto got = (*reader)->read(off, len);
      if (!got || *got != held->substr(off, len)) std::abort();
    }
    if ((*reader)->read(e.size, 1)) std::abort();
    for (std::uint64_t k = 1; k < 8 && (*reader)->points() > 1; k += 3) {
      auto fresh = MemberReader::open(zip, e, span);
      const std::uint64_t off = e.size * k / 8;
      const std::uint64_t len = std::min<std::uint64_t>(e.size - off, 100);
      if (!fresh) std::abort();
      auto got = (*fresh)->read(off, len);
      if (!got || *got != held->substr(off, len)) std::abort();
    }
  }
  return 0;
}
