// wheelhouse-csi: a CSI node plugin (spec v1: the Identity and Node services) that serves
// wheelhouse-fs mounts to Kubernetes pods. NodePublishVolume starts, or reuses, one
// wheelhousefs daemon per (endpoint, repo, revision, options, token) on the node, all on one
// cache, and bind-mounts it read-only onto the pod's target path; NodeUnpublishVolume takes
// the bind mount away, and the daemon ends with its last one. Daemons outlive the plugin and its
// container (they run in a cgroup of the node's own): a restarted plugin adopts them from its
// state file. A watchdog starts a daemon that died again and binds its targets again.

#include <grpcpp/grpcpp.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fs/common/units.h"
#include "fs/common/version.h"
#include "tools/csi/csi.grpc.pb.h"
#include "tools/csi/linux_system.h"
#include "tools/csi/node.h"

namespace {

using whfs::csi::Code;

constexpr const char* kPluginName = "wheelhouse-fs.csi";

// Code's numbers are gRPC's.
static_assert(static_cast<int>(Code::kInvalidArgument) == grpc::StatusCode::INVALID_ARGUMENT);
static_assert(static_cast<int>(Code::kNotFound) == grpc::StatusCode::NOT_FOUND);
static_assert(static_cast<int>(Code::kAlreadyExists) == grpc::StatusCode::ALREADY_EXISTS);
static_assert(static_cast<int>(Code::kResourceExhausted) == grpc::StatusCode::RESOURCE_EXHAUSTED);
static_assert(static_cast<int>(Code::kFailedPrecondition) == grpc::StatusCode::FAILED_PRECONDITION);
static_assert(static_cast<int>(Code::kAborted) == grpc::StatusCode::ABORTED);
static_assert(static_cast<int>(Code::kInternal) == grpc::StatusCode::INTERNAL);
static_assert(static_cast<int>(Code::kUnavailable) == grpc::StatusCode::UNAVAILABLE);

grpc::Status to_grpc(const whfs::csi::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return {static_cast<grpc::StatusCode>(s.code), s.message};
}

class IdentityService final : public csi::v1::Identity::Service {
 public:
  explicit IdentityService(const whfs::csi::Node& node) : node_(node) {}

  grpc::Status GetPluginInfo(grpc::ServerContext* /*ctx*/,
                             const csi::v1::GetPluginInfoRequest* /*req*/,
                             csi::v1::GetPluginInfoResponse* resp) override {
    resp->set_name(kPluginName);
    resp->set_vendor_version(whfs::kVersion);
    return grpc::Status::OK;
  }
  // No controller service (nothing to provision or attach) and no topology: a node plugin.
  grpc::Status GetPluginCapabilities(grpc::ServerContext* /*ctx*/,
                                     const csi::v1::GetPluginCapabilitiesRequest* /*req*/,
                                     csi::v1::GetPluginCapabilitiesResponse* /*resp*/) override {
    return grpc::Status::OK;
  }
  // Adoption is done before the socket listens. The Node answers unless its lock is stuck:
  // then this call does not answer, and the liveness probe's timeout restarts the container
  // (the daemons go on serving and are adopted).
  grpc::Status Probe(grpc::ServerContext* /*ctx*/, const csi::v1::ProbeRequest* /*req*/,
                     csi::v1::ProbeResponse* resp) override {
    resp->mutable_ready()->set_value(node_.ready());
    return grpc::Status::OK;
  }

 private:
  const whfs::csi::Node& node_;
};

class NodeService final : public csi::v1::Node::Service {
 public:
  NodeService(whfs::csi::Node& node, std::string node_id)
      : node_(node), node_id_(std::move(node_id)) {}

  grpc::Status NodePublishVolume(grpc::ServerContext* /*ctx*/,
                                 const csi::v1::NodePublishVolumeRequest* req,
                                 csi::v1::NodePublishVolumeResponse* /*resp*/) override {
    whfs::csi::PublishRequest r;
    r.volume_id = req->volume_id();
    r.target_path = req->target_path();
    r.has_mount_capability = req->has_volume_capability() && req->volume_capability().has_mount();
    r.block = req->has_volume_capability() && req->volume_capability().has_block();
    r.volume_context = {req->volume_context().begin(), req->volume_context().end()};
    r.secrets = {req->secrets().begin(), req->secrets().end()};  // never logged
    const auto s = node_.publish(r);
    if (!s.ok()) {
      spdlog::warn("NodePublishVolume {} on {}: {}", r.volume_id, r.target_path, s.message);
    }
    return to_grpc(s);
  }

  grpc::Status NodeUnpublishVolume(grpc::ServerContext* /*ctx*/,
                                   const csi::v1::NodeUnpublishVolumeRequest* req,
                                   csi::v1::NodeUnpublishVolumeResponse* /*resp*/) override {
    const auto s = node_.unpublish(req->volume_id(), req->target_path());
    if (!s.ok()) {
      spdlog::warn("NodeUnpublishVolume {} on {}: {}", req->volume_id(), req->target_path(),
                   s.message);
    }
    return to_grpc(s);
  }

  // None: no staging (a publish needs nothing per device), no stats, no expansion.
  grpc::Status NodeGetCapabilities(grpc::ServerContext* /*ctx*/,
                                   const csi::v1::NodeGetCapabilitiesRequest* /*req*/,
                                   csi::v1::NodeGetCapabilitiesResponse* /*resp*/) override {
    return grpc::Status::OK;
  }

  grpc::Status NodeGetInfo(grpc::ServerContext* /*ctx*/, const csi::v1::NodeGetInfoRequest* /*req*/,
                           csi::v1::NodeGetInfoResponse* resp) override {
    resp->set_node_id(node_id_);
    // No limit: volumes of one key share a daemon, and --max-daemons counts daemons.
    resp->set_max_volumes_per_node(0);
    return grpc::Status::OK;
  }

 private:
  whfs::csi::Node& node_;
  std::string node_id_;
};

std::string default_node_id() {
  if (const char* n = std::getenv("NODE_NAME"); n != nullptr && *n != '\0') return n;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

std::string default_daemon(const char* argv0) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = self.parent_path() / "wheelhousefs";
    if (::access(beside.c_str(), X_OK) == 0) return beside;
    // The build tree: tools/csi/wheelhouse-csi beside fs/wheelhousefs.
    const auto built = self.parent_path().parent_path().parent_path() / "fs" / "wheelhousefs";
    if (::access(built.c_str(), X_OK) == 0) return built;
  }
  (void)argv0;
  return "/usr/bin/wheelhousefs";
}

int run(int argc, char** argv) {
  CLI::App app{
      "wheelhouse-csi: the CSI node plugin of wheelhouse-fs. Serves the CSI v1 Identity and Node "
      "services on a unix socket; each volume is one wheelhousefs daemon per (endpoint, repo, "
      "revision, options, token) on this node, all on one cache, bind-mounted read-only onto "
      "each pod's target path. volume_context keys: repo (required), revision (default main), "
      "endpoint (one of --allow-endpoint; default the first), options (comma-separated: arch, "
      "torch, cuda, python_tag, current, nocurrent, refresh, streaming, readahead, connections, "
      "read_timeout, stall_timeout, caller_timeout; bounded on a volume: " +
      whfs::csi::volume_option_bounds() +
      "). An option given with --daemon-option is the node's: a volume that sets it too (current "
      "and nocurrent count as one) is refused, as is offline. The token comes from the volume's "
      "secret (nodePublishSecretRef), key token or HF_TOKEN; it is never logged. A daemon "
      "starts outside the plugin's lock: a slow start delays only the publishes of its own "
      "volume key."};
  app.set_version_flag("-V,--version", std::string("wheelhouse-csi ") + whfs::kVersion);
  std::string address = "unix:///csi/csi.sock";
  std::string node_id = default_node_id();
  std::string state_dir = "/var/lib/wheelhouse-csi";
  whfs::csi::DaemonConfig daemon;
  daemon.program = default_daemon(argv[0]);
  daemon.cache_dir = "/var/cache/wheelhouse-fs";
  std::vector<std::string> endpoints = {"https://huggingface.co"};
  std::string log_level = "info";
  std::size_t max_daemons = whfs::csi::kDefaultMaxDaemons;
  std::string memory_max;
  int watch_interval_s = 2;
  app.add_option("--csi-address", address, "the socket to serve on, unix://PATH or PATH")
      ->capture_default_str();
  app.add_option("--node-id", node_id,
                 "this node's id in NodeGetInfo (default $NODE_NAME, else "
                 "the host name)");
  app.add_option("--state-dir", state_dir,
                 "where the daemons' mounts, logs and tokens and the state file are (0700)")
      ->capture_default_str();
  app.add_option("--cache-dir", daemon.cache_dir, "the cache every daemon shares")
      ->capture_default_str();
  app.add_option("--daemon", daemon.program,
                 "the wheelhousefs program (default: the one beside this program, else "
                 "/usr/bin/wheelhousefs)");
  app.add_option("--daemon-option", daemon.options,
                 "a -o option for every daemon (the node's: cache_size=40G, cudart=PATH, "
                 "metrics_textfile=PATH, offline, current=mount, ...); repeatable. It is the "
                 "node's alone: a volume that sets the same option is refused")
      ->delimiter(',');
  app.add_option("--allow-endpoint", endpoints,
                 "a Hub URL volumes may name; repeatable (default https://huggingface.co)")
      ->take_all();
  app.add_option("--start-timeout", daemon.start_timeout_s,
                 "seconds a daemon may take to serve before a publish fails")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  app.add_option("--max-daemons", max_daemons,
                 "daemons this node runs at most; a publish that needs one more is "
                 "RESOURCE_EXHAUSTED (volumes of one key share a daemon)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--cgroup-root", daemon.cgroup_root,
                 "the node's cgroup root (the host's /sys/fs/cgroup, mounted into the plugin's "
                 "container): each daemon runs in <root>/<parent>/<volume key> (every v1 "
                 "hierarchy, or the v2 tree), out of the plugin's container, so that it outlives "
                 "it; empty: the daemons stay in the plugin's cgroup")
      ->capture_default_str();
  app.add_option("--cgroup-parent", daemon.cgroup_parent,
                 "the daemons' cgroups' parent, relative to each hierarchy's root")
      ->capture_default_str();
  app.add_option("--daemon-memory-max", memory_max,
                 "each daemon's memory limit in its cgroup (e.g. 1G); default none");
  app.add_option("--watch-interval", watch_interval_s,
                 "seconds between two looks at the daemons: one that died is started again and "
                 "its targets bound again")
      ->capture_default_str()
      ->check(CLI::Range(1, 300));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.footer(
      "Needs root with CAP_SYS_ADMIN, /dev/fuse, the host's PID namespace (hostPID: so that "
      "current/ answers each pod's processes for their own root, and the daemons can join the "
      "host's cgroup namespace), the host's cgroup root, and Bidirectional mount propagation "
      "to kubelet's folder and to the state folder (the daemons' mounts, which the next plugin "
      "adopts). Exit status: 0 stopped by SIGTERM/SIGINT, 1 cannot serve, 2 usage.");
  CLI11_PARSE(app, argc, argv);

  auto logger = spdlog::stderr_color_mt("wheelhouse-csi");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(log_level));

  whfs::csi::ParseLimits limits;
  limits.node_options = daemon.options;
  for (const auto& e : endpoints) {
    auto n = whfs::csi::normalise_endpoint(e);
    if (n.empty()) {
      std::fprintf(stderr, "wheelhouse-csi: --allow-endpoint %s is not an http(s) URL\n",
                   e.c_str());
      return 2;
    }
    limits.allowed_endpoints.push_back(std::move(n));
  }
  if (!memory_max.empty()) {
    const auto bytes = whfs::parse_size(memory_max);
    if (!bytes || *bytes < (16U << 20)) {
      std::fprintf(stderr,
                   "wheelhouse-csi: --daemon-memory-max %s is not a size of 16M or more "
                   "(e.g. 1G)\n",
                   memory_max.c_str());
      return 2;
    }
    daemon.memory_max = *bytes;
  }
  const std::string socket_path = address.starts_with("unix://") ? address.substr(7) : address;
  if (socket_path.empty() || socket_path.front() != '/') {
    std::fprintf(stderr, "wheelhouse-csi: --csi-address must be unix:///ABSOLUTE/PATH\n");
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec || ::chmod(state_dir.c_str(), 0700) != 0) {
    std::fprintf(stderr, "wheelhouse-csi: state dir %s: %s\n", state_dir.c_str(),
                 ec ? ec.message().c_str() : std::strerror(errno));
    return 1;
  }

  // Signals are taken by a thread of their own (sigwait), before any other thread starts.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  whfs::csi::LinuxSystem system(daemon);
  const auto cgroups = system.prepare_cgroups();
  if (!cgroups) {
    std::fprintf(stderr, "wheelhouse-csi: %s\n", cgroups.error().c_str());
    return 1;
  }
  spdlog::info("{}", *cgroups);
  whfs::csi::Node node(system, state_dir, limits, max_daemons);
  for (const auto& line : node.adoption_report()) spdlog::info("{}", line);

  std::filesystem::create_directories(std::filesystem::path(socket_path).parent_path(), ec);
  ::unlink(socket_path.c_str());  // a socket left by the previous run
  IdentityService identity(node);
  NodeService node_service(node, node_id);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(&identity);
  builder.RegisterService(&node_service);
  const mode_t old = ::umask(0077);  // the socket: root's only
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ::umask(old);
  if (!server) {
    std::fprintf(stderr, "wheelhouse-csi: cannot listen on %s\n", socket_path.c_str());
    return 1;
  }
  spdlog::info(
      "wheelhouse-csi {} serves {} on {} (node {}, daemon {}, cache {}, at most {} daemons)",
      whfs::kVersion, kPluginName, socket_path, node_id, daemon.program, daemon.cache_dir,
      max_daemons);
  // The watchdog: a pass every --watch-interval seconds until the plugin stops.
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  bool stopping = false;
  std::thread watchdog([&] {
    std::unique_lock lock(watch_mu);
    while (!watch_cv.wait_for(lock, std::chrono::seconds(watch_interval_s),
                              [&] { return stopping; })) {
      lock.unlock();
      node.watch();
      lock.lock();
    }
  });
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop, &sig);
    spdlog::info(
        "signal {}: stopping; the daemons go on serving and are adopted at the next "
        "start",
        sig);
    server->Shutdown();
  });
  server->Wait();
  waiter.join();
  {
    std::lock_guard lock(watch_mu);
    stopping = true;
  }
  watch_cv.notify_all();
  watchdog.join();
  ::unlink(socket_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wheelhouse-csi: %s\n", e.what());
    return 1;
  }
}
