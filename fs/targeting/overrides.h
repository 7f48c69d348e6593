#pragma once
// What the user says about the target instead of letting it be detected (mount options and
// WHEELHOUSE_* environment variables), before validation (see target.h).

#include <functional>
#include <string>

namespace whfs {

struct TargetOverrides {
  std::string python;      // interpreter whose torch and tags count (python=PATH)
  std::string cudart;      // libcudart to load (cudart=PATH)
  std::string arch;        // sm89
  std::string torch;       // 2.9
  std::string cuda;        // 12.8
  std::string python_tag;  // cp312
};

using GetEnv = std::function<const char*(const char*)>;

}  // namespace whfs
