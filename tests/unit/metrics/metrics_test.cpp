// fs/metrics: the listen address, the families, the /metrics listener and the textfile.
#include "fs/metrics/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace whfs::metrics {
namespace {

namespace fsys = std::filesystem;

TEST(MetricsListenTest, LoopbackUnlessAnotherAddressIsNamed) {
  EXPECT_EQ(*parse_listen("9101"), "127.0.0.1:9101");
  EXPECT_EQ(*parse_listen(":9101"), "127.0.0.1:9101");
  EXPECT_EQ(*parse_listen("localhost:9101"), "127.0.0.1:9101");
  EXPECT_EQ(*parse_listen("0.0.0.0:9101"), "0.0.0.0:9101");
  EXPECT_EQ(*parse_listen("10.1.2.3:0"), "10.1.2.3:0");
  EXPECT_EQ(*parse_listen("[::1]:9101"), "[::1]:9101");
  for (const char* bad : {"", "x", "9101x", "70000", "-1", "::1:9101", "[::1]", "[::1]9101",
                          "a b:1", "h/x:1", "a,b:1"}) {
    EXPECT_FALSE(parse_listen(bad)) << bad;
  }
}

TEST(MetricsFamiliesTest, SamplesOfOneNameShareAFamily) {
  Families f;
  f.counter("x_total", "X.", 3, {{"server", "hub"}});
  f.counter("x_total", "X.", 4, {{"server", "cdn"}});
  f.gauge("y", "Y.", 1.5);
  LatencyHistogram h;
  h.observe(std::chrono::microseconds(50));
  h.observe(std::chrono::seconds(2));
  f.histogram("z_seconds", "Z.", h.snapshot());
  const auto families = f.take();
  ASSERT_EQ(families.size(), 3u);
  EXPECT_EQ(families[0].metric.size(), 2u);
  const std::string text = to_text(families);
  EXPECT_NE(text.find("# TYPE x_total counter\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_total{server=\"hub\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_total{server=\"cdn\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("y 1.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("z_seconds_bucket{le=\"0.0001\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("z_seconds_bucket{le=\"1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("z_seconds_bucket{le=\"2.5\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("z_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("z_seconds_count 2\n"), std::string::npos) << text;
}

TEST(MetricsProcessTest, FiguresOfThisProcess) {
  const auto p = process_figures();
  EXPECT_GT(p.resident_bytes, 1 << 20);
  EXPECT_GE(p.threads, 1);
  EXPECT_GE(p.open_fds, 3);
  EXPECT_GE(p.cpu_seconds, 0);
}

std::vector<prometheus::MetricFamily> sample_families(int value) {
  Families f;
  f.counter("wheelhouse_test_total", "A test counter.", value);
  return f.take();
}

std::string http_get(int port, const std::string& path) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!::write(s, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(s, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(s);
  return out;
}

TEST(MetricsExporterTest, ServesEachScrapeFreshOnLoopback) {
  std::atomic<int> value{1};  // read by the listener's threads
  auto e = Exporter::start("127.0.0.1:0", "", [&] { return sample_families(value.load()); });
  ASSERT_TRUE(e) << e.error();
  const int port = (*e)->port();
  ASSERT_GT(port, 0);
  std::string r = http_get(port, "/metrics");
  EXPECT_NE(r.find("200 OK"), std::string::npos) << r;
  EXPECT_NE(r.find("wheelhouse_test_total 1\n"), std::string::npos) << r;
  value = 7;
  r = http_get(port, "/metrics");
  EXPECT_NE(r.find("wheelhouse_test_total 7\n"), std::string::npos) << r;
  EXPECT_EQ(http_get(port, "/other").find("wheelhouse_test_total"), std::string::npos);
  // The same port twice: the second cannot listen, and says so.
  auto twice =
      Exporter::start("127.0.0.1:" + std::to_string(port), "", [] { return sample_families(0); });
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().find("cannot listen there"), std::string::npos) << twice.error();
}

class TextfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/whfs-textfile-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fsys::remove_all(dir_); }
  static std::string slurp(const std::string& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  std::string dir_;
};

TEST_F(TextfileTest, WrittenAtStartRewrittenThenRemoved) {
  const std::string path = dir_ + "/wheelhouse.prom";
  std::atomic<int> value{1};  // read by the textfile's thread
  auto e = Exporter::start(
      "", path, [&] { return sample_families(value.load()); }, std::chrono::milliseconds(50));
  ASSERT_TRUE(e) << e.error();
  EXPECT_NE(slurp(path).find("wheelhouse_test_total 1\n"), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  value = 2;
  for (int i = 0; i < 100 && slurp(path).find("wheelhouse_test_total 2\n") == std::string::npos;
       ++i) {
    ::usleep(20000);
  }
  EXPECT_NE(slurp(path).find("wheelhouse_test_total 2\n"), std::string::npos);
  e->reset();
  EXPECT_FALSE(fsys::exists(path));
  EXPECT_TRUE(fsys::is_empty(dir_));  // no temporary file left behind
}

TEST_F(TextfileTest, APlantedLinkIsRefusedOrReplacedNeverFollowed) {
  // Links planted at the file's name (refused at start) and at the temporary name (replaced):
  // neither target is written.
  const std::string victim = dir_ + "/victim";
  { std::ofstream(victim) << "root's file\n"; }
  const std::string path = dir_ + "/wheelhouse.prom";
  ASSERT_EQ(::symlink(victim.c_str(), path.c_str()), 0);
  auto refused = Exporter::start("", path, [] { return sample_families(3); });
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), "metrics_textfile=" + path + ": it is a symbolic link (not replaced)");
  ASSERT_EQ(::unlink(path.c_str()), 0);
  const std::string tmp = dir_ + "/.wheelhouse.prom." + std::to_string(::getpid()) + ".tmp";
  ASSERT_EQ(::symlink(victim.c_str(), tmp.c_str()), 0);
  auto e = Exporter::start(
      "", path, [] { return sample_families(3); }, std::chrono::hours(1));
  ASSERT_TRUE(e) << e.error();
  EXPECT_EQ(slurp(victim), "root's file\n");
  EXPECT_FALSE(fsys::is_symlink(path));
  EXPECT_NE(slurp(path).find("wheelhouse_test_total 3\n"), std::string::npos);
  // Removed at the end only while it is still the file written here.
  e->reset();
  EXPECT_FALSE(fsys::exists(path));
}

TEST_F(TextfileTest, AFolderThatCannotBeWrittenFailsTheStart) {
  auto e =
      Exporter::start("", dir_ + "/missing/wheelhouse.prom", [] { return sample_families(1); });
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().find("cannot open folder " + dir_ + "/missing"), std::string::npos)
      << e.error();
}

TEST_F(TextfileTest, AFolderOthersCanChangeOrAnotherUsersFileIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (files of another user are made)";
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  auto open = open_textfile_folder(dir_ + "/wheelhouse.prom");
  ASSERT_FALSE(open);
  EXPECT_NE(open.error().find("folder " + dir_ +
                              " is not safe for a file of this daemon: other users can write in "
                              "it (mode 0777)"),
            std::string::npos)
      << open.error();
  ASSERT_EQ(::chmod(dir_.c_str(), 01777), 0);  // sticky: only names of its own are replaced
  EXPECT_TRUE(open_textfile_folder(dir_ + "/wheelhouse.prom"));
  const std::string theirs = dir_ + "/theirs.prom";
  std::ofstream(theirs) << "x 1\n";
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  EXPECT_EQ(open_textfile_folder(theirs).error(),
            "metrics_textfile=" + theirs +
                ": it belongs to uid 65534, not to this daemon's user (uid 0)");
}

}  // namespace
}  // namespace whfs::metrics
