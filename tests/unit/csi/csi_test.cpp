#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "fs/common/text.h"
#include "tools/csi/linux_system.h"
#include "tools/csi/node.h"
#include "tools/csi/volume.h"

namespace whfs::csi {
namespace {

const ParseLimits kLimits{{"https://huggingface.co", "http://127.0.0.1:8080"}, {}};

std::map<std::string, std::string> ctx(std::string repo = "DoctorPopi/python_wheelhouse") {
  return {{"repo", std::move(repo)}};
}

TEST(VolumeSpecTest, DefaultsAndTheKubeletKeysAreIgnored) {
  auto c = ctx();
  c["csi.storage.k8s.io/pod.name"] = "trainer-0";
  c["csi.storage.k8s.io/ephemeral"] = "true";
  auto spec = parse_volume(c, {}, kLimits);
  ASSERT_TRUE(spec) << spec.error();
  EXPECT_EQ(spec->endpoint, "https://huggingface.co");
  EXPECT_EQ(spec->repo, "DoctorPopi/python_wheelhouse");
  EXPECT_EQ(spec->revision, "main");
  EXPECT_TRUE(spec->options.empty());
  EXPECT_TRUE(spec->token.empty());
}

TEST(VolumeSpecTest, BadVolumeContextIsRefusedWithWhatIsWrong) {
  struct Case {
    std::map<std::string, std::string> context;
    std::string says;
  };
  const Case cases[] = {
      {{}, "repo is required"},
      {{{"repo", "no-slash"}}, "invalid repository id"},
      {{{"repo", "models/a/b"}}, "a wheelhouse is a dataset"},
      {{{"repo", "a/b"}, {"revison", "v1"}}, "unknown key \"revison\""},
      {{{"repo", "a/b"}, {"revision", "../../etc"}}, "revision"},
      {{{"repo", "a/b"}, {"revision", "-o"}}, "revision"},
      {{{"repo", "a/b"}, {"endpoint", "https://evil.example"}}, "not one this node allows"},
      {{{"repo", "a/b"}, {"endpoint", "file:///etc/passwd"}}, "expected an http(s) URL"},
      {{{"repo", "a/b"}, {"options", "cache_dir=/etc"}}, "\"cache_dir\" is not an option"},
      {{{"repo", "a/b"}, {"options", "cudart=/tmp/evil.so"}}, "\"cudart\" is not an option"},
      {{{"repo", "a/b"}, {"options", "arch=sm89,python=/usr/bin/x"}}, "\"python\" is not"},
      {{{"repo", "a/b"}, {"options", "arch=sm89/../x"}}, "must be 1-64 letters"},
  };
  for (const auto& c : cases) {
    auto spec = parse_volume(c.context, {}, kLimits);
    ASSERT_FALSE(spec) << c.says;
    EXPECT_NE(spec.error().find(c.says), std::string::npos) << spec.error();
  }
  auto bad_token = parse_volume(ctx(), {{"token", "a b\nc"}}, kLimits);
  ASSERT_FALSE(bad_token);
  EXPECT_EQ(bad_token.error().find("a b"), std::string::npos) << "the secret was quoted";
}

TEST(VolumeSpecTest, TheKeySeparatesWhatMustNotShareADaemon) {
  auto base = parse_volume(ctx(), {}, kLimits).value();
  auto c = ctx();
  c["options"] = "arch=sm89, torch=2.9";
  auto with_options = parse_volume(c, {}, kLimits).value();
  c["options"] = "torch=2.9,arch=sm89";  // the same set, in another order
  auto same_options = parse_volume(c, {}, kLimits).value();
  auto with_token = parse_volume(ctx(), {{"token", "hf_secret"}}, kLimits).value();
  auto other_token = parse_volume(ctx(), {{"HF_TOKEN", "hf_other"}}, kLimits).value();
  auto c2 = ctx();
  c2["revision"] = "v2";
  auto other_rev = parse_volume(c2, {}, kLimits).value();
  c2 = ctx();
  c2["endpoint"] = "http://127.0.0.1:8080/";
  auto other_endpoint = parse_volume(c2, {}, kLimits).value();
  EXPECT_EQ(with_options.key(), same_options.key());
  const std::set<std::string> keys = {base.key(),        with_options.key(), with_token.key(),
                                      other_token.key(), other_rev.key(),    other_endpoint.key()};
  EXPECT_EQ(keys.size(), 6U);
  EXPECT_EQ(other_endpoint.endpoint, "http://127.0.0.1:8080");
  EXPECT_EQ(with_token.describe().find("hf_secret"), std::string::npos);
}

std::map<std::string, std::string> with_options(const std::string& options) {
  auto c = ctx();
  c["options"] = options;
  return c;
}

TEST(VolumeSpecTest, OfflineIsTheNodesAlone) {
  auto spec = parse_volume(with_options("offline"), {}, kLimits);
  ASSERT_FALSE(spec);
  EXPECT_NE(spec.error().find("\"offline\" is not an option a volume may set"), std::string::npos)
      << spec.error();
  EXPECT_NE(spec.error().find("--daemon-option offline"), std::string::npos) << spec.error();
  EXPECT_FALSE(parse_volume(with_options("arch=sm89,offline"), {}, kLimits));
}

TEST(VolumeSpecTest, AnOptionTheAdminSetIsRefusedOnAVolume) {
  const ParseLimits limits{kLimits.allowed_endpoints, {"cache_size=40G", "current=mount"}};
  for (const char* asked : {"current=caller", "current=mount", "nocurrent"}) {
    auto spec = parse_volume(with_options(asked), {}, limits);
    ASSERT_FALSE(spec) << asked;
    EXPECT_NE(spec.error().find("is set by this node's admin (current=mount"), std::string::npos)
        << spec.error();
  }
  // The admin's nocurrent decides current/ too.
  const ParseLimits off{kLimits.allowed_endpoints, {"nocurrent"}};
  auto on = parse_volume(with_options("current=caller"), {}, off);
  ASSERT_FALSE(on);
  EXPECT_NE(on.error().find("current is set by this node's admin (nocurrent"), std::string::npos)
      << on.error();
  // What the admin did not set stays the volume's.
  auto spec = parse_volume(with_options("arch=sm89,readahead=32M"), {}, limits);
  ASSERT_TRUE(spec) << spec.error();
  EXPECT_EQ(spec->options, (std::vector<std::string>{"arch=sm89", "readahead=32M"}));
}

TEST(VolumeSpecTest, NumericOptionsAreBoundedOnAVolume) {
  for (const char* good :
       {"readahead=1M", "readahead=256M", "connections=1", "connections=32", "refresh=0",
        "refresh=1m", "refresh=1d", "read_timeout=10m", "stall_timeout=2m", "caller_timeout=30s"}) {
    auto spec = parse_volume(with_options(good), {}, kLimits);
    EXPECT_TRUE(spec) << good << ": " << spec.error();
  }
  for (const char* bad :
       {"readahead=100G", "readahead=512K", "readahead", "connections=0", "connections=33",
        "connections=1e3", "refresh=10s", "refresh=2d", "read_timeout=0", "read_timeout=1h",
        "stall_timeout=3m", "caller_timeout=5m", "caller_timeout=forever"}) {
    auto spec = parse_volume(with_options(bad), {}, kLimits);
    ASSERT_FALSE(spec) << bad;
    const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
    EXPECT_NE(spec.error().find("is out of bounds: " + key + " must be "), std::string::npos)
        << spec.error();
  }
  EXPECT_NE(volume_option_bounds().find("readahead from 1M to 256M"), std::string::npos);
}

// A system in memory: daemons are pids, mounts are a set; what was done is counted. Starts and
// stops can be held (a daemon that takes long), and run outside the Node's lock: every member
// is guarded by m_; the tests read the counts while no call runs, or through the locked helpers.
class FakeSystem : public System {
 public:
  Expected<int, std::string> start_daemon(const VolumeSpec& spec, const std::string& /*dir*/,
                                          const std::string& mnt) override {
    std::unique_lock lock(m_);
    ++starts;
    last_token = spec.token;
    wait_while(lock, hold_starts);
    if (fail_start) return unexpected(std::string("the Hub is unreachable"));
    serving[mnt] = next_pid;
    return next_pid++;
  }
  bool daemon_serves(const std::string& mnt, int pid) override {
    std::unique_lock lock(m_);
    ++serves_asked;
    wait_while(lock, hold_serves);
    auto it = serving.find(mnt);
    return it != serving.end() && it->second == pid;
  }
  void stop_daemon(const std::string& /*dir*/, const std::string& mnt, int /*pid*/) override {
    std::unique_lock lock(m_);
    ++stops;
    wait_while(lock, hold_stops);
    serving.erase(mnt);
  }
  Expected<void, std::string> make_target(const std::string& target) override {
    std::lock_guard lock(m_);
    folders.insert(target);
    return {};
  }
  Expected<void, std::string> bind_read_only(const std::string& mnt,
                                             const std::string& target) override {
    std::lock_guard lock(m_);
    if (fail_bind) return unexpected(std::string("bind mount: Permission denied"));
    binds[target] = mnt;
    return {};
  }
  bool bound(const std::string& mnt, const std::string& target) override {
    std::lock_guard lock(m_);
    auto it = binds.find(target);
    return it != binds.end() && it->second == mnt && serving.contains(mnt);
  }
  bool mounted(const std::string& target) override {
    std::lock_guard lock(m_);
    asked_.insert(target);
    changed_.notify_all();
    return binds.contains(target);
  }
  Expected<void, std::string> unbind(const std::string& target) override {
    std::lock_guard lock(m_);
    ++unbinds;
    binds.erase(target);
    folders.erase(target);
    return {};
  }

  // Holding: starts (or stops) wait from now on until release().
  void hold_starts_now() {
    std::lock_guard lock(m_);
    hold_starts = true;
  }
  void hold_stops_now() {
    std::lock_guard lock(m_);
    hold_stops = true;
  }
  void hold_serves_now() {
    std::lock_guard lock(m_);
    hold_serves = true;
  }
  void release() {
    std::lock_guard lock(m_);
    hold_starts = hold_stops = hold_serves = false;
    changed_.notify_all();
  }
  // Waits until `n` calls are held.
  void wait_held(int n) {
    std::unique_lock lock(m_);
    wait_or_fail(
        lock, [&] { return held_ >= n; }, "no call reached the system");
  }
  // Waits until a request looked at whether `target` is mounted (it did so holding the Node's
  // lock, before it could wait for anything).
  void wait_asked(const std::string& target) {
    std::unique_lock lock(m_);
    wait_or_fail(
        lock, [&] { return asked_.contains(target); },
        "the request never looked at its target: it waited for the Node's lock");
  }
  int starts_now() {
    std::lock_guard lock(m_);
    return starts;
  }
  int stops_now() {
    std::lock_guard lock(m_);
    return stops;
  }

  std::map<std::string, int> serving;        // mnt -> pid
  std::map<std::string, std::string> binds;  // target -> mnt
  std::set<std::string> folders;
  int next_pid = 100;
  int starts = 0;
  int stops = 0;
  int unbinds = 0;
  int serves_asked = 0;
  bool fail_start = false;
  bool fail_bind = false;
  std::string last_token;

 private:
  // A guard, not a measure: a wait that would never end (the bug these tests are about) lets
  // everything held go after 60 s, and the test fails instead of hanging.
  template <class Pred>
  void wait_or_fail(std::unique_lock<std::mutex>& lock, Pred done, const char* what) {
    if (!changed_.wait_for(lock, std::chrono::seconds(60), done)) {
      hold_starts = hold_stops = hold_serves = false;
      changed_.notify_all();
      ADD_FAILURE() << what;
    }
  }
  void wait_while(std::unique_lock<std::mutex>& lock, const bool& hold) {
    if (!hold) return;
    ++held_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return !hold; });
    --held_;
  }

  std::mutex m_;
  std::condition_variable changed_;
  bool hold_starts = false;
  bool hold_stops = false;
  bool hold_serves = false;
  int held_ = 0;
  std::set<std::string> asked_;
};

class NodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/csi-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    state_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(state_); }

  PublishRequest request(const std::string& id, const std::string& target,
                         std::map<std::string, std::string> context = ctx()) {
    PublishRequest r;
    r.volume_id = id;
    r.target_path = target;
    r.has_mount_capability = true;
    r.volume_context = std::move(context);
    return r;
  }

  nlohmann::json state_file() {
    std::ifstream in(state_ + "/state.json");
    return nlohmann::json::parse(in);
  }

  FakeSystem sys_;
  std::string state_;
};

// Another volume key: the same dataset at another revision.
std::map<std::string, std::string> other_key(const std::string& revision = "v2") {
  auto c = ctx();
  c["revision"] = revision;
  return c;
}

// The future's value once it has one; a guard, not a measure: when the call is stuck (the bug
// these tests are about), the held calls are let go, so that the test fails instead of hanging.
Status answer(std::future<Status>& f, FakeSystem& sys) {
  if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    sys.release();
    ADD_FAILURE() << "the call did not answer while another key's daemon was held";
  }
  return f.get();
}

TEST_F(NodeTest, TwoPodsShareOneDaemonThatEndsWithTheLastTarget) {
  Node node(sys_, state_, kLimits);
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  ASSERT_TRUE(node.publish(request("vol-b", "/pods/b/mount")).ok());
  EXPECT_EQ(sys_.starts, 1);
  ASSERT_EQ(node.daemons().size(), 1U);
  EXPECT_EQ(node.daemons()[0].targets.size(), 2U);
  EXPECT_EQ(sys_.binds.at("/pods/a/mount"), sys_.binds.at("/pods/b/mount"));
  ASSERT_TRUE(node.unpublish("vol-a", "/pods/a/mount").ok());
  EXPECT_EQ(sys_.stops, 0) << "the daemon ended while a pod still uses it";
  EXPECT_FALSE(sys_.mounted("/pods/a/mount"));
  ASSERT_TRUE(node.unpublish("vol-b", "/pods/b/mount").ok());
  EXPECT_EQ(sys_.stops, 1);
  EXPECT_TRUE(node.daemons().empty());
  EXPECT_TRUE(sys_.serving.empty());
  EXPECT_TRUE(sys_.folders.empty()) << "the target folders were not removed";
}

TEST_F(NodeTest, PublishAndUnpublishAreIdempotent) {
  Node node(sys_, state_, kLimits);
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  EXPECT_EQ(sys_.starts, 1);
  EXPECT_EQ(node.daemons()[0].targets.size(), 1U);
  // Another volume on a published target: ALREADY_EXISTS, and nothing changes.
  auto other = node.publish(request("vol-x", "/pods/a/mount"));
  EXPECT_EQ(other.code, Code::kAlreadyExists) << other.message;
  auto c = ctx();
  c["revision"] = "v2";
  EXPECT_EQ(node.publish(request("vol-a", "/pods/a/mount", c)).code, Code::kAlreadyExists);
  ASSERT_TRUE(node.unpublish("vol-a", "/pods/a/mount").ok());
  ASSERT_TRUE(node.unpublish("vol-a", "/pods/a/mount").ok());
  EXPECT_TRUE(node.unpublish("vol-z", "/pods/never/published").ok());
  EXPECT_EQ(sys_.stops, 1);
}

TEST_F(NodeTest, AMountThePluginDidNotMakeIsLeftAlone) {
  Node node(sys_, state_, kLimits);
  sys_.binds["/pods/a/mount"] = "/somewhere/else";
  EXPECT_EQ(node.publish(request("vol-a", "/pods/a/mount")).code, Code::kAlreadyExists);
  EXPECT_TRUE(node.unpublish("vol-a", "/pods/a/mount").ok());
  EXPECT_TRUE(sys_.mounted("/pods/a/mount")) << "unpublish of an unknown target unmounted it";
}

TEST_F(NodeTest, BadRequestsAreInvalidArgument) {
  Node node(sys_, state_, kLimits);
  EXPECT_EQ(node.publish(request("", "/pods/a")).code, Code::kInvalidArgument);
  EXPECT_EQ(node.publish(request("v", "relative/path")).code, Code::kInvalidArgument);
  EXPECT_EQ(node.publish(request("v", "/pods/../etc")).code, Code::kInvalidArgument);
  auto block = request("v", "/pods/a");
  block.has_mount_capability = false;
  block.block = true;
  EXPECT_EQ(node.publish(block).code, Code::kInvalidArgument);
  auto none = request("v", "/pods/a");
  none.has_mount_capability = false;
  EXPECT_EQ(node.publish(none).code, Code::kInvalidArgument);
  auto bad = node.publish(request("v", "/pods/a", {{"repo", "a/b"}, {"options", "cudart=/x"}}));
  EXPECT_EQ(bad.code, Code::kInvalidArgument);
  EXPECT_NE(bad.message.find("cudart"), std::string::npos);
  EXPECT_EQ(node.unpublish("v", "not/absolute").code, Code::kInvalidArgument);
  EXPECT_EQ(sys_.starts, 0);
}

TEST_F(NodeTest, ADaemonThatCannotStartOrBindLeavesNothingBehind) {
  Node node(sys_, state_, kLimits);
  sys_.fail_start = true;
  auto s = node.publish(request("vol-a", "/pods/a/mount"));
  EXPECT_EQ(s.code, Code::kInternal);
  EXPECT_NE(s.message.find("the Hub is unreachable"), std::string::npos);
  EXPECT_TRUE(node.daemons().empty());
  sys_.fail_start = false;
  sys_.fail_bind = true;
  EXPECT_EQ(node.publish(request("vol-a", "/pods/a/mount")).code, Code::kInternal);
  EXPECT_TRUE(node.daemons().empty());
  EXPECT_TRUE(sys_.serving.empty()) << "a daemon with no target was left running";
}

TEST_F(NodeTest, TheTokenComesFromTheSecretAndNeverReachesTheStateFile) {
  Node node(sys_, state_, kLimits);
  auto r = request("vol-a", "/pods/a/mount");
  r.secrets = {{"token", "hf_very_secret"}};
  ASSERT_TRUE(node.publish(r).ok());
  EXPECT_EQ(sys_.last_token, "hf_very_secret");
  std::ifstream in(state_ + "/state.json");
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  EXPECT_NE(text.find("vol-a"), std::string::npos);
  EXPECT_EQ(text.find("hf_very_secret"), std::string::npos);
  // A pod without the token does not read through the daemon that holds it.
  ASSERT_TRUE(node.publish(request("vol-b", "/pods/b/mount")).ok());
  EXPECT_EQ(sys_.starts, 2);
  EXPECT_EQ(node.daemons().size(), 2U);
}

TEST_F(NodeTest, ARestartedPluginAdoptsItsDaemonsAndTargets) {
  {
    Node node(sys_, state_, kLimits);
    ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
    ASSERT_TRUE(node.publish(request("vol-b", "/pods/b/mount")).ok());
  }
  Node again(sys_, state_, kLimits);
  ASSERT_EQ(again.daemons().size(), 1U);
  EXPECT_EQ(again.daemons()[0].targets.size(), 2U);
  EXPECT_EQ(sys_.starts, 1) << "an adopted daemon was started again";
  ASSERT_FALSE(again.adoption_report().empty());
  EXPECT_NE(again.adoption_report()[0].find("adopted"), std::string::npos);
  ASSERT_TRUE(again.publish(request("vol-a", "/pods/a/mount")).ok());  // still idempotent
  ASSERT_TRUE(again.unpublish("vol-a", "/pods/a/mount").ok());
  ASSERT_TRUE(again.unpublish("vol-b", "/pods/b/mount").ok());
  EXPECT_EQ(sys_.stops, 1);
  EXPECT_TRUE(sys_.serving.empty());
}

TEST_F(NodeTest, ADaemonThatDiedWhileThePluginWasDownIsStartedAndBoundAgain) {
  {
    Node node(sys_, state_, kLimits);
    ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  }
  sys_.serving.clear();  // the daemon died; its bind mount is dead
  Node again(sys_, state_, kLimits);
  EXPECT_EQ(sys_.starts, 2);
  ASSERT_EQ(again.daemons().size(), 1U);
  const auto d = again.daemons()[0];
  EXPECT_TRUE(sys_.bound(d.mnt, "/pods/a/mount"));
  EXPECT_EQ(sys_.unbinds, 0) << "the dead mount was detached: the pod's copy gets nothing";
  ASSERT_TRUE(again.unpublish("vol-a", "/pods/a/mount").ok());
  EXPECT_TRUE(sys_.serving.empty());
}

TEST_F(NodeTest, ASlowStartStallsNoOtherKeyAndNoUnpublish) {
  Node node(sys_, state_, kLimits);
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  ASSERT_TRUE(node.publish(request("vol-c", "/pods/c/mount")).ok());
  sys_.hold_starts_now();
  auto slow = std::async(std::launch::async, [&] {
    return node.publish(request("vol-s", "/pods/s/mount", other_key()));
  });
  sys_.wait_held(1);
  // The starting daemon is recorded (a restarted plugin ends that start) and counted.
  const auto state = state_file();
  EXPECT_EQ(state["daemons"].size(), 2U) << state.dump();
  bool seen = false;
  for (const auto& [key, d] : state["daemons"].items()) {
    if (d.value("starting", false)) {
      seen = true;
      EXPECT_EQ(d["start_target"], "/pods/s/mount");
      EXPECT_EQ(d["pid"], 0);
    }
  }
  EXPECT_TRUE(seen) << state.dump();

  // A publish onto the running daemon, and unpublishes, answer while that start is held.
  auto fast = std::async(std::launch::async,
                         [&] { return node.publish(request("vol-b", "/pods/b/mount")); });
  EXPECT_TRUE(answer(fast, sys_).ok());
  auto gone =
      std::async(std::launch::async, [&] { return node.unpublish("vol-a", "/pods/a/mount"); });
  EXPECT_TRUE(answer(gone, sys_).ok());
  EXPECT_EQ(slow.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the slow publish answered before its daemon served";
  EXPECT_EQ(sys_.starts_now(), 2);

  sys_.release();
  EXPECT_TRUE(slow.get().ok());
  ASSERT_TRUE(node.unpublish("vol-b", "/pods/b/mount").ok());
  ASSERT_TRUE(node.unpublish("vol-c", "/pods/c/mount").ok());
  ASSERT_EQ(node.daemons().size(), 1U);
  EXPECT_FALSE(node.daemons()[0].starting);
  EXPECT_TRUE(sys_.bound(node.daemons()[0].mnt, "/pods/s/mount"));
  EXPECT_FALSE(state_file()["daemons"].begin()->contains("starting"));
}

TEST_F(NodeTest, APublishOfAKeyThatIsStartingWaitsForThatStart) {
  Node node(sys_, state_, kLimits);
  sys_.hold_starts_now();
  auto first = std::async(std::launch::async,
                          [&] { return node.publish(request("vol-1", "/pods/1/mount")); });
  sys_.wait_held(1);
  auto second = std::async(std::launch::async,
                           [&] { return node.publish(request("vol-2", "/pods/2/mount")); });
  sys_.wait_asked("/pods/2/mount");
  (void)node.daemons();  // the second publish let go of the lock: it waits for the start
  EXPECT_EQ(second.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  // The same target again, or its unpublish, while its publish runs: ABORTED, kubelet retries.
  auto again = node.publish(request("vol-2", "/pods/2/mount"));
  EXPECT_EQ(again.code, Code::kAborted) << again.message;
  EXPECT_NE(again.message.find("is being published"), std::string::npos) << again.message;
  EXPECT_EQ(node.unpublish("vol-1", "/pods/1/mount").code, Code::kAborted);
  EXPECT_EQ(node.unpublish("vol-2", "/pods/2/mount").code, Code::kAborted);
  sys_.release();
  EXPECT_TRUE(first.get().ok());
  EXPECT_TRUE(second.get().ok());
  EXPECT_EQ(sys_.starts, 1) << "a second daemon was started for the same key";
  ASSERT_EQ(node.daemons().size(), 1U);
  EXPECT_EQ(node.daemons()[0].targets.size(), 2U);
}

TEST_F(NodeTest, PublishesThatWaitedForAStartThatFailedAnswerItsReason) {
  Node node(sys_, state_, kLimits);
  sys_.fail_start = true;
  sys_.hold_starts_now();
  auto first = std::async(std::launch::async,
                          [&] { return node.publish(request("vol-1", "/pods/1/mount")); });
  sys_.wait_held(1);
  auto second = std::async(std::launch::async,
                           [&] { return node.publish(request("vol-2", "/pods/2/mount")); });
  sys_.wait_asked("/pods/2/mount");
  (void)node.daemons();
  sys_.release();
  const auto a = first.get();
  const auto b = second.get();
  EXPECT_EQ(a.code, Code::kInternal);
  EXPECT_EQ(b.code, Code::kInternal);
  EXPECT_NE(b.message.find("the Hub is unreachable"), std::string::npos) << b.message;
  EXPECT_EQ(sys_.starts, 1);
  EXPECT_TRUE(node.daemons().empty());
}

TEST_F(NodeTest, AnUnpublishDuringARestartOfItsDaemonAnswersAtOnce) {
  Node node(sys_, state_, kLimits);
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  sys_.serving.clear();  // the daemon died
  sys_.hold_starts_now();
  auto restart = std::async(std::launch::async,
                            [&] { return node.publish(request("vol-b", "/pods/b/mount")); });
  sys_.wait_held(1);
  auto gone =
      std::async(std::launch::async, [&] { return node.unpublish("vol-a", "/pods/a/mount"); });
  EXPECT_TRUE(answer(gone, sys_).ok());
  EXPECT_EQ(sys_.stops_now(), 0) << "the daemon being started was stopped";
  sys_.release();
  EXPECT_TRUE(restart.get().ok());
  ASSERT_EQ(node.daemons().size(), 1U);
  const auto d = node.daemons()[0];
  EXPECT_EQ(d.targets, (std::map<std::string, std::string>{{"/pods/b/mount", "vol-b"}}));
  EXPECT_TRUE(sys_.bound(d.mnt, "/pods/b/mount"));
  EXPECT_FALSE(sys_.mounted("/pods/a/mount"));
  ASSERT_TRUE(node.unpublish("vol-b", "/pods/b/mount").ok());
  EXPECT_EQ(sys_.stops, 1);
  EXPECT_TRUE(node.daemons().empty());
}

TEST_F(NodeTest, ARestartedDaemonGetsItsOtherTargetsBoundAgain) {
  Node node(sys_, state_, kLimits);
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  sys_.serving.clear();  // the daemon died: /pods/a/mount is a dead mount
  sys_.binds["/pods/a/mount"] = "/dead";
  ASSERT_TRUE(node.publish(request("vol-b", "/pods/b/mount")).ok());
  const auto d = node.daemons()[0];
  EXPECT_TRUE(sys_.bound(d.mnt, "/pods/a/mount"));
  EXPECT_TRUE(sys_.bound(d.mnt, "/pods/b/mount"));
}

TEST_F(NodeTest, AStopRunsOutsideTheLockAndItsKeyWaitsForIt) {
  Node node(sys_, state_, kLimits);
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  ASSERT_TRUE(node.publish(request("vol-o", "/pods/o/mount", other_key())).ok());
  sys_.hold_stops_now();
  auto stop =
      std::async(std::launch::async, [&] { return node.unpublish("vol-a", "/pods/a/mount"); });
  sys_.wait_held(1);
  auto other = std::async(std::launch::async, [&] {
    return node.publish(request("vol-p", "/pods/p/mount", other_key()));
  });
  EXPECT_TRUE(answer(other, sys_).ok());
  auto same = std::async(std::launch::async,
                         [&] { return node.publish(request("vol-a2", "/pods/a2/mount")); });
  sys_.wait_asked("/pods/a2/mount");
  (void)node.daemons();
  EXPECT_EQ(same.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "a publish bound a target onto a daemon being stopped";
  sys_.release();
  EXPECT_TRUE(stop.get().ok());
  EXPECT_TRUE(same.get().ok());
  EXPECT_EQ(sys_.starts, 3) << "the key's daemon was not started again after its stop";
  EXPECT_EQ(node.daemons().size(), 2U);
}

TEST_F(NodeTest, TheDaemonsOfANodeAreCapped) {
  Node node(sys_, state_, kLimits, 2);
  ASSERT_TRUE(node.publish(request("vol-1", "/pods/1/mount")).ok());
  ASSERT_TRUE(node.publish(request("vol-2", "/pods/2/mount", other_key("v2"))).ok());
  auto third = node.publish(request("vol-3", "/pods/3/mount", other_key("v3")));
  EXPECT_EQ(third.code, Code::kResourceExhausted) << third.message;
  EXPECT_NE(third.message.find("wheelhouse-csi --max-daemons 2"), std::string::npos)
      << third.message;
  EXPECT_FALSE(sys_.mounted("/pods/3/mount"));
  EXPECT_EQ(sys_.starts, 2);
  // A volume of a running daemon's key needs none more.
  EXPECT_TRUE(node.publish(request("vol-1b", "/pods/1b/mount")).ok());
  ASSERT_TRUE(node.unpublish("vol-2", "/pods/2/mount").ok());
  EXPECT_TRUE(node.publish(request("vol-3", "/pods/3/mount", other_key("v3"))).ok());
}

TEST_F(NodeTest, ADaemonThatIsStartingCountsAgainstTheCap) {
  Node node(sys_, state_, kLimits, 1);
  sys_.hold_starts_now();
  auto first = std::async(std::launch::async,
                          [&] { return node.publish(request("vol-1", "/pods/1/mount")); });
  sys_.wait_held(1);
  auto second = std::async(std::launch::async, [&] {
    return node.publish(request("vol-2", "/pods/2/mount", other_key()));
  });
  EXPECT_EQ(answer(second, sys_).code, Code::kResourceExhausted);
  sys_.release();
  EXPECT_TRUE(first.get().ok());
}

TEST_F(NodeTest, APluginRestartedDuringAStartEndsWhatThatStartLeft) {
  Node node(sys_, state_, kLimits);
  sys_.hold_starts_now();
  auto held = std::async(std::launch::async,
                         [&] { return node.publish(request("vol-s", "/pods/s/mount")); });
  sys_.wait_held(1);
  const auto spec = parse_volume(ctx(), {}, kLimits).value();
  const std::string mnt = state_ + "/daemons/" + spec.key() + "/mnt";
  // The plugin dies now; its start went on and serves, and the target got its bind mount just
  // before. The next plugin finds this on the node.
  FakeSystem after;
  after.serving[mnt] = 555;
  after.binds["/pods/s/mount"] = mnt;
  Node again(after, state_, kLimits);
  EXPECT_TRUE(again.daemons().empty());
  EXPECT_EQ(after.stops, 1);
  EXPECT_TRUE(after.serving.empty()) << "the daemon of the abandoned start was left running";
  EXPECT_FALSE(after.mounted("/pods/s/mount")) << "a target that never answered OK stays bound";
  const std::string report = join(again.adoption_report(), "\n");
  EXPECT_NE(report.find("was starting when the plugin stopped: that start is ended"),
            std::string::npos)
      << report;
  // kubelet publishes again: a fresh start.
  EXPECT_TRUE(again.publish(request("vol-s", "/pods/s/mount")).ok());
  EXPECT_EQ(after.starts, 1);
  sys_.release();
  (void)held.get();
}

TEST_F(NodeTest, ARestartDuringARestartStartsTheDaemonAgainForItsTargets) {
  {
    Node node(sys_, state_, kLimits);
    ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  }
  nlohmann::json state = state_file();
  auto& d = state["daemons"].begin().value();
  d["starting"] = true;  // a publish of /pods/b was starting the daemon again
  d["start_target"] = "/pods/b/mount";
  d["pid"] = 0;
  std::ofstream(state_ + "/state.json") << state.dump();
  FakeSystem after;
  Node again(after, state_, kLimits);
  ASSERT_EQ(again.daemons().size(), 1U);
  EXPECT_EQ(after.starts, 1);
  const auto view = again.daemons()[0];
  EXPECT_EQ(view.targets, (std::map<std::string, std::string>{{"/pods/a/mount", "vol-a"}}));
  EXPECT_TRUE(after.bound(view.mnt, "/pods/a/mount"));
  EXPECT_FALSE(state_file()["daemons"].begin()->contains("starting"));
}

TEST_F(NodeTest, TheWatchdogStartsADeadDaemonAgainAndBindsItsTargetsOnTop) {
  Node node(sys_, state_, kLimits);
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  ASSERT_TRUE(node.publish(request("vol-b", "/pods/b/mount")).ok());
  ASSERT_TRUE(node.publish(request("vol-o", "/pods/o/mount", other_key())).ok());
  node.watch();  // every daemon serves: nothing to do
  EXPECT_EQ(sys_.starts, 2);
  // The first key's daemon dies (SIGKILL); its two targets hold its dead mount.
  const std::string dead_mnt = sys_.binds.at("/pods/a/mount");
  sys_.serving.erase(dead_mnt);
  node.watch();
  EXPECT_EQ(sys_.starts, 3) << "the dead daemon was not started again (or the live one was)";
  EXPECT_EQ(sys_.unbinds, 0) << "a dead mount was detached: the pods' copies get nothing";
  for (const auto& d : node.daemons()) {
    EXPECT_TRUE(sys_.daemon_serves(d.mnt, d.pid)) << d.key;
    for (const auto& [target, id] : d.targets) EXPECT_TRUE(sys_.bound(d.mnt, target)) << target;
  }
  // state.json has the new pid, for the next plugin.
  bool found = false;
  const auto state = state_file();
  for (const auto& [key, d] : state["daemons"].items()) {
    if (d["mnt"] == dead_mnt) {
      found = true;
      EXPECT_EQ(d["pid"], sys_.serving.at(dead_mnt));
      EXPECT_EQ(d["targets"].size(), 2U);
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(NodeTest, TheWatchdogLooksOutsideTheLock) {
  Node node(sys_, state_, kLimits);
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  ASSERT_TRUE(node.publish(request("vol-o", "/pods/o/mount", other_key())).ok());
  sys_.hold_serves_now();  // a look that takes long
  auto pass = std::async(std::launch::async, [&] { node.watch(); });
  sys_.wait_held(1);
  auto gone =
      std::async(std::launch::async, [&] { return node.unpublish("vol-o", "/pods/o/mount"); });
  EXPECT_TRUE(answer(gone, sys_).ok());
  auto more = std::async(std::launch::async, [&] {
    return node.publish(request("vol-n", "/pods/n/mount", other_key("v3")));
  });
  EXPECT_TRUE(answer(more, sys_).ok());
  sys_.release();
  pass.get();
  EXPECT_EQ(sys_.starts, 3);
}

TEST_F(NodeTest, TheWatchdogLeavesADaemonBeingStoppedAlone) {
  Node node(sys_, state_, kLimits);
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  sys_.hold_stops_now();
  auto stop =
      std::async(std::launch::async, [&] { return node.unpublish("vol-a", "/pods/a/mount"); });
  sys_.wait_held(1);
  node.watch();
  EXPECT_EQ(sys_.starts_now(), 1) << "the watchdog started a daemon that is being stopped";
  sys_.release();
  EXPECT_TRUE(stop.get().ok());
  node.watch();
  EXPECT_EQ(sys_.starts, 1);
  EXPECT_TRUE(node.daemons().empty());
}

TEST_F(NodeTest, AnUnpublishDuringAWatchdogRestartAnswersAndTheDaemonEnds) {
  Node node(sys_, state_, kLimits);
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  sys_.serving.clear();  // the daemon died
  sys_.hold_starts_now();
  auto pass = std::async(std::launch::async, [&] { node.watch(); });
  sys_.wait_held(1);
  auto gone =
      std::async(std::launch::async, [&] { return node.unpublish("vol-a", "/pods/a/mount"); });
  EXPECT_TRUE(answer(gone, sys_).ok());
  sys_.release();
  pass.get();
  EXPECT_TRUE(node.daemons().empty()) << "a daemon with no target was left running";
  EXPECT_TRUE(sys_.serving.empty());
  EXPECT_EQ(sys_.stops, 1);
}

TEST_F(NodeTest, AWatchdogRestartThatFailsIsTriedAgainLaterOrByAPublish) {
  Node node(sys_, state_, kLimits);
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  sys_.serving.clear();
  sys_.fail_start = true;
  node.watch();
  EXPECT_EQ(sys_.starts, 2);
  ASSERT_EQ(node.daemons().size(), 1U) << "the target of a daemon that failed to start again "
                                          "was forgotten";
  EXPECT_EQ(node.daemons()[0].pid, 0);
  node.watch();  // not due yet (Node::kRetryAfter)
  EXPECT_EQ(sys_.starts, 2);
  // A publish of the key tries at once, and binds the recorded target too.
  sys_.fail_start = false;
  ASSERT_TRUE(node.publish(request("vol-b", "/pods/b/mount")).ok());
  EXPECT_EQ(sys_.starts, 3);
  const auto d = node.daemons()[0];
  EXPECT_TRUE(sys_.bound(d.mnt, "/pods/a/mount"));
  EXPECT_TRUE(sys_.bound(d.mnt, "/pods/b/mount"));
}

TEST_F(NodeTest, APublishAgainOfATargetWhoseDaemonDiedBindsOnTop) {
  Node node(sys_, state_, kLimits);
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  sys_.serving.clear();
  ASSERT_TRUE(node.publish(request("vol-a", "/pods/a/mount")).ok());
  EXPECT_EQ(sys_.starts, 2);
  EXPECT_EQ(sys_.unbinds, 0);
  const auto d = node.daemons()[0];
  EXPECT_EQ(d.targets.size(), 1U);
  EXPECT_TRUE(sys_.bound(d.mnt, "/pods/a/mount"));
}

TEST_F(NodeTest, ReadyAnswers) {
  Node node(sys_, state_, kLimits);
  EXPECT_TRUE(node.ready());
}

TEST(LinuxSystemTest, TheDaemonsCommandLineHasTheVolumesOptionsThenTheNodes) {
  DaemonConfig config;
  config.program = "/usr/bin/wheelhousefs";
  config.cache_dir = "/var/cache/wheelhouse-fs";
  config.options = {"cache_size=40G"};
  LinuxSystem sys(config);
  auto c = ctx();
  c["options"] = "arch=sm89";
  c["revision"] = "v1";
  auto spec = parse_volume(c, {{"token", "hf_x"}}, kLimits).value();
  const auto argv = sys.daemon_argv(spec, "/state/d/k", "/state/d/k/mnt", true);
  ASSERT_EQ(argv.size(), 5U);
  EXPECT_EQ(argv[0], "/usr/bin/wheelhousefs");
  EXPECT_EQ(argv[2],
            "endpoint=https://huggingface.co,revision=v1,cache_dir=/var/cache/wheelhouse-fs,"
            "allow_other,log_file=/state/d/k/wheelhousefs.log,state_dir=/state/d/k/state,"
            "fsname=wheelhouse-csi:DoctorPopi/python_wheelhouse,token_file=/state/d/k/token,"
            "arch=sm89,cache_size=40G");
  EXPECT_EQ(argv[3], "DoctorPopi/python_wheelhouse");
  for (const auto& a : argv) EXPECT_EQ(a.find("hf_x"), std::string::npos);
}

TEST(TargetPathTest, OnlyCleanAbsolutePaths) {
  EXPECT_TRUE(valid_target_path("/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/w/mount"));
  for (const char* p : {"", "/", "rel", "/a//b", "/a/./b", "/a/../b", "/a/b/"}) {
    EXPECT_FALSE(valid_target_path(p)) << p;
  }
}

}  // namespace
}  // namespace whfs::csi
