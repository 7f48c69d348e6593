// The RAII layer over LMDB: ownership, abort-unless-committed, misses as nullopt.

#include "cache/lmdb.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/unit/cache/test_support.h"

namespace whfs::cache::lmdb {
namespace {

using testing::TempDir;

class LmdbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = Env::open(dir_.path().string(), {.map_size = 1 << 20, .flags = MDB_NOSYNC});
    ASSERT_TRUE(e) << e.error().message();
    env_ = std::move(*e);
    auto txn = Txn::begin(env_, 0);
    ASSERT_TRUE(txn);
    auto dbi = txn->open_dbi("t", MDB_CREATE);
    ASSERT_TRUE(dbi);
    dbi_ = *dbi;
    ASSERT_TRUE(txn->commit());
  }

  std::optional<std::string> get(std::string_view key) {
    auto txn = Txn::begin(env_, MDB_RDONLY);
    EXPECT_TRUE(txn);
    auto v = txn->get(dbi_, as_bytes(key));
    EXPECT_TRUE(v);
    if (!*v) return std::nullopt;
    return std::string(as_chars(**v));
  }

  TempDir dir_;
  Env env_;
  Dbi dbi_;
};

TEST_F(LmdbTest, TxnAbortsUnlessCommitted) {
  {
    auto txn = Txn::begin(env_, 0);
    ASSERT_TRUE(txn);
    ASSERT_TRUE(txn->put(dbi_, as_bytes("k"), as_bytes("dropped")));
  }  // destroyed without commit
  EXPECT_EQ(get("k"), std::nullopt);
  {
    auto txn = Txn::begin(env_, 0);
    ASSERT_TRUE(txn->put(dbi_, as_bytes("k"), as_bytes("kept")));
    ASSERT_TRUE(txn->commit());
    EXPECT_FALSE(*txn);  // gone after commit
  }
  EXPECT_EQ(get("k"), "kept");
}

TEST_F(LmdbTest, MovedTxnIsOwnedOnce) {
  auto txn = Txn::begin(env_, 0);
  ASSERT_TRUE(txn);
  Txn moved = std::move(*txn);
  EXPECT_FALSE(*txn);
  EXPECT_TRUE(moved);
  ASSERT_TRUE(moved.put(dbi_, as_bytes("a"), as_bytes("1")));
  Txn other;
  other = std::move(moved);  // the target had nothing to abort
  ASSERT_TRUE(other.commit());
  EXPECT_EQ(get("a"), "1");
}

TEST_F(LmdbTest, MissIsNulloptAndDelReportsAbsence) {
  auto txn = Txn::begin(env_, 0);
  auto v = txn->get(dbi_, as_bytes("nope"));
  ASSERT_TRUE(v);
  EXPECT_FALSE(*v);
  auto d = txn->del(dbi_, as_bytes("nope"));
  ASSERT_TRUE(d);
  EXPECT_FALSE(*d);
}

TEST_F(LmdbTest, ReserveNewWritesOnceAndRefusesExisting) {
  auto txn = Txn::begin(env_, 0);
  auto slot = txn->reserve_new(dbi_, as_bytes("r"), 5);
  ASSERT_TRUE(slot && *slot);
  std::memcpy((*slot)->data(), "hello", 5);
  auto again = txn->reserve_new(dbi_, as_bytes("r"), 5);
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);
  ASSERT_TRUE(txn->commit());
  EXPECT_EQ(get("r"), "hello");
}

TEST_F(LmdbTest, CursorSeeksIteratesAndDeletes) {
  auto txn = Txn::begin(env_, 0);
  ASSERT_TRUE(txn);
  for (const char* k : {"a1", "a2", "a3", "b1"}) {
    ASSERT_TRUE(txn->put(dbi_, as_bytes(k), as_bytes(k)));
  }
  {
    auto cur = Cursor::open(*txn, dbi_);
    ASSERT_TRUE(cur);
    auto e = cur->seek(as_bytes("a2"));
    ASSERT_TRUE(e && *e);
    EXPECT_EQ(as_chars((*e)->key), "a2");
    ASSERT_TRUE(cur->del());
    e = cur->next();
    ASSERT_TRUE(e && *e);
    EXPECT_EQ(as_chars((*e)->key), "a3");  // after a delete, next() is the following entry
    e = cur->seek(as_bytes("c"));
    ASSERT_TRUE(e);
    EXPECT_FALSE(*e);  // past the end
  }                    // the cursor closes before the txn ends
  ASSERT_TRUE(txn->commit());
  EXPECT_EQ(get("a1"), "a1");
  EXPECT_EQ(get("a2"), std::nullopt);
  EXPECT_EQ(get("a3"), "a3");
}

TEST_F(LmdbTest, ResetTxnRenewsToANewSnapshot) {
  auto reader = Txn::begin(env_, MDB_RDONLY);
  ASSERT_TRUE(reader);
  reader->reset();
  {
    auto w = Txn::begin(env_, 0);
    ASSERT_TRUE(w->put(dbi_, as_bytes("late"), as_bytes("x")));
    ASSERT_TRUE(w->commit());
  }
  ASSERT_TRUE(reader->renew());
  auto v = reader->get(dbi_, as_bytes("late"));
  ASSERT_TRUE(v && *v);
}

TEST_F(LmdbTest, MapFullIsAnErrorNotACrash) {
  auto txn = Txn::begin(env_, 0);
  std::string big(64 * 1024, 'x');
  bool full = false;
  for (int i = 0; i < 64 && !full; ++i) {
    auto r = txn->put(dbi_, as_bytes("k" + std::to_string(i)), as_bytes(big));
    if (!r) {
      EXPECT_EQ(r.error().code, MDB_MAP_FULL) << r.error().message();
      full = true;
    }
  }
  EXPECT_TRUE(full);
}

TEST(LmdbErrorTest, CorruptionCodesAreRecognised) {
  EXPECT_TRUE((Error{MDB_CORRUPTED, "x"}).is_corruption());
  EXPECT_TRUE((Error{MDB_PAGE_NOTFOUND, "x"}).is_corruption());
  EXPECT_TRUE((Error{MDB_INVALID, "x"}).is_corruption());
  EXPECT_FALSE((Error{MDB_MAP_FULL, "x"}).is_corruption());
  EXPECT_NE((Error{MDB_MAP_FULL, "mdb_put"}).message().find("mdb_put"), std::string::npos);
}

}  // namespace
}  // namespace whfs::cache::lmdb
