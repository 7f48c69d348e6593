#pragma once
// Where a wheel goes and whether it may go there: pure decisions over a target, a checked
// wheel and what the Hub already holds at that path.
//
//   folder   <package>/sm<arch>/torch<M.m>-cu<NN>/, from a target with exactly one GPU arch
//            (a build for several archs is the mistake the layout exists to prevent);
//            <package> is the distribution name as the wheel's file name writes it
//   fit      the wheel's tags run on the target's Python and platform (the matcher of
//            current/), and its local version names no other torch or CUDA
//   action   new path: upload; the same bytes there: nothing to do; other bytes: refused
//            unless replacing; a folder there: refused

#include <optional>
#include <string>

#include "fs/check/wheel_check.h"
#include "fs/common/expected.h"
#include "fs/common/remote_entry.h"
#include "fs/targeting/target.h"

namespace whfs::check {

struct TargetFolder {
  std::string folder;  // sm89/torch2.9-cu128
  std::string why;     // where the arch, torch and CUDA came from, in words
};

// The folder of `t`; the error says which axis is missing or that it names several archs.
Expected<TargetFolder, std::string> target_folder(const target::Target& t);

// Why `wheel` does not belong to the target's folder, or nullopt when it does.
std::optional<std::string> misfit(const target::WheelName& wheel, const target::Target& t);

// "<distribution>/<folder>/<file name>", both as the wheel's file name writes them.
std::string repo_path(const WheelFacts& wheel, const TargetFolder& folder);

enum class Action { kUpload, kSame, kReplace, kConflict };
const char* to_string(Action a);

struct Decision {
  Action action = Action::kUpload;
  std::string reason;  // in words, for the plan and for a refusal
};

// What to do with `local` given the entry now at its path (null: nothing there).
Decision decide(const Content& local, const RemoteEntry* remote, bool replace);

}  // namespace whfs::check
