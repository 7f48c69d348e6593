#pragma once
// The Hub emulator with a writable repo for the write-client tests: acme/wheels (a write token
// hf_w, a read token hf_r), acme/gated (gated, hf_w has no access), acme/private (private,
// hf_w has no access); a fast retry policy, and token files.

#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <string>

#include "fs/publish/hub_writer.h"
#include "tests/support/fakehub.h"
#include "tests/unit/check/test_wheels.h"

namespace whfs::publish::test {

using check::test::wheel_members;
using check::test::write_wheel;

inline const std::string kRepo = "acme/wheels";

class Emulator {
 public:
  Emulator() {
    std::ofstream(src_.path() + "/README.md") << "# wheels\n";
    whfs::test::FakeHub::Options o;
    o.repos = {{kRepo, src_.path()},
               {"acme/gated", src_.path() + ":gated"},
               {"acme/private", src_.path() + ":private"}};
    o.tokens = {"hf_r=" + kRepo};
    o.args = {"--write-token", "hf_w=" + kRepo};
    hub = std::make_unique<whfs::test::FakeHub>(o);
    for (const char* t : {"hf_w", "hf_r"}) {
      const std::string path = token_file(t);
      std::ofstream(path) << t << "\n";
      ::chmod(path.c_str(), 0600);
    }
  }

  std::string token_file(const std::string& token) const {
    return dir_.path() + "/" + token + ".token";
  }

  WriterConfig config(const std::string& token = "hf_w", const std::string& repo = kRepo) const {
    WriterConfig c;
    c.transport.endpoint = hub->hub_url();
    c.repo = *hub::parse_repo_ref(repo);
    c.transport.token_file = token.empty() ? "/nonexistent/token" : token_file(token);
    c.transport.retry =
        hub::RetryPolicy{3, std::chrono::milliseconds(10), std::chrono::milliseconds(20)};
    c.transport.http.low_speed_time = std::chrono::seconds(1);
    c.transport.http.connect_timeout = std::chrono::seconds(2);
    return c;
  }

  std::string head(const std::string& repo = kRepo) {
    return hub->control("/state")["repos"][repo]["head"].get<std::string>();
  }

  // The emulator's requests of one kind ("storage-put", "commit", ...) since the log was cleared.
  std::vector<nlohmann::json> ops(const std::string& op) const {
    std::vector<nlohmann::json> out;
    for (auto& e : hub->log()) {
      if (e.value("op", "") == op) out.push_back(e);
    }
    return out;
  }

  std::unique_ptr<whfs::test::FakeHub> hub;

 private:
  whfs::test::TempDir dir_{"publish-emulator"};
  whfs::test::TempDir src_{"publish-emulator-src"};
};

}  // namespace whfs::publish::test
