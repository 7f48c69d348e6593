#pragma once
// Human units in options: sizes ("20G", "512MiB", "1048576") and durations ("30s", "10m", "1h").

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace whfs {

// Binary multiples: K/KB/KiB = 1024 ... T. A bare number is bytes. nullopt on anything else,
// including overflow, negative numbers and trailing garbage.
std::optional<std::uint64_t> parse_size(std::string_view text);

// s, m, h, d suffixes; a bare number is seconds; "0" means zero. nullopt on bad input.
std::optional<std::chrono::seconds> parse_duration(std::string_view text);

// 1536 -> "1.5 KiB".
std::string format_bytes(std::uint64_t bytes);

}  // namespace whfs
