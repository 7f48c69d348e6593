// The report of run_check.h, for people and as JSON.
#include <nlohmann/json.hpp>

#include "fs/check/run_check.h"
#include "fs/common/text.h"

namespace whfs::check {

std::string format_report(const RunReport& r) {
  std::string s = r.wheel + " on " + r.target + ":\n";
  for (const auto& o : r.objects) {
    s += "  " + o.member + "\n";
    if (o.fatbins > 0) {
      s += "    GPU code: " + std::to_string(o.fatbins) + " fat binaries; SASS " +
           (o.sass.empty() ? "none" : join(o.sass, ", ")) + "; PTX " +
           (o.ptx.empty() ? "none" : join(o.ptx, ", ")) + "\n";
    } else {
      s += "    GPU code: none\n";
    }
    s += "    glibc: " +
         (o.glibc.empty() ? std::string("no GLIBC_ version needed") : "needs GLIBC_" + o.glibc) +
         "\n";
    if (o.torch_imports > 0) {
      s += "    torch: imports " + std::to_string(o.torch_imports) + " symbols" +
           (o.abi.empty() ? "" : ", C++ ABI " + o.abi) +
           (o.missing_count > 0 ? ", " + std::to_string(o.missing_count) + " missing" : "") + "\n";
    }
    for (const auto& n : o.notes) s += "    note: " + n + "\n";
    for (const auto& p : o.problems) s += "    REFUSED: " + p + "\n";
  }
  for (const auto& n : r.notes) s += "  note: " + n + "\n";
  const auto problems = r.problems();
  s += problems.empty()
           ? "  verdict: runs on " + r.target + "\n"
           : "  verdict: does not run on " + r.target + " (" + std::to_string(problems.size()) +
                 " problem" + (problems.size() == 1 ? "" : "s") + ")\n";
  return s;
}

nlohmann::json to_json(const RunReport& r) {
  nlohmann::json objects = nlohmann::json::array();
  for (const auto& o : r.objects) {
    objects.push_back(
        {{"member", o.member},
         {"fatbins", o.fatbins},
         {"sass", o.sass},
         {"ptx", o.ptx},
         {"glibc", o.glibc.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.glibc)},
         {"torch_imports", o.torch_imports},
         {"missing_count", o.missing_count},
         {"missing", o.missing},
         {"abi", o.abi.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.abi)},
         {"problems", o.problems},
         {"notes", o.notes}});
  }
  return {{"wheel", r.wheel},         {"target", r.target}, {"runs", r.runs()},
          {"problems", r.problems()}, {"notes", r.notes},   {"objects", objects}};
}

}  // namespace whfs::check
