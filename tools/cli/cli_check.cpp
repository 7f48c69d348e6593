// wheelhouse check: whether wheels built here run on a target (this machine's, or a key's),
// from their shared objects: their GPU code, the torch symbols they import, the glibc they
// need (fs/check/run_check.h). `publish` runs the same check before it uploads anything.

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "fs/check/plan.h"
#include "fs/check/run_check.h"
#include "fs/targeting/wheel_name.h"
#include "tools/cli/cli_commands.h"
#include "tools/cli/cli_target.h"

namespace whfs::cli {
namespace {

int fail(const Failure& f) {
  std::fprintf(stderr, "wheelhouse check: %s\n", f.message.c_str());
  return f.code;
}

}  // namespace

int run_check(const CheckOptions& o) {
  if (o.wheels.empty()) return fail({kUsage, "no wheel given"});
  if (o.target != "auto" && !o.python.empty()) {
    return fail({kUsage, "--python applies to --target auto only"});
  }
  auto t = resolve_target({o.target, o.python, o.cudart});
  if (!t) return fail(t.error());
  auto setup = run_setup(*t, o.torch);
  if (!setup) return fail(setup.error());
  nlohmann::json all = nlohmann::json::array();
  int code = kOk;
  for (const auto& wheel : o.wheels) {
    // Its tags first (the Python, the platform, the torch and CUDA of its local version), as
    // publish checks them: a wheel pip would not install there does not run there either.
    const std::string file_name = std::filesystem::path(wheel).filename();
    const auto name = target::parse_wheel_name(file_name);
    std::optional<std::string> misfit =
        name ? check::misfit(*name, t->target)
             : std::optional<std::string>("not a wheel file name (PEP 427)");
    auto r = check::check_runs(wheel, (*setup)->run);
    if (!r) {
      std::fprintf(stderr, "wheelhouse check: %s\n", r.error().c_str());
      code = kFailed;
      continue;
    }
    if ((!r->runs() || misfit) && code == kOk) code = kWheelRefused;
    if (o.json) {
      auto j = check::to_json(*r);
      if (misfit) {
        j["tags"] = *misfit;
        j["runs"] = false;
      }
      all.push_back(std::move(j));
    } else {
      std::string text = check::format_report(*r);
      if (misfit) {
        // The verdict line last, as the report writes it.
        const auto last = text.rfind("  verdict:");
        text = text.substr(0, last) + "  problem: " + *misfit + "\n  verdict: does not run on " +
               t->key + "\n";
      }
      std::fputs(text.c_str(), stdout);
    }
  }
  if (o.json) {
    const nlohmann::json out = {{"target", t->key}, {"runs", code == kOk}, {"wheels", all}};
    std::printf("%s\n", out.dump(2).c_str());
  }
  return code;
}

}  // namespace whfs::cli
