#include "fs/reader/block_math.h"

#include <gtest/gtest.h>

namespace whfs::reader {
namespace {

TEST(BlockMath, BlocksForClipsAtTheEnd) {
  EXPECT_EQ(blocks_for(0, 1, 100, 10), (BlockRange{0, 1}));
  EXPECT_EQ(blocks_for(9, 2, 100, 10), (BlockRange{0, 2}));    // straddles an edge
  EXPECT_EQ(blocks_for(10, 10, 100, 10), (BlockRange{1, 1}));  // exactly one block
  EXPECT_EQ(blocks_for(95, 100, 100, 10), (BlockRange{9, 1}));
  EXPECT_EQ(blocks_for(100, 10, 100, 10), (BlockRange{}));  // at EOF
  EXPECT_EQ(blocks_for(5, 0, 100, 10), (BlockRange{}));
  EXPECT_EQ(blocks_for(0, 100, 95, 10), (BlockRange{0, 10}));  // short last block
  EXPECT_EQ(block_count(95, 10), 10u);
  EXPECT_EQ(block_count(0, 10), 0u);
}

TEST(BlockMath, CoalesceGroupsRunsUpToAMaximum) {
  EXPECT_EQ(coalesce({1, 2, 3, 7, 8, 20}, 100), (std::vector<BlockRange>{{1, 3}, {7, 2}, {20, 1}}));
  EXPECT_EQ(coalesce({0, 1, 2, 3, 4}, 2), (std::vector<BlockRange>{{0, 2}, {2, 2}, {4, 1}}));
  EXPECT_TRUE(coalesce({}, 4).empty());
  EXPECT_EQ(split({3, 5}, 2), (std::vector<BlockRange>{{3, 2}, {5, 2}, {7, 1}}));
}

}  // namespace
}  // namespace whfs::reader
