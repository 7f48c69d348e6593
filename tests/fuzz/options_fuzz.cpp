// Fuzzes the mount-option parser: arbitrary arguments (NUL-separated) and environment values
// must give options or one error line, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fs/config/options.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args;
  std::string cur;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  args.push_back(cur);
  const std::string env_value = args.size() > 1 ? args[1] : "";
  auto r = whfs::parse_mount_args(args, [&](const char* name) -> const char* {
    return name[0] == 'W' || name[0] == 'H' ? env_value.c_str() : nullptr;
  });
  if (!r && r.error().find('\n') != std::string::npos) std::abort();  // one line, always
  return 0;
}
