#include "fs/reader/readahead.h"

#include <gtest/gtest.h>

namespace whfs::reader {
namespace {

constexpr std::uint64_t MiB = 1 << 20;

ReadaheadConfig cfg() {
  ReadaheadConfig c;
  c.initial_window = 1 * MiB;
  c.max_window = 8 * MiB;
  c.zip_tail = 128 * 1024;
  c.whole_file_max = 512 * MiB;
  return c;
}

TEST(Readahead, SequentialReadsGrowTheWindowUpToTheMaximum) {
  Readahead ra(cfg(), 100 * MiB, false);
  auto p = ra.on_read(0, MiB);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->offset, MiB);
  EXPECT_EQ(p->length, MiB);
  std::uint64_t fetched_until = p->offset + p->length;
  for (std::uint64_t off = MiB; off < 20 * MiB; off += MiB) {
    auto q = ra.on_read(off, MiB);
    if (q) {
      EXPECT_EQ(q->offset, fetched_until);  // never asks twice for the same bytes
      fetched_until = q->offset + q->length;
    }
  }
  EXPECT_EQ(ra.window(), 8 * MiB);
  EXPECT_LE(fetched_until, 20 * MiB + 8 * MiB);
}

TEST(Readahead, AJumpResetsTheWindow) {
  Readahead ra(cfg(), 100 * MiB, false);
  ra.on_read(0, MiB);
  ra.on_read(MiB, MiB);
  EXPECT_GT(ra.window(), 0u);
  EXPECT_FALSE(ra.on_read(50 * MiB, 4096));
  EXPECT_EQ(ra.window(), 0u);
  // Sequential again from there: a second read in a row starts the window (one near read
  // after a jump may be chance).
  EXPECT_FALSE(ra.on_read(50 * MiB + 4096, 4096));
  EXPECT_TRUE(ra.on_read(50 * MiB + 8192, 4096));
}

TEST(Readahead, ReadsArrivingSlightlyOutOfOrderStaySequential) {
  Readahead ra(cfg(), 100 * MiB, false);
  ra.on_read(0, 128 * 1024);
  // The kernel's async reads: 256K before 128K, then 512K, then 384K.
  for (std::uint64_t off : {256 * 1024, 128 * 1024, 512 * 1024, 384 * 1024})
    ra.on_read(off, 128 * 1024);
  EXPECT_GT(ra.window(), 1 * MiB);
}

TEST(Readahead, RandomReadsFetchNothingAhead) {
  Readahead ra(cfg(), 256 * MiB, true);
  for (std::uint64_t off : {7 * MiB, 100 * MiB, 3 * MiB, 200 * MiB, 50 * MiB}) {
    EXPECT_FALSE(ra.on_read(off, 4096)) << off;
  }
}

TEST(Readahead, AZipReaderStartingAtTheTailGetsTheWholeWheel) {
  Readahead ra(cfg(), 64 * MiB, true);
  auto p = ra.on_read(64 * MiB - 22, 22);  // the end-of-central-directory record
  ASSERT_TRUE(p);
  EXPECT_EQ(p->offset, 0u);
  EXPECT_EQ(p->length, 64 * MiB);
  EXPECT_FALSE(ra.on_read(0, MiB));  // already asked for everything
}

TEST(Readahead, OnlyWheelsAndOnlyTheFirstReadTriggerTheWholeFile) {
  Readahead not_wheel(cfg(), 64 * MiB, false);
  EXPECT_FALSE(not_wheel.on_read(64 * MiB - 22, 22));
  Readahead later(cfg(), 64 * MiB, true);
  later.on_read(10 * MiB, 4096);
  EXPECT_FALSE(later.on_read(64 * MiB - 22, 22));
  Readahead huge(cfg(), 600 * MiB, true);
  EXPECT_FALSE(huge.on_read(600 * MiB - 22, 22));
}

}  // namespace
}  // namespace whfs::reader
