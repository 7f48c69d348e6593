// Fuzzes the parsers of names that come from the remote listing: wheel file names (with their
// tags and versions) and the arch/torch folder names, plus the override syntax. Any crash,
// sanitizer report or broken invariant is a bug:
//   - an accepted wheel name prints back to a name that parses to the same fields;
//   - its rank against a fixed CPython 3.12 tag list is the rank of one of its own triples;
//   - version comparison is reflexive and antisymmetric.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fs/targeting/pep440.h"
#include "fs/targeting/policy.h"
#include "fs/targeting/tags.h"
#include "fs/targeting/target.h"
#include "fs/targeting/wheel_name.h"

namespace {

bool same(const whfs::target::WheelName& a, const whfs::target::WheelName& b) {
  return a.distribution == b.distribution && a.version == b.version && a.build == b.build &&
         a.python_tags == b.python_tags && a.abi_tags == b.abi_tags &&
         a.platform_tags == b.platform_tags;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace whfs::target;
  static const SupportedTags kTags(cpython_tags({3, 12, ""}, linux_platform_tags("x86_64", 2, 36)));
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  if (const auto w = parse_wheel_name(in)) {
    const auto again = parse_wheel_name(wheel_file_name(*w));
    if (!again || !same(*w, *again)) std::abort();
    const std::size_t triples =
        w->python_tags.size() * w->abi_tags.size() * w->platform_tags.size();
    if (triples == 0 || triples > kMaxTagTriples) std::abort();
    if (const auto r = wheel_rank(*w, kTags); r && *r >= kTags.tags().size()) std::abort();
    if (compare_versions(w->version, w->version) != 0) std::abort();
    (void)normalize_project_name(w->distribution);
    const WheelName ws[] = {*w, *again};
    if (best_wheel(ws, kTags).has_value() != wheel_rank(*w, kTags).has_value()) std::abort();
  }
  // Versions: split the input in two and compare both ways.
  const std::string_view a = in.substr(0, in.size() / 2);
  const std::string_view b = in.substr(in.size() / 2);
  if (compare_versions(a, b) != -compare_versions(b, a)) std::abort();
  (void)parse_pep440(in);

  (void)parse_arch_folder(in);
  (void)parse_torch_folder(in);
  (void)normalize_arch(in);
  (void)normalize_torch(in);
  (void)normalize_cuda(in);
  (void)normalize_python_tag(in);
  return 0;
}
