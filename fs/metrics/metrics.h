#pragma once
// Prometheus metrics of a mount: `metrics=HOST:PORT` serves them at /metrics (prometheus-cpp's
// civetweb exposer), `metrics_textfile=PATH` writes them for node_exporter's textfile
// collector. Both take the same families from one collect function, called per scrape (and
// per textfile write): the figures are read from the daemon's own counters at that moment,
// so the read path pays nothing for metrics it is not asked for.

#include <prometheus/metric_family.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fs/common/expected.h"
#include "fs/common/histogram.h"
#include "fs/common/own_file.h"

namespace prometheus {
class Exposer;
}

namespace whfs::metrics {

// Builds metric families; samples of one name (with other labels) go into one family.
class Families {
 public:
  using Labels = std::map<std::string, std::string>;
  void counter(const std::string& name, const std::string& help, double value,
               const Labels& labels = {});
  void gauge(const std::string& name, const std::string& help, double value,
             const Labels& labels = {});
  void histogram(const std::string& name, const std::string& help,
                 const LatencyHistogram::Snapshot& s, const Labels& labels = {});
  std::vector<prometheus::MetricFamily> take() { return std::move(families_); }

 private:
  prometheus::MetricFamily& family(const std::string& name, const std::string& help,
                                   prometheus::MetricType type);
  std::vector<prometheus::MetricFamily> families_;
};

// The exposition text of `families` (Prometheus text format 0.0.4).
std::string to_text(const std::vector<prometheus::MetricFamily>& families);

// "HOST:PORT", ":PORT" or "PORT" (loopback), "[V6]:PORT". Returns the address civetweb binds
// ("127.0.0.1:9101") or an error sentence.
Expected<std::string, std::string> parse_listen(const std::string& spec);

// The daemon's own process figures from /proc/self: resident bytes, threads, open files.
struct ProcessFigures {
  double resident_bytes = 0;
  double threads = 0;
  double open_fds = 0;
  double cpu_seconds = 0;
};
ProcessFigures process_figures();

// The folder of metrics_textfile=PATH, opened and checked as the daemon's own (own_file.h),
// and the file's name in it: an error line when other users can change the folder, or PATH is
// a link, not a regular file, or another user's.
struct TextfileFolder {
  OwnFolder folder;
  std::string name;
};
Expected<TextfileFolder, std::string> open_textfile_folder(const std::string& textfile);

class Exporter {
 public:
  using CollectFn = std::function<std::vector<prometheus::MetricFamily>()>;
  // Starts what is asked (either may be empty): a listener on `listen` (parse_listen's form),
  // a textfile rewritten every `every`. An error sentence when the port cannot be bound or
  // the textfile's folder cannot be written.
  static Expected<std::unique_ptr<Exporter>, std::string> start(
      const std::string& listen, const std::string& textfile, CollectFn collect,
      std::chrono::milliseconds every = std::chrono::seconds(5));
  ~Exporter();  // stops serving; removes the textfile (its figures would be stale)
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // The port the listener got (for "PORT" 0: the kernel's choice); 0 without a listener.
  int port() const { return port_; }

 private:
  Exporter() = default;
  // Writes the textfile once, atomically (a temporary file beside it, then rename), in the
  // folder checked at start.
  Expected<void, std::string> write_textfile();
  void textfile_loop();

  class Source;
  CollectFn collect_;
  std::shared_ptr<Source> source_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
  std::string textfile_;
  std::unique_ptr<TextfileFolder> folder_;
  dev_t written_dev_ = 0;  // the file last written, which the destructor removes
  ino_t written_ino_ = 0;
  std::chrono::milliseconds every_{5000};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread writer_;
};

}  // namespace whfs::metrics
