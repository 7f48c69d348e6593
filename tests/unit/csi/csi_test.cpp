#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "tools/csi/linux_system.h"
#include "tools/csi/node.h"
#include "tools/csi/volume.h"

namespace whfs::csi {
namespace {

const ParseLimits kLimits{{"https://huggingface.co", "http://127.0.0.1:8080"}};

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

// A system in memory: daemons are pids, mounts are a set; what was done is counted.
class FakeSystem : public System {
 public:
  Expected<int, std::string> start_daemon(const VolumeSpec& spec, const std::string& /*dir*/,
                                          const std::string& mnt) override {
    ++starts;
    last_token = spec.token;
    if (fail_start) return unexpected(std::string("the Hub is unreachable"));
    serving[mnt] = next_pid;
    return next_pid++;
  }
  bool daemon_serves(const std::string& mnt, int pid) override {
    auto it = serving.find(mnt);
    return it != serving.end() && it->second == pid;
  }
  void stop_daemon(const std::string& /*dir*/, const std::string& mnt, int /*pid*/) override {
    ++stops;
    serving.erase(mnt);
  }
  Expected<void, std::string> make_target(const std::string& target) override {
    folders.insert(target);
    return {};
  }
  Expected<void, std::string> bind_read_only(const std::string& mnt,
                                             const std::string& target) override {
    if (fail_bind) return unexpected(std::string("bind mount: Permission denied"));
    binds[target] = mnt;
    return {};
  }
  bool bound(const std::string& mnt, const std::string& target) override {
    auto it = binds.find(target);
    return it != binds.end() && it->second == mnt && serving.contains(mnt);
  }
  bool mounted(const std::string& target) override { return binds.contains(target); }
  Expected<void, std::string> unbind(const std::string& target) override {
    binds.erase(target);
    folders.erase(target);
    return {};
  }

  std::map<std::string, int> serving;        // mnt -> pid
  std::map<std::string, std::string> binds;  // target -> mnt
  std::set<std::string> folders;
  int next_pid = 100;
  int starts = 0;
  int stops = 0;
  bool fail_start = false;
  bool fail_bind = false;
  std::string last_token;
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

  FakeSystem sys_;
  std::string state_;
};

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
  ASSERT_TRUE(again.unpublish("vol-a", "/pods/a/mount").ok());
  EXPECT_TRUE(sys_.serving.empty());
}

TEST(LinuxSystemTest, TheDaemonsCommandLineHasTheNodesOptionsThenTheVolumes) {
  LinuxSystem sys({"/usr/bin/wheelhousefs", "/var/cache/wheelhouse-fs", {"cache_size=40G"}, 60});
  auto c = ctx();
  c["options"] = "arch=sm89";
  c["revision"] = "v1";
  auto spec = parse_volume(c, {{"token", "hf_x"}}, kLimits).value();
  const auto argv = sys.daemon_argv(spec, "/state/d/k", "/state/d/k/mnt", true);
  ASSERT_EQ(argv.size(), 5U);
  EXPECT_EQ(argv[0], "/usr/bin/wheelhousefs");
  EXPECT_EQ(argv[2],
            "endpoint=https://huggingface.co,revision=v1,cache_dir=/var/cache/wheelhouse-fs,"
            "allow_other,log_file=/state/d/k/wheelhousefs.log,"
            "fsname=wheelhouse-csi:DoctorPopi/python_wheelhouse,token_file=/state/d/k/token,"
            "cache_size=40G,arch=sm89");
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
