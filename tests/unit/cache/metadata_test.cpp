// Persisted metadata: revisions and listings, through the cache.

#include <gtest/gtest.h>

#include "cache/block_cache.h"
#include "cache/metadata_codec.h"
#include "cache/records.h"
#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

using testing::TempDir;
using Clock = std::chrono::system_clock;

class MetadataTest : public ::testing::Test {
 protected:
  void SetUp() override { reopen(); }
  void reopen() {
    cache_.reset();
    cache_ = testing::open_or_die(testing::test_options(dir_.path()));
  }
  TempDir dir_;
  std::unique_ptr<BlockCache> cache_;
};

TEST_F(MetadataTest, RevisionRoundTripAndOverwrite) {
  const auto t1 = Clock::time_point(std::chrono::milliseconds(1700000000000));
  const auto t2 = t1 + std::chrono::minutes(5);
  ASSERT_TRUE(cache_->put_revision("https://hf.co", "org/r", "main", testing::kPublic, "c1", t1));
  ASSERT_TRUE(cache_->put_revision("https://mirror", "org/r", "main", testing::kPublic, "c9", t1));
  ASSERT_TRUE(cache_->put_revision("https://hf.co", "org/r", "main", testing::kPublic, "c2", t2));
  reopen();
  EXPECT_EQ(cache_->get_revision("https://hf.co", "org/r", "main", testing::kPublicOnly).value(),
            (RevisionRecord{"c2", t2, "public"}));
  EXPECT_EQ(cache_->get_revision("https://mirror", "org/r", "main", testing::kPublicOnly).value(),
            (RevisionRecord{"c9", t1, "public"}));
  EXPECT_FALSE(cache_->get_revision("https://hf.co", "org/r", "dev", testing::kPublicOnly).value());
}

TEST_F(MetadataTest, ListingRoundTrip) {
  const auto listing = testing::Fixture::listing();
  const std::string long_folder(1000, 'd');
  ASSERT_TRUE(cache_->put_listing("https://hub.example", "org/r", "c1", "simple", testing::kPublic,
                                  listing));
  ASSERT_TRUE(cache_->put_listing("https://hub.example", "org/r", "c1", long_folder,
                                  testing::kPublic, listing));
  ASSERT_TRUE(
      cache_->put_listing("https://hub.example", "org/r", "c1", "empty", testing::kPublic, {}));
  reopen();
  EXPECT_EQ(
      cache_->get_listing("https://hub.example", "org/r", "c1", "simple", testing::kPublicOnly)
          .value(),
      listing);
  EXPECT_EQ(
      cache_->get_listing("https://hub.example", "org/r", "c1", long_folder, testing::kPublicOnly)
          .value(),
      listing);
  EXPECT_EQ(cache_->get_listing("https://hub.example", "org/r", "c1", "empty", testing::kPublicOnly)
                .value(),
            std::vector<RemoteEntry>{});
  EXPECT_FALSE(
      cache_->get_listing("https://hub.example", "org/r", "c2", "simple", testing::kPublicOnly)
          .value());
}

TEST_F(MetadataTest, ListingsAreKeptPerEndpoint) {
  // A listing fetched through one endpoint (a plain-http site cache, say) is never what a
  // mount of another endpoint gets for the same repo and commit.
  const auto listing = testing::Fixture::listing();
  ASSERT_TRUE(
      cache_->put_listing("http://site-cache:8080", "org/r", "c1", "", testing::kPublic, listing));
  EXPECT_FALSE(
      cache_->get_listing("https://huggingface.co", "org/r", "c1", "", testing::kPublicOnly)
          .value());
  EXPECT_EQ(cache_->get_listing("http://site-cache:8080", "org/r", "c1", "", testing::kPublicOnly)
                .value(),
            listing);
}

TEST_F(MetadataTest, GarbageRecordIsAMiss) {
  ASSERT_TRUE(cache_->put_listing("https://hub.example", "org/r", "c1", "simple", testing::kPublic,
                                  testing::Fixture::listing()));
  cache_.reset();
  testing::put_raw(dir_.path(), kListingsDb,
                   metadata_key({"https://hub.example", "org/r", "c1", "simple", "public"}).key,
                   std::string("\x01\xff\xff\xff\x7fgarbage", 12));
  testing::put_raw(dir_.path(), kRevisionsDb, metadata_key({"e", "org/r", "main", "public"}).key,
                   "x");
  reopen();
  auto listing =
      cache_->get_listing("https://hub.example", "org/r", "c1", "simple", testing::kPublicOnly);
  ASSERT_TRUE(listing);
  EXPECT_FALSE(*listing);
  auto rev = cache_->get_revision("e", "org/r", "main", testing::kPublicOnly);
  ASSERT_TRUE(rev);
  EXPECT_FALSE(*rev);
  // And it can be written again.
  ASSERT_TRUE(
      cache_->put_listing("https://hub.example", "org/r", "c1", "simple", testing::kPublic, {}));
  EXPECT_TRUE(
      cache_->get_listing("https://hub.example", "org/r", "c1", "simple", testing::kPublicOnly)
          .value());
}

TEST_F(MetadataTest, ARecordIsSeenOnlyByItsAudience) {
  // What a mount with a token fetched from a private repository is its audience's alone; a
  // mount without it (public only) finds nothing, offline or not.
  const std::string alice = credential_audience("https://hf.co", "hf_alice");
  const std::string bob = credential_audience("https://hf.co", "hf_bob");
  ASSERT_NE(alice, bob);
  EXPECT_EQ(credential_audience("https://hf.co", ""), "public");
  EXPECT_NE(credential_audience("https://mirror", "hf_alice"), alice);  // per endpoint
  EXPECT_EQ(alice.find("hf_alice"), std::string::npos);                 // never the token
  const auto t = Clock::time_point(std::chrono::milliseconds(1700000000000));
  const auto listing = testing::Fixture::listing();
  ASSERT_TRUE(
      cache_->put_revision("https://hf.co", "acme/secret", "main", Audience(alice), "c1", t));
  ASSERT_TRUE(
      cache_->put_listing("https://hf.co", "acme/secret", "c1", "", Audience(alice), listing));
  ASSERT_TRUE(cache_->put_wheel_metadata("sha256:ab", Audience(alice), {"Name: x\n", true}));
  reopen();
  const AccessScope as_alice(alice), as_bob(bob), as_nobody("public");
  for (const AccessScope* other : {&as_bob, &as_nobody}) {
    EXPECT_FALSE(
        cache_->get_revision("https://hf.co", "acme/secret", "main", other->readable()).value());
    EXPECT_FALSE(
        cache_->get_listing("https://hf.co", "acme/secret", "c1", "", other->readable()).value());
    EXPECT_FALSE(cache_->get_wheel_metadata("sha256:ab", other->readable()).value());
  }
  auto rev = cache_->get_revision("https://hf.co", "acme/secret", "main", as_alice.readable());
  ASSERT_TRUE(rev && *rev);
  EXPECT_EQ((*rev)->audience, alice);
  EXPECT_EQ(
      cache_->get_listing("https://hf.co", "acme/secret", "c1", "", as_alice.readable()).value(),
      listing);
  EXPECT_TRUE(cache_->get_wheel_metadata("sha256:ab", as_alice.readable()).value());

  // A public record is everybody's, a token holder's included; its own comes first.
  ASSERT_TRUE(cache_->put_revision("https://hf.co", "org/pub", "main", testing::kPublic, "p1", t));
  for (const AccessScope* any : {&as_alice, &as_bob, &as_nobody}) {
    auto pub = cache_->get_revision("https://hf.co", "org/pub", "main", any->readable());
    ASSERT_TRUE(pub && *pub);
    EXPECT_EQ((*pub)->commit, "p1");
    EXPECT_EQ((*pub)->audience, "public");
  }
  ASSERT_TRUE(cache_->put_revision("https://hf.co", "org/pub", "main", Audience(alice), "p2", t));
  EXPECT_EQ(
      cache_->get_revision("https://hf.co", "org/pub", "main", as_alice.readable()).value()->commit,
      "p2");
  EXPECT_EQ(
      cache_->get_revision("https://hf.co", "org/pub", "main", as_bob.readable()).value()->commit,
      "p1");
}

TEST_F(MetadataTest, ARecordOfACacheMadeBeforeAudiencesIsAMiss) {
  // Keys without an audience (caches of earlier versions) are never found: whose they were
  // cannot be told. A listing is listed again; a revision resolved again.
  const auto listing = testing::Fixture::listing();
  cache_.reset();
  testing::put_raw(
      dir_.path(), kListingsDb, metadata_key({"https://hub.example", "org/r", "c1", ""}).key,
      encode_listing(metadata_key({"https://hub.example", "org/r", "c1", ""}), listing));
  reopen();
  EXPECT_FALSE(
      cache_->get_listing("https://hub.example", "org/r", "c1", "", testing::kPublicOnly).value());
}

TEST_F(MetadataTest, GrantsAreKeptPerAudienceAndContent) {
  const auto id = testing::sha256_of(testing::Fixture::lfs_bytes());
  const AccessScope alice(credential_audience("https://hf.co", "hf_alice"));
  const AccessScope bob(credential_audience("https://hf.co", "hf_bob"));
  const AccessScope nobody("public");
  EXPECT_FALSE(cache_->granted(id, alice.readable()).value());
  ASSERT_TRUE(cache_->grant(id, alice.write()));
  reopen();
  EXPECT_TRUE(cache_->granted(id, alice.readable()).value());
  EXPECT_FALSE(cache_->granted(id, bob.readable()).value());
  EXPECT_FALSE(cache_->granted(id, nobody.readable()).value());
  ASSERT_TRUE(cache_->grant(id, testing::kPublic));
  EXPECT_TRUE(cache_->granted(id, bob.readable()).value());
  EXPECT_TRUE(cache_->granted(id, nobody.readable()).value());
}

}  // namespace
}  // namespace whfs::cache
