#include "fs/wheel/fatbin.h"

#include <algorithm>

#include "fs/wheel/little_endian.h"

namespace whfs::wheel {
namespace {

constexpr std::uint64_t kContainerHeader = 16;
constexpr std::uint64_t kEntryHeader = 64;
constexpr std::uint64_t kPtxHead = 4096;  // where ".target" is, after the comments

Unexpected<std::string> bad(std::uint64_t at, const std::string& why) {
  return unexpected("not a valid fat binary: at offset " + std::to_string(at) + " of .nv_fatbin, " +
                    why);
}

// Whether the cubin (an ELF for EM_CUDA) is built for an arch-specific variant.
std::optional<bool> cubin_arch_specific(std::string_view head) {
  auto elf = read_elf_header(head);
  if (!elf || elf->machine != kEmCuda) return std::nullopt;
  return elf->abi_version >= 8 ? (elf->flags & 0x8) != 0 : (elf->flags & 0x800) != 0;
}

// Whether a PTX text targets an arch-specific variant (".target sm_90a").
std::optional<bool> ptx_arch_specific(std::string_view text) {
  const auto at = text.find(".target");
  if (at == std::string_view::npos) return std::nullopt;
  auto rest = text.substr(at + 7);
  const auto end = rest.find_first_of(",\n");
  rest = rest.substr(0, end);
  const auto sm = rest.find("sm_");
  if (sm == std::string_view::npos) return std::nullopt;
  std::size_t i = sm + 3;
  while (i < rest.size() && rest[i] >= '0' && rest[i] <= '9') ++i;
  return i < rest.size() && rest[i] == 'a';
}

Expected<FatbinEntry, std::string> read_entry(std::uint64_t at, std::uint64_t end, ReadAt read,
                                              const FatbinLimits& limits, std::uint64_t* next) {
  if (end - at < kEntryHeader) return bad(at, "an entry header runs past its container");
  auto h = read(at, kEntryHeader);
  if (!h) return unexpected(h.error());
  if (h->size() != kEntryHeader) return bad(at, "an entry header was read short");
  const std::uint64_t header_size = little_endian(*h, 4, 4);
  const std::uint64_t payload_size = little_endian(*h, 8, 8);
  if (header_size < kEntryHeader || header_size > limits.max_entry_header) {
    return bad(at, "an entry header of " + std::to_string(header_size) + " bytes (64 to " +
                       std::to_string(limits.max_entry_header) + ")");
  }
  if (header_size > end - at || payload_size > end - at - header_size) {
    return bad(at, "an entry of " + std::to_string(header_size) + " + " +
                       std::to_string(payload_size) + " bytes runs past its container");
  }
  FatbinEntry e;
  e.offset = at;
  e.raw_kind = static_cast<std::uint16_t>(little_endian(*h, 0, 2));
  e.kind = e.raw_kind == 1                         ? FatbinEntry::Kind::kPtx
           : e.raw_kind == 2 || e.raw_kind == 0x10 ? FatbinEntry::Kind::kSass
                                                   : FatbinEntry::Kind::kUnknown;
  e.version_minor = static_cast<int>(little_endian(*h, 24, 2));
  e.version_major = static_cast<int>(little_endian(*h, 26, 2));
  e.arch = static_cast<int>(std::min<std::uint64_t>(little_endian(*h, 28, 4), 100000));
  e.compressed = (little_endian(*h, 40, 8) & kFatbinCompressedFlags) != 0;
  const std::uint64_t payload = at + header_size;
  if (!e.compressed && e.kind == FatbinEntry::Kind::kSass && payload_size >= kEntryHeader) {
    auto head = read(payload, kEntryHeader);
    if (!head) return unexpected(head.error());
    e.arch_specific = cubin_arch_specific(*head);
  } else if (!e.compressed && e.kind == FatbinEntry::Kind::kPtx && payload_size > 0) {
    auto head = read(payload, std::min(payload_size, kPtxHead));
    if (!head) return unexpected(head.error());
    e.arch_specific = ptx_arch_specific(*head);
  }
  *next = payload + payload_size;
  return e;
}

}  // namespace

std::string code_name(const FatbinEntry& e) {
  const std::string arch = std::to_string(e.arch);
  switch (e.kind) {
    case FatbinEntry::Kind::kSass:
      return "sm_" + arch + (e.arch_specific.value_or(false) ? "a" : "");
    case FatbinEntry::Kind::kPtx:
      return "compute_" + arch + (e.arch_specific.value_or(false) ? "a" : "");
    default:
      return "kind " + std::to_string(e.raw_kind) + " arch " + arch;
  }
}

Expected<std::vector<FatbinContainer>, std::string> read_fatbin(std::uint64_t size, ReadAt read,
                                                                const FatbinLimits& limits) {
  std::vector<FatbinContainer> out;
  std::uint64_t entries = 0;
  std::uint64_t at = 0;
  while (at < size) {
    // Zero padding between containers is skipped a window at a time.
    auto window = read(at, std::min<std::uint64_t>(kPtxHead, size - at));
    if (!window) return unexpected(window.error());
    if (window->empty()) return bad(at, "the section was read short");
    const auto nonzero = window->find_first_not_of('\0');
    if (nonzero == std::string::npos) {
      at += window->size();
      continue;
    }
    at += nonzero;
    if (size - at < kContainerHeader) return bad(at, "a container header runs past the end");
    auto h = read(at, kContainerHeader);
    if (!h) return unexpected(h.error());
    if (h->size() != kContainerHeader || little_endian(*h, 0, 4) != kFatbinMagic) {
      return bad(at, "no container magic 0xBA55ED50");
    }
    const std::uint64_t header_size = little_endian(*h, 6, 2);
    const std::uint64_t fat_size = little_endian(*h, 8, 8);
    if (header_size < kContainerHeader || header_size > size - at) {
      return bad(at, "a container header of " + std::to_string(header_size) + " bytes");
    }
    if (fat_size > size - at - header_size) {
      return bad(at, "a container of " + std::to_string(fat_size) + " bytes runs past the end");
    }
    if (out.size() >= limits.max_containers) {
      return bad(at, "over " + std::to_string(limits.max_containers) + " containers");
    }
    FatbinContainer c;
    c.offset = at;
    const std::uint64_t end = at + header_size + fat_size;
    for (std::uint64_t e = at + header_size; e < end;) {
      if (++entries > limits.max_entries) {
        return bad(e, "over " + std::to_string(limits.max_entries) + " entries");
      }
      std::uint64_t next = 0;
      auto entry = read_entry(e, end, read, limits, &next);
      if (!entry) return unexpected(entry.error());
      c.entries.push_back(*entry);
      e = next;
    }
    out.push_back(std::move(c));
    at = end;
  }
  return out;
}

}  // namespace whfs::wheel
