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
  ASSERT_TRUE(cache_->put_revision("https://hf.co", "org/r", "main", "c1", t1));
  ASSERT_TRUE(cache_->put_revision("https://mirror", "org/r", "main", "c9", t1));
  ASSERT_TRUE(cache_->put_revision("https://hf.co", "org/r", "main", "c2", t2));
  reopen();
  EXPECT_EQ(cache_->get_revision("https://hf.co", "org/r", "main").value(),
            (RevisionRecord{"c2", t2}));
  EXPECT_EQ(cache_->get_revision("https://mirror", "org/r", "main").value(),
            (RevisionRecord{"c9", t1}));
  EXPECT_FALSE(cache_->get_revision("https://hf.co", "org/r", "dev").value());
}

TEST_F(MetadataTest, ListingRoundTrip) {
  const auto listing = testing::Fixture::listing();
  const std::string long_folder(1000, 'd');
  ASSERT_TRUE(cache_->put_listing("https://hub.example", "org/r", "c1", "simple", listing));
  ASSERT_TRUE(cache_->put_listing("https://hub.example", "org/r", "c1", long_folder, listing));
  ASSERT_TRUE(cache_->put_listing("https://hub.example", "org/r", "c1", "empty", {}));
  reopen();
  EXPECT_EQ(cache_->get_listing("https://hub.example", "org/r", "c1", "simple").value(), listing);
  EXPECT_EQ(cache_->get_listing("https://hub.example", "org/r", "c1", long_folder).value(),
            listing);
  EXPECT_EQ(cache_->get_listing("https://hub.example", "org/r", "c1", "empty").value(),
            std::vector<RemoteEntry>{});
  EXPECT_FALSE(cache_->get_listing("https://hub.example", "org/r", "c2", "simple").value());
}

TEST_F(MetadataTest, ListingsAreKeptPerEndpoint) {
  // A listing fetched through one endpoint (a plain-http site cache, say) is never what a
  // mount of another endpoint gets for the same repo and commit.
  const auto listing = testing::Fixture::listing();
  ASSERT_TRUE(cache_->put_listing("http://site-cache:8080", "org/r", "c1", "", listing));
  EXPECT_FALSE(cache_->get_listing("https://huggingface.co", "org/r", "c1", "").value());
  EXPECT_EQ(cache_->get_listing("http://site-cache:8080", "org/r", "c1", "").value(), listing);
}

TEST_F(MetadataTest, GarbageRecordIsAMiss) {
  ASSERT_TRUE(cache_->put_listing("https://hub.example", "org/r", "c1", "simple",
                                  testing::Fixture::listing()));
  cache_.reset();
  testing::put_raw(dir_.path(), kListingsDb,
                   metadata_key({"https://hub.example", "org/r", "c1", "simple"}).key,
                   std::string("\x01\xff\xff\xff\x7fgarbage", 12));
  testing::put_raw(dir_.path(), kRevisionsDb, metadata_key({"e", "org/r", "main"}).key, "x");
  reopen();
  auto listing = cache_->get_listing("https://hub.example", "org/r", "c1", "simple");
  ASSERT_TRUE(listing);
  EXPECT_FALSE(*listing);
  auto rev = cache_->get_revision("e", "org/r", "main");
  ASSERT_TRUE(rev);
  EXPECT_FALSE(*rev);
  // And it can be written again.
  ASSERT_TRUE(cache_->put_listing("https://hub.example", "org/r", "c1", "simple", {}));
  EXPECT_TRUE(cache_->get_listing("https://hub.example", "org/r", "c1", "simple").value());
}

}  // namespace
}  // namespace whfs::cache
