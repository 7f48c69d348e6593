#pragma once
// The mount's configuration: parsed and validated once from the command line (also in the
// mount.fuse3 calling convention used by mount(8) and /etc/fstab), then passed by const
// reference. No globals.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fs/common/expected.h"
#include "fs/targeting/overrides.h"

namespace whfs {

struct MountOptions {
  std::string repo = "DoctorPopi/python_wheelhouse";
  std::string mountpoint;
  bool nonempty = false;    // mount over a folder that is not empty (hiding what it holds)
  bool foreground = false;  // -f
  bool debug = false;       // -d: foreground, debug logs, libfuse's request trace
  std::string revision = "main";
  std::string endpoint;  // empty: HF_ENDPOINT, else https://huggingface.co
  std::string token_file;
  std::string cache_dir;
  std::string cache_upper;     // writable tier over a read-only cache_dir
  std::string cache_group;     // share the cache with this group (else private)
  bool cache_trusted = false;  // trust other processes' verification of shared contents
  std::uint64_t cache_size = 20ull << 30;
  bool offline = false;             // offline option or HF_HUB_OFFLINE: no requests at all
  std::chrono::seconds refresh{0};  // 0: only on SIGHUP
  std::string proxy;
  std::string log_level = "info";
  // A read whose downloads make no progress for this long fails with EIO.
  std::chrono::seconds read_timeout{30};
  // A connection with no progress for this long is dropped and its range asked again on a
  // fresh one.
  std::chrono::seconds stall_timeout{5};
  std::chrono::seconds caller_timeout{2};  // how long current/ waits for a process's files
  bool streaming = false;                  // serve bytes before the whole file is verified (opt-in)
  bool insecure_token = false;  // send the token to a plain-http endpoint off this machine
  std::string log_file;         // where a detached daemon logs (default: syslog, else a file)
  std::uint64_t log_size =
      10ull << 20;               // a log file is rotated at this size ($WHEELHOUSE_LOG_SIZE)
  bool dumpable = false;         // allow core dumps (they would hold the token)
  std::string metrics;           // Prometheus /metrics listener, "127.0.0.1:9101" ("" = none)
  std::string metrics_textfile;  // node_exporter textfile ("" = none)
  std::string state_dir;  // the shells' hints across a restart ("" = target::default_state_dir)
  std::uint64_t readahead = 64ull << 20;  // bytes in flight for readahead and prefetch
  unsigned connections = 16;              // parallel ranged GETs
  unsigned api_requests = 4;              // Hub API requests on the wire at once, at most
  TargetOverrides target;
  bool current = true;  // current and targets/ (nocurrent hides them)
  // current=caller (default): each process's own target; current=mount: the mount's own, for
  // every process (its environment, python= and the overrides).
  bool current_per_caller = true;
  std::vector<std::string> fuse_options;  // passed to libfuse (allow_other, ...)
  bool show_help = false;
  bool show_version = false;
};

// args excludes argv[0]. Bad input gives one clear line, e.g. "unknown option 'cache_sise'".
Expected<MountOptions, std::string> parse_mount_args(const std::vector<std::string>& args,
                                                     const GetEnv& getenv);

// $CACHE_DIRECTORY (systemd CacheDirectory=), /var/cache/wheelhouse-fs for root, else
// ${XDG_CACHE_HOME:-~/.cache}/wheelhouse-fs; "" when none applies (no HOME): never a shared
// folder such as /tmp, where another user could create the directory first.
std::string default_cache_dir(const GetEnv& getenv, bool is_root);

std::string mount_usage(const std::string& program);

}  // namespace whfs
