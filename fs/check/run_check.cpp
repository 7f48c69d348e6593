#include "fs/check/run_check.h"

#include <algorithm>
#include <set>

#include "fs/common/text.h"
#include "fs/targeting/target.h"

namespace whfs::check {
namespace {

using wheel::FatbinEntry;
using wheel::ZipEntry;
using Kind = FatbinEntry::Kind;

std::string arch_text(target::ComputeCapability a) {
  return "sm" + std::to_string(a.major) + std::to_string(a.minor);
}

int code_of(target::ComputeCapability a) { return a.major * 10 + a.minor; }

bool is_shared_object(const std::string& member) {
  const std::string base = member.substr(member.rfind('/') + 1);
  return base.ends_with(".so") || base.find(".so.") != std::string::npos;
}

std::string list_or_none(const std::vector<std::string>& v) {
  return v.empty() ? "none" : join(v, ", ");
}

// The GPU code of the object, each fat binary checked against each arch of the target.
void check_gpu_code(const std::vector<wheel::FatbinContainer>& fatbins, const RunTarget& t,
                    ObjectReport& o) {
  std::set<std::string> sass;
  std::set<std::string> ptx;
  for (const auto& c : fatbins) {
    for (const auto& e : c.entries) {
      if (e.kind == Kind::kSass) sass.insert(wheel::code_name(e));
      if (e.kind == Kind::kPtx) {
        ptx.insert(wheel::code_name(e) + " (PTX " + std::to_string(e.version_major) + "." +
                   std::to_string(e.version_minor) + ")");
      }
    }
  }
  o.fatbins = fatbins.size();
  o.sass.assign(sass.begin(), sass.end());
  o.ptx.assign(ptx.begin(), ptx.end());
  for (const auto arch : t.archs) {
    std::size_t refused = 0;
    std::size_t jit = 0;
    bool uncertain = false;
    std::size_t counted = 0;
    for (const auto& c : fatbins) {
      const bool has_code = std::any_of(c.entries.begin(), c.entries.end(),
                                        [](const auto& e) { return e.kind != Kind::kUnknown; });
      if (!has_code) continue;
      ++counted;
      const ArchFit f = fit(c.entries, arch);
      if (!f.runs) ++refused;
      if (f.runs && f.jit) ++jit;
      uncertain = uncertain || f.uncertain;
    }
    const std::string a = arch_text(arch);
    const std::string found = "SASS: " + list_or_none(o.sass) + "; PTX: " + list_or_none(o.ptx);
    auto in = [&](std::size_t n) {
      return counted > 1 ? " in " + std::to_string(n) + " of its " + std::to_string(counted) +
                               " fat binaries"
                         : std::string();
    };
    if (refused > 0) {
      o.problems.push_back("no GPU code runs on " + a + in(refused) + " (" + found +
                           "): it needs SASS for " + std::to_string(arch.major) +
                           ".x at or below " + a + ", or PTX of an arch at or below it");
    } else if (jit > 0) {
      o.notes.push_back(a + " has no SASS" + in(jit) +
                        ": the driver compiles the PTX at first launch (JIT; " + found + ")");
    }
    if (uncertain) {
      o.notes.push_back(a +
                        " is covered by compressed SASS whose arch-specific variant (sm_XYa) "
                        "cannot be read");
    }
  }
}

void check_glibc(const std::vector<wheel::NeededVersion>& versions, const RunTarget& t,
                 ObjectReport& o) {
  std::pair<int, int> top{0, 0};
  std::string from;
  for (const auto& v : versions) {
    const auto g = wheel::glibc_version_of(v.version);
    if (g > top) {
      top = g;
      from = v.file;
    }
  }
  if (top.first == 0) return;
  o.glibc = std::to_string(top.first) + "." + std::to_string(top.second);
  if (t.glibc.empty()) {
    o.problems.push_back("needs GLIBC_" + o.glibc + " (" + from + "), the target has no glibc");
    return;
  }
  const auto have = target::parse_glibc_version(t.glibc);
  if (top > have) {
    o.problems.push_back("needs GLIBC_" + o.glibc + " (" + from + "), the target has glibc " +
                         t.glibc);
  }
}

void check_torch(const std::vector<wheel::DynamicSymbol>& symbols, const RunTarget& t,
                 ObjectReport& o) {
  const CxxAbi abi = abi_of(symbols);
  o.abi = abi == CxxAbi::kCxx11 ? "cxx11" : abi == CxxAbi::kOld ? "old" : "";
  for (const auto& s : symbols) {
    if (s.defined || s.weak || !in_torch_namespace(s.name)) continue;
    ++o.torch_imports;
    if (t.torch == nullptr || t.torch->defines(s.name)) continue;
    if (++o.missing_count <= kMaxMissingShown) o.missing.push_back(demangle(s.name));
  }
  if (t.torch == nullptr || o.torch_imports == 0) return;
  if (abi != CxxAbi::kUnknown && t.torch->abi() != CxxAbi::kUnknown && abi != t.torch->abi()) {
    o.problems.push_back(std::string("built with ") + abi_name(abi) + ", torch (" +
                         t.torch->dir().string() + ") with " + abi_name(t.torch->abi()));
  }
  if (o.missing_count > 0) {
    o.problems.push_back(std::to_string(o.missing_count) + " of its " +
                         std::to_string(o.torch_imports) + " torch symbols are not defined by " +
                         t.torch->dir().string() + "/*.so: " + join(o.missing, "; ") +
                         (o.missing_count > o.missing.size() ? "; ..." : ""));
  }
}

// One object: its bytes are read through `read` (`size` of them).
void check_object(std::uint64_t size, wheel::ReadAt read, const RunTarget& t, ObjectReport& o) {
  auto elf = wheel::read_elf(size, read);
  if (!elf) {
    o.problems.push_back(elf.error());
    return;
  }
  if (const auto* s = elf->find(".nv_fatbin"); s != nullptr && s->type != wheel::kShtNobits) {
    const std::uint64_t base = s->offset;
    auto fatbins = wheel::read_fatbin(
        s->size, [&](std::uint64_t off, std::uint64_t len) -> Expected<std::string, std::string> {
          return read(base + off, len);  // read_fatbin keeps within the section's size
        });
    if (!fatbins) {
      o.problems.push_back(fatbins.error());
    } else {
      check_gpu_code(*fatbins, t, o);
    }
  }
  auto versions = wheel::needed_versions(*elf, read);
  if (!versions) {
    o.problems.push_back(versions.error());
  } else {
    check_glibc(*versions, t, o);
  }
  auto symbols = wheel::dynamic_symbols(*elf, read);
  if (!symbols) {
    o.problems.push_back(symbols.error());
  } else {
    check_torch(*symbols, t, o);
  }
}

}  // namespace

Expected<RunTarget, std::string> run_target_of(const target::Target& t, const std::string& key) {
  RunTarget r;
  r.key = key;
  r.glibc = t.libc;
  for (const auto part : split(t.arch.value, '+')) {
    const auto cc = target::parse_arch_folder(part);
    if (!cc) return unexpected("the target's arch \"" + std::string(part) + "\" is not smXY");
    r.archs.push_back(*cc);
  }
  return r;
}

bool RunReport::runs() const {
  return std::all_of(objects.begin(), objects.end(),
                     [](const ObjectReport& o) { return o.problems.empty(); });
}

std::vector<std::string> RunReport::problems() const {
  std::vector<std::string> out;
  for (const auto& o : objects) {
    for (const auto& p : o.problems) out.push_back(o.member + ": " + p);
  }
  return out;
}

ArchFit fit(const std::vector<FatbinEntry>& entries, target::ComputeCapability arch) {
  ArchFit f;
  bool ptx = false;
  for (const auto& e : entries) {
    if (e.kind == Kind::kSass) {
      const int major = e.arch / 10;
      const int minor = e.arch % 10;
      const bool specific = e.arch_specific.value_or(false);
      if (major != arch.major || minor > arch.minor) continue;
      if (specific && minor != arch.minor) continue;
      if (!e.arch_specific && minor != arch.minor) {
        f.uncertain = true;  // may be an sm_XYa that runs on X.Y only
        continue;
      }
      f.runs = true;
      f.uncertain = false;
      return f;
    }
    if (e.kind == Kind::kPtx && e.arch <= code_of(arch) &&
        (!e.arch_specific.value_or(false) || e.arch == code_of(arch))) {
      ptx = true;
    }
  }
  if (f.uncertain) {
    f.runs = true;  // compressed generic SASS is far more common than an 'a' of another minor
    return f;
  }
  f.runs = ptx;
  f.jit = ptx;
  return f;
}

Expected<RunReport, std::string> check_runs(const LocalZip& zip, const std::string& wheel,
                                            const RunTarget& t) {
  RunReport r;
  r.wheel = wheel;
  r.target = t.key;
  auto entries = zip.directory();
  if (!entries) return unexpected(entries.error());
  std::size_t torch_users = 0;
  for (const ZipEntry& e : *entries) {
    if (!is_shared_object(e.name)) continue;
    ObjectReport o;
    o.member = e.name;
    if (e.size > kMaxObjectSize) {
      o.problems.push_back("it is " + std::to_string(e.size) + " bytes uncompressed (at most " +
                           std::to_string(kMaxObjectSize) + " are read): not checked");
      r.objects.push_back(std::move(o));
      continue;
    }
    // Read where it lies (stored), or inflated from restart points: never held whole.
    auto member = MemberReader::open(zip, e);
    if (!member) return unexpected(member.error());
    auto read = [&](std::uint64_t off, std::uint64_t len) { return (*member)->read(off, len); };
    auto head = read(0, std::min<std::uint64_t>(e.size, 64));
    if (!head) return unexpected(e.name + ": " + head.error());
    if (!wheel::is_elf(*head)) {
      r.notes.push_back(e.name + " is not an ELF file: not read");
      continue;
    }
    if (auto h = wheel::read_elf_header(*head);
        !h && h.error().find("64-bit") != std::string::npos) {
      r.notes.push_back(e.name + " is " + h.error());
      continue;
    }
    check_object(e.size, read, t, o);
    if (o.torch_imports > 0) ++torch_users;
    r.objects.push_back(std::move(o));
  }
  const bool cuda = std::any_of(r.objects.begin(), r.objects.end(),
                                [](const ObjectReport& o) { return o.fatbins > 0; });
  if (!cuda) {
    r.notes.push_back("no CUDA code in its " + std::to_string(r.objects.size()) +
                      " shared objects: nothing GPU-specific to check");
  }
  if (torch_users > 0 && t.torch == nullptr) {
    r.notes.push_back("the torch ABI is not checked: " + t.torch_note);
  } else if (torch_users > 0) {
    r.notes.push_back("torch symbols checked against " + t.torch_note);
  }
  return r;
}

Expected<RunReport, std::string> check_runs(const std::filesystem::path& wheel,
                                            const RunTarget& t) {
  const std::string name = wheel.filename().string();
  auto f = CheckedFile::open(wheel);
  if (!f) return unexpected(name + ": " + f.error());
  LocalZip zip(std::move(*f));
  auto r = check_runs(zip, name, t);
  if (!r) return unexpected(name + ": " + r.error());
  return r;
}

}  // namespace whfs::check
