// wheelhouse check: whether wheels built here run on a target (this machine's, or a key's),
// from their shared objects: their GPU code, the torch symbols they import, the glibc they
// need (fs/publish/run_check.h). `publish` runs the same check before it uploads anything.

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "fs/publish/run_check.h"
#include "tools/cli_commands.h"
#include "tools/cli_target.h"

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
    auto r = publish::check_runs(wheel, (*setup)->run);
    if (!r) {
      std::fprintf(stderr, "wheelhouse check: %s\n", r.error().c_str());
      code = kFailed;
      continue;
    }
    if (!r->runs() && code == kOk) code = kWheelRefused;
    if (o.json) {
      all.push_back(publish::to_json(*r));
    } else {
      std::fputs(publish::format_report(*r).c_str(), stdout);
    }
  }
  if (o.json) {
    const nlohmann::json out = {{"target", t->key}, {"runs", code == kOk}, {"wheels", all}};
    std::printf("%s\n", out.dump(2).c_str());
  }
  return code;
}

}  // namespace whfs::cli
