#include "fs/hub/token.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>

namespace whfs::hub {
namespace {

namespace fs = std::filesystem;

class TokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("whfs-token-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  TokenSource::GetEnv env() {
    return [this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    };
  }

  fs::path dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(TokenTest, OptionFileWinsOverEverything) {
  write(dir_ / "opt", "  hf_option\n");
  env_["HF_TOKEN"] = "hf_env";
  TokenSource src(dir_ / "opt", env());
  EXPECT_EQ(src.token(), "hf_option");
}

TEST_F(TokenTest, EnvThenTokenPathThenHfHome) {
  write(dir_ / "path-token", "hf_path");
  write(dir_ / "home" / "token", "hf_home");
  env_["HF_TOKEN_PATH"] = (dir_ / "path-token").string();
  env_["HF_HOME"] = (dir_ / "home").string();
  env_["HF_TOKEN"] = "hf_env\r\n";
  EXPECT_EQ(TokenSource({}, env()).token(), "hf_env");
  env_.erase("HF_TOKEN");
  env_["HUGGING_FACE_HUB_TOKEN"] = "hf_legacy";
  EXPECT_EQ(TokenSource({}, env()).token(), "hf_legacy");
  env_.erase("HUGGING_FACE_HUB_TOKEN");
  EXPECT_EQ(TokenSource({}, env()).token(), "hf_path");
  env_.erase("HF_TOKEN_PATH");
  EXPECT_EQ(TokenSource({}, env()).token(), "hf_home");
  env_.erase("HF_HOME");
  env_["XDG_CACHE_HOME"] = dir_.string();
  write(dir_ / "huggingface" / "token", "hf_xdg");
  EXPECT_EQ(TokenSource({}, env()).token(), "hf_xdg");
  env_.erase("XDG_CACHE_HOME");
  env_["HOME"] = dir_.string();
  write(dir_ / ".cache" / "huggingface" / "token", "hf_default");
  EXPECT_EQ(TokenSource({}, env()).token(), "hf_default");
}

TEST_F(TokenTest, EmptyIsNoTokenAndMissingFileIsNoToken) {
  env_["HF_TOKEN"] = "  \n";
  env_["HF_HOME"] = (dir_ / "nowhere").string();
  TokenSource src({}, env());
  EXPECT_EQ(src.token(), std::nullopt);
  write(dir_ / "blank", "\n\n");
  EXPECT_EQ(TokenSource(dir_ / "blank", env()).token(), std::nullopt);
}

TEST_F(TokenTest, DisableImplicitTokenLeavesOnlyTheOption) {
  env_["HF_TOKEN"] = "hf_env";
  env_["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "yes";
  EXPECT_EQ(TokenSource({}, env()).token(), std::nullopt);
  write(dir_ / "opt", "hf_opt");
  EXPECT_EQ(TokenSource(dir_ / "opt", env()).token(), "hf_opt");
}

TEST_F(TokenTest, ChangedFileIsPickedUpWithoutRestart) {
  const fs::path file = dir_ / "token";
  write(file, "hf_first");
  TokenSource src(file, env(), std::chrono::milliseconds(0));
  EXPECT_EQ(src.token(), "hf_first");
  write(file, "hf_second_longer");
  fs::last_write_time(file, fs::last_write_time(file) + std::chrono::seconds(2));
  EXPECT_EQ(src.token(), "hf_second_longer");
  fs::remove(file);
  EXPECT_EQ(src.token(), std::nullopt);
  write(file, "hf_third");
  EXPECT_EQ(src.token(), "hf_third");
}

TEST_F(TokenTest, AFifoAsTheTokenFileNeverBlocks) {
  // Someone points token_file (or HF_TOKEN_PATH) at a FIFO nobody writes: reading it must not
  // hold up the requests that ask for the token.
  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  TokenSource src(fifo, env());
  auto t = std::async(std::launch::async, [&] { return src.token(); });
  ASSERT_EQ(t.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "blocked on a FIFO";
  EXPECT_EQ(t.get(), std::nullopt);
}

TEST_F(TokenTest, ALineBreakInsideTheTokenIsNoToken) {
  // A CR or LF inside would split the Authorization header into a second, forged header.
  write(dir_ / "two-lines", "hf_abc\nX-Injected: 1\n");
  EXPECT_EQ(TokenSource(dir_ / "two-lines", env()).token(), std::nullopt);
  write(dir_ / "cr", "hf_abc\rdef");
  EXPECT_EQ(TokenSource(dir_ / "cr", env()).token(), std::nullopt);
  env_["HF_TOKEN"] = "hf_a\r\nX: y";
  EXPECT_EQ(TokenSource({}, env()).token(), std::nullopt);
  // Trailing line ends and spaces are trimmed, as before.
  write(dir_ / "ok", "hf_fine\r\n");
  EXPECT_EQ(TokenSource(dir_ / "ok", env()).token(), "hf_fine");
}

TEST_F(TokenTest, ATokenFileIsASmallRegularFile) {
  write(dir_ / "huge", std::string(kMaxTokenFileBytes + 1, 'a'));
  EXPECT_EQ(TokenSource(dir_ / "huge", env()).token(), std::nullopt);
  fs::create_directories(dir_ / "a-folder");
  EXPECT_EQ(TokenSource(dir_ / "a-folder", env()).token(), std::nullopt);
  // Readable by others: still used (with a warning in the log).
  write(dir_ / "shared", "hf_shared");
  ::chmod((dir_ / "shared").c_str(), 0644);
  EXPECT_EQ(TokenSource(dir_ / "shared", env()).token(), "hf_shared");
}

TEST_F(TokenTest, DescribeNamesTheSourceNotTheToken) {
  env_["HF_TOKEN"] = "hf_secret_value";
  TokenSource src({}, env());
  EXPECT_EQ(src.describe(), "HF_TOKEN");
  EXPECT_EQ(src.describe().find("secret"), std::string::npos);
}

}  // namespace
}  // namespace whfs::hub
