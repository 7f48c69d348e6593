#include "cache/content_id.h"

#include <gtest/gtest.h>

#include <unordered_set>

namespace whfs::cache {
namespace {

constexpr const char* kSha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr const char* kGit = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391";

TEST(ContentIdTest, HexRoundTrip) {
  auto a = ContentId::from_hex(ContentId::Kind::kSha256, kSha);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->hex(), kSha);
  EXPECT_EQ(a->digest().size(), 32u);
  auto b = ContentId::from_hex(ContentId::Kind::kGitSha1, kGit);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->hex(), kGit);
  EXPECT_EQ(b->digest().size(), 20u);
  EXPECT_EQ(ContentId::parse(a->to_string()), a);
  EXPECT_EQ(ContentId::parse(b->to_string()), b);
  EXPECT_EQ(a->to_string(), std::string("sha256:") + kSha);
}

TEST(ContentIdTest, RejectsBadHex) {
  EXPECT_FALSE(ContentId::from_hex(ContentId::Kind::kSha256, kGit));  // wrong length
  EXPECT_FALSE(ContentId::from_hex(ContentId::Kind::kGitSha1, kSha));
  EXPECT_FALSE(
      ContentId::from_hex(ContentId::Kind::kGitSha1, "zz9de29bb2d1d6434b8b29ae775ad8c2e48c5391"));
  EXPECT_FALSE(ContentId::parse("md5:abc"));
  EXPECT_FALSE(ContentId::parse(std::string("sha256:") + kGit));
  const std::uint8_t short_digest[3] = {1, 2, 3};
  EXPECT_FALSE(ContentId::from_digest(ContentId::Kind::kSha256, short_digest));
}

TEST(ContentIdTest, OfRemoteEntry) {
  RemoteEntry lfs;
  lfs.path = "a/b.whl";
  lfs.oid = kGit;
  lfs.lfs_sha256 = kSha;
  EXPECT_EQ(ContentId::of(lfs)->kind(), ContentId::Kind::kSha256);
  EXPECT_EQ(ContentId::of(lfs)->hex(), kSha);

  RemoteEntry plain = lfs;
  plain.lfs_sha256.clear();
  EXPECT_EQ(ContentId::of(plain)->kind(), ContentId::Kind::kGitSha1);
  EXPECT_EQ(ContentId::of(plain)->hex(), kGit);

  RemoteEntry dir = plain;
  dir.type = RemoteEntry::Type::kDirectory;
  EXPECT_FALSE(ContentId::of(dir));

  RemoteEntry broken = plain;
  broken.oid = "not-hex";
  EXPECT_FALSE(ContentId::of(broken));
}

TEST(ContentIdTest, EqualityAndHashSeparateKinds) {
  auto a = *ContentId::from_hex(ContentId::Kind::kSha256, kSha);
  auto b = *ContentId::from_hex(ContentId::Kind::kGitSha1, kGit);
  std::unordered_set<ContentId> set{a, b, a};
  EXPECT_EQ(set.size(), 2u);
  EXPECT_FALSE(a == b);
}

}  // namespace
}  // namespace whfs::cache
