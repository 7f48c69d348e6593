#include "fs/check/torch_symbols.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <system_error>

namespace whfs::check {
namespace {

constexpr std::size_t kMaxLibraries = 256;

std::string errno_text() { return std::error_code(errno, std::generic_category()).message(); }

}  // namespace

const char* abi_name(CxxAbi abi) {
  switch (abi) {
    case CxxAbi::kCxx11:
      return "the new C++ ABI (std::__cxx11)";
    case CxxAbi::kOld:
      return "the old C++ ABI (_GLIBCXX_USE_CXX11_ABI=0)";
    default:
      return "an unknown C++ ABI";
  }
}

CxxAbi abi_of(const std::vector<wheel::DynamicSymbol>& symbols) {
  bool old = false;
  for (const auto& s : symbols) {
    if (s.name.find("__cxx11") != std::string::npos) return CxxAbi::kCxx11;
    if (!s.defined && (s.name.starts_with("_ZNSs") || s.name.starts_with("_ZNKSs"))) old = true;
  }
  return old ? CxxAbi::kOld : CxxAbi::kUnknown;
}

bool in_torch_namespace(std::string_view m) {
  if (!m.starts_with("_Z")) return false;
  m.remove_prefix(2);
  // Special names: _ZTV (vtable), _ZTI (typeinfo), _ZTS (its name), _ZTT (VTT).
  if (m.size() >= 2 && m[0] == 'T' && (m[1] == 'V' || m[1] == 'I' || m[1] == 'S' || m[1] == 'T')) {
    m.remove_prefix(2);
  }
  if (!m.starts_with('N')) return false;
  m.remove_prefix(1);
  while (!m.empty() && (m[0] == 'r' || m[0] == 'V' || m[0] == 'K' || m[0] == 'R' || m[0] == 'O')) {
    m.remove_prefix(1);
  }
  return m.starts_with("3c10") || m.starts_with("2at") || m.starts_with("5torch");
}

std::string demangle(const std::string& mangled) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : mangled;
}

Expected<std::vector<wheel::DynamicSymbol>, std::string> file_dynamic_symbols(
    const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return unexpected(path.string() + ": cannot open it: " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return unexpected(path.string() + ": not a regular file");
  }
  auto read = [fd](std::uint64_t offset,
                   std::uint64_t length) -> Expected<std::string, std::string> {
    std::string out(static_cast<std::size_t>(length), '\0');
    std::size_t got = 0;
    while (got < out.size()) {
      const ssize_t n =
          ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return unexpected("read error: " + errno_text());
      if (n == 0) return unexpected(std::string("the file shrank while it was read"));
      got += static_cast<std::size_t>(n);
    }
    return out;
  };
  auto elf = wheel::read_elf(static_cast<std::uint64_t>(st.st_size), read);
  auto symbols =
      elf ? wheel::dynamic_symbols(*elf, read)
          : Expected<std::vector<wheel::DynamicSymbol>, std::string>(unexpected(elf.error()));
  ::close(fd);
  if (!symbols) return unexpected(path.string() + ": " + symbols.error());
  return symbols;
}

Expected<TorchSymbols, std::string> TorchSymbols::load(const std::filesystem::path& lib_dir) {
  std::error_code ec;
  std::vector<std::filesystem::path> libs;
  for (std::filesystem::directory_iterator it(lib_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.ends_with(".so") || name.find(".so.") != std::string::npos) libs.push_back(it->path());
  }
  if (ec) return unexpected(lib_dir.string() + ": cannot list it: " + ec.message());
  if (libs.empty()) return unexpected(lib_dir.string() + ": no lib*.so in it (is it torch/lib?)");
  if (libs.size() > kMaxLibraries) {
    return unexpected(lib_dir.string() + ": over " + std::to_string(kMaxLibraries) + " libraries");
  }
  std::sort(libs.begin(), libs.end());
  TorchSymbols t;
  t.dir_ = lib_dir;
  for (const auto& lib : libs) {
    auto symbols = file_dynamic_symbols(lib);
    if (!symbols) {
      // A non-ELF file named .so (a linker script, a stub) exports nothing.
      if (symbols.error().find("no ELF magic") != std::string::npos) continue;
      return unexpected(symbols.error());
    }
    ++t.libraries_;
    const CxxAbi abi = abi_of(*symbols);
    if (abi == CxxAbi::kCxx11 || (abi == CxxAbi::kOld && t.abi_ == CxxAbi::kUnknown)) t.abi_ = abi;
    for (auto& s : *symbols) {
      if (s.defined) t.defined_.insert(std::move(s.name));
    }
  }
  return t;
}

}  // namespace whfs::check
