#pragma once
// What a torch install exports to extensions: the defined dynamic symbols of its lib/*.so,
// read from their symbol tables (nothing is loaded or run), and the C++ ABI they use. A wheel's
// object that imports a c10::, at:: or torch:: symbol none of them defines fails to load.

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "fs/common/expected.h"
#include "fs/wheel/elf.h"

namespace whfs::check {

// libstdc++'s two std::string ABIs: the one since GCC 5 (std::__cxx11::basic_string, the
// default) and the old one (_GLIBCXX_USE_CXX11_ABI=0).
enum class CxxAbi { kUnknown, kCxx11, kOld };
const char* abi_name(CxxAbi abi);  // "the new (__cxx11) C++ ABI", ...

// From mangled names: __cxx11 anywhere is the new ABI; the old std::string's members
// (_ZNSs..., _ZNKSs...) are the old one.
CxxAbi abi_of(const std::vector<wheel::DynamicSymbol>& symbols);

// Whether a mangled name is of the c10::, at:: or torch:: namespaces (functions, data,
// vtables and typeinfo of their classes).
bool in_torch_namespace(std::string_view mangled);

// The demangled name, or the mangled one when it does not demangle.
std::string demangle(const std::string& mangled);

class TorchSymbols {
 public:
  // The libraries of `lib_dir` (torch/lib). The error names the folder or the library.
  static Expected<TorchSymbols, std::string> load(const std::filesystem::path& lib_dir);

  bool defines(const std::string& mangled) const { return defined_.contains(mangled); }
  CxxAbi abi() const { return abi_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::size_t libraries() const { return libraries_; }
  std::size_t size() const { return defined_.size(); }

 private:
  std::filesystem::path dir_;
  std::unordered_set<std::string> defined_;
  CxxAbi abi_ = CxxAbi::kUnknown;
  std::size_t libraries_ = 0;
};

// The ELF file at `path` read with pread through `read` (for the torch libraries, and tests).
Expected<std::vector<wheel::DynamicSymbol>, std::string> file_dynamic_symbols(
    const std::filesystem::path& path);

}  // namespace whfs::check
