// One whole publish against the Hub emulator: what is already there, conflicts and --replace,
// a branch that moves under the publish, and the repository or branch missing.
#include "fs/publish/publisher.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "tests/unit/publish/emulator.h"

namespace whfs::publish {
namespace {

using check::Action;
using check::inspect_wheel;

class PublisherTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { emu_ = new test::Emulator(); }
  static void TearDownTestSuite() { delete emu_; }
  void SetUp() override { emu_->hub->clear_log(); }
  void TearDown() override { emu_->hub->clear_faults(); }

  PublishItem item(const std::string& version, const std::string& payload,
                   const std::string& folder = "demo_pkg/sm89/torch2.9-cu128") {
    auto members = test::wheel_members("demo_pkg", version, "py3-none-any", payload);
    const std::string file = "demo_pkg-" + version + "-py3-none-any.whl";
    auto w = inspect_wheel(test::write_wheel(dir_.path(), file, members));
    EXPECT_TRUE(w) << w.error();
    return PublishItem{*w, folder + "/" + file};
  }

  Expected<PublishResult, PublishError> run(const std::vector<PublishItem>& items,
                                            bool replace = false,
                                            const std::string& repo = test::kRepo,
                                            const std::string& branch = "main") {
    const WriterConfig wc = emu_->config("hf_w", repo);
    hub::HubClientConfig rc;
    rc.transport.endpoint = wc.transport.endpoint;
    rc.transport.token_file = wc.transport.token_file;
    rc.transport.retry = wc.transport.retry;
    rc.repo = wc.repo;
    auto reader = hub::make_hub_client(rc);
    HubWriter writer(wc);
    Publisher p(*reader, writer);
    return p.publish(items, PublishRequest{branch, replace, "Publish", "test"});
  }

  static test::Emulator* emu_;
  whfs::test::TempDir dir_{"publish-publisher"};
};

test::Emulator* PublisherTest::emu_ = nullptr;

TEST_F(PublisherTest, PublishedOnceThenNothingToDo) {
  const PublishItem one = item("1.0", "one");
  PublishItem two = one;  // the same file, checked once, for a second folder
  two.path = "demo_pkg/sm80/torch2.9-cu128/" + one.wheel.file_name;
  const std::vector<PublishItem> items = {one, two};
  const std::string before = emu_->head();
  auto r = run(items);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(r->commit);
  EXPECT_EQ(r->survey.head, before);
  EXPECT_EQ(r->commit->commit, emu_->head());
  EXPECT_EQ(emu_->ops("commit").size(), 1u);       // both files in one commit
  EXPECT_EQ(emu_->ops("storage-put").size(), 1u);  // one object for two paths

  emu_->hub->clear_log();
  auto again = run(items);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_FALSE(again->commit);
  for (const auto& d : again->survey.decisions) EXPECT_EQ(d.action, Action::kSame);
  EXPECT_TRUE(emu_->ops("preupload").empty());  // reads only
}

// What is sent is the file that was checked: a wheel replaced at its path after the check is
// not read by name (the checked file is sent), and one written into after the check is
// refused before anything is committed.
TEST_F(PublisherTest, TheCheckedCopyIsTheOneSent) {
  PublishItem swapped = item("4.0", "checked");
  const auto path = swapped.wheel.local;
  // Another file renamed over the path: the open file is still the checked one.
  const auto other = test::write_wheel(
      dir_.path(), "other.whl",
      test::wheel_members("demo_pkg", "4.0", "py3-none-any", "not the one checked"));
  std::filesystem::rename(other, path);
  auto r = run({swapped});
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(r->commit);
  const auto put = emu_->ops("storage-put");
  ASSERT_EQ(put.size(), 1u);
  const std::string head = emu_->head();

  PublishItem written = item("4.1", "checked too");
  {
    std::FILE* f = std::fopen(written.wheel.local.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fputs("PK", f);  // the same bytes, written again: the file changed all the same
    std::fclose(f);
  }
  auto refused = run({written});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("changed after it was checked"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(emu_->head(), head);  // nothing committed
}

TEST_F(PublisherTest, AnotherFileThereIsRefusedUnlessReplacing) {
  ASSERT_TRUE(run({item("2.0", "first")}));
  const std::string head = emu_->head();
  emu_->hub->clear_log();
  auto refused = run({item("2.0", "second")});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, PublishError::Kind::kConflict);
  EXPECT_NE(refused.error().message.find("another file is there"), std::string::npos);
  EXPECT_TRUE(emu_->ops("preupload").empty());  // nothing sent
  EXPECT_EQ(emu_->head(), head);
  auto replaced = run({item("2.0", "second")}, true);
  ASSERT_TRUE(replaced) << replaced.error().message;
  EXPECT_EQ(replaced->survey.decisions[0].action, Action::kReplace);
  EXPECT_EQ(replaced->commit->commit, emu_->head());
}

TEST_F(PublisherTest, ABranchThatMovesIsPlannedAgainOnce) {
  emu_->hub->fault(
      {{"kind", "branch_moved"}, {"server", "hub"}, {"path", "/commit/"}, {"count", 1}});
  const std::string before = emu_->head();
  auto r = run({item("3.0", "raced")});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->replans, 1);
  EXPECT_NE(r->survey.head, before);  // planned again against the commit that raced in
  EXPECT_EQ(emu_->ops("commit").size(), 2u);
  EXPECT_EQ(emu_->ops("storage-put").size(), 1u);  // the object was not sent again

  emu_->hub->fault(
      {{"kind", "branch_moved"}, {"server", "hub"}, {"path", "/commit/"}, {"count", 2}});
  const std::string head = emu_->head();
  auto twice = run({item("3.1", "raced twice")});
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().kind, PublishError::Kind::kFailed);
  EXPECT_NE(twice.error().message.find("moved again while publishing; nothing was committed"),
            std::string::npos);
  // Only the two racing commits landed, not ours.
  const auto log = emu_->ops("commit");
  EXPECT_EQ(log.back()["status"], 412);
}

TEST_F(PublisherTest, RepositoryOrBranchMissing) {
  auto repo = run({item("4.0", "x")}, false, "acme/nothing");
  ASSERT_FALSE(repo);
  EXPECT_EQ(repo.error().kind, PublishError::Kind::kNotFound);
  EXPECT_EQ(repo.error().message,
            "repository acme/nothing not found, or private and the token from token_file option (" +
                emu_->token_file("hf_w") + ") has no access to it");
  auto branch = run({item("4.0", "x")}, false, test::kRepo, "nobranch");
  ASSERT_FALSE(branch);
  EXPECT_EQ(branch.error().kind, PublishError::Kind::kNotFound);
  EXPECT_EQ(branch.error().message, "the repository acme/wheels has no branch nobranch");
}

}  // namespace
}  // namespace whfs::publish
