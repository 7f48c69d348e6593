#include "fs/mount_app.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "cache/block_cache.h"
#include "cache/tiered_cache.h"
#include "fs/caller_views.h"
#include "fs/common/log.h"
#include "fs/common/version.h"
#include "fs/filesystem.h"
#include "fs/fuse/fuse_mount.h"
#include "fs/hub/hub_client.h"
#include "fs/hub/offline_hub.h"
#include "fs/index/index_metadata.h"
#include "fs/index/wheel_metadata.h"
#include "fs/listing_source.h"
#include "fs/metrics/metrics.h"
#include "fs/mount_config.h"
#include "fs/mount_metrics.h"
#include "fs/namespace/namespace.h"
#include "fs/namespace/targets_view.h"
#include "fs/reader/reader.h"
#include "fs/stats_json.h"
#include "fs/target/caller_targets.h"
#include "fs/target/gpu_probe.h"
#include "fs/target/target.h"

namespace whfs {
namespace {

using namespace std::chrono_literals;

std::int64_t parse_iso8601(const std::string& s) {
  std::tm tm{};
  if (s.size() < 19 || strptime(s.substr(0, 19).c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) {
    return 0;
  }
  return timegm(&tm);
}

class MountApp {
 public:
  MountApp(const MountOptions& o, const StartupHooks& hooks) : o_(o), hooks_(hooks) {}

  int run() {
    if (auto r = start(); !r) {
      hooks_.failed(r.error());
      return 1;
    }
    mounted_at_ = std::time(nullptr);
    hooks_.ready();  // first: a detached daemon's log moves to its file here
    spdlog::info("mounted {}@{} (commit {}{}) on {}; {}{}", repo_.id, o_.revision, names_->commit(),
                 offline_note_, o_.mountpoint, gpu_summary(),
                 metrics_url_.empty() ? "" : "; metrics at " + metrics_url_);
    std::thread signals([this] { wait_for_signals(); });
    std::thread refresher([this] { refresh_loop(); });
    fuse_->run();  // until SIGTERM/SIGINT or an external unmount
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    refresher.join();
    signals.join();
    metrics_.reset();  // no scrape from here on; the textfile goes
    hub_->cancel();
    reader_->shutdown();
    fuse_.reset();  // unmounts
    if (auto r = cache_->flush(); !r) spdlog::warn("cache flush at exit: {}", r.error().message);
    spdlog::info("unmounted {}", o_.mountpoint);
    return 0;
  }

 private:
  Expected<void, std::string> start() {
    // Signals go to the threads that wait for them, never to worker threads.
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&set, s);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    ::signal(SIGPIPE, SIG_IGN);

    if (auto v = target::validate_overrides(o_.target); !v) return unexpected(v.error());
    if (auto v = target::check_trusted_library(o_.target.cudart); !v) {
      return unexpected(v.error());
    }
    // The GPUs first, before any thread exists (the probe forks).
    target::GpuReport gpus = o_.current ? probe_gpus() : target::GpuReport{};

    auto repo = hub::parse_repo_ref(o_.repo);
    if (!repo) return unexpected(repo.error());
    repo_ = *repo;
    endpoint_ = hub::resolve_endpoint(o_.endpoint);

    if (!o_.token_file.empty() && ::access(o_.token_file.c_str(), R_OK) != 0) {
      return unexpected("token_file=" + o_.token_file + ": " + std::strerror(errno));
    }
    if (auto r = open_cache(); !r) return r;

    hub_ = o_.offline ? std::make_unique<hub::OfflineHub>()
                      : hub::make_hub_client(hub_config(o_, endpoint_, repo_));
    if (auto r = resolve_at_mount(); !r) return r;

    // A listing decides which bytes are right: one that another user could have written (a
    // group-shared or read-only cache) is re-listed from the Hub (issue 21).
    const bool own_listings = o_.cache_trusted || (o_.cache_group.empty() &&
                                                   o_.cache_upper.empty() && !cache_->read_only());
    listings_ = std::make_unique<CachedListingSource>(*hub_, *cache_, endpoint_, repo_.id, 60s, 100,
                                                      own_listings);
    auto rc = reader_config(o_);
    rc.fetcher.peek_verified_only = !own_listings;  // a wheel's METADATA: not a co-tenant's
    reader_ = std::make_unique<reader::Reader>(*cache_, *hub_, rc);
    target::CallerTargetsConfig tc;
    tc.overrides = o_.target;
    tc.per_caller = o_.current_per_caller;
    tc.deadline = o_.caller_timeout;
    callers_ =
        std::make_unique<target::CallerTargets>(tc, std::move(gpus), target::host_platform());
    views_ = std::make_unique<TargetCallerViews>(*callers_);
    wheel_meta_ = std::make_unique<index::WheelMetadataService>(*reader_, *cache_, o_.read_timeout,
                                                                own_listings);
    index_meta_ = std::make_unique<index::WheelIndexMetadata>(*wheel_meta_);
    targets_ = std::make_unique<ns::TargetsView>(*listings_, callers_->host(), index_meta_.get());
    targets_->set_current_keys(
        [callers = callers_.get()](const std::string& key) { return callers->leads_to(key); });
    names_ = std::make_unique<ns::Namespace>(*listings_, commit_, mtime_);
    if (o_.current) names_->set_synthetic_root(targets_.get());
    fs_ = std::make_unique<Filesystem>(
        *names_, *reader_, FilesystemConfig{o_.read_timeout, repo_.id, o_.revision, o_.cache_size});
    fs_->set_status_provider([this] { return status_json(); });
    fs_->set_caller_views(views_.get());

    // List the root now: a repository that cannot be listed fails the mount, not the first ls.
    if (auto root = names_->readdir(ns::kRootIno, false); !root) {
      return unexpected("cannot list " + repo_.id + " at commit " + commit_ + ": " +
                        root.error().message);
    }
    if (!o_.metrics.empty() || !o_.metrics_textfile.empty()) {
      auto e = metrics::Exporter::start(o_.metrics, o_.metrics_textfile,
                                        [this] { return collect_metrics(); });
      if (!e) return unexpected(e.error());
      metrics_ = std::move(e).value();
      if (!o_.metrics.empty()) {
        // The port the listener got (metrics=...:0 lets the kernel choose one).
        metrics_url_ = "http://" + o_.metrics.substr(0, o_.metrics.rfind(':') + 1) +
                       std::to_string(metrics_->port()) + "/metrics";
      }
    }
    auto m = fuse::FuseMount::mount(*fs_, fuse_config(o_, repo_.id));
    if (!m) return unexpected(m.error());
    fuse_ = std::move(m).value();
    // No path a caller names is followed back into this mount (issue 21): a request thread
    // would wait for the very entry it is answering.
    if (const auto dev = fuse_->device()) {
      callers_->refuse_device(*dev);
    } else {
      spdlog::warn(
          "cannot tell this mount's device: paths that callers name are not checked "
          "for leading back into it");
    }
    // Streaming readers may have been handed bytes of a download that then failed its hash:
    // the kernel drops its pages of that content. Not on the thread that found it, which may
    // be a FUSE request thread the kernel waits on while it holds those very pages.
    reader_->set_corrupt_listener([this](const cache::ContentId& id) {
      std::lock_guard lock(mu_);
      corrupt_.push_back(id);
      cv_.notify_all();
    });
    return {};
  }

  // The commit to mount: the Hub's answer, or the last one the cache knows when the Hub is
  // out of reach (or offline was asked for).
  Expected<void, std::string> resolve_at_mount() {
    auto known = cache_->get_revision(endpoint_, repo_.id, o_.revision);
    std::optional<cache::RevisionRecord> last;
    if (known && *known) last = **known;
    if (!hub_->offline()) {
      // With a cached commit to fall back on, do not keep the user waiting for a slow Hub.
      const auto deadline = Clock::now() + (last ? 3s : 8s);
      auto rev = resolve(deadline);
      if (rev) {
        commit_ = rev->commit;
        mtime_ = mtime_of(*rev);
        return {};
      }
      // The first line is the cause, short; what to check comes after it.
      if (!hub::unreachable(rev.error())) {
        std::string msg =
            "cannot mount " + repo_.id + "@" + o_.revision + ": " + rev.error().short_cause();
        if (rev.error().kind == hub::HubErrorKind::kNotFound) {
          msg +=
              "\n  check the repository's name (owner/name, as on the Hub), revision= "
              "(a branch, tag, commit or refs/pr/N), and for a private repository a token "
              "(HF_TOKEN or token_file=)";
        }
        msg += "\n  " + rev.error().describe();
        return unexpected(msg);
      }
      if (!last) {
        return unexpected("cannot reach the Hub at " + endpoint_ + ": " +
                          rev.error().short_cause() + "\n  and the cache " + o_.cache_dir +
                          " has no copy of " + repo_.id + "@" + o_.revision +
                          " to serve offline (check the network, proxy= or HTTPS_PROXY)");
      }
      spdlog::warn(
          "the Hub is unreachable ({}); serving the last known commit {} of {}@{} "
          "from the cache (offline fallback)",
          rev.error().describe(), last->commit, repo_.id, o_.revision);
      offline_note_ = ", offline fallback";
    } else {
      if (!last) {
        return unexpected("offline, and the cache in " + o_.cache_dir + " has no copy of " +
                          repo_.id + "@" + o_.revision);
      }
      offline_note_ = ", offline";
    }
    commit_ = last->commit;
    mtime_ = std::chrono::system_clock::to_time_t(last->resolved_at);
    return {};
  }

  // The cache: cache_dir, private or shared with cache_group; a read-only one (an image
  // layer) under cache_upper when given; none at all when another process holds the directory
  // past read_timeout (stopped?): then files are verified in memory and nothing is kept.
  Expected<void, std::string> open_cache() {
    auto c = open_mount_cache(o_);
    if (!c) return unexpected(c.error());
    cache_ = std::move(c).value();
    return {};
  }

  static std::int64_t mtime_of(const hub::Revision& rev) {
    const std::int64_t t = parse_iso8601(rev.last_modified);
    return t != 0 ? t : std::time(nullptr);
  }

  // The revision's commit, kept for a start with the Hub out of reach.
  // The revision's commit from the Hub, recorded in the cache for a start without network.
  Expected<hub::Revision, hub::HubError> resolve(Deadline deadline) {
    auto rev = hub_->resolve_revision(o_.revision, deadline);
    if (rev) record_revision(rev->commit);
    return rev;
  }

  void record_revision(const std::string& commit) {
    if (auto r = cache_->put_revision(endpoint_, repo_.id, o_.revision, commit,
                                      std::chrono::system_clock::now());
        !r) {
      spdlog::warn("cannot record the revision in the cache: {}", r.error().message);
    }
  }

  void wait_for_signals() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
    const timespec tick{0, 200L * 1000 * 1000};
    while (true) {
      {
        std::lock_guard lock(mu_);
        if (stopping_) return;
      }
      const int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig == SIGHUP) {
        spdlog::info("SIGHUP: looking for a new commit");
        std::lock_guard lock(mu_);
        refresh_requested_ = true;
        cv_.notify_all();
      } else if (sig == SIGTERM || sig == SIGINT) {
        spdlog::info("{}: unmounting", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        hub_->cancel();
        fuse_->exit();
        return;
      }
    }
  }

  void refresh_loop() {
    auto next_refresh = std::chrono::steady_clock::now() + o_.refresh;
    auto next_maintenance = std::chrono::steady_clock::now() + 60s;
    std::unique_lock lock(mu_);
    while (!stopping_) {
      auto wake = next_maintenance;
      if (o_.refresh.count() > 0) wake = std::min(wake, next_refresh);
      cv_.wait_until(lock, wake,
                     [&] { return stopping_ || refresh_requested_ || !corrupt_.empty(); });
      if (stopping_) return;
      if (!corrupt_.empty()) {
        auto ids = std::exchange(corrupt_, {});
        lock.unlock();
        for (const auto& id : ids) drop_kernel_pages(id);
        lock.lock();
        continue;
      }
      const auto now = std::chrono::steady_clock::now();
      const bool due = o_.refresh.count() > 0 && now >= next_refresh;
      if (refresh_requested_ || due) {
        refresh_requested_ = false;
        next_refresh = now + o_.refresh;
        lock.unlock();
        refresh();
        lock.lock();
      }
      if (now >= next_maintenance) {
        next_maintenance = now + 60s;
        lock.unlock();
        // Keep the leases of open files alive and bound what a power loss could cost.
        if (auto r = cache_->refresh_pins(); !r)
          spdlog::warn("cache leases: {}", r.error().message);
        if (auto r = cache_->flush(); !r) spdlog::warn("cache flush: {}", r.error().message);
        lock.lock();
      }
    }
  }

  void drop_kernel_pages(const cache::ContentId& id) {
    const auto inodes = fs_->inodes_with_content(id);
    fuse_->invalidate_data(inodes);
    spdlog::warn("{}: dropped the kernel's cached pages of {} inode(s)", id.to_string(),
                 inodes.size());
  }

  // The machine's GPUs, unless arch= makes them irrelevant. The mount owner's libraries
  // only (cudart=, the system's); every device, whatever this daemon's CUDA_VISIBLE_DEVICES.
  target::GpuReport probe_gpus() const {
    if (!o_.target.arch.empty()) {
      target::GpuReport r;
      r.error = "not probed: arch=" + o_.target.arch + " is set";
      return r;
    }
    target::GpuProbeOptions g;
    g.cudart = o_.target.cudart;
    return target::probe_gpus(g);
  }

  std::string gpu_summary() const {
    if (!o_.current) return "no current/";
    const auto g = callers_->gpus();
    std::string s =
        o_.current_per_caller ? "current/ follows each process" : "current/ is the mount's";
    if (!g.found()) return s + "; GPUs: " + g.error;
    s += "; GPUs:";
    for (const auto& d : g.devices) s += " " + std::to_string(d.index) + ":" + d.arch();
    return s + " (" + target::to_string(g.api) + " " + g.library + ")";
  }

  // SIGHUP and the refresh= timer: the GPUs again (a driver was installed, a GPU went away),
  // then the revision. A process's own target is read again as its files change (see
  // caller_targets.h), with no refresh.
  void refresh() {
    if (o_.current) {
      target::GpuReport gpus = probe_gpus();
      const auto before = callers_->gpus();
      if (!gpus.found() && before.found() && o_.target.arch.empty()) {
        // A probe that fails (a driver being reloaded, a library replaced mid-update) does
        // not take the GPUs away from every caller: the last good probe stays (issue 21).
        spdlog::warn("refresh: the GPU probe failed ({}); keeping the GPUs found before: {}",
                     gpus.error, gpu_summary());
        gpus = before;
      }
      const bool changed = target::arch_set(gpus.devices) != target::arch_set(before.devices) ||
                           gpus.devices.size() != before.devices.size();
      callers_->set_gpus(std::move(gpus));
      if (changed) spdlog::info("refresh: {}", gpu_summary());
    }
    std::string commit = names_->commit();
    std::int64_t mtime = names_->mtime();
    if (!hub_->offline()) {
      auto rev = resolve(Clock::now() + 30s);
      if (!rev) {
        spdlog::warn("refresh of {}@{} failed: {}", repo_.id, o_.revision, rev.error().describe());
        note_refresh("failed: " + rev.error().describe(), false);
      } else if (rev->commit != commit) {
        commit = rev->commit;
        mtime = mtime_of(*rev);
      }
    }
    const std::string old = names_->commit();
    if (commit == old) {
      spdlog::info("refresh: {}@{} is still at {}", repo_.id, o_.revision, old);
      note_refresh("still at " + old, !hub_->offline());
      return;
    }
    auto inv = names_->switch_to(commit, mtime);
    if (!inv) {
      spdlog::warn("refresh to {} failed: {}", commit, inv.error().message);
      note_refresh("listing " + commit + " failed: " + inv.error().message, false);
      return;
    }
    fuse_->invalidate(*inv);
    refreshes_++;
    note_refresh("moved from " + old + " to " + commit, true);
    spdlog::info("refresh: {}@{} moved from {} to {} ({} entries and {} inodes invalidated)",
                 repo_.id, o_.revision, old, commit, inv->entries.size(), inv->inodes.size());
  }

  void note_refresh(std::string result, bool reached_hub) {
    std::lock_guard lock(facts_mu_);
    last_refresh_at_ = std::time(nullptr);
    if (reached_hub) last_refresh_ok_ = last_refresh_at_;
    last_refresh_result_ = std::move(result);
  }

  MountFacts facts() {
    MountFacts f;
    f.repo = repo_.id;
    f.revision = o_.revision;
    f.commit = names_->commit();
    f.commit_time = names_->mtime();
    f.mounted_at = mounted_at_;
    f.commit_changes = refreshes_.load();
    f.offline = hub_->offline() || !offline_note_.empty();
    std::lock_guard lock(facts_mu_);
    f.last_refresh = last_refresh_ok_;
    return f;
  }

  std::vector<prometheus::MetricFamily> collect_metrics() {
    return mount_metrics(facts(), *hub_, *reader_, *cache_);
  }

  std::string status_json() {
    nlohmann::json j;
    j["version"] = kVersion;
    j["repo"] = repo_.id;
    j["revision"] = o_.revision;
    j["commit"] = names_->commit();
    j["endpoint"] = endpoint_;
    j["offline"] = hub_->offline();
    j["offline_fallback"] = !offline_note_.empty();
    j["mountpoint"] = o_.mountpoint;
    // For `wheelhouse cache --mount`: the writable tier's folder, and its group.
    j["cache_dir"] = o_.cache_upper.empty() ? o_.cache_dir : o_.cache_upper;
    j["cache_group"] = o_.cache_group;
    j["mounted_at"] = mounted_at_;
    j["now"] = std::time(nullptr);
    j["commit_time"] = names_->mtime();
    j["pid"] = ::getpid();
    j["refreshes"] = refreshes_.load();
    {
      std::lock_guard lock(facts_mu_);
      j["last_refresh"] = last_refresh_at_ == 0 ? nlohmann::json(nullptr)
                                                : nlohmann::json{{"at", last_refresh_at_},
                                                                 {"result", last_refresh_result_}};
    }
    if (!metrics_url_.empty()) j["metrics"] = metrics_url_;
    j["reads"] = read_stats_json(reader_->read_stats());
    j["received_bytes"] = reader_->received_bytes();
    j["transfers"] = transfers_json(reader_->transfers());
    j["inodes"] = names_->inode_count();
    j["serving"] = o_.streaming ? "streaming" : "verified";
    j["targets"] = o_.current ? callers_->status_json() : nlohmann::json(nullptr);
    j["wheel_metadata"] = wheel_metadata_json(wheel_meta_->stats());
    j["hub"] = hub_stats_json(hub_->stats());
    j["fetch"] = fetch_stats_json(reader_->stats());
    j["recent_problems"] = problems_json(recent_problems());
    if (auto s = cache_->stats(); s) {
      j["cache"] = cache_stats_json(o_.cache_dir, *s);
    }
    return j.dump();
  }

  const MountOptions& o_;
  const StartupHooks& hooks_;
  hub::RepoRef repo_;
  std::string endpoint_;
  std::string commit_;
  std::int64_t mtime_ = 0;
  std::string offline_note_;
  std::int64_t mounted_at_ = 0;
  std::atomic<std::uint64_t> refreshes_{0};

  // Destroyed in reverse order of declaration: the metrics and the FUSE mount first.
  std::unique_ptr<cache::BlockCache> cache_;
  std::unique_ptr<hub::HubClient> hub_;
  std::unique_ptr<CachedListingSource> listings_;
  std::unique_ptr<target::CallerTargets> callers_;
  std::unique_ptr<TargetCallerViews> views_;
  std::unique_ptr<ns::TargetsView> targets_;
  std::unique_ptr<ns::Namespace> names_;
  std::unique_ptr<reader::Reader> reader_;
  std::unique_ptr<index::WheelMetadataService> wheel_meta_;
  std::unique_ptr<index::WheelIndexMetadata> index_meta_;
  std::unique_ptr<Filesystem> fs_;
  std::unique_ptr<fuse::FuseMount> fuse_;
  std::unique_ptr<metrics::Exporter> metrics_;  // reads the above at each scrape
  std::string metrics_url_;                     // set before the mount, then read only

  std::mutex facts_mu_;  // guards the three below (a leaf)
  std::int64_t last_refresh_at_ = 0;
  std::int64_t last_refresh_ok_ = 0;  // the last refresh that reached the Hub
  std::string last_refresh_result_;

  std::mutex mu_;  // guards stopping_, refresh_requested_ and corrupt_
  std::condition_variable cv_;
  bool stopping_ = false;
  bool refresh_requested_ = false;
  std::vector<cache::ContentId> corrupt_;  // contents whose kernel pages must go
};

}  // namespace

int run_mount(const MountOptions& options, const StartupHooks& hooks) {
  MountApp app(options, hooks);
  return app.run();
}

}  // namespace whfs
