#include "fs/metrics/metrics.h"

#include <fcntl.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>

namespace whfs::metrics {

// ---- families --------------------------------------------------------------------------

prometheus::MetricFamily& Families::family(const std::string& name, const std::string& help,
                                           prometheus::MetricType type) {
  for (auto& f : families_) {
    if (f.name == name) return f;
  }
  families_.push_back(prometheus::MetricFamily{name, help, type, {}});
  return families_.back();
}

namespace {

prometheus::ClientMetric with_labels(const Families::Labels& labels) {
  prometheus::ClientMetric m;
  for (const auto& [k, v] : labels) m.label.push_back({k, v});
  return m;
}

}  // namespace

void Families::counter(const std::string& name, const std::string& help, double value,
                       const Labels& labels) {
  auto m = with_labels(labels);
  m.counter.value = value;
  family(name, help, prometheus::MetricType::Counter).metric.push_back(std::move(m));
}

void Families::gauge(const std::string& name, const std::string& help, double value,
                     const Labels& labels) {
  auto m = with_labels(labels);
  m.gauge.value = value;
  family(name, help, prometheus::MetricType::Gauge).metric.push_back(std::move(m));
}

void Families::histogram(const std::string& name, const std::string& help,
                         const LatencyHistogram::Snapshot& s, const Labels& labels) {
  auto m = with_labels(labels);
  m.histogram.sample_count = s.count;
  m.histogram.sample_sum = s.sum_seconds;
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < s.counts.size(); ++i) {
    cumulative += s.counts[i];
    const double bound = i < LatencyHistogram::kBounds.size()
                             ? LatencyHistogram::kBounds[i]
                             : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back({cumulative, bound});
  }
  family(name, help, prometheus::MetricType::Histogram).metric.push_back(std::move(m));
}

std::string to_text(const std::vector<prometheus::MetricFamily>& families) {
  return prometheus::TextSerializer().Serialize(families);
}

// ---- the listen address ----------------------------------------------------------------

Expected<std::string, std::string> parse_listen(const std::string& spec) {
  std::string host = "127.0.0.1";
  std::string port = spec;
  if (spec.starts_with("[")) {
    const auto close = spec.find(']');
    if (close == std::string::npos || close + 1 >= spec.size() || spec[close + 1] != ':') {
      return unexpected("metrics=" + spec + ": expected [IPV6]:PORT");
    }
    host = spec.substr(0, close + 1);
    port = spec.substr(close + 2);
  } else if (const auto colon = spec.rfind(':'); colon != std::string::npos) {
    if (colon > 0) host = spec.substr(0, colon);
    port = spec.substr(colon + 1);
    if (host.find(':') != std::string::npos) {
      return unexpected("metrics=" + spec + ": write an IPv6 address in brackets, [::1]:9101");
    }
  }
  int n = -1;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), n);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || n < 0 || n > 65535) {
    return unexpected("metrics=" + spec + ": the port must be a number from 0 to 65535");
  }
  if (host == "localhost") host = "127.0.0.1";
  if (host.empty() || host.find_first_of(" /,") != std::string::npos) {
    return unexpected("metrics=" + spec + ": expected HOST:PORT, e.g. 127.0.0.1:9101");
  }
  return host + ":" + std::to_string(n);
}

// ---- process figures -------------------------------------------------------------------

namespace {

// A /proc file whole (they are small, and their size is 0 to stat).
std::string read_proc(const char* path) {
  std::string out;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace

ProcessFigures process_figures() {
  ProcessFigures p;
  std::istringstream status(read_proc("/proc/self/status"));
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream in(line);
    std::string key;
    double value = 0;
    in >> key >> value;
    if (key == "VmRSS:") p.resident_bytes = value * 1024;
    if (key == "Threads:") p.threads = value;
  }
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    p.open_fds += 1;
  }
  // Fields after the command name (which may hold spaces): utime and stime are the 12th and
  // 13th of them.
  const std::string stat = read_proc("/proc/self/stat");
  if (const auto close = stat.rfind(')'); close != std::string::npos && close + 2 < stat.size()) {
    std::istringstream in(stat.substr(close + 2));
    std::string field;
    double utime = 0;
    double stime = 0;
    for (int i = 1; i <= 13 && in >> field; ++i) {
      if (i == 12) utime = std::strtod(field.c_str(), nullptr);
      if (i == 13) stime = std::strtod(field.c_str(), nullptr);
    }
    const long hz = ::sysconf(_SC_CLK_TCK);
    if (hz > 0) p.cpu_seconds = (utime + stime) / static_cast<double>(hz);
  }
  return p;
}

// ---- the exporter ----------------------------------------------------------------------

class Exporter::Source final : public prometheus::Collectable {
 public:
  explicit Source(CollectFn collect) : collect_(std::move(collect)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return collect_(); }

 private:
  Exporter::CollectFn collect_;
};

Expected<std::unique_ptr<Exporter>, std::string> Exporter::start(const std::string& listen,
                                                                 const std::string& textfile,
                                                                 CollectFn collect,
                                                                 std::chrono::milliseconds every) {
  std::unique_ptr<Exporter> e(new Exporter());
  e->collect_ = std::move(collect);
  e->every_ = every;
  if (!listen.empty()) {
    e->source_ = std::make_shared<Source>(e->collect_);
    try {
      e->exposer_ = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
          "listening_ports", listen, "num_threads", "2", "request_timeout_ms", "10000"});
    } catch (const std::exception& ex) {
      return unexpected("metrics=" + listen + ": cannot listen there (" + ex.what() + ")");
    }
    e->exposer_->RegisterCollectable(e->source_);
    const auto ports = e->exposer_->GetListeningPorts();
    e->port_ = ports.empty() ? 0 : ports.front();
  }
  if (!textfile.empty()) {
    e->textfile_ = textfile;
    auto folder = open_textfile_folder(textfile);
    if (!folder) return unexpected(folder.error());
    e->folder_ = std::make_unique<TextfileFolder>(std::move(*folder));
    if (auto w = e->write_textfile(); !w) return unexpected(w.error());
    e->writer_ = std::thread([p = e.get()] { p->textfile_loop(); });
  }
  return e;
}

Exporter::~Exporter() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  exposer_.reset();
  // Removed while it is still the file last written here (never what took its name since).
  struct stat st {};
  if (folder_ &&
      ::fstatat(folder_->folder.fd(), folder_->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      st.st_dev == written_dev_ && st.st_ino == written_ino_) {
    ::unlinkat(folder_->folder.fd(), folder_->name.c_str(), 0);
  }
}

Expected<TextfileFolder, std::string> open_textfile_folder(const std::string& textfile) {
  const std::string what = "metrics_textfile=" + textfile;
  const auto slash = textfile.rfind('/');
  if (textfile.empty() || textfile[0] != '/' || slash + 1 == textfile.size()) {
    return unexpected(what + ": not an absolute path to a file");
  }
  auto folder = OwnFolder::open(slash == 0 ? "/" : textfile.substr(0, slash), false, what);
  if (!folder) return unexpected(folder.error());
  std::string name = textfile.substr(slash + 1);
  if (auto ok = replaceable(*folder, name, what); !ok) return unexpected(ok.error());
  return TextfileFolder{std::move(*folder), std::move(name)};
}

Expected<void, std::string> Exporter::write_textfile() {
  const int dfd = folder_->folder.fd();
  const std::string& name = folder_->name;
  const std::string tmp = "." + name + "." + std::to_string(::getpid()) + ".tmp";
  const std::string text = to_text(collect_());
  // O_EXCL | O_NOFOLLOW: a name planted in a sticky folder is never followed; rename() then
  // replaces the entry itself, never what a planted link points to.
  ::unlinkat(dfd, tmp.c_str(), 0);
  const int fd =
      ::openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return unexpected("metrics_textfile=" + textfile_ + ": cannot write in its folder (" +
                      std::strerror(errno) + ")");
  }
  std::size_t off = 0;
  bool ok = true;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n <= 0) {
      ok = false;
      break;
    }
    off += static_cast<std::size_t>(n);
  }
  const int err = errno;
  ::fchmod(fd, 0644);  // readable by node_exporter, whatever the umask
  struct stat st {};
  ::fstat(fd, &st);
  ::close(fd);
  if (!ok || ::renameat(dfd, tmp.c_str(), dfd, name.c_str()) != 0) {
    const int e = ok ? errno : err;
    ::unlinkat(dfd, tmp.c_str(), 0);
    return unexpected("metrics_textfile=" + textfile_ + ": " + std::strerror(e));
  }
  written_dev_ = st.st_dev;
  written_ino_ = st.st_ino;
  return {};
}

void Exporter::textfile_loop() {
  std::unique_lock lock(mu_);
  bool warned = false;
  while (!cv_.wait_for(lock, every_, [this] { return stopping_; })) {
    lock.unlock();
    auto w = write_textfile();
    if (!w && !warned) spdlog::warn("{}", w.error());
    if (w && warned) spdlog::info("metrics_textfile={}: written again", textfile_);
    warned = !w;
    lock.lock();
  }
}

}  // namespace whfs::metrics
