#pragma once
// One folder of targets/: the wheels that run on one target. For each package folder of the
// remote tree, the policy (fs/target/policy.h) picks one arch/torch folder for the target, and
// of its wheels the one pip would install for the target Python (exactly one per project, so
// `pip install <folder>/<pkg>/*.whl` gets one installable wheel). Each entry shows the same
// content as its source (same cache blocks, and one inode for one wheel in every folder); its
// user.wheelhouse.source attribute and the folder's .target say where it came from and why.

#include <memory>
#include <string>
#include <vector>

#include "fs/namespace/namespace.h"
#include "fs/target/target.h"

namespace whfs::ns {

// The report file of every target folder.
inline constexpr const char* kReportName = ".target";

// The children of the folder of `key` at `commit`: a folder per matching package and the
// .target report. With `target` null the folder holds only the report, which says
// `why_empty`.
Expected<std::vector<std::shared_ptr<Node>>, FsErr> build_target_folder(
    ListingSource& source, const std::string& commit, const std::string& key,
    const target::Target* target, const std::string& why_empty);

}  // namespace whfs::ns
