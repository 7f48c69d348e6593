#pragma once
// The fixture of the CurlHubClient tests: one Hub emulator for the suite over the small test
// dataset (public, private and gated copies, two tokens, pages of 7 entries), and helpers.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include "fs/common/hash.h"
#include "fs/hub/hub_client.h"
#include "tests/support/fakehub.h"

namespace whfs::hub::testing_hub {

using namespace std::chrono_literals;
using nlohmann::json;
using test::FakeHub;

inline const std::string kRepo = "DoctorPopi/python_wheelhouse";

inline Deadline in(std::chrono::milliseconds d) { return Clock::now() + d; }

// The file's bytes [offset, offset + out.size()) into `out`, by stream_range; `on_filled` (may
// be empty) is told after each piece how much of the front of `out` holds them.
inline Expected<void, HubError> read_range(HubClient& c, const FileRef& f, std::uint64_t offset,
                                           std::span<std::byte> out, Deadline d,
                                           const std::function<void(std::size_t)>& on_filled = {}) {
  std::size_t filled = 0;
  auto take = [&](std::span<const std::byte> bytes) {
    std::memcpy(out.data() + filled, bytes.data(), bytes.size());
    filled += bytes.size();
    if (on_filled) on_filled(filled);
  };
  return c.stream_range(f, offset, out.size(), d, nullptr, take);
}

class HubClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new std::string(test::dataset("small"));
    manifest_ = new json(test::manifest(*data_));
    const std::string tree = *data_ + "/tree";
    FakeHub::Options o;
    o.repos = {{kRepo, tree}, {"acme/private", tree + ":private"}, {"acme/gated", tree + ":gated"}};
    o.tokens = {"hf_good=acme/private,acme/gated", "hf_noaccess="};
    o.args = {"--page-size", "7"};
    hub_ = new FakeHub(o);
  }
  static void TearDownTestSuite() {
    delete hub_;
    delete manifest_;
    delete data_;
  }
  void TearDown() override {
    hub_->clear_faults();
    hub_->control("/config", {{"rate", 0}, {"latency_ms", 0}});
  }

  static HubClientConfig config(const std::string& repo = kRepo) {
    HubClientConfig c;
    c.transport.endpoint = hub_->hub_url();
    c.repo = *parse_repo_ref(repo);
    c.transport.retry = RetryPolicy{6, 10ms, 50ms};
    c.transport.http.low_speed_time = 2s;
    c.transport.http.connect_timeout = 2s;
    return c;
  }
  static std::string head() {
    return hub_->control("/state")["repos"][kRepo]["head"].get<std::string>();
  }
  static std::string source(const std::string& path) {
    return test::read_file(*data_ + "/tree/" + path);
  }
  // The biggest file of the dataset (an LFS wheel with a "+" in its name).
  static std::string big() { return (*manifest_)["big_file"].get<std::string>(); }
  static FileRef file(const std::string& path) {
    return FileRef{head(), path, (*manifest_)["files"][path]["size"].get<std::uint64_t>()};
  }
  static std::string read_all(HubClient& c, const FileRef& f, Deadline d = in(60s)) {
    std::string out(f.size, '\0');
    auto r = read_range(c, f, 0, std::as_writable_bytes(std::span(out)), d);
    EXPECT_TRUE(r) << r.error().describe();
    return out;
  }
  std::vector<json> log_since(std::size_t n) {
    auto all = hub_->log();
    return {all.begin() + static_cast<std::ptrdiff_t>(std::min(n, all.size())), all.end()};
  }

  inline static std::string* data_ = nullptr;
  inline static json* manifest_ = nullptr;
  inline static FakeHub* hub_ = nullptr;
};

}  // namespace whfs::hub::testing_hub
