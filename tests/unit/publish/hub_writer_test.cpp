// HubWriter against the Hub emulator: the write API step by step, the token's travels, and
// the faults of an upload (reset, stall, a storage host that keeps failing, a stale parent).
#include "fs/publish/hub_writer.h"

#include <gtest/gtest.h>

#include "fs/check/wheel_check.h"
#include "tests/unit/publish/emulator.h"

namespace whfs::publish {
namespace {

using check::inspect_wheel;
using check::WheelFacts;
using nlohmann::json;

class HubWriterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { emu_ = new test::Emulator(); }
  static void TearDownTestSuite() { delete emu_; }
  void SetUp() override {
    emu_->hub->control("/config",
                       {{"multipart_threshold", 5000000000LL}, {"multipart_chunk", 64 << 20}});
    emu_->hub->clear_log();
  }
  void TearDown() override { emu_->hub->clear_faults(); }

  // A checked wheel of about `size` bytes (its payload stored, so the size is near).
  WheelFacts wheel(const std::string& version, std::size_t size) {
    std::string payload(size, '\0');
    for (std::size_t i = 0; i < size; ++i) payload[i] = static_cast<char>((i * 7919 + size) >> 3);
    auto members = test::wheel_members("demo_pkg", version, "py3-none-any");
    members.push_back({"demo_pkg/payload.bin", payload});
    const std::string file = "demo_pkg-" + version + "-py3-none-any.whl";
    auto w = inspect_wheel(test::write_wheel(dir_.path(), file, members));
    EXPECT_TRUE(w) << w.error();
    return *w;
  }

  // preupload + batch + upload + commit of one wheel at `path`.
  Expected<CommitAnswer, PublishError> publish_one(HubWriter& w, const WheelFacts& f,
                                                   const std::string& path,
                                                   const std::string& parent) {
    auto modes = w.preupload("main", {{path, f.content.size, f.sample}});
    if (!modes) return unexpected(modes.error());
    EXPECT_TRUE((*modes)[0].lfs);  // a zip holds NUL bytes: binary, so LFS
    auto batch = w.batch("main", {{f.content.sha256, f.content.size}});
    if (!batch) return unexpected(batch.error());
    if (auto up = w.upload((*batch)[0], *f.file, path); !up) return unexpected(up.error());
    return w.commit("main", commit_payload({"Publish", "", parent},
                                           {{path, f.content.size, f.content.sha256, true, ""}}));
  }

  static test::Emulator* emu_;
  whfs::test::TempDir dir_{"publish-writer"};
};

test::Emulator* HubWriterTest::emu_ = nullptr;

TEST_F(HubWriterTest, BasicUploadAndOneCommitAgainstItsParent) {
  HubWriter w(emu_->config());
  ASSERT_TRUE(w.ready());
  const WheelFacts f = wheel("1.0", 300000);
  const std::string parent = emu_->head();
  auto c = publish_one(w, f, "demo_pkg/sm89/torch2.9-cu128/" + f.file_name, parent);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->commit, emu_->head());
  EXPECT_NE(c->commit, parent);
  EXPECT_EQ(w.stats().bytes_uploaded, f.content.size);
  EXPECT_EQ(w.stats().retries, 0u);
  const auto puts = emu_->ops("storage-put");
  ASSERT_EQ(puts.size(), 1u);
  EXPECT_EQ(puts[0]["bytes_in"], f.content.size);
  // The token went with every Hub call, never to the storage host.
  for (const char* op : {"preupload", "lfs-batch", "lfs-verify", "commit"}) {
    const auto calls = emu_->ops(op);
    ASSERT_EQ(calls.size(), 1u) << op;
    EXPECT_TRUE(calls[0]["auth"].get<bool>()) << op;
  }
  EXPECT_FALSE(puts[0]["auth"].get<bool>());
  EXPECT_EQ(emu_->hub->control("/state")["counters"].value("cdn_auth_violations", 0), 0);
  // Once stored, the batch API asks for nothing more.
  auto again = w.batch("main", {{f.content.sha256, f.content.size}});
  ASSERT_TRUE(again);
  EXPECT_TRUE((*again)[0].stored);
}

TEST_F(HubWriterTest, MultipartResendsOnlyThePartThatFailed) {
  emu_->hub->control("/config", {{"multipart_threshold", 1 << 20}, {"multipart_chunk", 256 << 10}});
  HubWriter w(emu_->config());
  const WheelFacts f = wheel("2.0", (1 << 20) + 5000);  // 5 parts
  // The first storage request (part 1) is reset after 100 KB of its body.
  emu_->hub->fault({{"kind", "reset"},
                    {"server", "cdn"},
                    {"method", "PUT"},
                    {"path", "^/lfs-upload/"},
                    {"after_bytes", 100000},
                    {"count", 1}});
  auto c = publish_one(w, f, "demo_pkg/big/" + f.file_name, emu_->head());
  ASSERT_TRUE(c) << c.error().message;
  std::map<int, int> tries;
  for (const auto& e : emu_->ops("storage-part")) tries[e["part"].get<int>()]++;
  EXPECT_EQ(tries, (std::map<int, int>{{1, 2}, {2, 1}, {3, 1}, {4, 1}, {5, 1}}));
  EXPECT_EQ(emu_->ops("complete-multipart").size(), 1u);
  EXPECT_FALSE(emu_->ops("complete-multipart")[0]["auth"].get<bool>());
  EXPECT_EQ(w.stats().parts, 5u);
  EXPECT_EQ(w.stats().retries, 1u);
  EXPECT_EQ(w.stats().bytes_uploaded, f.content.size);
}

TEST_F(HubWriterTest, AStalledUploadIsRetriedOnAFreshConnection) {
  HubWriter w(emu_->config());
  const WheelFacts f = wheel("3.0", 200000);
  emu_->hub->fault({{"kind", "stall_body"},
                    {"server", "cdn"},
                    {"method", "PUT"},
                    {"path", "^/lfs-upload/"},
                    {"after_bytes", 50000},
                    {"count", 1}});
  auto c = publish_one(w, f, "demo_pkg/stall/" + f.file_name, emu_->head());
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(w.stats().retries, 1u);
}

TEST_F(HubWriterTest, AStorageHostThatKeepsFailingFailsCleanly) {
  HubWriter w(emu_->config());
  const WheelFacts f = wheel("4.0", 100000);
  const std::string before = emu_->head();
  emu_->hub->fault({{"kind", "status"},
                    {"status", 503},
                    {"server", "cdn"},
                    {"method", "PUT"},
                    {"path", "^/lfs-upload/"}});
  auto c = publish_one(w, f, "demo_pkg/fail/" + f.file_name, before);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().kind, PublishError::Kind::kFailed);
  EXPECT_EQ(c.error().message, "upload of demo_pkg/fail/" + f.file_name +
                                   ": the storage host answered HTTP 503 (gave up after 3 tries)");
  std::size_t puts = 0;
  for (const auto& e : emu_->hub->log()) puts += e["server"] == "cdn" && e["method"] == "PUT";
  EXPECT_EQ(puts, 3u);
  EXPECT_TRUE(emu_->ops("commit").empty());
  EXPECT_EQ(emu_->head(), before);
}

TEST_F(HubWriterTest, TransientHubErrorsAreRetried) {
  HubWriter w(emu_->config());
  emu_->hub->fault({{"kind", "status"},
                    {"status", 502},
                    {"server", "hub"},
                    {"path", "/preupload/"},
                    {"count", 2}});
  auto modes = w.preupload("main", {{"x/y.whl", 3, std::string("PK\0", 3)}});
  ASSERT_TRUE(modes) << modes.error().message;
  EXPECT_EQ(w.stats().retries, 2u);
}

TEST_F(HubWriterTest, ARacingCommitMakesTheParentStale) {
  HubWriter w(emu_->config());
  const WheelFacts f = wheel("5.0", 50000);
  emu_->hub->fault(
      {{"kind", "branch_moved"}, {"server", "hub"}, {"path", "/commit/"}, {"count", 1}});
  auto c = publish_one(w, f, "demo_pkg/race/" + f.file_name, emu_->head());
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().kind, PublishError::Kind::kStale);
  EXPECT_NE(c.error().message.find("The branch was updated"), std::string::npos);
}

TEST_F(HubWriterTest, TokensThatCannotWrite) {
  HubWriter none(emu_->config(""));
  auto r = none.ready();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, PublishError::Kind::kDenied);
  EXPECT_NE(r.error().message.find("no token (looked in token_file option"), std::string::npos);

  HubWriter reader(emu_->config("hf_r"));
  ASSERT_TRUE(reader.ready());
  auto ro = reader.preupload("main", {{"x/y.whl", 3, "abc"}});
  ASSERT_FALSE(ro);
  EXPECT_EQ(ro.error().kind, PublishError::Kind::kDenied);
  EXPECT_EQ(ro.error().message,
            "preupload: the token from token_file option (" + emu_->token_file("hf_r") +
                ") can only read; publishing needs a token with write access (Hub: you must use "
                "a write token to upload to a repository)");

  HubWriter gated(emu_->config("hf_w", "acme/gated"));
  auto g = gated.preupload("main", {{"x/y.whl", 3, "abc"}});
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().kind, PublishError::Kind::kDenied);
  EXPECT_NE(g.error().message.find("gated repository"), std::string::npos);

  HubWriter hidden(emu_->config("hf_w", "acme/private"));
  auto p = hidden.preupload("main", {{"x/y.whl", 3, "abc"}});
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().kind, PublishError::Kind::kNotFound);

  WriterConfig c = emu_->config("hf_w");
  c.transport.endpoint =
      "http://192.0.2.1:8080";  // plain http, not this machine: checked before sending
  HubWriter far(c);
  auto insecure = far.ready();
  ASSERT_FALSE(insecure);
  EXPECT_EQ(insecure.error().message,
            "the endpoint http://192.0.2.1:8080 is plain http on another machine: the token is "
            "not sent in clear text");
}

TEST_F(HubWriterTest, NoBranchToCommitTo) {
  HubWriter w(emu_->config());
  auto r = w.preupload("v1.0", {{"x/y.whl", 3, "abc"}});  // a tag
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, PublishError::Kind::kNotFound);
  EXPECT_EQ(r.error().message,
            "preupload: no such branch to commit to (Hub: Invalid rev id: v1.0)");
}

}  // namespace
}  // namespace whfs::publish
