#include "fs/daemon/mount_app.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>

#include "cache/block_cache.h"
#include "fs/common/own_file.h"
#include "fs/daemon/commit_at_mount.h"
#include "fs/daemon/gpus.h"
#include "fs/daemon/mount_config.h"
#include "fs/daemon/mount_metrics.h"
#include "fs/daemon/refresher.h"
#include "fs/daemon/status.h"
#include "fs/fuse/fuse_mount.h"
#include "fs/hub/hub_client.h"
#include "fs/hub/offline_hub.h"
#include "fs/hub/token.h"
#include "fs/index/index_metadata.h"
#include "fs/index/metadata_service.h"
#include "fs/metrics/metrics.h"
#include "fs/namespace/namespace.h"
#include "fs/namespace/targets_view.h"
#include "fs/reader/reader.h"
#include "fs/targeting/caller_targets.h"
#include "fs/targeting/hint_book.h"
#include "fs/targeting/target.h"
#include "fs/vfs/caller_views.h"
#include "fs/vfs/filesystem.h"
#include "fs/vfs/listing_source.h"

namespace whfs {
namespace {

using namespace std::chrono_literals;

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
    spdlog::info("mounted {}@{} (commit {}{}) on {}; {}{}", key_.repo, o_.revision,
                 names_->commit(), at_mount_.offline_note, o_.mountpoint,
                 gpu_summary(o_, *callers_),
                 metrics_url_.empty() ? "" : "; metrics at " + metrics_url_);
    // In the log, not on the terminal of the person who mounted (a mount says nothing when
    // it works).
    if (!cache_note_.empty()) spdlog::info("{}", cache_note_);
    spdlog::info("cache {}: {}", o_.cache_upper.empty() ? o_.cache_dir : o_.cache_upper,
                 gate_->cache_trust().why);
    refresher_->start();
    fuse_->run();  // until SIGTERM/SIGINT or an external unmount
    refresher_->stop();
    metrics_.reset();  // no scrape from here on; the textfile goes
    hub_->cancel();
    reader_->shutdown();
    fuse_.reset();                // unmounts
    callers_->drop_gone_hints();  // those of running shells stay for the next mount here
    if (auto r = cache_->flush(); !r) spdlog::warn("cache flush at exit: {}", r.error().message);
    const int sig = refresher_->stop_signal();
    spdlog::info("unmounted {}{}", o_.mountpoint,
                 sig == SIGTERM  ? " (SIGTERM)"
                 : sig == SIGINT ? " (SIGINT)"
                                 : "");
    return 0;
  }

 private:
  // Builds the parts in the order of their declarations below, each from its options
  // (mount_config.h), and mounts.
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
    target::GpuReport gpus = o_.current ? probe_gpus(o_) : target::GpuReport{};

    auto repo = hub::parse_repo_ref(o_.repo);
    if (!repo) return unexpected(repo.error());
    const std::string endpoint = hub::resolve_endpoint(o_.endpoint);
    key_ = RevisionKey{endpoint, repo->id, o_.revision};

    if (!o_.token_file.empty() && ::access(o_.token_file.c_str(), R_OK) != 0) {
      return unexpected("token_file=" + o_.token_file + ": " + std::strerror(errno));
    }
    // The cache: cache_dir, private or shared with cache_group; a read-only one (an image
    // layer) under cache_upper when given; none at all when another process holds the
    // directory past read_timeout (stopped?): then files are verified in memory, not kept.
    auto c = open_mount_cache(o_, &cache_note_);
    if (!c) return unexpected(c.error());
    cache_ = std::move(c).value();

    hub_ = o_.offline ? std::make_unique<hub::OfflineHub>()
                      : hub::make_hub_client(hub_config(o_, endpoint, *repo));
    // Whose records of a shared cache this mount may read, and whose it writes: the
    // credential it holds now (cache/audience.h).
    scope_ = std::make_unique<cache::AccessScope>(
        cache::credential_audience(endpoint, hub::TokenSource(o_.token_file).token().value_or("")));
    auto at = commit_at_mount(*hub_, *cache_, key_, *scope_, o_.cache_dir);
    if (!at) return unexpected(at.error());
    at_mount_ = std::move(*at);

    // Who may serve what: one gate, asked by the listings, the reader and the wheel metadata.
    // Whose records it believes is decided once (cache_trust()): a listing decides which bytes
    // are right, so one that another user could have written (a group-shared or read-only
    // cache, a tier, one that was shared once) is re-listed from the Hub, and a content it
    // records as verified is hashed again by this process before it is served. A cache only
    // this user can have written is taken at its word: the re-hash would protect nothing this
    // user could not change anyway.
    const auto rc = reader_config(o_);
    gate_ = std::make_unique<reader::ServingGate>(*scope_, cache_trust(o_, *cache_), rc.fetcher,
                                                  read_stats_);
    listings_ =
        std::make_unique<CachedListingSource>(*hub_, *cache_, *gate_, endpoint, key_.repo, 60s);
    reader_ = std::make_unique<reader::Reader>(*cache_, *hub_, *gate_, read_stats_, rc);
    target::CallerTargetsConfig tc;
    tc.overrides = o_.target;
    tc.per_caller = o_.current_per_caller;
    tc.deadline = o_.caller_timeout;
    callers_ =
        std::make_unique<target::CallerTargets>(tc, std::move(gpus), target::host_platform());
    if (o_.current && o_.current_per_caller) {
      if (auto k = keep_hints(); !k) return unexpected(k.error());
    }
    views_ = std::make_unique<TargetCallerViews>(*callers_);
    wheel_meta_ = std::make_unique<index::WheelMetadataService>(
        *reader_, *cache_, *scope_, o_.read_timeout, gate_->believes_records());
    index_meta_ = std::make_unique<index::WheelIndexMetadata>(*wheel_meta_);
    targets_ = std::make_unique<ns::TargetsView>(*listings_, callers_->host(), index_meta_.get());
    targets_->set_current_keys(
        [callers = callers_.get()](const std::string& key) { return callers->leads_to(key); });
    names_ = std::make_unique<ns::Namespace>(*listings_, at_mount_.commit, at_mount_.mtime);
    if (o_.current) names_->set_synthetic_root(targets_.get());
    fs_ = std::make_unique<Filesystem>(
        *names_, *reader_,
        FilesystemConfig{o_.read_timeout, key_.repo, o_.revision, o_.cache_size});
    fs_->set_status_provider([this] { return status(); });
    fs_->set_caller_views(views_.get());
    // Before anything that reports (the status xattr, the metrics' first textfile): both read
    // its facts.
    refresher_ = std::make_unique<Refresher>(
        o_, key_, Refresher::Parts{*hub_, *cache_, *scope_, *names_, *callers_, *fs_});
    // Streaming readers may have been handed bytes of a download that then failed its hash:
    // the kernel drops its pages of that content (from the refresher's thread).
    gate_->set_corrupt_listener(
        [r = refresher_.get()](const cache::ContentId& id) { r->drop_pages_of(id); });

    // List the root now: a repository that cannot be listed fails the mount, not the first ls.
    if (auto root = names_->readdir(ns::kRootIno, false); !root) {
      return unexpected("cannot list " + key_.repo + " at commit " + at_mount_.commit + ": " +
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
    auto m = fuse::FuseMount::mount(*fs_, fuse_config(o_, key_.repo));
    if (!m) return unexpected(m.error());
    fuse_ = std::move(m).value();
    // No path a caller names is followed back into this mount: a request thread
    // would wait for the very entry it is answering.
    if (const auto dev = fuse_->device()) {
      callers_->refuse_device(*dev);
    } else {
      spdlog::warn(
          "cannot tell this mount's device: paths that callers name are not checked "
          "for leading back into it");
    }
    refresher_->attach(*fuse_);
    return {};
  }

  // The shells' hints, kept for the next daemon on this mount point (hint_book.h): a state_dir=
  // that cannot be used fails the mount; the default folder is used where it can be.
  Expected<void, std::string> keep_hints() {
    const bool given = !o_.state_dir.empty();
    const std::string dir =
        given ? o_.state_dir
              : target::default_state_dir([](const char* n) { return std::getenv(n); },
                                          ::geteuid() == 0);
    if (dir.empty()) {
      spdlog::info("hints of hooked shells are not kept for a restart: no state_dir (no HOME)");
      return {};
    }
    auto folder = OwnFolder::open(dir, true, "state_dir=" + dir);
    if (!folder) {
      if (given) return unexpected(folder.error());
      spdlog::warn("hints of hooked shells are not kept for a restart: {}", folder.error());
      return {};
    }
    callers_->keep_hints_in(std::move(*folder), target::hint_file_name(o_.mountpoint),
                            o_.mountpoint);
    return {};
  }

  std::string status() {
    return status_json(StatusParts{o_, key_, *hub_, *cache_, *scope_, *names_, *gate_, read_stats_,
                                   *callers_, *wheel_meta_},
                       StatusFacts{!at_mount_.offline_note.empty(), mounted_at_, metrics_url_,
                                   refresher_->facts()});
  }

  std::vector<prometheus::MetricFamily> collect_metrics() {
    const RefreshFacts r = refresher_->facts();
    MountFacts f;
    f.repo = key_.repo;
    f.revision = o_.revision;
    f.commit = names_->commit();
    f.commit_time = names_->mtime();
    f.mounted_at = mounted_at_;
    f.commit_changes = r.commit_changes;
    f.offline = hub_->offline() || !at_mount_.offline_note.empty();
    f.last_refresh = r.last_ok;
    return mount_metrics(f, *hub_, read_stats_, *cache_);
  }

  const MountOptions& o_;
  const StartupHooks& hooks_;
  RevisionKey key_;
  MountCommit at_mount_;
  std::int64_t mounted_at_ = 0;  // set before the first request, then read only
  std::string metrics_url_;      // set before the mount, then read only
  std::string cache_note_;       // a read-only cache, said in the log once mounted

  // The read path's figures: recorded by its parts, read by status and the metrics.
  reader::ReadPathStats read_stats_;

  // Built in this order by start(), destroyed in the reverse order: each part only uses parts
  // declared above it (and the refresher the FUSE mount, attached once mounted; run() ends the
  // refresher, the metrics and the FUSE mount first).
  std::unique_ptr<cache::BlockCache> cache_;
  std::unique_ptr<hub::HubClient> hub_;
  std::unique_ptr<cache::AccessScope> scope_;
  std::unique_ptr<reader::ServingGate> gate_;
  std::unique_ptr<CachedListingSource> listings_;
  std::unique_ptr<reader::Reader> reader_;
  std::unique_ptr<target::CallerTargets> callers_;
  std::unique_ptr<TargetCallerViews> views_;
  std::unique_ptr<index::WheelMetadataService> wheel_meta_;
  std::unique_ptr<index::WheelIndexMetadata> index_meta_;
  std::unique_ptr<ns::TargetsView> targets_;
  std::unique_ptr<ns::Namespace> names_;
  std::unique_ptr<Filesystem> fs_;
  std::unique_ptr<Refresher> refresher_;        // made before the mount: status() reads it
  std::unique_ptr<metrics::Exporter> metrics_;  // reads the above at each scrape
  std::unique_ptr<fuse::FuseMount> fuse_;
};

}  // namespace

int run_mount(const MountOptions& options, const StartupHooks& hooks) {
  MountApp app(options, hooks);
  return app.run();
}

}  // namespace whfs
