// Repo references and the endpoint, as users and the environment give them.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "fs/hub/hub_client.h"

namespace whfs::hub {
namespace {

TEST(RepoRef, ParsesAndValidates) {
  auto d = parse_repo_ref("DoctorPopi/python_wheelhouse");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->type, RepoType::kDataset);
  EXPECT_EQ(parse_repo_ref("models/org/m")->type, RepoType::kModel);
  EXPECT_EQ(parse_repo_ref("datasets/a/b")->id, "a/b");
  for (const char* bad : {"", "a", "a/b/c", "/b", "a/", "a/b c", "a--x/b", "a/..b", "-a/b", "a/b.",
                          "a/b?x", "a/b#y", "a/\xc3\xa9"}) {
    EXPECT_FALSE(parse_repo_ref(bad)) << bad;
  }
}

TEST(Endpoint, OptionThenEnvThenDefault) {
  ::unsetenv("HF_ENDPOINT");
  EXPECT_EQ(resolve_endpoint(""), "https://huggingface.co");
  ::setenv("HF_ENDPOINT", "http://mirror.local:8080/", 1);
  EXPECT_EQ(resolve_endpoint(""), "http://mirror.local:8080");
  EXPECT_EQ(resolve_endpoint("http://opt//"), "http://opt");
  ::unsetenv("HF_ENDPOINT");
}

}  // namespace
}  // namespace whfs::hub
