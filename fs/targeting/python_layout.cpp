#include "fs/targeting/python_layout.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <mutex>
#include <tuple>

#include "fs/common/text.h"

namespace whfs::target {
namespace {

constexpr std::size_t kMaxConfig = 64 << 10;
constexpr std::size_t kMaxLibc = 16 << 20;
// Folders of PATH and PYTHONPATH looked at: each costs a few system calls in the daemon, and a
// process names as many as it likes (a 128 KiB PATH costs 0.1 s of CPU per detection).
constexpr std::size_t kMaxSearchDirs = 64;

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_python_name(const std::string& name) {
  return parse_python_name(name).has_value() || name == "python" || name == "python3";
}

// "3.12.1" or "3.12.1.final.0" -> {3, 12}.
std::optional<std::pair<int, int>> major_minor(std::string_view v) {
  int major = 0;
  int minor = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), major);
  if (ec != std::errc() || p == v.data() + v.size() || *p != '.') return std::nullopt;
  auto [q, ec2] = std::from_chars(p + 1, v.data() + v.size(), minor);
  if (ec2 != std::errc() || q == p + 1) return std::nullopt;
  return std::make_pair(major, minor);
}

struct Elf {
  std::string machine;  // x86_64, aarch64, i686
  int bits = 64;
};

// The machine of an ELF executable from its header.
std::optional<Elf> elf_of(const std::string& head) {
  if (head.size() < 20 || head.compare(0, 4,
                                       "\x7f"
                                       "ELF") != 0)
    return std::nullopt;
  const int bits = head[4] == 2 ? 64 : 32;
  const bool little = head[5] == 1;
  const auto b0 = static_cast<unsigned char>(head[18]);
  const auto b1 = static_cast<unsigned char>(head[19]);
  const unsigned machine = little ? (b0 | b1 << 8) : (b1 | b0 << 8);
  switch (machine) {
    case 62:
      return Elf{"x86_64", bits};
    case 3:
      return Elf{"i686", 32};
    case 183:
      return Elf{"aarch64", bits};
    case 40:
      return Elf{"armv7l", 32};
    case 21:
      return Elf{little ? "ppc64le" : "ppc64", bits};
    case 22:
      return Elf{"s390x", bits};
    case 243:
      return Elf{"riscv64", bits};
    default:
      return std::nullopt;
  }
}

bool is_elf(const RootFs& root, const std::string& path) {
  const auto head = root.read_head(path, 4);
  return head && *head ==
                     "\x7f"
                     "ELF";
}

// The glibc version of a libc image, cached by the image's stamp (a root shares its libc with
// every interpreter in it; a scan reads about 2 MB).
std::string cached_glibc(const RootFs& root, const std::string& path, const FileStamp& stamp) {
  static std::mutex mu;
  static std::map<std::tuple<dev_t, ino_t, std::int64_t, std::uint64_t>, std::string> cache;
  const auto key = std::make_tuple(stamp.dev, stamp.ino, stamp.mtime_ns, stamp.size);
  {
    std::lock_guard lock(mu);
    if (const auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const auto image = root.read_file(path, kMaxLibc);
  if (!image) return "";
  std::string version = glibc_version_in(*image);
  std::lock_guard lock(mu);
  if (cache.size() >= 64) cache.clear();
  cache[key] = version;
  return version;
}

}  // namespace

std::optional<PythonName> parse_python_name(std::string_view name) {
  if (!name.starts_with("python")) return std::nullopt;
  name.remove_prefix(6);
  std::string flags;
  if (!name.empty() && name.back() == 't') {
    flags = "t";
    name.remove_suffix(1);
  }
  const auto mm = major_minor(name);
  if (!mm || mm->first != 3) return std::nullopt;
  // Nothing after the minor ("python3.12-config" is not an interpreter).
  const auto digits = std::to_string(mm->first) + "." + std::to_string(mm->second);
  if (name != digits) return std::nullopt;
  return PythonName{mm->first, mm->second, flags};
}

VenvConfig parse_pyvenv_cfg(std::string_view text) {
  VenvConfig c;
  std::string version_info;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string key(trim(line.substr(0, eq)));
    const std::string value(trim(line.substr(eq + 1)));
    if (key == "home") c.home = value;
    if (key == "version") c.version = value;
    if (key == "version_info") version_info = value;
    if (key == "include-system-site-packages") {
      std::string v = value;
      std::transform(v.begin(), v.end(), v.begin(),
                     [](unsigned char ch) { return std::tolower(ch); });
      c.system_site = v == "true";
    }
  }
  if (c.version.empty()) c.version = version_info;
  return c;
}

std::string glibc_version_in(std::string_view image) {
  int best = -1;
  constexpr std::string_view kTag = "GLIBC_2.";
  for (std::size_t at = image.find(kTag); at != std::string_view::npos;
       at = image.find(kTag, at + kTag.size())) {
    int minor = 0;
    const char* begin = image.data() + at + kTag.size();
    auto [end, ec] = std::from_chars(begin, image.data() + image.size(), minor);
    if (ec == std::errc() && end != begin && minor < 1000) best = std::max(best, minor);
  }
  return best < 0 ? "" : "2." + std::to_string(best);
}

namespace {

// The first line of a pyenv version file (`.python-version`, `$PYENV_ROOT/version`): the first
// of its names ("3.12.1", "myenv", "system"); pyenv reads several, separated by spaces or
// newlines, and uses the first one that is installed.
std::vector<std::string> pyenv_names(std::string_view text) {
  std::vector<std::string> out;
  std::string word;
  for (const char ch : text) {
    if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t' || ch == ':') {
      if (!word.empty() && !word.starts_with('#')) out.push_back(word);
      word.clear();
    } else {
      word.push_back(ch);
    }
  }
  if (!word.empty() && !word.starts_with('#')) out.push_back(word);
  return out;
}

struct PyenvChoice {
  std::string version;  // "3.12.1", an env's name, or "system"
  std::string from;     // "PYENV_VERSION", "/home/u/proj/.python-version", ...
};

// What pyenv itself would pick, read the way it reads it: PYENV_VERSION, else the first
// .python-version from the working directory upwards, else $PYENV_ROOT/version, else system.
PyenvChoice pyenv_version(const CallerProcess& p, const RootFs& root,
                          const std::string& pyenv_root) {
  if (const auto v = p.var("PYENV_VERSION"); v && !v->empty()) {
    const auto names = pyenv_names(*v);
    if (!names.empty()) return {names.front(), "PYENV_VERSION"};
  }
  if (!p.cwd.empty() && p.cwd.front() == '/') {
    std::string dir = normalize_path(p.cwd);
    for (int depth = 0; depth < 64; ++depth) {
      const std::string file = (dir == "/" ? "" : dir) + "/.python-version";
      if (const auto text = root.read_file(file, 4096)) {
        const auto names = pyenv_names(*text);
        if (!names.empty()) return {names.front(), file};
      }
      if (dir == "/") break;
      dir = parent_of(dir);
    }
  }
  if (const auto text = root.read_file(pyenv_root + "/version", 4096)) {
    const auto names = pyenv_names(*text);
    if (!names.empty()) return {names.front(), pyenv_root + "/version"};
  }
  return {"system", "no version set"};
}

}  // namespace

Expected<InterpreterChoice, std::string> choose_interpreter(const CallerProcess& p,
                                                            const RootFs& root) {
  const std::string path_var = p.var("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  // A pyenv shims folder met on PATH before any real python3: the shim decides at run time,
  // from files pyenv reads, which Python runs; those files are read here instead.
  std::optional<std::string> shims;
  // The first executable of that name on PATH, as the process would run it. Scripts are
  // passed over (a pyenv shim decides at run time which Python runs, which only running it
  // would tell).
  auto on_path = [&](const std::string& name,
                     const std::string& after = "") -> std::optional<std::string> {
    std::size_t looked = 0;
    bool skipping = !after.empty();
    for (const auto dir : split_nonempty(path_var, ':')) {
      if (dir.front() != '/') continue;  // a relative PATH entry: the process's cwd, skipped
      if (++looked > kMaxSearchDirs) break;
      const std::string folder = normalize_path(std::string(dir));
      if (skipping) {
        skipping = folder != after;
        continue;
      }
      const std::string candidate = normalize_path(folder + "/" + name);
      if (!root.is_executable_file(candidate)) continue;
      if (is_elf(root, candidate)) return candidate;
      if (!shims && after.empty() && base_name(folder) == "shims") shims = folder;
      if (shims) return std::nullopt;  // what the shim would run is pyenv's choice
    }
    return std::nullopt;
  };
  if (is_python_name(p.exe_name) && !p.argv.empty() && !p.argv[0].empty()) {
    const std::string& a0 = p.argv[0];
    std::optional<std::string> at;
    if (a0.front() == '/') {
      at = normalize_path(a0);
    } else if (a0.find('/') != std::string::npos) {
      if (!p.cwd.empty()) at = normalize_path(p.cwd + "/" + a0);
    } else {
      at = on_path(a0);
    }
    // A wrapper script (a pyenv shim) found by name is not what runs: then the binary
    // itself, which is what the process is.
    if (at && root.is_executable_file(*at) && is_elf(root, *at)) {
      return InterpreterChoice{*at, "the process is the Python interpreter " + p.exe_name +
                                        ", started as " + a0 + (a0 == *at ? "" : " (" + *at + ")")};
    }
    if (!p.exe_path.empty() && root.is_executable_file(p.exe_path)) {
      return InterpreterChoice{p.exe_path, "the process is the Python interpreter " + p.exe_path};
    }
  }
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    const auto prefix = p.var(var);
    if (!prefix || prefix->empty() || prefix->front() != '/') continue;
    for (const char* name : {"python3", "python"}) {
      const std::string candidate = normalize_path(*prefix + "/bin/" + name);
      if (root.is_executable_file(candidate)) {
        return InterpreterChoice{candidate, "$" + std::string(var) + " is " + *prefix};
      }
    }
    if (root.met_refused()) {
      return unexpected("$" + std::string(var) + " names " + *prefix +
                        ", which lies inside this mount (not followed)");
    }
    return unexpected("$" + std::string(var) + " names " + *prefix + ", which has no bin/python3");
  }
  if (auto found = on_path("python3")) {
    return InterpreterChoice{*found, "the first python3 on the process's PATH"};
  }
  if (shims) {
    const std::string pyenv_root = p.var("PYENV_ROOT").value_or(parent_of(*shims));
    const PyenvChoice v = pyenv_version(p, root, pyenv_root);
    const std::string why = "pyenv " + v.version + " (" + v.from + ")";
    if (v.version == "system") {
      if (auto found = on_path("python3", *shims)) {
        return InterpreterChoice{*found, why + ": the first python3 on PATH after " + *shims};
      }
      return unexpected(why + ", and no python3 on the process's PATH after " + *shims);
    }
    if (v.version.find('/') != std::string::npos || v.version == "..") {
      return unexpected(why + " is not a version name");
    }
    const std::string prefix = pyenv_root + "/versions/" + v.version;
    for (const char* name : {"python3", "python"}) {
      const std::string candidate = prefix + "/bin/" + name;
      if (root.is_executable_file(candidate)) return InterpreterChoice{candidate, why};
    }
    return unexpected(why + ", which is not installed (no " + prefix + "/bin/python3)");
  }
  if (root.met_refused()) {
    return unexpected(
        "no python3 on the process's PATH outside this mount (a path that leads "
        "into the mount itself is not followed)");
  }
  std::string shown = path_var.size() > 512 ? path_var.substr(0, 512) + "..." : path_var;
  return unexpected("no python3 on the process's PATH (" + shown + ")");
}

Expected<PythonLayout, std::string> read_python_layout(const RootFs& root,
                                                       const std::string& interpreter,
                                                       const CallerProcess* process) {
  PythonLayout out;
  auto input = [&](const std::string& path) {
    if (auto st = root.stamp(path)) out.inputs.push_back(Input{path, *st});
  };
  const auto real = root.resolve(interpreter);
  if (!real || !root.is_executable_file(*real)) {
    return unexpected("the interpreter " + interpreter + " does not exist");
  }
  input(*real);
  const std::string name = base_name(*real);
  if (name.starts_with("pypy")) {
    return unexpected(interpreter + " is PyPy; the wheelhouse holds CPython wheels");
  }
  const auto head = root.read_head(*real, 64);
  const auto elf = head ? elf_of(*head) : std::nullopt;
  if (!elf) return unexpected(interpreter + " is not an ELF executable this version knows");
  // A venv: pyvenv.cfg beside the interpreter or one folder up (CPython's own rule).
  std::optional<VenvConfig> venv;
  std::string venv_dir;
  for (const std::string& dir : {parent_of(interpreter), parent_of(parent_of(interpreter))}) {
    if (auto text = root.read_file(dir + "/pyvenv.cfg", kMaxConfig)) {
      venv = parse_pyvenv_cfg(*text);
      venv_dir = dir;
      input(dir + "/pyvenv.cfg");
      break;
    }
  }
  const std::string prefix = venv ? venv_dir : parent_of(parent_of(*real));
  std::optional<PythonName> version;
  if (venv) {
    if (auto mm = major_minor(venv->version); mm && mm->first == 3) {
      version = PythonName{mm->first, mm->second, ""};
    }
  }
  if (auto from_name = parse_python_name(name)) {
    if (!version) version = from_name;
    version->abiflags = from_name->abiflags;
  }
  if (!version) {
    // "python3" as the real binary: the one lib/python3.X folder of its prefix says.
    std::vector<PythonName> found;
    input(prefix + "/lib");
    for (const auto& entry : root.list(prefix + "/lib")) {
      if (auto n = parse_python_name(entry)) found.push_back(*n);
    }
    if (found.size() != 1) {
      return unexpected("cannot tell the Python version of " + interpreter +
                        " from its files (no version in its name or pyvenv.cfg, and " +
                        std::to_string(found.size()) + " lib/python3.X folders in " + prefix + ")");
    }
    version = found.front();
  }
  const std::string lib =
      "python" + std::to_string(version->major) + "." + std::to_string(version->minor);
  if (version->abiflags.empty() && root.is_dir(prefix + "/lib/" + lib + "t") &&
      !root.is_dir(prefix + "/lib/" + lib)) {
    version->abiflags = "t";
  }
  const std::string pylib = lib + version->abiflags;

  PythonInfo& info = out.info;
  info.implementation = "cpython";
  info.major = version->major;
  info.minor = version->minor;
  info.abiflags = version->abiflags;
  info.executable = interpreter;
  info.platform = "linux-" + (elf->machine == "i686" ? std::string("i686") : elf->machine);
  info.pointer_bits = elf->bits;
  for (const char* libc :
       {"/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6", "/lib64/libc.so.6",
        "/usr/lib64/libc.so.6", "/lib/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/aarch64-linux-gnu/libc.so.6"}) {
    if (const auto st = root.stamp(libc)) {
      info.glibc = cached_glibc(root, libc, *st);
      out.inputs.push_back(Input{libc, *st});
      break;
    }
  }

  // sys.path's order, the folders that exist.
  std::vector<std::string> dirs;
  auto add = [&](const std::string& d) {
    const std::string n = normalize_path(d);
    if (std::find(dirs.begin(), dirs.end(), n) == dirs.end() && root.is_dir(n)) dirs.push_back(n);
  };
  auto env = [&](const char* var) -> std::optional<std::string> {
    return process ? process->var(var) : std::nullopt;
  };
  if (auto pp = env("PYTHONPATH")) {
    std::size_t looked = 0;
    for (const auto d : split_nonempty(*pp, ':')) {
      if (d.front() == '/' && ++looked <= kMaxSearchDirs) add(std::string(d));
    }
  }
  const bool system_site = !venv || venv->system_site;
  const auto no_user_site = env("PYTHONNOUSERSITE");
  if (system_site && (!no_user_site || no_user_site->empty())) {
    std::optional<std::string> base = env("PYTHONUSERBASE");
    if (!base) {
      if (auto home = env("HOME"); home && !home->empty() && home->front() == '/') {
        base = *home + "/.local";
      }
    }
    if (base) add(*base + "/lib/" + pylib + "/site-packages");
  }
  if (venv) add(venv_dir + "/lib/" + pylib + "/site-packages");
  if (system_site) {
    const std::string base =
        venv && !venv->home.empty() ? parent_of(venv->home) : parent_of(parent_of(*real));
    add(base + "/lib/" + pylib + "/site-packages");
    if (base == "/usr") {  // Debian's and Ubuntu's layout
      add("/usr/local/lib/" + pylib + "/dist-packages");
      add("/usr/lib/python3/dist-packages");
      add("/usr/lib/" + pylib + "/dist-packages");
    }
  }
  info.site_dirs = std::move(dirs);
  return out;
}

}  // namespace whfs::target
