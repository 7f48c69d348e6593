// StoredCopy: values read in a txn, copied out of the data file rather than through the map.

#include "cache/stored_copy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/cache/test_support.h"

namespace whfs::cache {
namespace {

using testing::make_bytes;
using testing::TempDir;

std::span<const std::byte> stored_value_key(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

class StoredCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = lmdb::Env::open(dir_.path().string(), {.map_size = 16 << 20, .flags = MDB_NOSYNC});
    ASSERT_TRUE(e) << e.error().message();
    env_ = std::move(*e);
    auto txn = lmdb::Txn::begin(env_, 0);
    ASSERT_TRUE(txn);
    auto dbi = txn->open_dbi("t", MDB_CREATE);
    ASSERT_TRUE(dbi);
    dbi_ = *dbi;
    // Values as blocks are stored: several pages each (LMDB's overflow pages), one txn for
    // several of them, and a small one between.
    for (int i = 0; i < 12; ++i) {
      values_.push_back(make_bytes(i == 5 ? 100 : 20000 + 1000 * i, 10 + i));
      const std::string key = "k" + std::to_string(100 + i);
      ASSERT_TRUE(txn->put(dbi_, stored_value_key(key), values_.back()));
      if (i % 4 == 3) {
        ASSERT_TRUE(txn->commit());
        txn = lmdb::Txn::begin(env_, 0);
        ASSERT_TRUE(txn);
      }
    }
    ASSERT_TRUE(txn->commit());
  }

  TempDir dir_;
  lmdb::Env env_;
  lmdb::Dbi dbi_;
  std::vector<std::vector<std::byte>> values_;
};

TEST_F(StoredCopyTest, ValuesComeOutOfTheFileInFewReadsWithTheirBytes) {
  ASSERT_NE(env_.map_address(), nullptr);
  ASSERT_GE(env_.data_fd(), 0);
  auto txn = lmdb::Txn::begin(env_, MDB_RDONLY);
  ASSERT_TRUE(txn);
  std::size_t total = 0;
  for (const auto& v : values_) total += v.size();
  std::vector<std::byte> out(total);
  StoredCopy copy(env_);
  std::size_t at = 0;
  for (std::size_t i = 0; i < values_.size(); ++i) {
    auto v = txn->get(dbi_, stored_value_key("k" + std::to_string(100 + i)));
    ASSERT_TRUE(v && *v);
    // Where the patched mdb_env_get_map() says the file is mapped.
    EXPECT_GE((**v).data(), env_.map_address());
    EXPECT_LE((**v).data() + (**v).size(), env_.map_address() + env_.map_size());
    copy.add(**v, out.data() + at);
    at += (**v).size();
  }
  copy.flush();
  at = 0;
  for (const auto& v : values_) {
    ASSERT_TRUE(std::equal(v.begin(), v.end(), out.begin() + static_cast<std::ptrdiff_t>(at)));
    at += v.size();
  }
  // Twelve values in a few MiB of file: runs of neighbours are read at once.
  EXPECT_GE(copy.reads(), 1u);
  EXPECT_LT(copy.reads(), values_.size() / 2);
}

TEST_F(StoredCopyTest, BytesOutsideTheMapAndOutOfOrderAreCopiedAsTheyAre) {
  auto txn = lmdb::Txn::begin(env_, MDB_RDONLY);
  ASSERT_TRUE(txn);
  // Backwards through the file, with bytes of this process's own memory between.
  const auto mine = make_bytes(5000, 99);
  std::vector<std::vector<std::byte>> want;
  std::vector<std::span<const std::byte>> from;
  for (int i = 11; i >= 0; --i) {
    auto v = txn->get(dbi_, stored_value_key("k" + std::to_string(100 + i)));
    ASSERT_TRUE(v && *v);
    from.push_back(**v);
    want.push_back(values_[static_cast<std::size_t>(i)]);
    from.push_back(mine);
    want.push_back(mine);
  }
  std::vector<std::vector<std::byte>> out;
  for (const auto& w : want) out.emplace_back(w.size());
  StoredCopy copy(env_);
  for (std::size_t i = 0; i < from.size(); ++i) copy.add(from[i], out[i].data());
  copy.flush();
  EXPECT_EQ(out, want);
  EXPECT_EQ(copy.reads(), 12u);  // no run: each value on its own
}

}  // namespace
}  // namespace whfs::cache
