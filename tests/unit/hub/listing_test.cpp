#include "fs/hub/listing.h"

#include <gtest/gtest.h>

namespace whfs::hub {
namespace {

const std::string kOid = "0123456789abcdef0123456789abcdef01234567";
const std::string kSha = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";

std::string file_json(const std::string& path, const std::string& extra = "") {
  return R"({"type":"file","oid":")" + kOid + R"(","size":12,"path":")" + path + "\"" + extra + "}";
}

TEST(Listing, ParsesFilesFoldersAndLfs) {
  const std::string body =
      "[" + std::string(R"({"type":"directory","oid":")") + kOid +
      R"(","size":0,"path":"pkg/sm89"},)" +
      file_json("pkg/a.whl", R"(,"lfs":{"oid":")" + kSha +
                                 R"(","size":4096,"pointerSize":134},"xetHash":")" + kSha + "\"") +
      "," + file_json("pkg/README.md") + "]";
  auto page = parse_tree_page(body, "pkg", false);
  ASSERT_TRUE(page) << page.error().describe();
  ASSERT_EQ(page->entries.size(), 3u);
  EXPECT_TRUE(page->skipped.empty());
  EXPECT_TRUE(page->entries[0].is_dir());
  EXPECT_EQ(page->entries[0].name(), "sm89");
  const auto& lfs = page->entries[1];
  EXPECT_EQ(lfs.size, 4096u);  // lfs.size preferred over the top-level size
  EXPECT_EQ(lfs.lfs_sha256, kSha);
  EXPECT_EQ(lfs.xet_hash, kSha);
  EXPECT_EQ(lfs.oid, kOid);
  EXPECT_FALSE(page->entries[2].is_lfs());
  EXPECT_EQ(page->entries[2].size, 12u);
}

TEST(Listing, SkipsUnsafeOrForeignNamesWithAReason) {
  const std::string body = "[" + file_json("pkg/../etc/passwd") + "," + file_json("pkg/./x") + "," +
                           file_json("pkg//x") + "," + file_json("other/x") + "," +
                           file_json("pkg/" + std::string(256, 'n')) + "," +
                           file_json("pkg/deep/er") + "," + file_json("/pkg/abs") + "," +
                           file_json("pkg/nul\\u0000x") + "," + file_json("pkg/ok") + "]";
  auto page = parse_tree_page(body, "pkg", false);
  ASSERT_TRUE(page);
  ASSERT_EQ(page->entries.size(), 1u);
  EXPECT_EQ(page->entries[0].path, "pkg/ok");
  EXPECT_EQ(page->skipped.size(), 8u);
  for (const auto& why : page->skipped) EXPECT_FALSE(why.empty());
}

TEST(Listing, ControlCharactersAndAbsurdSizesAreInvalidEntries) {
  // A newline in a name would forge log lines and break every tool that reads `ls`; a size
  // past 2^63 would be a negative st_size, past 2^32 blocks alias block numbers.
  const std::string huge = R"({"type":"file","oid":")" + kOid +
                           R"(","size":18446744073709551615,"path":"pkg/huge.whl"})";
  const std::string big_lfs =
      file_json("pkg/big.whl", R"(,"lfs":{"oid":")" + kSha + R"(","size":1099511627777})");
  const std::string body = "[" + file_json("pkg/new\\nline.whl") + "," + file_json("pkg/tab\\tx") +
                           "," + file_json("pkg/esc\\u001bx") + "," + file_json("pkg/del\\u007fx") +
                           "," + huge + "," + big_lfs + "," + file_json("pkg/ok.whl") + "]";
  auto page = parse_tree_page(body, "pkg", false);
  ASSERT_TRUE(page) << page.error().describe();
  ASSERT_EQ(page->entries.size(), 1u);
  EXPECT_EQ(page->entries[0].path, "pkg/ok.whl");
  ASSERT_EQ(page->skipped.size(), 6u);
  for (const auto& why : page->skipped) {
    // The reason is one printable line, whatever the name held.
    EXPECT_EQ(why.find_first_of(std::string("\n\t\x1b\x7f", 4)), std::string::npos) << why;
  }
  // 1 TiB exactly is the largest file served.
  auto edge = parse_tree_page(
      "[" + file_json("pkg/e.whl", R"(,"lfs":{"oid":")" + kSha + R"(","size":1099511627776})") +
          "]",
      "pkg", false);
  ASSERT_TRUE(edge);
  EXPECT_EQ(edge->entries.size(), 1u);
}

TEST(Listing, APageIsBoundedInEntries) {
  std::string body = "[";
  for (std::size_t i = 0; i <= kMaxEntriesPerPage; ++i) {
    body += (i ? "," : "") + file_json("pkg/f" + std::to_string(i));
  }
  body += "]";
  auto page = parse_tree_page(body, "pkg", false);
  ASSERT_FALSE(page);
  EXPECT_NE(page.error().message.find("entries"), std::string::npos);
}

TEST(Listing, RecursiveAcceptsDeeperPathsAndRootFolder) {
  auto page = parse_tree_page("[" + file_json("a/b/c/d.whl") + "]", "", true);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->entries.size(), 1u);
  page = parse_tree_page("[" + file_json("a/b/c/d.whl") + "]", "", false);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->entries.size(), 0u);
}

TEST(Listing, MalformedJsonIsAClearError) {
  for (const char* body : {"", "[", "{\"a\":1}", "nul", "[1,2", "\"x\""}) {
    auto page = parse_tree_page(body, "", true);
    ASSERT_FALSE(page) << body;
    EXPECT_EQ(page.error().kind, HubErrorKind::kBadResponse);
    EXPECT_NE(page.error().message.find("tree listing"), std::string::npos);
  }
}

TEST(Listing, WrongTypesAndUnknownEntriesAreSkipped) {
  const std::string body = R"([1, "x", {"type":"unknown","path":"y","oid":")" + kOid +
                           R"("}, {"type":"file","path":"z","size":"12","oid":")" + kOid +
                           R"("}, {"type":"file","path":"w","size":3}, )" +
                           R"({"type":"file","path":"v","size":3,"oid":")" + kOid +
                           R"(","lfs":{"oid":"short"}}, null])";
  auto page = parse_tree_page(body, "", true);
  ASSERT_TRUE(page);
  EXPECT_TRUE(page->entries.empty());
  EXPECT_EQ(page->skipped.size(), 7u);
}

TEST(Listing, DuplicatesKeepTheFirst) {
  auto page = parse_tree_page("[" + file_json("a") + "," + file_json("a") + "]", "", false);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->entries.size(), 1u);
}

TEST(Listing, RevisionInfo) {
  auto info = parse_revision_info(R"({"_id":"x","id":"a/b","sha":")" + kOid +
                                  R"(","lastModified":"2026-05-04T12:34:56.000Z"})");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->commit, kOid);
  EXPECT_EQ(info->last_modified, "2026-05-04T12:34:56.000Z");
  EXPECT_FALSE(parse_revision_info(R"({"sha":"abc"})"));
  EXPECT_FALSE(parse_revision_info(R"({"id":"a/b"})"));
  EXPECT_FALSE(parse_revision_info("[]"));
  EXPECT_FALSE(parse_revision_info("{"));
}

TEST(Listing, RevisionInfoIsPublicOnlyWhenTheHubSaysNeitherPrivateNorGated) {
  const std::string head = R"({"id":"a/b","sha":")" + kOid + R"(")";
  auto is_public = [&](const std::string& rest) {
    auto info = parse_revision_info(head + rest + "}");
    EXPECT_TRUE(info) << rest;
    return info && info->is_public;
  };
  EXPECT_TRUE(is_public(R"(,"private":false,"gated":false)"));
  EXPECT_FALSE(is_public(""));                     // not said: not public
  EXPECT_FALSE(is_public(R"(,"private":false)"));  // gated unknown
  EXPECT_FALSE(is_public(R"(,"private":true,"gated":false)"));
  EXPECT_FALSE(is_public(R"(,"private":false,"gated":"auto")"));
  EXPECT_FALSE(is_public(R"(,"private":false,"gated":"manual")"));
  EXPECT_FALSE(is_public(R"(,"private":"false","gated":false)"));  // not a boolean
}

TEST(Listing, LinkHeader) {
  EXPECT_EQ(parse_link_next(R"(<https://h/api/x?cursor=abc>; rel="next")"),
            "https://h/api/x?cursor=abc");
  EXPECT_EQ(parse_link_next(R"(<https://h/p1>; rel="prev", <https://h/p3>; rel="next")"),
            "https://h/p3");
  EXPECT_EQ(parse_link_next(R"(<https://h/a,b>; rel=next)"), "https://h/a,b");
  EXPECT_EQ(parse_link_next(R"(<https://h/x>; rel="prefetch next")"), "https://h/x");
  EXPECT_EQ(parse_link_next(R"(<https://h/x>; title="a, rel=next"; rel="prev")"), std::nullopt);
  EXPECT_EQ(parse_link_next(R"(<https://h/x>; rel="xet-auth")"), std::nullopt);
  EXPECT_EQ(parse_link_next(""), std::nullopt);
  EXPECT_EQ(parse_link_next("<unterminated"), std::nullopt);
}

}  // namespace
}  // namespace whfs::hub
