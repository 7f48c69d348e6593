#include "fs/common/hash.h"

#include <gtest/gtest.h>

namespace whfs {
namespace {

TEST(Hash, Sha256KnownAnswer) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Hash, StreamingEqualsOneShot) {
  Hasher h(HashAlgo::kSha256);
  h.update(std::string_view("a"));
  h.update(std::string_view("bc"));
  EXPECT_EQ(to_hex(h.finish()), sha256_hex("abc"));
}

TEST(Hash, GitBlobSha1MatchesGit) {
  // `printf 'hello\n' | git hash-object --stdin`
  Hasher h = git_blob_hasher(6);
  h.update(std::string_view("hello\n"));
  EXPECT_EQ(to_hex(h.finish()), "ce013625030ba8dba906f756967f9e9ca394464a");
  // The empty blob.
  EXPECT_EQ(to_hex(git_blob_hasher(0).finish()), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
}

TEST(Hex, RoundTripAndRejects) {
  auto bytes = from_hex("00ff10Ab");
  ASSERT_TRUE(bytes);
  EXPECT_EQ(to_hex(*bytes), "00ff10ab");
  EXPECT_FALSE(from_hex("abc"));
  EXPECT_FALSE(from_hex("zz"));
  EXPECT_TRUE(is_hex("0123456789abcdef0123456789abcdef01234567", 40));
  EXPECT_FALSE(is_hex("0123456789abcdef0123456789abcdef0123456g", 40));
  EXPECT_FALSE(is_hex("abc", 40));
}

}  // namespace
}  // namespace whfs
