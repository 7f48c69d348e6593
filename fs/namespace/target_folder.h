#pragma once
// One folder of targets/: the wheels that run on one target. For each package folder of the
// remote tree, the policy (fs/targeting/policy.h) picks one arch/torch folder for the target, and
// of its wheels the one pip would install for the target Python (exactly one per project, so
// `pip install <folder>/<pkg>/*.whl` gets one installable wheel). Each entry shows the same
// content as its source (same cache blocks, and one inode for one wheel in every folder); its
// user.wheelhouse.source attribute and the folder's .target say where it came from and why.
//
// Beside the packages, the same choice for installers:
//   simple/             a PEP 503 repository (index_pages.h): simple/<project>/ holds the page,
//                       the wheels and each wheel's .metadata (PEP 658), made when first listed
//   all/                every chosen wheel in one folder, for --find-links

#include <memory>
#include <string>
#include <vector>

#include "fs/namespace/namespace.h"
#include "fs/targeting/target.h"

namespace whfs::ns {

// The report file of every target folder, and its index folders.
inline constexpr const char* kReportName = ".target";
inline constexpr const char* kSimple = "simple";
inline constexpr const char* kAll = "all";

// A wheel's METADATA file, for its index page.
struct IndexMetadata {
  std::shared_ptr<const std::string> bytes;
  std::string sha256;
  std::string requires_python;
};

// Where index pages get the METADATA of a wheel (fs/wheel: ranged reads of the wheel's zip).
class IndexMetadataSource {
 public:
  virtual ~IndexMetadataSource() = default;
  // The metadata of the wheel `entry` at `commit`, or why there is none (its page then links
  // the wheel alone, and pip downloads it to learn its metadata).
  virtual Expected<IndexMetadata, std::string> metadata(const RemoteEntry& entry,
                                                        const std::string& commit) = 0;
};

// The children of the folder of `key` at `commit`: a folder per matching package, simple/,
// all/ and the .target report. With `target` null the folder holds the report, which says
// `why_empty`, and empty index folders (a find-links or index URL always names a folder).
// `metadata` may be null: pages without metadata.
Expected<std::vector<std::shared_ptr<Node>>, FsErr> build_target_folder(
    ListingSource& source, const std::string& commit, const std::string& key,
    const target::Target* target, const std::string& why_empty, IndexMetadataSource* metadata);

}  // namespace whfs::ns
