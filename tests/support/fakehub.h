#pragma once
// Test support: run the Hub emulator (tests/fakehub/fakehub.py) as a child process and drive
// its control port, and find the generated test datasets.

#include <sys/types.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace whfs::test {

std::string source_dir();  // WHFS_SOURCE_DIR, set by ctest
std::string build_dir();   // WHFS_BUILD_DIR

// <out> of a generated dataset ("small" or "default"): <out>/tree and <out>/manifest.json.
std::string dataset(const std::string& profile);
nlohmann::json manifest(const std::string& dataset_dir);
std::string read_file(const std::string& path);

// A fresh, empty directory under /tmp, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "whfs-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A child process whose first stdout line says it is ready (a JSON object); SIGTERM at the end.
class ReadyProcess {
 public:
  explicit ReadyProcess(std::vector<std::string> argv);  // throws when it exits before
  ~ReadyProcess();
  ReadyProcess(const ReadyProcess&) = delete;
  ReadyProcess& operator=(const ReadyProcess&) = delete;
  const nlohmann::json& ready() const { return ready_; }

 private:
  pid_t pid_ = -1;
  nlohmann::json ready_;
};

// A forward HTTP proxy (tests/fakehub/proxy.py) that logs what passes through it.
class Proxy {
 public:
  // `args`: extra arguments of proxy.py, e.g. {"--resolve", "hub.example=127.0.0.1"}.
  explicit Proxy(const std::vector<std::string>& args = {});
  const std::string& url() const { return url_; }
  std::vector<nlohmann::json> log() const;

 private:
  TempDir dir_;
  std::string log_path_;
  ReadyProcess proc_;
  std::string url_;
};

class FakeHub {
 public:
  struct Options {
    std::map<std::string, std::string> repos;  // repo id -> "DIR[:private|:gated]"
    std::vector<std::string> tokens;           // "TOKEN=id,id"
    std::vector<std::string> args;             // extra command-line arguments
  };

  explicit FakeHub(const Options& options);  // throws std::runtime_error when it cannot start
  ~FakeHub();
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;

  const std::string& hub_url() const { return hub_; }
  const std::string& cdn_url() const { return cdn_; }

  // POST a JSON body to a control route (GET for /state and /log); throws on HTTP errors.
  nlohmann::json control(const std::string& route,
                         const nlohmann::json& body = nlohmann::json::object());
  int fault(const nlohmann::json& spec) { return control("/faults", spec)["id"].get<int>(); }
  void clear_faults() { control("/faults/clear"); }
  std::vector<nlohmann::json> log() const;  // every request so far, from the JSON-lines file
  void clear_log() { control("/log/clear"); }

 private:
  TempDir dir_;
  std::string log_path_;
  std::unique_ptr<ReadyProcess> proc_;
  std::string hub_;
  std::string cdn_;
  int control_port_ = 0;
};

std::vector<nlohmann::json> read_json_lines(const std::string& path);
// The same, once the file has stopped growing for a moment (servers log after responding).
std::vector<nlohmann::json> read_settled_log(const std::string& path);

}  // namespace whfs::test
