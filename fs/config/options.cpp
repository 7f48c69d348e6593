#include "fs/config/options.h"

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "fs/common/text.h"
#include "fs/common/units.h"
#include "fs/hub/hub_client.h"
#include "fs/metrics/metrics.h"
#include "fs/targeting/target.h"

namespace whfs {
namespace {

// A default as the usage writes it: "30s".
std::string seconds_text(std::chrono::seconds s) { return std::to_string(s.count()) + "s"; }

// A default size as the usage writes it: "20G", "64M", else in bytes.
std::string size_text(std::uint64_t bytes) {
  for (const auto& [shift, unit] : {std::pair{30, "G"}, std::pair{20, "M"}, std::pair{10, "K"}}) {
    if (bytes != 0 && bytes % (std::uint64_t{1} << shift) == 0) {
      return std::to_string(bytes >> shift) + unit;
    }
  }
  return std::to_string(bytes);
}

// User input echoed in an error message, with control characters escaped so that the message
// stays one line.
std::string shown(const std::string& text, std::size_t limit = 200) {
  std::string out;
  for (unsigned char c : text.substr(0, limit)) {
    if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

bool truthy(const char* v) {
  if (v == nullptr) return false;
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s == "1" || s == "ON" || s == "YES" || s == "TRUE";
}

// Options of mount(8) that reach us through mount.fuse3 and mean nothing to this filesystem
// (it is always read-only and never setuid/dev).
const std::set<std::string>& ignored_mount_options() {
  static const std::set<std::string> kIgnored = {
      "rw",     "ro",       "dev",     "nodev",    "suid",       "nosuid",      "exec",
      "noexec", "atime",    "noatime", "relatime", "norelatime", "strictatime", "auto",
      "noauto", "user",     "nouser",  "users",    "owner",      "group",       "_netdev",
      "nofail", "defaults", "sync",    "async",    "dirsync"};
  return kIgnored;
}

// FUSE options handed to libfuse as they are.
bool is_fuse_option(const std::string& key) {
  static const std::set<std::string> kFuse = {
      "allow_other", "allow_root", "auto_unmount", "default_permissions", "fsname", "subtype",
      "max_read",    "blkdev",     "blksize"};
  return kFuse.count(key) != 0;
}

// The options apply_option knows, for the one an unknown option most likely meant.
constexpr std::string_view kKnownOptions =
    "revision endpoint token_file log_file metrics metrics_textfile cache_dir cache_upper "
    "cache_group proxy python cudart arch torch cuda python_tag log_level nocurrent current "
    "offline streaming insecure_token dumpable nonempty cache_trusted cache_size readahead "
    "refresh read_timeout stall_timeout caller_timeout connections api_requests debug "
    "allow_other allow_root auto_unmount default_permissions fsname max_read";

// "; did you mean 'cache_dir'?" for "cachedir", else "".
std::string did_you_mean(const std::string& key) {
  std::vector<std::string> known;
  for (auto name : split_nonempty(kKnownOptions, ' ')) known.emplace_back(name);
  const std::string best = nearest_name(key, known);
  return best.empty() ? "" : "; did you mean '" + best + "'?";
}

Expected<void, std::string> apply_option(MountOptions& o, const std::string& item) {
  const auto eq = item.find('=');
  const std::string key = item.substr(0, eq);
  const bool has_value = eq != std::string::npos;
  const std::string value = has_value ? item.substr(eq + 1) : "";
  auto need_value = [&]() -> Expected<void, std::string> {
    if (!has_value || value.empty()) return unexpected("option '" + shown(key) + "' needs a value");
    return {};
  };
  auto set_string = [&](std::string& field) -> Expected<void, std::string> {
    if (auto r = need_value(); !r) return r;
    field = value;
    return {};
  };
  if (key.empty()) return {};
  if (key == "revision") return set_string(o.revision);
  if (key == "endpoint") {
    if (auto r = set_string(o.endpoint); !r) return r;
    if (!o.endpoint.starts_with("http://") && !o.endpoint.starts_with("https://")) {
      return unexpected("endpoint must be an http:// or https:// URL, got '" + shown(value) + "'");
    }
    return {};
  }
  if (key == "token_file") return set_string(o.token_file);
  if (key == "log_file") {
    if (auto r = set_string(o.log_file); !r) return r;
    if (!o.log_file.starts_with("/")) {
      return unexpected("log_file must be an absolute path (the daemon runs from /)");
    }
    return {};
  }
  if (key == "metrics") {
    if (auto r = need_value(); !r) return r;
    auto listen = metrics::parse_listen(value);
    if (!listen) return unexpected(shown(listen.error(), 400));
    o.metrics = *listen;
    return {};
  }
  if (key == "metrics_textfile") {
    if (auto r = set_string(o.metrics_textfile); !r) return r;
    if (!o.metrics_textfile.starts_with("/")) {
      return unexpected("metrics_textfile must be an absolute path (the daemon runs from /)");
    }
    if (!o.metrics_textfile.ends_with(".prom")) {
      return unexpected("metrics_textfile must end in .prom (node_exporter reads only those)");
    }
    return {};
  }
  if (key == "state_dir") {
    if (auto r = set_string(o.state_dir); !r) return r;
    if (!o.state_dir.starts_with("/")) {
      return unexpected("state_dir must be an absolute path (the daemon runs from /)");
    }
    return {};
  }
  if (key == "cache_dir") return set_string(o.cache_dir);
  if (key == "cache_upper") return set_string(o.cache_upper);
  if (key == "cache_group") return set_string(o.cache_group);
  if (key == "proxy") return set_string(o.proxy);
  if (key == "python") return set_string(o.target.python);
  if (key == "cudart") return set_string(o.target.cudart);
  if (key == "arch") return set_string(o.target.arch);
  if (key == "torch") return set_string(o.target.torch);
  if (key == "cuda") return set_string(o.target.cuda);
  if (key == "python_tag") return set_string(o.target.python_tag);
  if (key == "log_level") {
    if (auto r = set_string(o.log_level); !r) return r;
    static const std::set<std::string> kLevels = {"trace", "debug",    "info", "warn",
                                                  "error", "critical", "off"};
    if (kLevels.count(value) == 0) {
      return unexpected("log_level must be trace, debug, info, warn, error, critical or off");
    }
    return {};
  }
  if (key == "nocurrent") {
    if (has_value) return unexpected("option 'nocurrent' takes no value");
    o.current = false;
    return {};
  }
  if (key == "current") {
    if (auto r = need_value(); !r) return r;
    if (value != "caller" && value != "mount") {
      return unexpected(
          "current must be caller (each process's own target) or mount (the "
          "mount's), got '" +
          shown(value) + "'");
    }
    o.current_per_caller = value == "caller";
    return {};
  }
  const std::pair<const char*, bool*> flags[] = {
      {"offline", &o.offline},   {"streaming", &o.streaming}, {"insecure_token", &o.insecure_token},
      {"dumpable", &o.dumpable}, {"nonempty", &o.nonempty},   {"cache_trusted", &o.cache_trusted}};
  for (const auto& [name, field] : flags) {
    if (key != name) continue;
    if (has_value) return unexpected("option '" + key + "' takes no value");
    *field = true;
    return {};
  }
  if (key == "cache_size" || key == "readahead") {
    if (auto r = need_value(); !r) return r;
    const auto bytes = parse_size(value);
    if (!bytes) {
      return unexpected(key + " must be a size such as 20G or 512M, got '" + shown(value) + "'");
    }
    if (key == "cache_size") {
      if (*bytes < (64ull << 20)) return unexpected("cache_size must be at least 64M");
      o.cache_size = *bytes;
    } else {
      if (*bytes < (1ull << 20)) return unexpected("readahead must be at least 1M");
      o.readahead = *bytes;
    }
    return {};
  }
  if (key == "refresh" || key == "read_timeout" || key == "stall_timeout" ||
      key == "caller_timeout") {
    if (auto r = need_value(); !r) return r;
    const auto d = parse_duration(value);
    if (!d) {
      return unexpected(key + " must be a duration such as 30s, 10m or 1h, got '" + shown(value) +
                        "'");
    }
    if (key == "refresh") {
      if (d->count() != 0 && d->count() < 10)
        return unexpected("refresh must be 0 or at least 10s");
      o.refresh = *d;
    } else if (key == "read_timeout") {
      if (d->count() < 1) return unexpected("read_timeout must be at least 1s");
      o.read_timeout = *d;
    } else if (key == "caller_timeout") {
      if (d->count() < 1 || d->count() > 60) {
        return unexpected("caller_timeout must be from 1s to 1m");
      }
      o.caller_timeout = *d;
    } else {
      if (d->count() < 1 || d->count() > 600) {
        return unexpected("stall_timeout must be from 1s to 10m");
      }
      o.stall_timeout = *d;
    }
    return {};
  }
  // A count from 1 to `most`.
  for (const auto& [name, field, most] : {std::tuple{"connections", &o.connections, 64L},
                                          std::tuple{"api_requests", &o.api_requests, 32L}}) {
    if (key != name) continue;
    if (auto r = need_value(); !r) return r;
    char* end = nullptr;
    const long n = std::strtol(value.c_str(), &end, 10);
    if (end == value.c_str() || *end != '\0' || n < 1 || n > most) {
      return unexpected(key + " must be a number from 1 to " + std::to_string(most) + ", got '" +
                        shown(value) + "'");
    }
    *field = static_cast<unsigned>(n);
    return {};
  }
  if (ignored_mount_options().count(key) != 0 || key.starts_with("x-") || key == "comment") {
    return {};
  }
  if (is_fuse_option(key)) {
    o.fuse_options.push_back(item);
    return {};
  }
  return unexpected("unknown option '" + shown(key) + "'" + did_you_mean(key) + " (see --help)");
}

}  // namespace

std::string default_cache_dir(const GetEnv& getenv, bool is_root) {
  if (const char* d = getenv("CACHE_DIRECTORY"); d != nullptr && *d != '\0') {
    std::string s(d);
    return s.substr(0, s.find(':'));  // systemd may list several, ':'-separated
  }
  if (is_root) return "/var/cache/wheelhouse-fs";
  if (const char* x = getenv("XDG_CACHE_HOME"); x != nullptr && *x == '/') {
    return std::string(x) + "/wheelhouse-fs";
  }
  // No fallback under /tmp: another user could create that directory first.
  const char* home = getenv("HOME");
  if (home == nullptr || *home != '/') return "";
  return std::string(home) + "/.cache/wheelhouse-fs";
}

Expected<MountOptions, std::string> parse_mount_args(const std::vector<std::string>& args,
                                                     const GetEnv& getenv) {
  MountOptions o;
  std::vector<std::string> positional;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      o.show_help = true;
    } else if (a == "-V" || a == "--version") {
      o.show_version = true;
    } else if (a == "-f") {
      o.foreground = true;
    } else if (a == "-d" || a == "-odebug") {
      o.debug = true;
      o.foreground = true;
      o.log_level = "debug";
    } else if (a == "-s") {
      // libfuse's single-threaded flag: accepted for compatibility, the daemon stays threaded.
    } else if (a.starts_with("-o")) {
      std::string list = a.size() > 2 ? a.substr(2) : "";
      if (list.empty()) {
        if (i + 1 >= args.size()) return unexpected(std::string("-o needs a list of options"));
        list = args[++i];
      }
      std::size_t start = 0;
      while (start <= list.size()) {
        auto comma = list.find(',', start);
        if (comma == std::string::npos) comma = list.size();
        const std::string item = list.substr(start, comma - start);
        if (item == "debug") {
          o.debug = true;
          o.foreground = true;
          o.log_level = "debug";
        } else if (auto r = apply_option(o, item); !r) {
          return unexpected(r.error());
        }
        start = comma + 1;
      }
    } else if (a.starts_with("-") && a.size() > 1) {
      return unexpected("unknown flag '" + shown(a) + "' (see --help)");
    } else {
      positional.push_back(a);
    }
  }
  if (o.show_help || o.show_version) return o;
  if (positional.size() == 1) {
    o.mountpoint = positional[0];
  } else if (positional.size() == 2) {
    o.repo = positional[0];
    o.mountpoint = positional[1];
  } else if (positional.empty()) {
    return unexpected(std::string("missing MOUNTPOINT (see --help)"));
  } else {
    return unexpected("too many arguments: expected [REPO] MOUNTPOINT, got " +
                      std::to_string(positional.size()));
  }
  if (o.revision.empty()) return unexpected(std::string("revision must not be empty"));
  if (truthy(getenv("HF_HUB_OFFLINE")) || truthy(getenv("TRANSFORMERS_OFFLINE"))) {
    o.offline = true;
  }
  // Target overrides from the environment, where no option set them.
  const std::pair<std::string*, const char*> env_overrides[] = {
      {&o.target.arch, "WHEELHOUSE_ARCH"},     {&o.target.torch, "WHEELHOUSE_TORCH"},
      {&o.target.cuda, "WHEELHOUSE_CUDA"},     {&o.target.python_tag, "WHEELHOUSE_PYTHON_TAG"},
      {&o.target.python, "WHEELHOUSE_PYTHON"}, {&o.target.cudart, "WHEELHOUSE_CUDART"}};
  for (const auto& [field, var] : env_overrides) {
    if (field->empty()) {
      if (const char* v = getenv(var); v != nullptr) *field = v;
    }
  }
  if (const char* v = getenv("WHEELHOUSE_LOG_SIZE"); v != nullptr && *v != '\0') {
    const auto bytes = parse_size(v);
    if (!bytes || *bytes < 4096) {
      return unexpected("WHEELHOUSE_LOG_SIZE must be a size of at least 4K, such as 10M, got '" +
                        shown(v) + "'");
    }
    o.log_size = *bytes;
  }
  // Every value that can be wrong on the command line is refused here, so that each such
  // mistake exits 2 with one line (not 1, after the mount started).
  // (Their messages quote the value, which may come from the environment: kept one line.)
  if (auto repo = hub::parse_repo_ref(o.repo); !repo) {
    return unexpected(shown(repo.error(), 400));
  }
  if (auto v = target::validate_overrides(o.target); !v) {
    return unexpected(shown(v.error(), 400));
  }
  return o;
}

std::string mount_usage(const std::string& program) {
  std::string text = "Usage: " + program + R"( [-f] [-d] [-o opt[,opt...]] [REPO] MOUNTPOINT

Mounts a Hugging Face Hub dataset of prebuilt wheels (REPO, default
{repo}) read-only on MOUNTPOINT, fetching files lazily into a
local block cache. current/ shows the wheels that run for the process that looks: its
Python, its torch and CUDA, the GPUs it may use; targets/KEY/ those of any target.

  -f                  stay in the foreground (logs to stderr)
  -d                  foreground with debug logs and libfuse's request trace
  -o revision=REV     branch, tag, commit or refs/pr/N to mount (default {revision})
  -o endpoint=URL     Hub URL (default $HF_ENDPOINT, else https://huggingface.co)
  -o token_file=PATH  token file (default $HF_TOKEN, $HF_TOKEN_PATH, $HF_HOME/token)
  -o cache_dir=DIR    block cache (default $XDG_CACHE_HOME/wheelhouse-fs, or
                      /var/cache/wheelhouse-fs for root)
  -o cache_size=SIZE  cap on the cache, e.g. 20G (default {cache_size})
  -o cache_group=GROUP share the cache with this group (directory 3770, files 0660);
                      without it the cache is private (0700/0600) and a directory that
                      others own or can write is refused
  -o cache_upper=DIR  a writable cache (the daemon's alone, e.g. a tmpfs of mode 0700) over
                      cache_dir, which is then only read (a warm cache in an image layer or
                      a :ro bind mount): what it lacks is kept here
  -o cache_trusted    serve what another process sharing the cache recorded as verified
                      without hashing it here once first (default: each daemon verifies
                      every file itself once before serving it)
  -o offline          no network: serve only what the cache holds ($HF_HUB_OFFLINE)
  -o refresh=DURATION look for a new commit this often, e.g. 10m (default: on SIGHUP only)
  -o proxy=URL        HTTP(S) proxy (default: $HTTPS_PROXY / $https_proxy, $NO_PROXY)
  -o log_level=LEVEL  trace, debug, info, warn, error (default {log_level})
  -o read_timeout=D   a read whose downloads make no progress for D fails with EIO
                      (default {read_timeout})
  -o stall_timeout=D  a connection with no progress for D is dropped and its range asked
                      again on a fresh one (default {stall_timeout})
  -o caller_timeout=D current/ waits at most D for a process's Python files to be read (a
                      slow or hung filesystem in its paths), then answers targets/unresolved
                      while the reading goes on (default {caller_timeout})
  -o streaming        serve bytes as they arrive instead of once the whole file matched its
                      hash: the first read of a large file returns sooner, but a corrupt
                      download is only found at its end, after some of its bytes may have
                      been read (they are then dropped from the kernel's cache, and reads
                      fail with EIO); for reading small parts of huge files
  -o insecure_token   send the token to a plain http:// endpoint that is not on this machine
                      (it travels in clear text; by default it is sent only over https or to
                      a loopback address)
  -o log_file=PATH    where the daemon logs once detached (default: syslog when /dev/log
                      exists, else /var/log/wheelhousefs.log for root or
                      ~/.local/state/wheelhouse-fs/wheelhousefs.log); created 0600, in a
                      folder only this user or root can write (or a sticky one, like /tmp),
                      never through a link; rotated at {log_size}, 3 kept ($WHEELHOUSE_LOG_SIZE)
  -o metrics=[HOST:]PORT
                      serve Prometheus metrics at http://HOST:PORT/metrics (HOST defaults
                      to 127.0.0.1; another address only when named, e.g. 0.0.0.0:9101)
  -o metrics_textfile=PATH
                      write the same metrics to PATH (ending in .prom) every 5 s, for
                      node_exporter's textfile collector; removed at unmount (its folder
                      as for log_file)
  -o state_dir=DIR    where the daemon keeps what each hooked shell told it (wheelhouse
                      shell-hook), so that the same mount point mounted again (a restart,
                      a crash) knows the shells still running: a file per mount point, 0600,
                      in a folder only this user or root can write (default
                      /run/wheelhouse-fs for root, else $XDG_RUNTIME_DIR/wheelhouse-fs or
                      ~/.cache/wheelhouse-fs/state)
  -o nonempty         mount over a folder that is not empty (its files are hidden while
                      mounted; by default such a folder is refused)
  -o dumpable         allow core dumps of the daemon (off by default: a dump would hold
                      the token); for debugging
  -o readahead=SIZE   bytes fetched ahead of sequential readers (default {readahead})
  -o connections=N    parallel ranged GETs (default {connections})
  -o api_requests=N   Hub API requests (listings, revisions) on the wire at once, at most
                      (default {api_requests}; the Hub's rate limits count them per user)
  -o nocurrent        no current or targets/ (just the dataset's tree)
  -o current=MODE     caller (default): current/ follows each process (the Python it runs or
                      would run, its venv or conda env, its CUDA_VISIBLE_DEVICES); mount: one
                      target for every process, the mount's own
  -o python=PATH      the Python whose torch and wheel tags current/ matches, for every
                      process (read from its files, never run)
  -o cudart=PATH      libcudart to query for the GPUs (default: the system's; as root it
                      must be root's and not writable by others)
  -o arch=sm89,torch=2.9,cuda=12.8,python_tag=cp312
                      fix that part of the target for every process (also $WHEELHOUSE_ARCH,
                      ...); arch=sm80+sm86 for a set of GPUs
  -o allow_other,default_permissions,auto_unmount,fsname=NAME,max_read=N
                      passed to FUSE
  -h, --help          this text
  -V, --version       version

mount -t fuse.wheelhousefs REPO MOUNTPOINT -o opts, and /etc/fstab lines of type
fuse.wheelhousefs, work the same. SIGHUP looks for a new commit at once.

Exit status:
  0  mounted (without -f: the daemon serves; with -f: unmounted cleanly)
  1  the mount failed: the Hub, the cache or FUSE (one line says why)
  2  usage: a bad option or value, or a mount point that does not exist, is not a
     folder, is not empty (see nonempty) or already has a mount on it
)";
  // The defaults as options.h has them: written once.
  const MountOptions d;
  const std::pair<std::string_view, std::string> defaults[] = {
      {"{repo}", d.repo},
      {"{revision}", d.revision},
      {"{cache_size}", size_text(d.cache_size)},
      {"{log_level}", d.log_level},
      {"{read_timeout}", seconds_text(d.read_timeout)},
      {"{stall_timeout}", seconds_text(d.stall_timeout)},
      {"{caller_timeout}", seconds_text(d.caller_timeout)},
      {"{log_size}", size_text(d.log_size)},
      {"{readahead}", size_text(d.readahead)},
      {"{connections}", std::to_string(d.connections)},
      {"{api_requests}", std::to_string(d.api_requests)},
  };
  for (const auto& [key, value] : defaults) {
    const auto at = text.find(key);
    if (at != std::string::npos) text.replace(at, key.size(), value);
  }
  return text;
}

}  // namespace whfs
