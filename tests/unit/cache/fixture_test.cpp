// The golden fixture: a store of the current format, made by `cache_test_helper make-fixture
// tests/unit/cache/data`. If this fails after a change to cache/records.h or
// cache/metadata_codec.h, the on-disk format changed: bump kFormatName on purpose, decide what
// happens to existing caches, and regenerate the fixture.
//
// Regenerated for records keyed by their audience (cache/audience.h): kept at format /1, since
// blocks and contents did not change and a record stored under an older key is only a miss
// (one request), not an error (metadata_test.cpp checks that).

#include <gtest/gtest.h>
#include <unistd.h>

#include "cache/block_cache.h"
#include "cache/records.h"
#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

namespace fs = std::filesystem;
using F = testing::Fixture;

TEST(FixtureTest, CurrentFormatOpensAndServesItsContents) {
  if (::sysconf(_SC_PAGESIZE) != 4096) GTEST_SKIP() << "the fixture is made with 4 KiB pages";
  const fs::path golden = fs::path(WHFS_CACHE_FIXTURE_DIR) / "data.mdb";
  ASSERT_TRUE(fs::exists(golden)) << "missing " << golden
                                  << "; regenerate it: cache_test_helper make-fixture "
                                  << WHFS_CACHE_FIXTURE_DIR;
  testing::TempDir dir;
  fs::copy_file(golden, dir / "data.mdb");
  auto opened = BlockCache::open(testing::test_options(dir.path(), 0, 8));
  ASSERT_TRUE(opened) << opened.error().message;
  BlockCache& c = **opened;
  EXPECT_EQ(c.block_size(), 4072u);  // recorded in the store, not taken from the options
  EXPECT_EQ(c.stats()->cap_bytes, F::kCap);

  const auto lfs = F::lfs_bytes();
  const auto lfs_id = testing::sha256_of(lfs);
  EXPECT_EQ(c.content_state(lfs_id).value(), (ContentState{3, 3, true}));
  EXPECT_EQ(testing::read_all(c, lfs_id, lfs.size()), lfs);
  const auto plain = F::plain_bytes();
  const auto plain_id = testing::git_blob_of(plain);
  EXPECT_EQ(c.content_state(plain_id).value(), (ContentState{1, 1, false}));
  EXPECT_EQ(testing::read_all(c, plain_id, plain.size()), plain);

  auto rev = c.get_revision(F::kEndpoint, F::kRepo, F::kRev, testing::kPublicOnly);
  ASSERT_TRUE(rev && *rev);
  EXPECT_EQ((*rev)->commit, F::kCommit);
  EXPECT_EQ((*rev)->resolved_at,
            std::chrono::system_clock::time_point(std::chrono::milliseconds(F::kResolvedMs)));
  auto listing = c.get_listing(F::kEndpoint, F::kRepo, F::kCommit, "", testing::kPublicOnly);
  ASSERT_TRUE(listing && *listing);
  EXPECT_EQ(**listing, F::listing());

  const auto st = c.stats().value();
  EXPECT_EQ(st.usage.contents, 2u);
  EXPECT_EQ(st.usage.blocks, 4u);
  EXPECT_EQ(st.usage.payload_bytes, lfs.size() + plain.size());
  EXPECT_EQ(st.counters.corrupt_blocks, 0u);
}

}  // namespace
}  // namespace whfs::cache
