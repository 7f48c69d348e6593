#include "fs/config/options.h"

#include <gtest/gtest.h>

#include <map>

namespace whfs {
namespace {

class OptionsTest : public ::testing::Test {
 protected:
  Expected<MountOptions, std::string> parse(std::vector<std::string> args) {
    return parse_mount_args(args, [this](const char* n) -> const char* {
      auto it = env.find(n);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  }
  std::map<std::string, std::string> env;
};

TEST_F(OptionsTest, DefaultsAndPositionals) {
  auto o = parse({"/mnt/w"});
  ASSERT_TRUE(o) << o.error();
  EXPECT_EQ(o->repo, "DoctorPopi/python_wheelhouse");
  EXPECT_EQ(o->mountpoint, "/mnt/w");
  EXPECT_EQ(o->revision, "main");
  EXPECT_FALSE(o->foreground);
  auto two = parse({"org/repo", "/mnt/w", "-f"});
  ASSERT_TRUE(two);
  EXPECT_EQ(two->repo, "org/repo");
  EXPECT_TRUE(two->foreground);
}

TEST_F(OptionsTest, OwnOptionsFuseOptionsAndMountNoise) {
  // The mount.fuse3 convention: source, mount point, then -o with mount(8)'s options mixed in.
  auto o = parse({"org/repo", "/mnt/w", "-o",
                  "rw,nodev,nosuid,_netdev,x-systemd.automount,allow_other,revision=refs/pr/1,"
                  "cache_size=5G,refresh=10m,offline,log_level=debug,arch=sm89,torch=2.9,"
                  "nocurrent,caller_timeout=5s,api_requests=2"});
  ASSERT_TRUE(o) << o.error();
  EXPECT_EQ(o->caller_timeout, std::chrono::seconds(5));
  EXPECT_EQ(o->api_requests, 2u);
  EXPECT_EQ(o->revision, "refs/pr/1");
  EXPECT_EQ(o->cache_size, 5ull << 30);
  EXPECT_EQ(o->refresh, std::chrono::seconds(600));
  EXPECT_TRUE(o->offline);
  EXPECT_EQ(o->log_level, "debug");
  EXPECT_EQ(o->target.arch, "sm89");
  EXPECT_EQ(o->target.torch, "2.9");
  EXPECT_EQ(o->fuse_options, (std::vector<std::string>{"allow_other"}));
  EXPECT_FALSE(o->current);
  auto glued = parse({"-oendpoint=http://x:1,token_file=/t", "/m"});
  ASSERT_TRUE(glued);
  EXPECT_EQ(glued->endpoint, "http://x:1");
  EXPECT_EQ(glued->token_file, "/t");
}

TEST_F(OptionsTest, BadInputIsOneClearLine) {
  const std::map<std::vector<std::string>, std::string> cases = {
      {{"-o", "cache_size=lots", "/m"}, "cache_size must be a size"},
      {{"-o", "cache_size=1M", "/m"}, "at least 64M"},
      {{"-o", "refresh=soon", "/m"}, "refresh must be a duration"},
      {{"-o", "refresh=5s", "/m"}, "at least 10s"},
      {{"-o", "caller_timeout=0s", "/m"}, "caller_timeout must be from 1s to 1m"},
      {{"-o", "caller_timeout=2h", "/m"}, "caller_timeout must be from 1s to 1m"},
      {{"-o", "endpoint=ftp://x", "/m"}, "http:// or https://"},
      {{"-o", "log_level=loud", "/m"}, "log_level must be"},
      {{"-o", "nosuchthing", "/m"}, "unknown option 'nosuchthing'"},
      {{"-o", "revision=", "/m"}, "needs a value"},
      {{"-o", "offline=1", "/m"}, "takes no value"},
      {{"-o", "connections=0", "/m"}, "connections must be"},
      {{"-o", "api_requests=0", "/m"}, "api_requests must be a number from 1 to 32"},
      {{"-o", "api_requests=lots", "/m"}, "api_requests must be"},
      {{"-x", "/m"}, "unknown flag '-x'"},
      {{"-o"}, "-o needs"},
      {{}, "missing MOUNTPOINT"},
      {{"a/b", "/m", "extra"}, "too many arguments"},
      {{"-o", "h\nDo", "/m"}, "unknown option 'h\\x0aDo'"},  // found by options_fuzz
      // Refused here, not once the mount started: every usage error exits 2.
      {{"not a repo", "/m"}, "not a repo"},
      {{"-o", "arch=sm8x", "/m"}, "arch=sm8x"},
      {{"-o", "torch=latest", "/m"}, "torch"},
      {{"-o", "metrics=70000", "/m"}, "port must be a number"},
      {{"-o", "metrics_textfile=x.prom", "/m"}, "absolute path"},
      {{"-o", "metrics_textfile=/x.txt", "/m"}, "end in .prom"},
      {{"-o", "log_file=wh.log", "/m"}, "log_file must be an absolute path"},
      {{"-o", "nonempty=yes", "/m"}, "takes no value"},
      {{"-o", "arch=sm8\nx", "/m"}, "arch=sm8\\x0ax"},  // found by options_fuzz
  };
  for (const auto& [args, want] : cases) {
    auto o = parse(args);
    ASSERT_FALSE(o) << want;
    EXPECT_NE(o.error().find(want), std::string::npos) << o.error();
    EXPECT_EQ(o.error().find('\n'), std::string::npos);
  }
}

TEST_F(OptionsTest, EnvironmentOverridesAndOffline) {
  env["HF_HUB_OFFLINE"] = "1";
  env["WHEELHOUSE_ARCH"] = "sm86";
  env["WHEELHOUSE_PYTHON_TAG"] = "cp311";
  auto o = parse({"-o", "arch=sm89", "/m"});
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->offline);
  EXPECT_EQ(o->target.arch, "sm89");  // the option wins
  EXPECT_EQ(o->target.python_tag, "cp311");
}

TEST_F(OptionsTest, TheLogRotationSizeFromTheEnvironment) {
  auto o = parse({"/m"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->log_size, 10u << 20);
  env["WHEELHOUSE_LOG_SIZE"] = "64K";
  o = parse({"/m"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->log_size, 64u << 10);
  env["WHEELHOUSE_LOG_SIZE"] = "1K";
  EXPECT_EQ(parse({"/m"}).error(),
            "WHEELHOUSE_LOG_SIZE must be a size of at least 4K, such as 10M, got '1K'");
}

TEST_F(OptionsTest, DefaultCacheDir) {
  auto get = [this](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  env["HOME"] = "/home/u";
  EXPECT_EQ(default_cache_dir(get, false), "/home/u/.cache/wheelhouse-fs");
  env["XDG_CACHE_HOME"] = "/x";
  EXPECT_EQ(default_cache_dir(get, false), "/x/wheelhouse-fs");
  EXPECT_EQ(default_cache_dir(get, true), "/var/cache/wheelhouse-fs");
  env["CACHE_DIRECTORY"] = "/var/cache/wheelhouse-fs:/other";
  EXPECT_EQ(default_cache_dir(get, true), "/var/cache/wheelhouse-fs");
  // No HOME: no default at all, never a folder under /tmp that another user could make first.
  env.clear();
  EXPECT_EQ(default_cache_dir(get, false), "");
  env["HOME"] = "relative";
  EXPECT_EQ(default_cache_dir(get, false), "");
}

TEST_F(OptionsTest, HelpAndVersion) {
  EXPECT_TRUE(parse({"--help"})->show_help);
  EXPECT_TRUE(parse({"-V"})->show_version);
  EXPECT_NE(mount_usage("wheelhousefs").find("cache_size=SIZE"), std::string::npos);
}

}  // namespace
}  // namespace whfs
