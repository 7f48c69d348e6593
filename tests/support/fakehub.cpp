#include "tests/support/fakehub.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace whfs::test {
namespace fs = std::filesystem;

std::string source_dir() {
  const char* s = std::getenv("WHFS_SOURCE_DIR");
  if (s == nullptr) throw std::runtime_error("WHFS_SOURCE_DIR is not set (run through ctest)");
  return s;
}

std::string build_dir() {
  const char* s = std::getenv("WHFS_BUILD_DIR");
  return s != nullptr ? s : source_dir() + "/build";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string dataset(const std::string& profile) {
  const std::string cmd = "python3 " + source_dir() + "/tests/fakehub/testdata.py " + profile;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) throw std::runtime_error("cannot run " + cmd);
  std::array<char, 4096> buf{};
  std::string out;
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
  if (::pclose(p) != 0) throw std::runtime_error(cmd + " failed: " + out);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

nlohmann::json manifest(const std::string& dataset_dir) {
  return nlohmann::json::parse(read_file(dataset_dir + "/manifest.json"));
}

TempDir::TempDir(const std::string& prefix) {
  std::string tmpl = (fs::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

ReadyProcess::ReadyProcess(std::vector<std::string> args) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::perror("execvp");
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string line;
  char c = 0;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  ::close(fds[0]);
  ready_ = nlohmann::json::parse(line, nullptr, false);
  if (line.empty() || ready_.is_discarded()) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    throw std::runtime_error(args[1] + " did not start (see its stderr above)");
  }
}

ReadyProcess::~ReadyProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

std::vector<nlohmann::json> read_settled_log(const std::string& path) {
  // A server writes a request's line once the response is out, so a client can be done a
  // moment before its last line lands: read until the log stops growing.
  auto entries = read_json_lines(path);
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    auto again = read_json_lines(path);
    if (again.size() == entries.size()) break;
    entries = std::move(again);
  }
  return entries;
}

namespace {

std::vector<std::string> proxy_argv(const std::string& log, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"python3", source_dir() + "/tests/fakehub/proxy.py", "--log",
                                   log};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

}  // namespace

Proxy::Proxy(const std::vector<std::string>& args)
    : dir_("whfs-proxy"),
      log_path_(dir_.path() + "/proxy.jsonl"),
      proc_(proxy_argv(log_path_, args)),
      url_(proc_.ready()["proxy"].get<std::string>()) {}

std::vector<nlohmann::json> Proxy::log() const { return read_settled_log(log_path_); }

FakeHub::FakeHub(const Options& options) : dir_("whfs-fakehub") {
  log_path_ = dir_.path() + "/requests.jsonl";
  std::vector<std::string> args = {"python3", source_dir() + "/tests/fakehub/fakehub.py", "--log",
                                   log_path_};
  for (const auto& [id, spec] : options.repos) {
    args.push_back("--repo");
    args.push_back(id + "=" + spec);
  }
  for (const auto& t : options.tokens) {
    args.push_back("--token");
    args.push_back(t);
  }
  args.insert(args.end(), options.args.begin(), options.args.end());
  proc_ = std::make_unique<ReadyProcess>(std::move(args));
  const auto& info = proc_->ready();
  hub_ = info["hub"];
  cdn_ = info["cdn"];
  const std::string control = info["control"];
  control_port_ = std::stoi(control.substr(control.rfind(':') + 1));
}

FakeHub::~FakeHub() = default;

nlohmann::json FakeHub::control(const std::string& route, const nlohmann::json& body) {
  const bool get = route == "/state" || route == "/log";
  const std::string payload = get ? "" : body.dump();
  std::string req = std::string(get ? "GET " : "POST ") + route +
                    " HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    "Content-Length: " +
                    std::to_string(payload.size()) + "\r\n\r\n" + payload;
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(control_port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(s);
    throw std::runtime_error("cannot connect to the fakehub control port");
  }
  for (std::size_t off = 0; off < req.size();) {
    const auto n = ::write(s, req.data() + off, req.size() - off);
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  std::string resp;
  std::array<char, 65536> buf{};
  ssize_t n = 0;
  while ((n = ::read(s, buf.data(), buf.size())) > 0)
    resp.append(buf.data(), static_cast<std::size_t>(n));
  ::close(s);
  const auto head_end = resp.find("\r\n\r\n");
  if (resp.size() < 12 || head_end == std::string::npos)
    throw std::runtime_error("bad control reply");
  const int status = std::stoi(resp.substr(9, 3));
  auto json = nlohmann::json::parse(resp.substr(head_end + 4), nullptr, false);
  if (status != 200)
    throw std::runtime_error("control " + route + " failed: " + resp.substr(head_end + 4));
  return json;
}

std::vector<nlohmann::json> FakeHub::log() const { return read_settled_log(log_path_); }

}  // namespace whfs::test
