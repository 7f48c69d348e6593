#pragma once
// Whether a wheel can run on a target, from its shared objects alone (read from the zip, never
// written out, never loaded): `wheelhouse check`, and `publish` before anything is uploaded.
//
//   GPU code  each CUDA fat binary (.nv_fatbin, fatbin.h) of each object must hold SASS that
//             runs on every arch of the target (same major, minor not above the target's; an
//             arch-specific sm_90a only on 9.0), else PTX of an arch not above it (the driver
//             compiles it at first launch: a note). No CUDA code at all passes, with a note.
//   torch     every c10::, at::, torch:: symbol an object imports is defined by the target
//             torch's lib/*.so, and both use one C++ ABI (__cxx11 or not).
//   glibc     the highest GLIBC_x.y an object needs (.gnu.version_r) is not above the
//             target's glibc.
//
// What this cannot prove: that a kernel launches or computes right (its resources, the driver's
// version, a PTX the driver cannot JIT), nor symbols that are looked up at run time (dlsym).

#include <cstddef>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "fs/check/local_zip.h"
#include "fs/check/torch_symbols.h"
#include "fs/common/expected.h"
#include "fs/targeting/policy.h"
#include "fs/wheel/fatbin.h"

namespace whfs::check {

inline constexpr std::uint64_t kMaxObjectSize = 2ull << 30;  // one shared object, uncompressed
inline constexpr std::size_t kMaxMissingShown = 10;

struct RunTarget {
  std::string key;                               // for the report
  std::vector<target::ComputeCapability> archs;  // every GPU the folder must run on
  std::string glibc;                             // "2.31"; empty: no glibc
  const TorchSymbols* torch = nullptr;           // null: the torch ABI is not checked
  std::string torch_note;                        // which torch, or why none
};

// The target's archs and glibc; the error names the bad arch.
Expected<RunTarget, std::string> run_target_of(const target::Target& t, const std::string& key);

struct ObjectReport {
  std::string member;                 // torch_ext/_C.so
  std::size_t fatbins = 0;            // CUDA fat-binary containers
  std::vector<std::string> sass;      // sm_80, sm_90a
  std::vector<std::string> ptx;       // compute_80 (PTX 8.5)
  std::string glibc;                  // the highest GLIBC_ needed: "2.34"; "" none
  std::size_t torch_imports = 0;      // c10::/at::/torch:: symbols it imports
  std::size_t missing_count = 0;      // of which torch does not define
  std::vector<std::string> missing;   // the first kMaxMissingShown, demangled
  std::string abi;                    // "cxx11", "old" or ""
  std::vector<std::string> problems;  // why it does not run on the target
  std::vector<std::string> notes;
};

struct RunReport {
  std::string wheel;
  std::string target;
  std::vector<ObjectReport> objects;
  std::vector<std::string> notes;

  bool runs() const;
  // "member: why", one per problem.
  std::vector<std::string> problems() const;
};

// The whole-container fit of one fat binary on one arch.
struct ArchFit {
  bool runs = false;
  bool jit = false;        // only PTX covers it
  bool uncertain = false;  // compressed SASS of another minor covers it: 'a' unknown
};
ArchFit fit(const std::vector<wheel::FatbinEntry>& entries, target::ComputeCapability arch);

// The check of the wheel `zip` (its file name `wheel`). The error is about the zip itself;
// what is wrong with an object is in the report.
Expected<RunReport, std::string> check_runs(const LocalZip& zip, const std::string& wheel,
                                            const RunTarget& t);
Expected<RunReport, std::string> check_runs(const std::filesystem::path& wheel, const RunTarget& t);

// The report for people, a few lines per object and the verdict last.
std::string format_report(const RunReport& r);
nlohmann::json to_json(const RunReport& r);

}  // namespace whfs::check
