#pragma once
// The CUDA fat binaries of a shared object (its .nv_fatbin section): which GPU code it holds,
// SASS (machine code for one arch) or PTX (compiled by the driver on first launch), and for
// which arch. Payloads are never decompressed: the entry header carries the arch.
//
// Layout (little endian; NVIDIA documents none of it: this follows the public reverse
// engineering of cuobjdump: GrigoryEvko/nvopen-tools fatbin/FORMAT_SPECIFICATION.md, the
// structures of ZLUDA, cricket and gpu-virtualisation projects, and LLVM's ELF.h for the cubin
// e_flags). The section holds containers back to back, with zero padding between them:
//
//   container header, 16 bytes
//     0  u32 magic 0xBA55ED50    4  u16 version (1)    6  u16 header_size (16)
//     8  u64 fat_size: the bytes of entries after the header
//   entries, each a header and its payload; the next entry starts at
//   entry + header_size + payload_size, and the last ends at the container's end
//     0  u16 kind: 1 PTX, 2 ELF (SASS, a cubin); 0x10 ELF too (cuobjdump counts it)
//     2  u16 version (0x0101)    4  u32 header_size (64; 80 or 112 from sm_100 on)
//     8  u64 payload_size (the stored bytes, 8-aligned)
//    16  u32 compressed size    20  u32 unknown
//    24  u16 minor, 26 u16 major: the code version (the PTX ISA version of a PTX entry)
//    28  u32 arch: 80 for sm_80 / compute_80, 120 for sm_120
//    32  u32 name offset, 36 u32 name length
//    40  u64 flags: 0x1 64-bit, 0x2 debug, 0x10 linux; compressed: 0x1000 and 0x2000 (LZ4),
//        0x8000 (zstd)
//    48  u64 zero    56  u64 uncompressed payload size
//
// The arch-specific variant (sm_90a: runs on 9.0 only) is not in the entry header. It is read
// from an uncompressed payload: a cubin's e_flags (ELF ABI version < 8: the SM in the low byte,
// 'a' is 0x800; from 8 on: the SM in bits 8-15, 'a' is 0x8) or a PTX's ".target sm_90a" line.
// A compressed payload's variant is unknown.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fs/common/expected.h"
#include "fs/wheel/elf.h"

namespace whfs::wheel {

inline constexpr std::uint32_t kFatbinMagic = 0xBA55ED50;
inline constexpr std::uint64_t kFatbinCompressedFlags = 0x1000 | 0x2000 | 0x8000;

struct FatbinLimits {
  std::uint64_t max_containers = 1u << 16;  // libcublasLt.so holds some 3,000
  std::uint64_t max_entries = 1u << 18;     // all containers together
  std::uint64_t max_entry_header = 4096;
};

struct FatbinEntry {
  enum class Kind { kPtx, kSass, kUnknown };
  Kind kind = Kind::kUnknown;
  std::uint16_t raw_kind = 0;
  int arch = 0;  // 80, 86, 90, 120
  int version_major = 0;
  int version_minor = 0;
  bool compressed = false;
  std::optional<bool> arch_specific;  // sm_90a; unknown for a compressed payload
  std::uint64_t offset = 0;           // of its header, in the section
};

// "sm_90a", "sm_80", "compute_80", "kind 4 arch 80"; a compressed SASS entry of unknown variant
// is "sm_90".
std::string code_name(const FatbinEntry& e);

struct FatbinContainer {
  std::uint64_t offset = 0;
  std::vector<FatbinEntry> entries;
};

// The containers of a .nv_fatbin section of `size` bytes (`read` takes offsets in the
// section). The error names the offset and what is wrong.
Expected<std::vector<FatbinContainer>, std::string> read_fatbin(std::uint64_t size, ReadAt read,
                                                                const FatbinLimits& limits = {});

}  // namespace whfs::wheel
